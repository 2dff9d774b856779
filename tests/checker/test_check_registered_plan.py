"""One registered plan: where a campaign's ledger registers its plan (plan_frozen, then amendments),
the top-level plan.json and the campaign's own plan.json must both be it. A dishonest signer who
rewrites the top-level plan after the run, renders the report again with the project's renderer and
re-seals is refused, naming the campaign and the keys that differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refspec.provenance.ledger import Ledger
from refspec.reporting import render as report
from support.synthetic_archive import reseal_edited, run_check

PLAN = {"campaign": "implementation", "threshold": 1.02, "reference": "R", "arms": ["R", "M_qb", "C_qb"]}


def _register(work: Path, amend: bool = True) -> None:
    """The implementation campaign's registration as a run writes it: its plan in its ledger and in
    campaigns/implementation/plan.json, and in the top-level plan.json; an amendment sets one field."""
    final = dict(PLAN, selection={"predictor": "M0"}) if amend else dict(PLAN)
    folder = work / "campaigns" / "implementation"
    led = Ledger(folder / "ledger.jsonl")
    led.append({"kind": "plan_frozen", "campaign": "implementation", "plan": PLAN, "reason": "registered"})
    if amend:
        led.append({"kind": "plan_amendment", "field": "selection", "value": {"predictor": "M0"}, "reason": "r"})
    (folder / "plan.json").write_text(json.dumps(final, indent=1) + "\n")
    top = json.loads((work / "plan.json").read_text())
    top["campaigns"]["implementation"] = final
    (work / "plan.json").write_text(json.dumps(top, indent=1) + "\n")
    report.render(work, pdf=False)


def test_the_registered_plan_passes(stage, tmp_path):
    code, out = run_check(reseal_edited(stage, tmp_path / "archive", _register))
    assert code == 0, out[-3000:]


@pytest.mark.parametrize("where", ["plan.json", "campaigns/implementation/plan.json"])
@pytest.mark.parametrize("key,value", [("reference", "C0"), ("threshold", 1.0)])
def test_a_plan_rewritten_after_the_run_is_refused(stage, tmp_path, where, key, value):
    def edit(work: Path) -> None:
        _register(work)
        p = work / where
        doc = json.loads(p.read_text())
        (doc["campaigns"]["implementation"] if where == "plan.json" else doc)[key] = value
        p.write_text(json.dumps(doc, indent=1) + "\n")
        report.render(work, pdf=False)  # the report rendered again from the rewritten plan

    code, out = run_check(reseal_edited(stage, tmp_path / "archive", edit))
    assert code == 1, out[-3000:]
    said = "campaigns.implementation is not" if where == "plan.json" else f"{where}: not the plan registered"
    assert said in out and f"{key} differ" in out, out[-3000:]


def test_an_amendment_left_out_is_refused(stage, tmp_path):
    """The frozen plan alone is not the registered plan where the ledger amended it."""

    def edit(work: Path) -> None:
        _register(work)
        led = work / "campaigns" / "implementation" / "ledger.jsonl"
        lines = led.read_text().splitlines(keepends=True)
        assert '"plan_amendment"' in lines[-1]
        led.write_text("".join(lines[:-1]))  # the amendment cut (the chain still holds: it was last)

    code, out = run_check(reseal_edited(stage, tmp_path / "archive", edit))
    assert code == 1 and "selection differ" in out, out[-3000:]
