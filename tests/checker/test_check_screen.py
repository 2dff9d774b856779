"""report/check.py recomputes the divergence screen (refspec_check.screen): the tasks' ranks by risk
margin, the tasks tried under the rule's want and budget, the exposed tasks and the stable controls,
and screen.json's lists. Each edit a re-sealing signer could make to what a reader sees (a task
called exposed, a diverging arm shown as matching, a control picked by hand, a reordered screen) is
refused; the screen as written passes."""

from __future__ import annotations

import copy
import json

from refspec_check.context import Context
from refspec_check.contract import CsvTable
from refspec_check.problems import Checker
from refspec_check.screen import check_exposed_repairs, check_screen

# task -> (risk margin, arm -> first divergence or None (matches), or "not tried")
SCREEN = {
    "HumanEval/0": (0.9, "not tried"),
    "HumanEval/1": (0.05, {"M0": None, "C0": 22}),
    "HumanEval/2": (0.01, {"M0": 32, "C0": 32}),
    "HumanEval/3": (2.5, "not tried"),
}
ORDER = ["HumanEval/2", "HumanEval/1", "HumanEval/0", "HumanEval/3"]


def _rows() -> list[dict]:
    rows = []
    for tid, (risk, arms) in SCREEN.items():
        base = dict(
            family="f",
            task_id=tid,
            rank=ORDER.index(tid) + 1,
            prompt_tokens=150,
            risk_margin=risk,
            exposed=tid in ("HumanEval/1", "HumanEval/2"),
            control=tid == "HumanEval/3",
        )
        none = dict(
            n_tokens=None,
            stop_reason=None,
            first_diff_index=None,
            ref_token=None,
            arm_token=None,
            ref_margin=None,
            arm_margin=None,
            divergence=None,
            near_tie_bound=None,
        )
        rows.append(base | none | dict(arm="R", status="reference", n_tokens=48, stop_reason="cap"))
        for arm in ("M0", "C0"):
            if arms == "not tried":
                rows.append(base | none | dict(arm=arm, status="not tried"))
                continue
            fd = arms[arm]
            r = base | none | dict(arm=arm, status="matches" if fd is None else "diverges", n_tokens=48)
            if fd is not None:
                r |= dict(first_diff_index=fd, ref_token=7, arm_token=8, ref_margin=0.1, arm_margin=0.2)
                r |= dict(divergence="near tie", near_tie_bound=0.5)
            rows.append(r)
    return rows


RECORD = {
    "panel": {"source": "humaneval", "tasks": list(SCREEN), "sha256": "x"},
    "cap": 48,
    "want": 2,
    "budget": 3,
    "controls_wanted": 1,
    "order": ORDER,
    "tried": ["HumanEval/2", "HumanEval/1"],
    "exposed": ["HumanEval/2", "HumanEval/1"],
    "controls": ["HumanEval/3"],
    "exposed_panel": {"file": "exposed-panel.jsonl", "tasks": ["HumanEval/2", "HumanEval/1", "HumanEval/3"]},
}


def _problems(tmp_path, rows=None, record=None, plan=None) -> list[str]:
    d = tmp_path / "campaigns" / "screen"
    d.mkdir(parents=True, exist_ok=True)
    (d / "screen.json").write_text(json.dumps(record or RECORD))
    rows = rows or _rows()
    c = Checker(str(tmp_path), quiet=True)
    t = CsvTable(
        "divergence_screen",
        "divergence_screen.csv",
        "tables/divergence_screen.csv",
        rows,
        list(range(2, len(rows) + 2)),
    )
    ctx = Context(c, {"divergence_screen": t}, lambda name: f"tables/{name}.csv")
    check_screen(ctx, plan)
    return c.problems


def test_the_screen_as_written_passes(tmp_path):
    assert _problems(tmp_path) == []


def test_a_task_called_exposed_without_a_divergence_is_refused(tmp_path):
    rows = _rows()
    for r in rows:
        if r["task_id"] == "HumanEval/0":
            r["exposed"] = True
    probs = _problems(tmp_path, rows)
    assert any("HumanEval/0] exposed" in p for p in probs), probs


def test_a_diverging_arm_shown_as_matching_is_refused(tmp_path):
    rows = _rows()
    for r in rows:
        if r["task_id"] == "HumanEval/1" and r["arm"] == "C0":
            r["status"] = "matches"
    probs = _problems(tmp_path, rows)
    assert any("an arm diverges exactly when it has a first divergence" in p for p in probs), probs


def test_a_control_picked_by_hand_is_refused(tmp_path):
    rec = copy.deepcopy(RECORD)
    rec["controls"] = ["HumanEval/0"]
    probs = _problems(tmp_path, record=rec)
    assert any("screen.json controls" in p for p in probs), probs


def test_a_reordered_screen_is_refused(tmp_path):
    rows = _rows()
    for r in rows:  # HumanEval/1 shown first, though HumanEval/2 has the smaller margin
        if r["task_id"] == "HumanEval/1":
            r["rank"] = 1
        elif r["task_id"] == "HumanEval/2":
            r["rank"] = 2
    probs = _problems(tmp_path, rows)
    assert any("rank by risk margin" in p for p in probs), probs


