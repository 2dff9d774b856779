"""bench/cold_run.py reads the step table of a README command from its output: each test's seconds are
its setup, call and teardown summed, modules sum their tests, and the set-up before pytest is the
command's wall time less pytest's own total. The bench times nothing here: it parses fixed text."""

from __future__ import annotations

import importlib.util
import json

from refspec.core.paths import REPO_ROOT

PYTEST_LOG = """\
lint: ok
============================= slowest durations ==============================
30.00s call     tests/a/test_x.py::test_slow
5.50s setup    tests/a/test_x.py::test_slow
0.50s teardown tests/a/test_x.py::test_slow
20.00s call     tests/a/test_x.py::test_param[two words]
33.00s call     tests/b/test_y.py::test_alone
1.00s setup    tests/a/test_x.py::test_fast
(12 durations < 0.005s hidden.)
=================== 3 passed, 1 skipped in 90.25s (0:01:30) ===================
"""


def _bench():
    spec = importlib.util.spec_from_file_location("cold_run", REPO_ROOT / "bench" / "cold_run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_tests_seconds_are_its_setup_call_and_teardown_and_modules_sum_their_tests():
    b = _bench()
    slowest = b._slowest_tests(PYTEST_LOG)
    # 36 = 30 + 5.5 + 0.5: the call alone (30) would rank it below test_alone (33)
    assert [(t["test"], t["wall_s"]) for t in slowest] == [
        ("tests/a/test_x.py::test_slow", 36.0),
        ("tests/b/test_y.py::test_alone", 33.0),
        ("tests/a/test_x.py::test_param[two words]", 20.0),
        ("tests/a/test_x.py::test_fast", 1.0),
    ]
    assert [(s["step"], s["wall_s"]) for s in b._test_steps(PYTEST_LOG)] == [
        ("tests tests/a/test_x.py", 57.0),
        ("tests tests/b/test_y.py", 33.0),
    ]


def test_the_set_up_before_pytest_is_the_wall_time_less_pytests_total():
    b = _bench()
    assert b._pytest_setup_step(PYTEST_LOG, 400.25) == {
        "step": "set-up before pytest",
        "wall_s": 310.0,
        "cpu_s": None,
    }
    assert b._pytest_setup_step("lint failed\n", 12.0) is None  # no pytest summary: no row


def test_an_older_runs_table_takes_its_slowest_tests_and_set_up_from_the_log_beside_it(tmp_path):
    b = _bench()
    doc = {"command": "./run test", "cold": True, "commit": "0" * 40, "cores": 2, "exit": 0}
    doc |= {"wall_s": 400.25, "cpu_s": 700.0, "rules_wall_s": None, "steps": b._test_steps(PYTEST_LOG)}
    (tmp_path / "before.json").write_text(json.dumps(doc), encoding="utf-8")
    (tmp_path / "before.log").write_bytes(PYTEST_LOG.encode() + b"\x96 a cut progress bar\n")
    after = dict(doc, wall_s=200.0, slowest_tests=[{"test": "tests/b/test_y.py::test_alone", "wall_s": 3.0}])
    after["steps"] = [{"step": "set-up before pytest", "wall_s": 100.0, "cpu_s": None}, *doc["steps"]]
    (tmp_path / "after.json").write_text(json.dumps(after), encoding="utf-8")
    text = b.table([b._read_run(tmp_path / "before.json"), b._read_run(tmp_path / "after.json")])
    assert "whole command" in text and "0.500" in text  # 200 / 400.25, rounded
    setup = next(line for line in text.splitlines() if line.startswith("set-up before pytest"))
    assert setup.split()[-3:] == ["0.323", "-", "-"]  # the ratio, then no CPU seconds for the set-up
    before_part, after_part = text.split("slowest tests after")
    assert "36.0  tests/a/test_x.py::test_slow" in before_part
    assert [x.strip() for x in after_part.strip().splitlines()] == [
        "(setup + call + teardown, s):",
        "3.0  tests/b/test_y.py::test_alone",
    ]


def test_a_main_runs_table_sums_its_timed_campaigns_apart_from_its_other_rules():
    b = _bench()
    steps = [
        {"step": "set-up before the workflow", "wall_s": 60.0, "cpu_s": None},
        {"step": "rule campaign_implementation", "wall_s": 300.0, "cpu_s": 150.0},
        {"step": "rule campaign_replication", "wall_s": 200.0, "cpu_s": 50.0},
        {"step": "rule replay", "wall_s": 90.0, "cpu_s": 80.0},
        {"step": "rule native_build", "wall_s": 120.0, "cpu_s": None},
    ]
    # the set-up is neither; a rule without a CPU time leaves its sum's CPU unknown, not undercounted
    assert b._sums(steps) == [
        {"step": "sum: timed campaigns (rules campaign_*)", "wall_s": 500.0, "cpu_s": 200.0},
        {"step": "sum: other rules", "wall_s": 210.0, "cpu_s": None},
    ]
    doc = {"command": "./run main", "cold": True, "commit": "0" * 40, "cores": 2, "exit": 0}
    before = doc | {"wall_s": 800.0, "cpu_s": 500.0, "steps": steps}
    after = doc | {"wall_s": 600.0, "cpu_s": 450.0, "steps": [dict(s, wall_s=s["wall_s"] / 2) for s in steps]}
    lines = b.table([before, after]).splitlines()
    summed = next(x for x in lines if x.startswith("sum: timed campaigns"))
    assert summed.split()[-5:] == ["500.0", "250.0", "0.500", "200.0", "200.0"]
    assert next(x for x in lines if x.startswith("sum: other rules")).split()[-2:] == ["-", "-"]
