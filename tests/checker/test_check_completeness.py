"""Completeness (refspec_check.completeness): the derived rows that must exist do. A dishonest signer
who cuts a row of a derived table (ratios, diagnostics, estimates, sessions; with the project's own table
writer, so CSV and Parquet agree), renders the report again and re-seals is refused, naming the row; so
is an archive whose ratios table is gone while requests.csv holds the campaigns that derive it, and one
whose campaign the run ledger says ran while no request of it is left."""

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


def _cut(stage, tmp_path, table: str, pick):
    """The archive with the first row of ``table`` that ``pick`` selects cut (CSV and Parquet alike),
    the report rendered again from what is left and re-sealed; (exit, output, the row cut)."""
    cut: list[dict] = []

    def edit(work: Path) -> None:
        rows = T.read_records(table, work / "tables")
        gone = next(r for r in rows if pick(r))
        T.write_table([r for r in rows if r is not gone], table, work / "tables")
        cut.append(gone)
        report.render(work, pdf=False)

    code, out = run_check(reseal_edited(stage, tmp_path / "archive", edit))
    return code, out, cut[0]


def test_a_cut_diagnostic_row_is_refused(stage, tmp_path):
    code, out, gone = _cut(stage, tmp_path, "diagnostics", lambda r: True)
    want = f"no diagnostic row for {gone['campaign']} {gone['family']} cap {gone['cap']} {gone['numerator']}/"
    assert code == 1 and want in out, out[-3000:]


@pytest.mark.parametrize("path", ["target", "spec"])
def test_a_cut_estimate_is_refused(stage, tmp_path, path):
    code, out, gone = _cut(stage, tmp_path, "estimates", lambda r: r["path"] == path)
    assert code == 1, out[-3000:]
    assert f"no estimate for replication {gone['family']} {path} {gone['comparison']}" in out, out[-3000:]


def test_a_cut_session_row_is_refused(stage, tmp_path):
    code, out, gone = _cut(stage, tmp_path, "sessions", lambda r: r["campaign"] == "replication")
    assert code == 1, out[-3000:]
    assert f"no row for session {gone['session']} of replication {gone['family']}" in out, out[-3000:]


def test_a_campaign_cut_whole_is_refused_by_the_run_ledger(stage, tmp_path):
    """Every request of one family's implementation campaign cut, with every table derived from them
    recomputed by the pipeline's own code: the report is consistent with itself, the run ledger's
    campaign_run line is not (other mismatches follow from the rows the cut leaves behind)."""
    fams: list[str] = []

    def edit(work: Path) -> None:
        reqs = T.read_records("requests", work / "tables")
        fam = sorted({r["family"] for r in reqs if r["campaign"] == "implementation"})[0]
        fams.append(fam)
        keep = [r for r in reqs if not (r["campaign"] == "implementation" and r["family"] == fam)]
        T.write_table(keep, "requests", work / "tables")
        ratios = T.read_records("ratios", work / "tables")
        T.write_table(
            [r for r in ratios if not (r["campaign"] == "implementation" and r["family"] == fam)],
            "ratios",
            work / "tables",
        )
        report.render(work, pdf=False)

    code, out = run_check(reseal_edited(stage, tmp_path / "archive", edit))
    assert code == 1, out[-3000:]
    assert f"no row of campaign implementation ({fams[0]}), which the run ledger says ran" in out, out[-3000:]


# --- texts shown as sealed are derived from the rows they stand beside


def _edit_row(stage, tmp_path, table: str, pick, change: dict):
    """The archive with ``change`` made to the first row of ``table`` that ``pick`` selects, the report
    rendered again and re-sealed; (exit, output)."""

    def edit(work: Path) -> None:
        rows = T.read_records(table, work / "tables")
        row = next(r for r in rows if pick(r))
        row.update(change)
        T.write_table(rows, table, work / "tables")
        report.render(work, pdf=False)

    return run_check(reseal_edited(stage, tmp_path / "archive", edit))


def test_a_reason_rewritten_is_refused(stage, tmp_path):
    code, out = _edit_row(stage, tmp_path, "estimates", lambda r: r["estimate"] is not None, {"reason": "settled"})
    assert code == 1 and "estimates.csv" in out and "settled" in out, out[-3000:]


@pytest.fixture(scope="module")
def aa_stage(tmp_path_factory) -> Path:
    """The synthetic results with the A/A twins (a ``noise`` table), rendered."""
    from support.synthetic_archive import make_results

    results = make_results(tmp_path_factory.mktemp("aa-stage") / "results", evil=True, draws=300, aa=True)
    report.render(results, pdf=False)
    return results


def test_an_a_a_reason_added_to_a_control_that_holds_is_refused(aa_stage, tmp_path):
    code, out = _edit_row(
        aa_stage, tmp_path, "noise", lambda r: r["verdict"] == "ok", {"reason": "the A/A interval does not contain 1"}
    )
    assert code == 1 and "noise.csv" in out and "does not contain 1" in out, out[-3000:]
