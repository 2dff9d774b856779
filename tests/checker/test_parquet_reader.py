"""The checker's standard-library Parquet reader (report/refspec_check/parquet.py): it reads every file the
project's writers make (``refspec.core.tables.to_parquet_bytes`` and the seal's copy) as pyarrow reads it,
value for value and bit for bit, renders its rows to the CSV text the seal writes, and refuses a malformed or
unfamiliar file with a ParquetError that says why, never another exception."""

from __future__ import annotations

import csv
import io
import math
import random
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from refspec_check.parquet import (
    MAX_DEPTH,
    ParquetError,
    UnsupportedCodec,
    check_statistics,
    hybrid,
    open_parquet,
    read_parquet,
)
from refspec_check.parquet_copies import check_parquet_copy
from refspec_check.problems import Checker

from refspec.core import tables as T
from refspec.provenance.seal import rewrite_parquet

KINDS = ("string", "int32", "int64", "float64", "bool", "list<int32>")
SPECIAL_FLOATS = (float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 5e-324, 1.7976931348623157e308, 0.1)


def every_type_spec() -> T.TableSpec:
    """A table of every column type, nullable and not (a list column is never nullable)."""
    cols = []
    for kind in KINDS:
        cols.append(T.Column(f"{kind}_req", kind, False, ""))
        if kind != "list<int32>":
            cols.append(T.Column(f"{kind}_opt", kind, True, ""))
    return T.TableSpec("every_type", "", (), tuple(cols))


def value(kind: str, rng: random.Random, nullable: bool):
    if nullable and rng.random() < 0.25:
        return None
    if kind == "string":
        return rng.choice(["", "a", "ünïcødé ✓ 𝄞", 'comma, "quote"', "line\nbreak", "tab\tx", "x" * 300, "-1.5"])
    if kind == "int32":
        return rng.choice([0, -1, 1, -(2**31), 2**31 - 1, rng.randint(-(2**31), 2**31 - 1)])
    if kind == "int64":
        return rng.choice([0, -1, -(2**63), 2**63 - 1, rng.randint(-(2**63), 2**63 - 1)])
    if kind == "float64":
        return rng.choice([*SPECIAL_FLOATS, rng.uniform(-1e6, 1e6), rng.random()])
    if kind == "bool":
        return rng.random() < 0.5
    return rng.choice([[], [0], [-(2**31), 2**31 - 1], [rng.randint(-9, 9) for _ in range(rng.randint(1, 40))]])


