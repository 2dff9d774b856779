"""Shared fixtures: the patched native build, the embedded default family's model files and its
target loaded (``target``), a small real study, sealed (``small_study``), and a copy of its
archive to change (``study_copy``), the sealed archives of the seal tests (``seal_env``); the
skip of the opt-in groups and the account of every skipped test.

The build and the model files are prepared once per test session (a first run builds the
libraries and derives the model files; later runs find them in the cache). The small study is run
once per test session into its temporary folder.

Every skip is accounted for: the suite ends with the skipped tests grouped by reason, and a skip
whose reason is not an opt-in group (``opt-in:``, the markers of pyproject.toml whose
description says so, with their cost) or this machine's hardware (``hardware:``, a CUDA device
or GPU backend absent, or present where the test is of the CPU-only path) fails the run: it is
something the set-up could build, install or generate (``./run test`` installs the Debian
packages the tests need as root with apt, builds the Vulkan backend where it can, and the tests
make the archives they read).
"""

from __future__ import annotations

import pytest

from support.durations import GROUP_BUDGET_S, SLOWEST, group_times, slowest_tests
from support.opt_in import OPT_IN, skip_opt_in

#: the reason prefixes of the skips a run may end with (see the module's docstring)
HARDWARE = "hardware:"
ACCOUNTED = (OPT_IN, HARDWARE)


@pytest.fixture(scope="session")
def native_build():
    """The patched llama.cpp build (:func:`refspec.native.build.current`)."""
    from refspec.native import build as native

    return native.current()


@pytest.fixture(scope="session")
def lib_path(native_build):
    """The folder with the patched libraries (what LLAMA_CPP_LIB_PATH points at)."""
    return native_build.lib_dir


@pytest.fixture(scope="session")
def family_files(native_build):
    """The ``smollm2-135m`` target and drafts, checked against their pins."""
    from refspec.native import models

    return models.ensure_family("smollm2-135m")


@pytest.fixture(scope="session")
def vulkan_build():
    """The patched build with the Vulkan backend (``./run test`` prepares it); the tests that need
    it skip only where this machine cannot have it (no Vulkan runtime and no root with apt)."""
    from refspec.native import build as native
    from refspec.native import vulkan

    why = vulkan.unavailable()
    if why:
        pytest.skip(f"Vulkan backend unavailable: {why}")
    return native.build(native.BuildOptions(backend="vulkan"), quiet=True)


@pytest.fixture(scope="session")
def replay_tool():
    """``refspec-replay`` of the default (CPU) native build, or ``$REFSPEC_REPLAY_TOOL``."""
    import os
    from pathlib import Path

    from refspec.native import build as native

    env = os.environ.get("REFSPEC_REPLAY_TOOL")
    return Path(env) if env else native.current().replay_tool


@pytest.fixture(scope="session")
def small_study(tmp_path_factory, native_build, family_files):
    """A small real study run by the workflow and sealed (:mod:`support.small_study`): the
    implementation and replication campaigns (with the A/A twin of C_qb) and the state stages."""
    from support.small_study import shared_small_study

    study = shared_small_study(tmp_path_factory)
    _SMALL_STUDY.append(study)
    return study


_SMALL_STUDY: list = []


@pytest.fixture(scope="module")
def study_copy(tmp_path_factory, small_study):
    """A copy of the small study's sealed archive (``a``; the study's own archive is never touched),
    a test key (``key``, ``keyid``), the study's signer and config and the copy read back verified
    (``archive``), under ``base``: the archive the compare and reproduce tests change and seal again."""
    import shutil

    from refspec.compare import load_verified
    from refspec.provenance import keys

    base = tmp_path_factory.mktemp("study-copy")
    kp = keys.generate(base / "keys", name="study_copy_test")
    a = base / "a"
    shutil.copytree(small_study.sealed, a)
    signer = small_study.signer
    return {
        "base": base,
        "key": kp,
        "keyid": keys.public_fingerprint(kp.public_path),
        "a": a,
        "archive": load_verified(a, signer, "A", keys.public_fingerprint(signer), base),
        "signer": signer,
        "config": small_study.config,
    }


@pytest.fixture(scope="module")
def target(native_build, family_files):
    """The ``smollm2-135m`` target loaded by the patched runtime (one per test module)."""
    from refspec.native import runtime

    runtime.load(native_build.lib_dir)
    m = runtime.Model(family_files.target.path, sha256=family_files.target.sha256)
    yield m
    m.close()


@pytest.fixture(scope="session")
def seal_env(tmp_path_factory):
    """Keys A and B, a clean archive (and its tar), a chained successor and an archive of another
    campaign, for the seal tests (:func:`support.sealing.make_seal_env`)."""
    from support.sealing import make_seal_env

    return make_seal_env(tmp_path_factory.mktemp("seal_env"))


