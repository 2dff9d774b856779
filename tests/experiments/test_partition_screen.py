"""The partition screen's rule (refspec.experiments.state.partition_screen.choose) on rows built by
hand: which inputs are exposed, which pair ``auto`` takes, which inputs the study and its controls
get, and the frozen record's refusal of a changed exposed panel. The screen on real prefills is in
tests/experiments/test_state_report.py."""

from __future__ import annotations

import json

import pytest

from refspec.core.errors import ConfigError
from refspec.core.panels import Task, write_panel
from refspec.experiments.state.partition_screen import (
    EXPOSED_PANEL,
    SCREEN_RECORD,
    choose,
    pair_order,
    read_partition_screen,
)

ARMS = ["A", "B", "C", "Sn-1", "U1"]


def _rows(states: dict[str, dict[str, str]]) -> list[dict]:
    """``{task: {arm: state}}`` (arms left out share A's state) as screen rows with their classes."""
    rows = []
    for t, st in states.items():
        seen: dict[str, int] = {}
        for arm in ARMS:
            v = st.get(arm, "a")
            k = seen.setdefault(v, len(seen))
            rows.append({"task_id": t, "arm": arm, "kv_sha256": v, "logits_sha256": v, "differs": k != 0})
    return rows


def test_auto_takes_a_b_where_the_backend_shows_it():
    rows = _rows({"t0": {"U1": "u"}, "t1": {"B": "b", "C": "b"}, "t2": {}, "t3": {"B": "x"}})
    pick = choose(rows, ["t0", "t1", "t2", "t3"], ARMS, pair=None, inputs=2, controls=1)
    assert pick["exposed"] == ["t0", "t1", "t3"]
    assert pick["pair"] == ["A", "B"]
    assert pick["study"] == ["t1", "t3"]  # where A and B differ, not t0 (only U1 differs there)
    assert pick["controls"] == ["t2"]


def test_auto_falls_back_in_the_stated_order():
    rows = _rows({"t0": {"U1": "u"}, "t1": {"Sn-1": "s", "U1": "u"}})
    assert pair_order(ARMS) == [("A", "B"), ("A", "C"), ("B", "C"), ("A", "Sn-1"), ("A", "U1")]
    pick = choose(rows, ["t0", "t1"], ARMS, pair=None, inputs=3, controls=1)
    assert pick["pair"] == ["A", "Sn-1"] and pick["study"] == ["t1"] and pick["controls"] == []
    rows = _rows({"t0": {"B": "b", "C": "b"}})  # B and C share a state that is not A's: A/B comes first
    assert choose(rows, ["t0"], ARMS, pair=None, inputs=1, controls=0)["pair"] == ["A", "B"]


def test_a_configured_pair_is_kept_and_its_inputs_taken_in_panel_order():
    rows = _rows({"t0": {"B": "b"}, "t1": {"U1": "u"}, "t2": {"U1": "v"}, "t3": {"U1": "w"}})
    pick = choose(rows, ["t0", "t1", "t2", "t3"], ARMS, pair=("A", "U1"), inputs=2, controls=1)
    assert pick["pair"] == ["A", "U1"] and pick["study"] == ["t1", "t2"] and pick["controls"] == []
    with pytest.raises(ConfigError, match="does not run"):
        choose(rows, ["t0"], ARMS, pair=("A", "U4"), inputs=1, controls=0)


def test_nothing_exposed_is_vacuous_and_keeps_the_controls():
    rows = _rows({"t0": {}, "t1": {}})
    pick = choose(rows, ["t0", "t1"], ARMS, pair=None, inputs=2, controls=1)
    assert pick == {"exposed": [], "pair": None, "study": [], "controls": ["t0"]}


def test_the_frozen_panel_is_read_only_as_recorded(tmp_path):
    sha = write_panel([Task("HumanEval/2", "def f(): pass")], tmp_path / EXPOSED_PANEL)
    rec = {"exposed_panel": {"file": EXPOSED_PANEL, "sha256": sha, "tasks": ["HumanEval/2"]}, "pair": ["A", "B"]}
    (tmp_path / SCREEN_RECORD).write_text(json.dumps(rec))
    assert read_partition_screen(tmp_path)["pair"] == ["A", "B"]
    write_panel([Task("HumanEval/3", "def g(): pass")], tmp_path / EXPOSED_PANEL)  # re-picked by hand
    with pytest.raises(ConfigError, match="not the exposed panel"):
        read_partition_screen(tmp_path)
    with pytest.raises(ConfigError, match="no partition screen here"):
        read_partition_screen(tmp_path / "missing")