def rows_of(spec: T.TableSpec, n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [{c.name: value(c.type, rng, c.nullable) for c in spec.columns} for _ in range(n)]


def same(a, b) -> bool:
    """Equal values, floats bit for bit (NaN, -0.0), bools as bools."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def assert_reads_as_pyarrow(data: bytes) -> list[tuple]:
    names, rows = read_parquet(data)
    ref = pq.read_table(io.BytesIO(data))
    assert names == ref.column_names
    want = ref.to_pylist()
    assert len(rows) == len(want)
    for i, (got, w) in enumerate(zip(rows, want)):
        for name, v in zip(names, got):
            assert same(v, w[name]), (i, name, v, w[name])
    return rows


def test_the_project_writer_is_read_as_pyarrow_reads_it():
    sp = every_type_spec()
    data = T.to_parquet_bytes(rows_of(sp, 3000), sp)
    md = pq.ParquetFile(io.BytesIO(data)).metadata
    assert {md.row_group(0).column(i).compression for i in range(md.num_columns)} == {"GZIP"}
    rows = assert_reads_as_pyarrow(data)
    flat = {type(v) for r in rows for v in r}
    assert flat == {type(None), str, int, float, bool, list}
    floats = {struct.pack("<d", v) for r in rows for v in r if isinstance(v, float)}
    assert {struct.pack("<d", f) for f in SPECIAL_FLOATS} <= floats  # NaN, infinities and -0.0 came through
    lists = [v for r in rows for v in r if isinstance(v, list)]
    assert [] in lists and any(len(v) > 8 for v in lists)


def test_an_empty_table_and_a_table_of_one_row():
    sp = every_type_spec()
    names, rows = read_parquet(T.to_parquet_bytes([], sp))
    assert names == sp.names and rows == []
    assert_reads_as_pyarrow(T.to_parquet_bytes(rows_of(sp, 1), sp))


def test_null_lists_and_null_list_elements():
    """The project's list columns are never null and hold no null element; the reader still reads both as
    pyarrow does (the 3-level list with an optional group and an optional element)."""
    t = pa.table({"l": pa.array([[1, None], None, [], [None], [2, 3]], pa.list_(pa.int32())), "i": [1, 2, 3, 4, 5]})
    buf = io.BytesIO()
    pq.write_table(t, buf, **T.PARQUET_WRITE)
    rows = assert_reads_as_pyarrow(buf.getvalue())
    assert [r[0] for r in rows] == [[1, None], None, [], [None], [2, 3]]


def _seal_copy(tmp_path, table: pa.Table, **write) -> tuple[bytes, str]:
    """The seal's copy of ``table`` (written with ``write``'s options) and the CSV text the seal writes for it."""
    src, dst, out_csv = tmp_path / "src.parquet", tmp_path / "tables" / "x.parquet", tmp_path / "tables" / "x.csv"
    dst.parent.mkdir(exist_ok=True)
    pq.write_table(table, src, **write)
    rewrite_parquet(src, dst, "archive-id", "confirmation", "tables/x.parquet", csv_path=out_csv)
    return dst.read_bytes(), out_csv.read_text(encoding="utf-8")


def test_the_seal_copy_of_several_row_groups_and_pages(tmp_path):
    """The seal keeps a table's row groups: many, each of many small pages, read in order."""
    sp = every_type_spec()
    table = pa.Table.from_pylist(rows_of(sp, 700, seed=3), schema=T._arrow_schema(sp))
    data, _ = _seal_copy(tmp_path, table, row_group_size=64, data_page_size=256, compression="snappy")
    pf = pq.ParquetFile(io.BytesIO(data))
    assert pf.metadata.num_row_groups == 11
    assert pf.metadata.row_group(0).column(0).compression == "GZIP"
    assert open_parquet(tmp_path / "tables" / "x.parquet").num_row_groups == 11
    assert_reads_as_pyarrow(data)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_checker_renders_the_csv_text_the_seal_writes(tmp_path, seed):
    """check_parquet_copy holds the seal's copy equal to the CSV the seal wrote from it (the checker's twin of
    refspec.core.tables.csv_text / csv_body); one changed cell is named by row and column."""
    sp = every_type_spec()
    table = pa.Table.from_pylist(rows_of(sp, 400, seed=seed), schema=T._arrow_schema(sp))
    _, text = _seal_copy(tmp_path, table, row_group_size=97)
    c = Checker(str(tmp_path))
    c.tree = {"tables/x.parquet", "tables/x.csv"}
    check_parquet_copy(c, "tables/x.parquet")
    assert c.problems == [] and c.unreadable == [] and c.matched == c.compared == 1
    rows = list(csv.reader(io.StringIO(text, newline="")))
    rows[5][1] += "9"  # the second cell of row 5 gains a character
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    (tmp_path / "tables" / "x.csv").write_text(buf.getvalue(), encoding="utf-8")
    c = Checker(str(tmp_path))
    c.tree = {"tables/x.parquet", "tables/x.csv"}
    check_parquet_copy(c, "tables/x.parquet")
    assert len(c.problems) == 1 and c.problems[0].startswith(f"tables/x.parquet: row 5 column {sp.names[1]}: Parquet ")
    assert "but the CSV copy tables/x.csv says" in c.problems[0]


def test_dictionary_pages_are_read_too():
    t = pa.table({"s": ["a", "b", None, "a"] * 50, "d": [0.5, None, 0.5, -1.0] * 50})
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="gzip", use_dictionary=True, data_page_version="1.0")
    assert "RLE_DICTIONARY" in pq.ParquetFile(io.BytesIO(buf.getvalue())).metadata.row_group(0).column(0).encodings
    assert_reads_as_pyarrow(buf.getvalue())


def _written(**opts) -> bytes:
    buf = io.BytesIO()
    t = pa.table({"x": pa.array([1, 2, None], pa.int64()), "s": ["a", None, "c"]})
    pq.write_table(t, buf, **opts)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("opts", "words"),
    [
        ({"compression": "zstd"}, "ZSTD"),
        ({"compression": "snappy"}, "SNAPPY"),
        ({"compression": "gzip", "data_page_version": "2.0", "use_dictionary": False}, "DATA_PAGE_V2"),
        ({"compression": "gzip", "column_encoding": {"x": "DELTA_BINARY_PACKED"}, "use_dictionary": False}, "DELTA"),
    ],
)
def test_what_the_project_never_writes_is_refused_by_name(opts, words):
    with pytest.raises(ParquetError, match=words) as e:
        read_parquet(_written(**opts))
    assert isinstance(e.value, UnsupportedCodec) == (words in ("ZSTD", "SNAPPY"))


@pytest.mark.parametrize(
    ("arrow_type", "words"),
    [
        (pa.timestamp("ns"), "INT64 \\(TIMESTAMP\\)"),
        (pa.uint32(), "INT32 \\(INTEGER\\)"),
        (pa.int8(), "INT32 \\(INTEGER\\)"),
        (pa.binary(), "BYTE_ARRAY"),
        (pa.float32(), "FLOAT"),
        (pa.struct([("a", pa.int32())]), "column 'c'"),
        (pa.list_(pa.int64()), "a list of int64"),
    ],
)
def test_types_the_project_never_writes_are_refused_by_name(arrow_type, words):
    buf = io.BytesIO()
    pq.write_table(pa.table({"c": pa.array([None], arrow_type)}), buf, **T.PARQUET_WRITE)
    with pytest.raises(ParquetError, match=words):
        read_parquet(buf.getvalue())