#: the modules that take longest (minutes of real workflow runs), in the order a parallel run
#: starts them: the long poles first, so that no process is left alone with one at the end;
#: test_compare.py runs the shared small study, test_reproduce.py reads it once it is sealed
FIRST_MODULES = ("test_compare.py", "test_workflow_run.py", "test_reproduce.py", "test_vulkan.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The opt-in tests (``server_build``, ``bundle_round_trip``, ``cuda_build``, ``upstream_suite``
    and ``other_server`` build for a long time or download, ``reproduce_full`` runs the whole
    default study again) are skipped unless ``-m`` names them (:mod:`support.opt_in`). The modules
    of :data:`FIRST_MODULES` come first (pytest-xdist hands modules out in this order); the others
    keep theirs."""
    skip_opt_in(config, items)
    rank = {name: i for i, name in enumerate(FIRST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST_MODULES)))  # stable: the rest keep their order


# --------------------------------------------------------------------------- the account of skips

_SKIPPED: list[tuple[str, str]] = []  # (test id, reason)


def _skip_reason(report) -> str:
    lr = report.longrepr
    text = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
    return text[len("Skipped: ") :] if text.startswith("Skipped: ") else text


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail") and (report.when == "setup" or report.when == "call"):
        _SKIPPED.append((report.nodeid, _skip_reason(report)))


def pytest_collectreport(report):
    if report.skipped:
        _SKIPPED.append((report.nodeid, _skip_reason(report)))


def unaccounted(skipped: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The skips whose reason is neither an opt-in group nor this machine's hardware."""
    return [(t, r) for t, r in skipped if not r.startswith(ACCOUNTED)]


def pytest_sessionfinish(session, exitstatus):
    """A run with an unaccounted skip fails (exit 1), as a failed test does."""
    if unaccounted(_SKIPPED) and exitstatus == 0:
        session.exitstatus = 1


def _write_slowest(tr, reports: list) -> None:
    slow = slowest_tests(reports)
    if not slow:
        return
    tr.section(f"the {SLOWEST} slowest tests (seconds: setup + call + teardown)", sep="=")
    for nodeid, s in slow:
        tr.write_line(f"  {s:8.1f}  {nodeid}")


def _write_group_times(tr, reports: list) -> None:
    times = group_times(reports)
    if not times:
        return
    tr.section("test time by group (seconds, summed over the group's tests; budget on a 2-core machine)", sep="=")
    for group, s in sorted(times.items(), key=lambda kv: -kv[1]):
        budget = GROUP_BUDGET_S.get(group)
        over = budget is not None and s > budget
        tr.write_line(
            f"  {group:<12} {s:8.1f}  budget {budget if budget is not None else '-':>5}"
            + ("  OVER BUDGET" if over else ""),
            yellow=over,
        )


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    # every report of the run (setup, call and teardown alike), read once for both summaries
    reports = [r for key in ("passed", "failed", "skipped", "error", "") for r in tr.stats.get(key, [])]
    _write_slowest(tr, reports)
    _write_group_times(tr, reports)
    for study in _SMALL_STUDY:
        tr.write_line(study.summary())
    if not _SKIPPED:
        return
    costs = {}
    for line in config.getini("markers"):
        name, _, description = line.partition(":")
        costs[f"{OPT_IN} ./run test -m {name.split('(')[0].strip()}"] = description.strip()
    by_reason: dict[str, list[str]] = {}
    for test, reason in _SKIPPED:
        by_reason.setdefault(reason, []).append(test)
    bad = unaccounted(_SKIPPED)
    tr.section(f"skipped: {len(_SKIPPED)} test(s) by reason", sep="=")
    for group, title in ((OPT_IN, "opt-in groups"), (HARDWARE, "this machine's hardware"), (None, "UNACCOUNTED")):
        reasons = [r for r in by_reason if (r.startswith(group) if group else not r.startswith(ACCOUNTED))]
        if not reasons:
            continue
        tr.write_line(f"{title}:")
        for reason in sorted(reasons):
            tests = by_reason[reason]
            cost = f" [{costs[reason]}]" if reason in costs else ""
            tr.write_line(f"  {len(tests):3d}  {reason}{cost}")
            for t in sorted(tests):
                tr.write_line(f"         {t}")
    if bad:
        tr.write_line(
            f"{len(bad)} skip(s) neither opt-in nor hardware: the set-up could build, install or generate what "
            "they need, so the run fails (exit 1) until it does",
            red=True,
        )
