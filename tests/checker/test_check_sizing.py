"""A sized paired campaign: the size the cost model chose before the run (the frozen definition's
sizing.plan) beside the detectable ratio the run achieved, shown in the report and recomputed by
report/check.py from the plan's prior.

The synthetic archive's implementation campaign gets a frozen definition with a sizing prior; its
``sizing`` row is written by the package (refspec.campaigns.sizing). A signer who states a smaller
expected detectable ratio, or a size the prior does not give, is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refspec.campaigns.sizing import resolve_size, sizing_table
from refspec.core import stats as S
from refspec.core import tables as T
from refspec.reporting import render
from support.synthetic_archive import make_results, reseal_edited, run_check, seal_archive

PRIOR = {"between": 0.0005, "within": 0.015, "interaction": 0.00004, "process_s": 4.0, "request_s": 0.3}


def _sized_plan(results: Path) -> dict:
    """The implementation campaign's frozen plan with a sized paired definition, added to plan.json."""
    reqs = [r for r in T.read_records("requests", results) if r["campaign"] == "implementation"]
    family = reqs[0]["family"]
    arms = sorted({r["arm"] for r in reqs if r["family"] == family})
    tasks = sorted({r["task_id"] for r in reqs if r["family"] == family and r["status"] == "ok"})
    defn = {
        "campaign": "implementation",
        "design": "paired",
        "processes": 2,
        "repeats": 1,
        "bootstrap": {"seed": 20261014, "draws": 300, "threshold": 1.02},
        "sizing": {"target": 1.03, "budget_s": 300, "prior": PRIOR},
    }
    defn = resolve_size(defn, len(arms), len(tasks))
    plan = {
        "campaign": "implementation",
        "family": family,
        "aa_rule": S.DEFAULT_AA_RULE,  # the rule resolve_size sized under, as a frozen plan records it
        "definition": defn,
        "arms": {a: {} for a in arms},
        "panels": {"implementation": {"source": "humaneval", "tasks": tasks}},
    }
    doc = json.loads((results / "plan.json").read_text())
    doc["campaigns"][f"{family}/implementation"] = plan
    (results / "plan.json").write_text(json.dumps(doc, indent=2) + "\n")
    tables = {"ratios": [r for r in T.read_records("ratios", results) if r["campaign"] == "implementation"]}
    T.write_table(
        sizing_table(defn, family, {k: [r for r in v if r["family"] == family] for k, v in tables.items()}),
        "sizing",
        results / "tables",
    )
    return plan


@pytest.fixture(scope="module")
def sized(tmp_path_factory) -> Path:
    results = make_results(tmp_path_factory.mktemp("sizing") / "results", draws=300, aa=True)
    _sized_plan(results)
    render.render(results, pdf=False)
    return results


def test_the_sized_campaign_shows_its_plan_and_what_it_achieved(sized):
    (row,) = T.read_records("sizing", sized)
    assert row["processes"] >= 2 and row["repeats"] >= 1 and row["expected_detectable"] > 1.02
    assert row["reachable"] is False and "would cost" in row["reason"] or "not reached" in row["reason"]
    assert row["achieved_detectable"] is not None and row["achieved_intervals"] > 0
    html = (sized / "report.html").read_text(encoding="utf-8")
    assert "Size chosen before the run" in html and f"{row['expected_detectable']:.4f}" in html
    rc, out = run_check(seal_archive(sized, sized.parent / "archive"))
    assert rc == 0, out[-2000:]


def _edit_row(column, value):
    def edit(w: Path) -> None:
        recs = T.read_records("sizing", w)
        recs[0][column] = value(recs[0][column])
        T.write_table(recs, "sizing", w / "tables")

    return edit


def _edit_plan(w: Path) -> None:
    doc = json.loads((w / "plan.json").read_text())
    for p in doc["campaigns"].values():
        if (p.get("definition") or {}).get("sizing"):
            p["definition"]["processes"] += 1
    (w / "plan.json").write_text(json.dumps(doc, indent=2) + "\n")


@pytest.mark.parametrize(
    "edit, what",
    [
        (_edit_row("expected_detectable", lambda v: 1.03), "expected_detectable"),
        (_edit_row("achieved_detectable", lambda v: v * 0.9), "achieved_detectable"),
        (_edit_row("reachable", lambda v: True), "reachable"),
        (_edit_plan, "definition's size"),
    ],
)
def test_a_resealed_size_is_refused(sized, tmp_path, edit, what):
    rc, out = run_check(reseal_edited(sized, tmp_path / "archive", edit))
    assert rc == 1, out[-1500:]
    assert what in out