def test_tasks_tried_beyond_the_rule_are_refused(tmp_path):
    rec = copy.deepcopy(RECORD)
    rec["want"] = 1  # the screen should have stopped after HumanEval/2
    probs = _problems(tmp_path, record=rec)
    assert any("the screen's rule" in p for p in probs), probs


def test_a_campaign_on_other_tasks_than_the_exposed_panel_is_refused(tmp_path):
    plan = {
        "campaigns": {
            "confirmation": {
                "panels": {"confirm": {"source": "screen", "tasks": ["HumanEval/0"], "screen": {"cap": 48}}}
            }
        }
    }
    probs = _problems(tmp_path, plan=plan)
    assert any("panels.confirm.tasks" in p for p in probs), probs
    plan["campaigns"]["confirmation"]["panels"]["confirm"]["tasks"] = RECORD["exposed_panel"]["tasks"]
    assert _problems(tmp_path, plan=plan) == []


def test_repairs_on_the_exposed_tasks_are_counted_on_the_tasks_where_the_unrepaired_arm_diverges():
    c = Checker("archive", quiet=True)
    reqs = [
        dict(campaign="confirmation", family="f", arm=a, ub=ub, mask=m)
        for a, ub, m in (("R", 1, 0), ("M0", 4, 0), ("M3", 4, 3), ("M3_aa", 4, 3))
    ]
    qual = {}
    for t, m0_fd, m3_ok in (("T1", 5, True), ("T2", 9, False), ("T3", None, True)):
        qual[("confirmation", "f", t, 48, "M0")] = dict(first_diff_index=m0_fd, qualified=m0_fd is None)
        qual[("confirmation", "f", t, 48, "M3")] = dict(first_diff_index=None if m3_ok else 3, qualified=m3_ok)
        qual[("confirmation", "f", t, 48, "M3_aa")] = dict(first_diff_index=None, qualified=True)
    tables = {
        "requests": CsvTable("requests", "requests.csv", "tables/requests.csv", reqs, [2, 3, 4, 5]),
        "qualification": CsvTable("qualification", "qualification.csv", "tables/qualification.csv", [], []),
    }
    ctx = Context(c, tables, lambda name: f"tables/{name}.csv")
    check_exposed_repairs(ctx, qual)
    items = ctx.E.items
    # M3 reproduces R on 1 of the 2 exposed tasks (T3 is not exposed); the twin is not listed
    assert items["exprep|confirmation|f|M3|reproduces"][0] == 1
    assert items["exprep|confirmation|f|M3|exposed"][0] == 2
    assert not any("M3_aa" in k for k in items)


def test_a_screen_divergence_class_that_its_margin_does_not_give_is_refused(tmp_path):
    """A first divergence whose reference margin is a near tie, sealed as decisive (and one without its bound)."""
    rows = _rows()
    i = next(i for i, r in enumerate(rows) if r["status"] == "diverges")
    rows[i]["divergence"] = "decisive"
    j = next(j for j, r in enumerate(rows) if r["status"] == "diverges" and j != i)
    rows[j]["near_tie_bound"] = None
    probs = _problems(tmp_path, rows)
    assert any("column divergence" in p and "'near tie'" in p for p in probs), probs
    assert any("column near_tie_bound" in p for p in probs), probs


def _vacuous_screen() -> tuple[list[dict], dict]:
    """The same discovery panel where no unrepaired arm diverges: the budget of three tasks runs out."""
    rows = []
    for r in _rows():
        r = dict(r, exposed=False)
        if r["arm"] != "R" and r["task_id"] != "HumanEval/3":
            r |= dict(status="matches", n_tokens=48, first_diff_index=None, ref_token=None, arm_token=None)
            r |= dict(ref_margin=None, arm_margin=None, divergence=None, near_tie_bound=None)
        rows.append(r)
    rec = copy.deepcopy(RECORD)
    rec |= dict(tried=["HumanEval/2", "HumanEval/1", "HumanEval/0"], exposed=[])
    rec["exposed_panel"] = {"file": "exposed-panel.jsonl", "tasks": ["HumanEval/3"]}
    return rows, rec


def _expected(tmp_path, rows, record) -> dict:
    d = tmp_path / "campaigns" / "screen"
    d.mkdir(parents=True, exist_ok=True)
    (d / "screen.json").write_text(json.dumps(record))
    c = Checker(str(tmp_path), quiet=True)
    lines = list(range(2, len(rows) + 2))
    t = CsvTable("divergence_screen", "divergence_screen.csv", "tables/divergence_screen.csv", rows, lines)
    ctx = Context(c, {"divergence_screen": t}, lambda name: f"tables/{name}.csv")
    check_screen(ctx, None)
    assert c.problems == []
    return {k: v[0] for k, v in ctx.E.items.items()}


def test_a_screen_that_finds_nothing_owes_the_vacuous_verdict(tmp_path):
    """check.py expects "vacuous: no exposed input in N screened" (N the tasks tried) exactly when the
    screen exposed nothing: a report that leaves the verdict out misses a recomputed number."""
    e = _expected(tmp_path / "v", *_vacuous_screen())
    assert e["screen|f|exposed"] == 0 and e["screen|f|vacuous_screened"] == 3
    e = _expected(tmp_path / "x", _rows(), RECORD)
    assert e["screen|f|exposed"] == 2 and "screen|f|vacuous_screened" not in e
