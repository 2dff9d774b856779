"""The divergence screen (refspec.experiments.divergence_screen): the order of the tasks by R's smallest
margin, the stable controls, the repairs counted on the exposed tasks (refspec.core.vacuity), and the
screen's frozen panel as the confirmation campaign reads it: a panel whose digest differs from the
one the screen froze, or a campaign at another cap, is refused."""

from __future__ import annotations

import json
import math

import pytest

from refspec.campaigns.context import _screened
from refspec.core.errors import ConfigError
from refspec.core.panels import Task, write_panel
from refspec.core.vacuity import exposed_repairs
from refspec.experiments.divergence_screen import (
    EXPOSED_PANEL,
    SCREEN_RECORD,
    choose_controls,
    read_screen,
    risk,
    screen_order,
)

TASKS = [Task(f"HumanEval/{i}", text=f"task {i}") for i in range(5)]


def test_risk_is_the_smallest_finite_margin():
    assert risk([3.0, 0.25, math.inf, 1.0]) == 0.25
    assert risk([math.nan, 2.0]) == 2.0
    assert risk([]) is None and risk([math.inf]) is None


def test_order_is_smallest_margin_first_ties_in_panel_order_and_no_margin_last():
    risks = {"HumanEval/0": 1.0, "HumanEval/1": None, "HumanEval/2": 0.5, "HumanEval/3": 1.0, "HumanEval/4": 0.1}
    assert screen_order(TASKS, risks) == ["HumanEval/4", "HumanEval/2", "HumanEval/0", "HumanEval/3", "HumanEval/1"]


def test_controls_are_the_least_at_risk_tasks_outside_the_exposed():
    risks = {"HumanEval/0": 1.0, "HumanEval/1": None, "HumanEval/2": 0.5, "HumanEval/3": 4.0, "HumanEval/4": 9.0}
    order = screen_order(TASKS, risks)
    assert choose_controls(order, risks, {"HumanEval/4"}, 2) == ["HumanEval/3", "HumanEval/0"]
    assert choose_controls(order, risks, set(), 0) == []


def test_repairs_are_counted_on_the_tasks_where_an_unrepaired_arm_diverges():
    reqs = [
        dict(campaign="confirmation", family="f", arm=a, ub=ub, mask=m)
        for a, ub, m in (("R", 1, 0), ("M0", 4, 0), ("C0", 4, 0), ("M3", 4, 3), ("M3_aa", 4, 3))
    ]
    qual = []
    for t, m0, c0, m3 in (("T1", 5, None, True), ("T2", 9, 4, False), ("T3", None, None, True)):
        for arm, fd in (("M0", m0), ("C0", c0)):
            qual.append(
                dict(
                    campaign="confirmation",
                    family="f",
                    task_id=t,
                    cap=48,
                    arm=arm,
                    first_diff_index=fd,
                    qualified=fd is None,
                )
            )
        qual.append(
            dict(
                campaign="confirmation",
                family="f",
                task_id=t,
                cap=48,
                arm="M3",
                first_diff_index=None if m3 else 2,
                qualified=m3,
            )
        )
        qual.append(
            dict(
                campaign="confirmation",
                family="f",
                task_id=t,
                cap=48,
                arm="M3_aa",
                first_diff_index=None,
                qualified=True,
            )
        )
    got = exposed_repairs(qual, reqs)
    # exposed: T1 (M0) and T2 (M0, C0); M3 qualifies on T1 only; the twin has no entry
    assert got == {("confirmation", "f", "M3"): (1, 2)}


def _screen_folder(tmp_path, cap=48):
    d = tmp_path / "screen"
    d.mkdir()
    sha = write_panel(TASKS[:2], d / EXPOSED_PANEL)
    rec = {
        "cap": cap,
        "exposed": ["HumanEval/0"],
        "controls": ["HumanEval/1"],
        "exposed_panel": {"file": EXPOSED_PANEL, "sha256": sha, "tasks": ["HumanEval/0", "HumanEval/1"]},
    }
    (d / SCREEN_RECORD).write_text(json.dumps(rec))
    return d


def test_a_campaign_reads_the_frozen_exposed_panel(tmp_path):
    d = _screen_folder(tmp_path)
    spec, rec = _screened({"source": "screen"}, d)
    assert spec == {"source": "file", "file": str(d / EXPOSED_PANEL)} and rec["exposed"] == ["HumanEval/0"]
    assert _screened({"source": "humaneval", "tasks": "0"}, d) == ({"source": "humaneval", "tasks": "0"}, None)


def test_an_exposed_panel_changed_after_the_screen_is_refused(tmp_path):
    d = _screen_folder(tmp_path)
    write_panel(TASKS[2:4], d / EXPOSED_PANEL)  # other tasks, same file name
    with pytest.raises(ConfigError, match="not the exposed panel"):
        read_screen(d)


def test_a_missing_screen_is_refused_with_what_to_run(tmp_path):
    with pytest.raises(ConfigError, match="run the screen stage first"):
        read_screen(tmp_path / "nowhere")
