"""Preregistration: a frozen plan refuses every later difference and names the changed field.

* :func:`refspec.provenance.plan.diff` names fields as dotted paths.
* ``plan.json`` edited after freezing is refused (by the file check and by
  ``refspec campaign --analyze``) with the changed field in the message.
* A campaign whose inputs changed after freezing (its definition, the analysis
  code) is refused on ``--resume``, naming the field.
* Amendments only add new fields; changing an existing one is refused.
"""

from __future__ import annotations

import json

import pytest
import yaml

from refspec import cli
from refspec.provenance import plan as planmod
from refspec.provenance.ledger import Ledger, verify_chain


def test_diff_names_dotted_fields():
    a = {"bootstrap": {"seed": 1, "draws": 10, "threshold": 1.02}, "schedule": [{"arm": "R"}, {"arm": "M_pq"}], "x": 1}
    b = {"bootstrap": {"seed": 1, "draws": 10, "threshold": 1.05}, "schedule": [{"arm": "R"}, {"arm": "M_qb"}], "y": 2}
    d = planmod.diff(a, b)
    assert planmod.changed_fields(d) == ["bootstrap.threshold", "schedule[1].arm", "x", "y"]
    assert "frozen 1.02, now 1.05" in d[0]
    assert planmod.diff({"n": 1}, {"n": 1.0}) == []
    assert planmod.diff([1, 2], [1]) == ["(plan): length frozen 2, now 1"]


def test_freeze_check_and_amend(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    plan = {
        "campaign": "replication",
        "bootstrap": {"seed": 20261014, "draws": 10000, "threshold": 1.02},
        "arms": {"R": {"ub": 1}},
    }
    planmod.freeze(tmp_path, plan, led, "test")
    assert planmod.check(tmp_path, led, plan) == plan
    with pytest.raises(planmod.PlanMismatch, match="already frozen"):
        planmod.freeze(tmp_path, plan, led, "again")

    # the inputs changed after freezing
    with pytest.raises(planmod.PlanMismatch, match=r"arms\.R\.ub") as e:
        planmod.check(tmp_path, led, {**plan, "arms": {"R": {"ub": 4}}})
    assert e.value.differences == ["arms.R.ub: frozen 1, now 4"]

    # an amendment adds a field; plan.json follows; the computed plan need not know it
    planmod.amend(tmp_path, led, "predictions", {"T/0": [1, 2, 3]}, "frozen predictions")
    assert planmod.check(tmp_path, led, plan)["predictions"] == {"T/0": [1, 2, 3]}
    with pytest.raises(planmod.PlanMismatch, match="already in the frozen plan"):
        planmod.amend(tmp_path, led, "predictions", {}, "again")
    with pytest.raises(planmod.PlanMismatch, match="already in the frozen plan"):
        planmod.amend(tmp_path, led, "bootstrap", {}, "change")

    # plan.json edited after freezing: refused, naming the field
    p = tmp_path / "plan.json"
    doc = json.loads(p.read_text())
    doc["predictions"]["T/0"] = [1, 2, 4]
    p.write_text(json.dumps(doc))
    with pytest.raises(planmod.PlanMismatch, match=r"edited after the plan was frozen.*predictions\.T/0"):
        planmod.check_file(tmp_path, led)
    p.unlink()
    with pytest.raises(planmod.PlanMismatch, match="missing"):
        planmod.check_file(tmp_path, led)
    assert verify_chain(led.path) == []


def _definition(tmp_path, **over):
    (tmp_path / "panel.jsonl").write_text('{"task_id": "T/0", "text": "Say hello."}\n')
    d = {
        "campaign": "confirmation",
        "arms": ["R", "M3"],
        "panel": {"source": "file", "file": "panel.jsonl"},
        "cap": 4,
        "repeats": 1,
        "block_by": "arm",
        "warmup_cap": 2,
    }
    d.update(over)
    path = tmp_path / "confirmation.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def _frozen_campaign(tmp_path, lib_path):
    """A confirmation campaign whose plan is frozen (nothing run yet)."""
    from refspec.campaigns.context import prepare
    from refspec.core.config import load_config

    defn = _definition(tmp_path)
    ctx, run, computed = prepare(
        "confirmation", load_config(None), definition=defn, out=tmp_path / "res", threads=1, progress=False
    )
    run.freeze_or_check(computed)
    return defn, run.out


def test_plan_edited_after_freezing_is_refused_naming_the_field(tmp_path, lib_path, family_files, capsys, monkeypatch):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    defn, cdir = _frozen_campaign(tmp_path, lib_path)
    plan = json.loads((cdir / "plan.json").read_text())
    assert plan["bootstrap"] == {"seed": 20261014, "draws": 10000, "threshold": 1.02}
    assert plan["aa_rule"] == "calibration"  # the A/A control's rule for every decision's floor
    assert set(plan["analysis_code"]["files"]) >= {
        "core/stats.py",
        "provenance/plan.py",
        "campaigns/__init__.py",
        "campaigns/confirmation.py",
    }
    assert plan["panels"]["confirm"]["tasks"] == ["T/0"] and plan["schedule"][0]["blocks"]

    args = [
        "campaign",
        "confirmation",
        "--definition",
        str(defn),
        "--out",
        str(tmp_path / "res"),
        "--threads",
        "1",
        "--no-progress",
    ]
    # without --resume a frozen campaign is not started again
    assert cli.main(args) == 2
    assert "--resume" in capsys.readouterr().err

    # plan.json edited: the analysis refuses and names the field
    edited = json.loads((cdir / "plan.json").read_text())
    edited["bootstrap"]["threshold"] = 1.01
    (cdir / "plan.json").write_text(json.dumps(edited, indent=1, sort_keys=True))
    assert cli.main(args + ["--analyze"]) == 1
    err = capsys.readouterr().err
    assert "edited after the plan was frozen" in err and "bootstrap.threshold: frozen 1.02, now 1.01" in err
    assert cli.main(args + ["--resume"]) == 1
    assert "bootstrap.threshold" in capsys.readouterr().err
    (cdir / "plan.json").write_text(json.dumps(plan, indent=1, sort_keys=True))

    # the definition changed after freezing: the resumed run is refused, naming the changed fields
    _definition(tmp_path, repeats=2)
    assert cli.main(args + ["--resume"]) == 1
    err = capsys.readouterr().err
    assert "differs from the frozen plan" in err and "definition.repeats: frozen 1, now 2" in err
    _definition(tmp_path)

    # the analysis code changed after freezing: refused, naming the file
    from refspec.campaigns import context as campaigns

    code = json.loads(json.dumps(campaigns.ANALYSIS_CODE))
    code["files"]["core/stats.py"] = "0" * 64
    monkeypatch.setattr(campaigns, "ANALYSIS_CODE", code)
    assert cli.main(args + ["--analyze"]) == 1
    assert "analysis_code.files.core/stats.py" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))

    # unchanged inputs: the analysis runs (nothing has run yet, so the tables are empty)
    assert cli.main(args + ["--analyze"]) == 5
    assert (cdir / "requests.parquet").is_file() and (cdir / "summary.txt").is_file()
    assert verify_chain(cdir / "ledger.jsonl") == []
