"""The suite's time per test group against its budget, and its slowest tests (printed by
tests/conftest.py at the end of ``./run test``): the budgets are the measured times of a full run
on a quiet 2-core machine with warm caches, rounded up; a group over its budget is named in the
summary, not failed (machines are shared, and speed is measured in benchmarks, not asserted by
tests)."""

from __future__ import annotations

#: seconds each test group (a folder of tests/) may take on a 2-core machine, summed over its tests'
#: setup, call and teardown (in a parallel run the sum exceeds the wall time); the suite prints each
#: group's time beside its budget and names the groups over it
GROUP_BUDGET_S = {
    "campaigns": 420,
    "checker": 900,
    "commands": 60,
    "compare": 300,
    "core": 60,
    "engine": 480,
    "engines": 300,
    "experiments": 600,
    "native": 900,
    "pipeline": 1200,
    "provenance": 240,
    "reporting": 300,
    "repo": 120,
    "workflow": 1500,
}


def group_times(reports) -> dict[str, float]:
    """Seconds per test group (the folder under tests/) over ``reports``' setup, call and teardown."""
    out: dict[str, float] = {}
    for rep in reports:
        parts = getattr(rep, "nodeid", "").split("/")
        if len(parts) > 2 and parts[0] == "tests" and isinstance(getattr(rep, "duration", None), float):
            out[parts[1]] = out.get(parts[1], 0.0) + rep.duration
    return out


#: how many of the slowest tests the end of ``./run test`` lists
SLOWEST = 10


def slowest_tests(reports, n: int = SLOWEST) -> list[tuple[str, float]]:
    """The ``n`` slowest tests of ``reports``, each test's setup, call and teardown summed (a slow
    fixture counts to the test that made it), the slowest first; ties by the test's id."""
    out: dict[str, float] = {}
    for rep in reports:
        nodeid = getattr(rep, "nodeid", "")
        if nodeid and isinstance(getattr(rep, "duration", None), float):
            out[nodeid] = out.get(nodeid, 0.0) + rep.duration
    return sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