def _file(footer: bytes, body: bytes = b"") -> bytes:
    return b"PAR1" + body + footer + len(footer).to_bytes(4, "little") + b"PAR1"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "not a Parquet file"),
        (b"PAR1PAR1", "not a Parquet file"),
        (b"PAR0" + b"\0" * 20 + b"PAR1", "not a Parquet file"),
        (b"PAR1" + b"\0" * 8 + b"PARE", "encrypted"),
        (b"PAR1" + b"\0" * 4 + b"\xff\xff\xff\x7fPAR1", "a footer of 2147483647 bytes"),
        (_file(b"\x1c" * (MAX_DEPTH + 5)), "nested deeper"),  # struct in struct in struct ...
        (_file(b"\x19\xfc" * 40), "nested deeper"),  # list of lists of lists ...
        (_file(b"\x18\xff\xff\xff\xff\x0f"), "more than the"),  # a binary of 4 GiB
        (_file(b"\x19\xfc\xff\xff\xff\xff\x0f"), "more than the"),  # a list of 4 G structs
        (_file(b"\x1b\xff\xff\xff\xff\x0f\x55"), "more than the"),  # a map of 4 G entries
        (_file(b"\x16" + b"\xff" * 11), "longer than 10 bytes"),
        (_file(b"\x15\x02"), "ends in the middle"),
        (_file(b"\x15\x02\x00"), "required field 2 missing"),
        (_file(b"\x15\x02\x05\x02\x04\x00"), "given twice"),  # field 1 again, by its explicit id
        (_file(b"\x1d"), "unknown value type 13"),
    ],
)
def test_malformed_files_raise_a_parquet_error(data, words):
    with pytest.raises(ParquetError, match=words):
        read_parquet(data)


def test_every_truncation_and_many_corruptions_raise_a_parquet_error_only():
    """No prefix of a file, and no random damage to it, makes the reader fail with anything but a
    ParquetError (it may read damaged values that still parse: the CSV comparison refuses those)."""
    sp = every_type_spec()
    for opts in (T.PARQUET_WRITE, {"compression": "none", "use_dictionary": False, "data_page_version": "1.0"}):
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows_of(sp, 40), schema=T._arrow_schema(sp)), buf, **opts)
        data = buf.getvalue()
        for cut in range(0, len(data), 7):
            with pytest.raises(ParquetError):
                read_parquet(data[:cut])
        rng = random.Random(11)
        for _ in range(400):
            bad = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                bad[rng.randrange(4, len(bad) - 4)] = rng.randrange(256)
            try:
                read_parquet(bytes(bad))
            except ParquetError:
                pass


def test_the_hybrid_decoder_and_its_limits():
    assert hybrid(b"\x08\x01", 0, 2, 1, 4, "x") == [1, 1, 1, 1]  # an RLE run of 4 ones
    assert hybrid(b"\x03\xa5", 0, 2, 1, 8, "x") == [1, 0, 1, 0, 0, 1, 0, 1]  # one bit-packed group
    assert hybrid(b"\x03\xa5", 0, 2, 1, 3, "x") == [1, 0, 1]  # a run may hold more than is needed
    with pytest.raises(ParquetError, match="past the end"):
        hybrid(b"\x05\xa5", 0, 2, 1, 16, "x")  # two groups announced, one there
    with pytest.raises(ParquetError, match="past the end"):
        hybrid(b"\x08", 0, 1, 1, 4, "x")
    with pytest.raises(ParquetError, match="wider than"):
        hybrid(b"\x08\x02", 0, 2, 1, 4, "x")
    big = hybrid(b"\xfe\xff\xff\xff\x0f\x01", 0, 6, 1, 5, "x")  # a run of 2**31 - 1 is read as far as needed
    assert big == [1] * 5


def test_statistics_must_hold_the_values():
    """A filtering reader (pandas' read_parquet(filters=...)) skips row groups by their statistics: bounds
    that leave out a value, or a wrong null count, are refused."""
    ints = [3, -1, 7]
    check_statistics({3: 1, 5: struct.pack("<q", 7), 6: struct.pack("<q", -1)}, 2, ints, 1, "c")
    with pytest.raises(ParquetError, match="max"):
        check_statistics({5: struct.pack("<q", 6)}, 2, ints, 0, "c")
    with pytest.raises(ParquetError, match="min"):
        check_statistics({6: struct.pack("<q", 0)}, 2, ints, 0, "c")
    with pytest.raises(ParquetError, match="nulls"):
        check_statistics({3: 0}, 2, ints, 1, "c")
    check_statistics({5: struct.pack("<d", 2.0), 6: struct.pack("<d", 1.0)}, 5, [1.0, math.nan, 2.0], 0, "c")
    with pytest.raises(ParquetError, match="max"):
        check_statistics({5: b"b"}, 6, ["a", "c"], 0, "c")
