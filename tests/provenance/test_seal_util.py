"""Building blocks of sealing (DSSE encoding, member names, base64) and the
shared helpers the other ``test_seal_*`` modules import."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refspec.provenance import keys
from refspec.provenance.archive import parent_dirs, unsafe_name
from refspec.provenance.dsse import b64decode_strict, pae
from refspec.provenance.ledger import Ledger
from refspec.provenance.manifest import Artifact, build_manifest
from refspec.provenance.seal import seal

# --------------------------------------------------------------------------- helpers


def make_key(directory: Path, name: str = "test_ed25519") -> keys.KeyPair:
    return keys.generate(directory, name=name)


def make_results(root: Path, campaign: str = "probe", seed: int = 0) -> Path:
    """A small but complete results folder: two tables, manifest, plan, ledger, report."""
    root.mkdir(parents=True)
    (root / "tables").mkdir()
    qual = pa.table(
        {
            "family": ["smollm2-135m"] * 3,
            "task": [f"HumanEval/{seed + i}" for i in range(3)],
            "arm": ["R", "C_qb", "C_pq"],
            "qualified": [True, False, None],
            "tokens": pa.array([[1, 2, 3], [4, 5], []], type=pa.list_(pa.int32())),
            "latency_s": [0.1, 1 / 3, float("nan")],
        }
    )
    pq.write_table(qual, root / "tables" / "qualification.parquet", compression="snappy")
    timings = pa.table({"session": [0, 0, 1, 1], "t": [1.5e-3, 2.25e-3, 1e20, -0.0]})
    pq.write_table(timings, root / "tables" / "timings.parquet")
    panel = root.parent / f"{root.name}-panel.jsonl"
    panel.write_text('{"task": "HumanEval/0"}\n')
    manifest = build_manifest(
        [Artifact("humaneval-probe", "panel", panel)],
        {"campaign": campaign, "seed": seed},
        include_source=False,
        include_environment=False,
        include_host=False,
        created="2026-01-01T00:00:00Z",
    )
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (root / "plan.json").write_text(json.dumps({"campaign": campaign, "arms": ["R", "C_qb"]}) + "\n")
    led = Ledger(root / "ledger.jsonl")
    led.append({"event": "attempt", "arm": "R", "outcome": "ok", "reason": "planned"})
    led.append({"event": "attempt", "arm": "C_qb", "outcome": "failed", "reason": "worker died"})
    led.append({"event": "attempt", "arm": "C_qb", "outcome": "ok", "reason": "retry of attempt 1"})
    (root / "report").mkdir()
    (root / "report" / "report.html").write_text("<html><body>refspec report</body></html>\n")
    (root / "report" / "figures").mkdir()
    (root / "report" / "figures" / "ratios.svg").write_text("<svg/>\n")
    return root


def copy_archive(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="session")
def seal_env(tmp_path_factory):
    """Keys A and B, a clean archive, a chained successor and an archive of another campaign."""
    base = tmp_path_factory.mktemp("seal_env")
    a = make_key(base / "keys", "a")
    b = make_key(base / "keys", "b")
    res = make_results(base / "results")
    clean = base / "clean"
    r0 = seal(res, clean, key=a.private_path, archive_id="archive-0", created="2026-01-02T00:00:00Z", tar=True)
    nxt = base / "next"
    r1 = seal(res, nxt, key=a.private_path, previous=clean, archive_id="archive-1", created="2026-01-03T00:00:00Z")
    other_res = make_results(base / "results-other", campaign="confirm", seed=7)
    other = base / "other"
    seal(other_res, other, key=a.private_path, archive_id="archive-9")
    return {
        "base": base,
        "a": a,
        "b": b,
        "results": res,
        "clean": clean,
        "clean_tar": r0.tar,
        "clean_result": r0,
        "next": nxt,
        "next_result": r1,
        "other": other,
    }


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
