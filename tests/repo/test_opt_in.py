"""The opt-in test groups: one list, the markers that pyproject.toml describes as opt-in, skipped
alike by a plain ``pytest`` and by ``./run test`` unless ``-m`` names them; and the layout's rule
that test modules have unique basenames (pytest's default import mode imports them by name)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections import Counter
from types import SimpleNamespace

from refspec.pipeline.main import pytest_command, suite_processes
from support.durations import GROUP_BUDGET_S, group_times, slowest_tests
from support.opt_in import skip_opt_in
from support.paths import REPO_ROOT, TESTS

OPT_IN = {"server_build", "bundle_round_trip", "cuda_build", "upstream_suite", "reproduce_full", "other_server"}


def _markers() -> dict[str, str]:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    lines = pyproject["tool"]["pytest"]["ini_options"]["markers"]
    return {name.strip(): description for name, _, description in (m.partition(":") for m in lines)}


class _Item:
    def __init__(self, marker: str):
        self.marker = marker
        self.keywords = {marker: True, f"test_{marker}": True}
        self.markers = []

    def add_marker(self, marker):
        self.markers.append(marker)


def _skips(markexpr: str) -> dict[str, list[str]]:
    lines = [f"{name}: {description}" for name, description in _markers().items()]
    config = SimpleNamespace(option=SimpleNamespace(markexpr=markexpr), getini=lambda name: lines)
    items = [_Item(name) for name in _markers()]
    skip_opt_in(config, items)
    return {item.marker: [m.kwargs["reason"] for m in item.markers if m.name == "skip"] for item in items}


def test_the_opt_in_groups_are_the_markers_pyproject_describes_as_opt_in():
    declared = {name for name, description in _markers().items() if "opt-in" in description}
    assert declared == OPT_IN
    for name in declared:
        assert f"./run test -m {name}" in _markers()[name], name


def test_a_plain_run_skips_every_opt_in_group_and_nothing_else():
    skips = _skips("")
    assert {name for name, reasons in skips.items() if reasons} == OPT_IN
    for name in OPT_IN:
        assert skips[name] == [f"opt-in: ./run test -m {name}"]


def test_a_group_named_by_m_runs():
    skips = _skips("server_build or bundle_round_trip")
    assert skips["server_build"] == [] and skips["bundle_round_trip"] == []
    assert skips["cuda_build"] == ["opt-in: ./run test -m cuda_build"]


def test_run_test_leaves_the_selection_to_the_conftest():
    # `./run test` passes no marker expression of its own: it runs what a plain pytest runs
    command = pytest_command([])
    assert command[1:3] == ["-m", "pytest"] and "-m" not in command[3:]
    assert command[command.index("-n") + 1] == str(suite_processes()) and "loadfile" in command
    assert "-n" not in pytest_command(["-n", "0"])[3:-2]
    assert pytest_command(["-m", "vulkan"])[3:].count("-m") == 1


def test_test_modules_have_unique_basenames():
    names = Counter(p.name for p in TESTS.rglob("*.py") if p.name.startswith("test_"))
    assert [name for name, n in names.items() if n > 1] == []


def test_every_test_group_has_a_time_budget():

    groups = {p.parent.name for p in TESTS.rglob("test_*.py") if p.parent.parent == TESTS}
    assert set(GROUP_BUDGET_S) == groups

    class Rep:
        def __init__(self, nodeid, duration):
            self.nodeid, self.duration = nodeid, duration

    reps = [Rep("tests/core/test_a.py::t", 1.5), Rep("tests/core/test_b.py::u", 2.0), Rep("tests/repo/x.py::v", 0.25)]
    assert group_times(reps) == {"core": 3.5, "repo": 0.25}


def test_the_slowest_tests_sum_each_tests_setup_call_and_teardown():
    class Rep:
        def __init__(self, nodeid, duration):
            self.nodeid, self.duration = nodeid, duration

    # the fixture-heavy test is slowest only with its setup counted (its call alone is the fastest)
    reps = [Rep("tests/a.py::heavy", 30.0), Rep("tests/a.py::heavy", 1.0), Rep("tests/a.py::heavy", 0.5)]
    reps += [Rep(f"tests/b.py::t{i}", 10.0 + i) for i in range(12)]
    reps.append(Rep("", 99.0))  # a collection report names no test
    slow = slowest_tests(reps)
    assert len(slow) == 10 and slow[0] == ("tests/a.py::heavy", 31.5)
    assert [t for t, _ in slow[1:]] == [f"tests/b.py::t{i}" for i in range(11, 2, -1)]


def test_a_parallel_run_keeps_each_module_in_one_process():
    # a module's fixtures are made once only if its tests share a process
    r = subprocess.run(
        [
            *pytest_command(["-n", "2", "-vv"]),  # -q and one -v cancel
            "tests/pipeline/test_stale_lock.py",
            "tests/compare/test_compare.py::test_noise_floor_is_the_widest_reach_of_the_archives_a_a_controls",
            "tests/compare/test_compare.py::test_an_a_a_twin_is_not_a_side_of_an_estimate",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .*? PASSED (\S+?)::", r.stdout, re.M)
    assert len(ran) == 5, r.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, module in ran:
        workers.setdefault(module, set()).add(worker)
    assert set(workers) == {"tests/pipeline/test_stale_lock.py", "tests/compare/test_compare.py"}, workers
    assert all(len(w) == 1 for w in workers.values()), workers
