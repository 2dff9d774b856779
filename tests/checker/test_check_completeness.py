"""Completeness: the ratio rows that must exist do. A dishonest signer who cuts any row of the ratios
table (with the project's own table writer, so CSV and Parquet agree), renders the report again and
re-seals is refused, naming the pair; so is an archive whose ratios table is gone while requests.csv
holds the campaigns that derive it."""

from __future__ import annotations

from pathlib import Path

import pytest

from refspec.core import tables as T
from refspec.reporting import render as report
from support.synthetic_archive import reseal_edited, run_check


@pytest.mark.parametrize("index", [0, 7, -1])
def test_a_cut_ratio_row_is_refused(stage, tmp_path, index):
    cut: list[str] = []

    def edit(work: Path) -> None:
        rows = T.read_records("ratios", work / "tables")
        kept = [r for r in rows if r["campaign"] == "implementation"]
        gone = kept[index % len(kept)]
        T.write_table([r for r in rows if r is not gone], "ratios", work / "tables")
        cut.append(f"{gone['numerator']}/{gone['denominator']}")
        report.render(work, pdf=False)

    archive = reseal_edited(stage, tmp_path / "archive", edit)
    pair = cut[0]
    code, out = run_check(archive)
    assert code == 1, out[-3000:]
    assert f"MISMATCH tables/ratios.csv: no row for {pair} of " in out, out[-3000:]


def test_the_ratios_table_gone_is_refused(stage, tmp_path):
    def edit(work: Path) -> None:
        for p in (work / "tables").glob("ratios.*"):
            p.unlink()
        report.render(work, pdf=False)

    code, out = run_check(reseal_edited(stage, tmp_path / "archive", edit))
    assert code == 1 and "tables/ratios.csv: missing, but requests.csv holds the implementation" in out, out[-3000:]
