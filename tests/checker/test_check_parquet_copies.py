"""report/check.py holds every sealed Parquet table against its CSV copy (refspec_check/parquet_copies.py):
a signer who seals a forged Parquet table beside an honest CSV copy (the seal's own CSV check switched off,
as ``--no-csv-check`` does) is refused with the table, row, column and both values named, and so is the
converse; an archive sealed with ZSTD tables (the releases before GZIP) is said to be unreadable here, and
metadata that makes pandas show other column names is refused. An honest archive still passes."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from refspec_check.parquet_copies import cell

from refspec.core import tables as T
from refspec.reporting import render as report
from support.synthetic_archive import reseal_edited, run_check, seal_archive, signer


def mismatches(out: str) -> list[str]:
    return [l for l in out.splitlines() if l.startswith("MISMATCH ")]


def seal_unchecked(stage: Path, dst: Path, edit) -> Path:
    """``reseal_edited`` as a dishonest signer seals: without the seal's check of the CSV copies against
    their tables (``refspec seal --no-csv-check``)."""
    from refspec.provenance.seal import seal

    work = dst.with_name(dst.name + "-stage")
    shutil.copytree(stage, work)
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    edit(work)
    seal(work, dst, key=signer(), archive_id="synthetic", created="2026-10-20T00:00:00Z", check_csv=False)
    return dst


def forge_parquet(table: str, pick, change):
    """An edit that rewrites one row of ``table``'s Parquet file with the project's writer (the first row
    ``pick`` selects, changed by ``change``), leaving its CSV copy as it is; returns (edit, forged)."""
    forged: dict = {}

    def edit(work: Path) -> None:
        p = work / "tables" / f"{table}.parquet"
        rows = pq.read_table(p).to_pylist()
        i = next(i for i, r in enumerate(rows) if pick(r))
        forged.update(row=i + 1, before=dict(rows[i]))
        rows[i] = change(dict(rows[i]))
        forged["after"] = rows[i]
        p.write_bytes(T.to_parquet_bytes(rows, table))

    return edit, forged


def test_an_honest_archive_passes(stage, tmp_path):
    archive = seal_archive(stage, tmp_path / "archive")
    code, out = run_check(archive)
    assert code == 0, out[-3000:]
    assert out.splitlines()[-1] == f"OK: {archive}"


CASES = [
    # (table, column, which row, the forgery)
    ("ratios", "ratio", lambda r: r["ratio"] is not None, lambda r: r | {"ratio": 1 / r["ratio"]}),
    ("requests", "t_ns", lambda r: r["t_ns"] is not None, lambda r: r | {"t_ns": r["t_ns"] // 2}),
    ("qualification", "qualified", lambda r: not r["qualified"], lambda r: r | {"qualified": True}),
]


def test_a_forged_parquet_beside_an_honest_csv_is_refused(stage, tmp_path):
    """Each forgery alone: nothing but the Parquet copy changes, and it is the one mismatch."""
    for table, column, pick, change in CASES:
        edit, forged = forge_parquet(table, pick, change)
        code, out = run_check(seal_unchecked(stage, tmp_path / f"forged-{table}", edit))
        want = (
            f"MISMATCH tables/{table}.parquet: row {forged['row']} column {column}: Parquet "
            f"{cell(forged['after'][column])} but the CSV copy tables/{table}.csv says {cell(forged['before'][column])}"
        )
        assert code == 1, out[-3000:]
        assert mismatches(out) == [want], out[-3000:]


def test_a_forged_csv_beside_an_honest_parquet_is_refused(stage, tmp_path):
    """The converse: the CSV copy forged and the report rendered again from it (what every other check reads),
    the Parquet table left honest. The recomputation from the raw requests refuses the forged ratio too;
    the Parquet copy names the table, row and column."""
    before: dict = {}

    def edit(work: Path) -> None:
        p = work / "tables" / "ratios.csv"
        rows = T.read_csv_records("ratios", work)
        i = next(i for i, r in enumerate(rows) if r["ratio"] is not None)
        before.update(row=i + 1, ratio=rows[i]["ratio"])
        rows[i]["ratio"] = 1 / rows[i]["ratio"]
        p.write_bytes(T.to_csv_bytes(rows, "ratios"))
        report.render(work, pdf=False)

    code, out = run_check(seal_unchecked(stage, tmp_path / "forged-csv", edit))
    assert code == 1, out[-3000:]
    want = (
        f"MISMATCH tables/ratios.parquet: row {before['row']} column ratio: Parquet {cell(before['ratio'])} "
        f"but the CSV copy tables/ratios.csv says {cell(1 / before['ratio'])}"
    )
    assert want in mismatches(out), out[-3000:]


def test_pandas_metadata_that_renames_columns_is_refused(stage, tmp_path):
    """pandas applies a table's ``pandas`` metadata: here it shows ratios' ``lo`` as ``hi`` and the converse,
    while pyarrow's column names, and so the seal's CSV check, see nothing wrong."""

    def edit(work: Path) -> None:
        p = work / "tables" / "ratios.parquet"
        t = pq.read_table(p)
        swap = {"lo": "hi", "hi": "lo"}
        cols = [
            {"name": swap.get(n, n), "field_name": n, "pandas_type": "unicode", "numpy_type": "object"}
            for n in t.column_names
        ]
        meta = {"index_columns": [], "column_indexes": [], "columns": cols, "pandas_version": "2.2.0"}
        t = t.replace_schema_metadata({**t.schema.metadata, b"pandas": json.dumps(meta).encode()})
        pq.write_table(t, p, **T.PARQUET_WRITE)

    archive = reseal_edited(stage, tmp_path / "pandas", edit)  # the seal's CSV check passes it
    df = pq.read_table(archive / "tables" / "ratios.parquet").to_pandas()
    honest = pq.read_table(archive / "tables" / "ratios.parquet").to_pylist()
    i = next(i for i, r in enumerate(honest) if r["lo"] is not None)
    assert df["hi"][i] == honest[i]["lo"] and df["lo"][i] == honest[i]["hi"]  # what pandas shows
    code, out = run_check(archive)
    assert code == 1, out[-3000:]
    assert [l for l in mismatches(out) if "pandas" in l] == [
        "MISMATCH tables/ratios.parquet: key-value metadata 'pandas', which a pandas reader applies to what it "
        "shows (column names, index, types) and the project never writes"
    ], out[-3000:]


def test_zstd_tables_of_an_older_release_are_said_to_be_unreadable_here(stage, tmp_path, monkeypatch):
    """An archive whose seal wrote ZSTD tables (as releases before GZIP tables did): each Parquet copy is named
    as unreadable here (exit 2, as an archive of another renderer version is), not as tampered."""
    from refspec.provenance import seal as S

    monkeypatch.setattr(S, "PARQUET_WRITE", {"compression": "zstd", "compression_level": 9})
    archive = seal_archive(stage, tmp_path / "zstd")
    monkeypatch.undo()
    honest = seal_archive(stage, tmp_path / "gzip")
    sizes = {a.name: sum(p.stat().st_size for p in (a / "tables").glob("*.parquet")) for a in (archive, honest)}
    print(f"sealed Parquet tables: zstd {sizes['zstd']} bytes, gzip {sizes['gzip']} bytes")
    code, out = run_check(archive)
    assert code == 2, out[-3000:]
    tables = sorted(p.name for p in (archive / "tables").glob("*.parquet"))
    unread = [l for l in out.splitlines() if l.startswith("UNREADABLE ")]
    assert len(unread) == len(tables) and all("compressed with ZSTD" in l for l in unread), out[-3000:]
    assert unread[0].startswith(f"UNREADABLE tables/{tables[0]}: the Parquet copy is compressed with ZSTD")
    assert not [l for l in mismatches(out) if ".parquet" in l], out[-3000:]


@pytest.mark.parametrize(
    ("write", "words"),
    [
        ({"compression": "gzip", "data_page_version": "2.0"}, "a Parquet table this checker cannot read"),
        ({"compression": "snappy"}, "the Parquet copy is compressed with SNAPPY, a codec this checker cannot read"),
    ],
)
def test_a_parquet_table_the_checker_cannot_read_is_a_mismatch(stage, tmp_path, monkeypatch, write, words):
    """A sealed table outside what the project writes (version 2 data pages, another codec: a seal that is
    not the project's) is a mismatch naming the table, never an internal error."""
    from refspec.provenance import seal as S

    monkeypatch.setattr(S, "PARQUET_WRITE", write)
    archive = seal_archive(stage, tmp_path / "other")
    code, out = run_check(archive)
    assert code == 1, out[-3000:]
    assert any(l.startswith(f"MISMATCH tables/ratios.parquet: {words}") for l in mismatches(out)), out[-3000:]


def test_the_reader_sees_what_pyarrow_sees_in_a_sealed_archive(stage, tmp_path):
    """Every table of a sealed archive, read by the checker's reader, is pyarrow's reading, cell for cell."""
    from refspec_check.parquet import read_parquet

    archive = seal_archive(stage, tmp_path / "archive")
    for p in sorted((archive / "tables").glob("*.parquet")):
        names, rows = read_parquet(p)
        want = pq.read_table(p)
        assert names == want.column_names
        assert [[cell(v) for v in r] for r in rows] == [[cell(r[n]) for n in names] for r in want.to_pylist()], p
        assert io.BytesIO(p.read_bytes()).getbuffer()[:4] == b"PAR1"
