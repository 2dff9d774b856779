"""report/check.py recomputes the class of every first divergence from the sealed qualification row: a
near tie when ``ref_margin`` is below the near-tie bound, decisive otherwise; the row's ``near_tie_bound``
must be the product's constant (refspec_check.divergence, refspec.core.divergence). A row that says
"near tie" where the margin says decisive, or the reverse, or that was classified with another bound,
is refused; the rows refspec writes pass (refspec_check.results.check_qualification)."""

from __future__ import annotations

import pytest
from refspec_check import divergence as CD
from refspec_check.context import Context
from refspec_check.contract import CsvTable
from refspec_check.digests import endpoint_digest
from refspec_check.problems import Checker
from refspec_check.results import check_qualification

from refspec.campaigns.derived import qualification_table
from refspec.core import divergence as PD

REF = [11, 12, 13, 14]
ARM = [11, 12, 99, 14]  # diverges at index 2


def _tables(ref_margin: float) -> tuple[list[dict], list[dict], list[dict]]:
    reqs, eps = [], []
    for arm, toks in (("R", REF), ("M0", ARM)):
        base = dict(campaign="confirmation", family="f", task_id="HumanEval/2", arm=arm, cap=4, session="s1", repeat=1)
        reqs.append(base | dict(status="ok"))
        eps.append(
            base | dict(endpoint_sha256=endpoint_digest(toks, False, "cap"), tokens=toks, eog=False, stop_reason="cap")
        )
    margins = {("confirmation", "f", "HumanEval/2", 4): [3.0, 2.0, ref_margin, 1.0]}
    arm_margins = {("confirmation", "f", "HumanEval/2", 4, "M0", "s1", 1): [3.0, 2.0, 0.125, 1.0]}
    qual = qualification_table(reqs, eps, margins=margins, arm_margins=arm_margins)
    return reqs, eps, qual


def _problems(reqs, eps, qual) -> list[str]:
    c = Checker("archive", quiet=True)
    t = lambda name, rows: CsvTable(name, f"{name}.csv", f"tables/{name}.csv", rows, list(range(2, len(rows) + 2)))  # noqa: E731
    tables = {
        "requests": t("requests", reqs),
        "endpoints": t("endpoints", eps),
        "qualification": t("qualification", qual),
    }
    check_qualification(Context(c, tables, lambda name: f"tables/{name}.csv"))
    return c.problems


def _m0(qual: list[dict]) -> dict:
    return next(q for q in qual if q["arm"] == "M0")


def test_the_checker_holds_the_product_constant():
    assert CD.NEAR_TIE_MARGIN == PD.NEAR_TIE_MARGIN
    assert CD.DIVERGENCE_TEXT == PD.DIVERGENCE_TEXT


@pytest.mark.parametrize(
    "margin,want",
    [(PD.NEAR_TIE_MARGIN * 0.5, "near tie"), (PD.NEAR_TIE_MARGIN, "decisive"), (PD.NEAR_TIE_MARGIN * 4, "decisive")],
)
def test_refspec_rows_pass(margin, want):
    reqs, eps, qual = _tables(margin)
    assert _m0(qual)["divergence"] == want
    assert _problems(reqs, eps, qual) == []


@pytest.mark.parametrize(
    "margin,told",
    [(PD.NEAR_TIE_MARGIN * 4, "near tie"), (PD.NEAR_TIE_MARGIN, "near tie"), (PD.NEAR_TIE_MARGIN * 0.5, "decisive")],
)
def test_a_class_the_margin_does_not_give_is_refused(margin, told):
    reqs, eps, qual = _tables(margin)
    _m0(qual)["divergence"] = told
    probs = _problems(reqs, eps, qual)
    assert any("divergence" in p and f"says {told!r}, but the reference margin" in p for p in probs), probs


def test_another_bound_is_refused():
    # decided with a bound of 4 (the margin 2 below it: a near tie), not the product's constant
    reqs, eps, qual = _tables(PD.NEAR_TIE_MARGIN * 4)
    row = _m0(qual)
    row["near_tie_bound"], row["divergence"] = PD.NEAR_TIE_MARGIN * 8, "near tie"
    probs = _problems(reqs, eps, qual)
    assert any("near-tie bound:" in p for p in probs), probs
    assert any("says 'near tie', but the reference margin" in p for p in probs), probs


def test_a_class_without_a_reference_margin_is_refused():
    reqs, eps, qual = _tables(1.0)
    row = _m0(qual)
    row["ref_margin"] = None
    probs = _problems(reqs, eps, qual)
    assert any("a divergence class without a first divergence and a reference margin" in p for p in probs), probs
