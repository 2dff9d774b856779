"""Building blocks of sealing (DSSE encoding, member names, base64); the helpers the other
``test_seal_*`` modules share are in ``support/sealing.py``."""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refspec.provenance.archive import parent_dirs, unsafe_name
from refspec.provenance.dsse import b64decode_strict, pae

# --------------------------------------------------------------------------- tests


def test_pae_matches_the_dsse_specification_example():
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters():
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"


@pytest.mark.parametrize(
    "name,ok",
    [
        ("tables/x.parquet", True),
        ("a", True),
        ("../x", False),
        ("a/../b", False),
        ("/etc/passwd", False),
        ("C:/x", False),
        ("a//b", False),
        ("./a", False),
        ("a/", False),
        ("a\\b", False),
        ("a\nb", False),
        ("", False),
    ],
)
def test_unsafe_name(name, ok):
    assert (unsafe_name(name) is None) is ok


def test_strict_base64_refuses_noncanonical_padding_bits():
    assert b64decode_strict("QQ==") == b"A"
    with pytest.raises(ValueError):
        b64decode_strict("QR==")  # decodes to b"A" in lenient decoders
    with pytest.raises(ValueError):
        b64decode_strict("QQ")
    with pytest.raises(ValueError):
        b64decode_strict(base64.urlsafe_b64encode(b"\xff\xfe").decode())


def test_parent_dirs():
    assert parent_dirs(["a/b/c", "d"]) == {"a", "a/b"}


# --------------------------------------------------------------------------- the CSV copy of a table

_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.1, -0.0, 1e16, 1e-5, 5e-324, 1 / 3])
_INTS = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(alphabet=st.sampled_from(list('ab ,"\n\r;x\u00e9')), max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(_FLOATS, _INTS, st.none() | _INTS, st.none() | _TEXT), max_size=20),
    st.sampled_from([["f", "i"], ["f"], ["n"], ["s"], ["f", "i", "n", "s"], ["i", "s"]]),
)
def test_csv_body_is_csv_text_as_the_csv_writer_joins_it(rows, names):
    """The fast path for plain number columns gives exactly the CSV text of the one encoding."""
    import csv
    import io

    from refspec.core.tables import csv_body, csv_text

    cols = {
        "f": pa.array([r[0] for r in rows], type=pa.float64()),
        "i": pa.array([r[1] for r in rows], type=pa.int64()),
        "n": pa.array([r[2] for r in rows], type=pa.int64()),
        "s": pa.array([r[3] for r in rows], type=pa.string()),
    }
    table = pa.table({k: cols[k] for k in names})
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(
        [csv_text(v) for v in row] for row in zip(*(c.to_pylist() for c in table.columns))
    )
    assert csv_body(table) == buf.getvalue()
