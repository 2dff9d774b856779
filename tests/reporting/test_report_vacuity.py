"""Vacuity is a verdict: a confirmation panel on which no unrepaired arm (M0, C0, R_prod) ever leaves
the reference reads "vacuous: no exposed input in N screened" in the headline, on its preservation
row and on its qualified ratios; a panel where one diverges reads as before. report/check.py
recomputes the verdict and refuses a report that says otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refspec.reporting import render as report
from support.synthetic_archive import FAMILIES, make_results, reseal_edited, run_check, seal_archive

QUIET, LOUD = FAMILIES[1], FAMILIES[0]  # QUIET: M0, C0 and R_prod match R on every task


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    results = make_results(tmp_path_factory.mktemp("vacuity") / "results", draws=300, unexposed=QUIET)
    report.render(results, pdf=False)
    return results


def _rows(results: Path) -> tuple[list[dict], dict]:
    doc = json.loads((results / "numbers.json").read_text(encoding="utf-8"))
    nums = {n["id"]: n for n in doc["numbers"]}
    return doc["headline"], nums


def _text(row: dict, nums: dict) -> str:
    return "".join(nums[p["num"]]["text"] if isinstance(p, dict) else p for p in row["parts"])


def _row(head: list[dict], finding: str, scope: str) -> dict:
    return next(h for h in head if h["finding"].startswith(finding) and h["scope"].startswith(scope))


def test_vacuous_panel_says_vacuous(rendered):
    head, nums = _rows(rendered)
    n = nums[f"vacuity|confirmation|{QUIET}|screened"]["value"]
    assert n == 6  # the confirmation's six tasks, all screened
    want = f"vacuous: no exposed input in {n} screened"
    pres = _text(_row(head, "preservation", f"confirmation {QUIET}"), nums)
    assert pres.startswith(want), pres
    ratios = _text(_row(head, "qualified ratios", f"confirmation {QUIET}"), nums)
    assert ratios.startswith(want) and "M0 is " in ratios and " than M3 " in ratios, ratios
    html = (rendered / "report.html").read_text(encoding="utf-8")
    assert "vacuous: no exposed input in" in html


def test_exposed_panel_reads_as_before(rendered):
    head, nums = _rows(rendered)
    assert f"vacuity|confirmation|{LOUD}|screened" not in nums
    pres = _text(_row(head, "preservation", f"confirmation {LOUD}"), nums)
    assert "vacuous" not in pres and pres.startswith("R "), pres
    # the implementation campaign runs no unrepaired arm: no verdict either way
    assert not any(k.startswith("vacuity|implementation") for k in nums)


def test_checker_accepts_the_vacuous_report(rendered, tmp_path):
    code, out = run_check(seal_archive(rendered, tmp_path / "archive"))
    assert code == 0, out


def _resealed(src: Path, dst: Path, old: str, new: str) -> Path:
    def edit(work: Path) -> None:
        for name in ("report.html", "numbers.json"):
            f = work / name
            before = f.read_text(encoding="utf-8")
            assert old in before
            f.write_text(before.replace(old, new), encoding="utf-8")

    return reseal_edited(src, dst, edit)


def test_checker_refuses_preserved_on_a_vacuous_panel(rendered, tmp_path):
    arch = _resealed(rendered, tmp_path / "archive", "vacuous: no exposed input in ", "preserved: no exposed input in ")
    code, out = run_check(arch)
    assert code == 1, out
    assert f"confirmation {QUIET}: no unrepaired arm diverges on any task" in out, out
    assert "is vacuous, but the row says 'preserved'" in out, out


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory) -> Path:
    """The synthetic archive with a partition study whose arms A and B agree on every input, and its claim."""
    from refspec.core import tables as T
    from refspec.core.endpoint import Endpoint
    from refspec.provenance.claims import claim_row

    results = make_results(tmp_path_factory.mktemp("vacuous-partition") / "results", draws=300)
    tdir = results / "tables"
    toks = [5, 6, 7]
    base = dict(family=LOUD, prompt_len=30, degenerate=False, cap=3, callers=1, micrographs=1, n=3, eog=False)
    base |= dict(last_token=7, stop_reason="cap", initial_token=5, initial_margin=0.25, kv_bytes=64)
    base |= dict(endpoint_sha256=Endpoint(tuple(toks), False, "cap").sha256, tokens=toks, first_diff_vs_A=None)
    base |= dict(logits_sha256="1" * 64, kv_sha256="2" * 64, kv_payload=None, logits_payload=None)
    rows = [
        base
        | dict(task_id=t, arm=arm, repeat=rep, ub=4, partition=[30] if arm == "A" else [15, 15])
        | dict(endpoint_class=0, kv_class=0, logits_class=0)
        for t in ("HumanEval/0", "HumanEval/1")
        for arm in ("A", "B")
        for rep in (1, 2)
    ]
    T.write_table(rows, "partition", tdir)
    T.write_table([claim_row("partition", tdir, 0, "campaigns/partition")], "claims", tdir)
    report.render(results, pdf=False)
    return results


def test_vacuous_partition_reads_vacuous_and_checks(partitioned, tmp_path):
    claims = json.loads((partitioned / "numbers.json").read_text(encoding="utf-8"))
    nums = {n["id"]: n for n in claims["numbers"]}
    assert nums["partition|inputs"]["value"] == 2
    html = (partitioned / "report.html").read_text(encoding="utf-8")
    assert 'data-table="state-partition-verdict"' in html and 'data-table="claims"' in html
    claims_table = html[html.index('data-table="claims"') :]
    assert "vacuous: no exposed input in" in claims_table[: claims_table.index("</table>")]
    assert "supported" not in claims_table[: claims_table.index("</table>")]
    code, out = run_check(seal_archive(partitioned, tmp_path / "archive"))
    assert code == 0, out
