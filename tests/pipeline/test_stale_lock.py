"""``./run main`` releases the lock a killed run left on its own results, and only that lock: a live
run on another study in the same repository keeps its locks (several runs share one repository
when the test suite runs in parallel, and a user may run two studies side by side)."""

from __future__ import annotations

import subprocess
import sys
import time

from refspec.core.paths import REPO_ROOT
from refspec.pipeline.main import release_stale_lock


def _lock(locks, n, outputs):
    locks.mkdir(parents=True, exist_ok=True)
    (locks / f"{n}.input.lock").write_text("config/config.yaml\n")
    (locks / f"{n}.output.lock").write_text("".join(f"{o}\n" for o in outputs))


def test_only_the_locks_on_this_runs_results_are_released(tmp_path, capsys):
    locks = tmp_path / "locks"
    mine, other = tmp_path / "mine", tmp_path / "other"
    _lock(locks, 0, [other / "archive" / "report.html"])
    _lock(locks, 1, [mine / "campaigns" / "journal.jsonl", mine / "archive" / "SEAL.dsse.json"])
    release_stale_lock(["snakemake", "--configfile", str(tmp_path / "mine.yaml")], mine, locks)
    assert sorted(f.name for f in locks.iterdir()) == ["0.input.lock", "0.output.lock"]
    assert "releasing the lock an interrupted run left behind" in capsys.readouterr().err
    # nothing of this run's is locked any more: a second call says nothing
    release_stale_lock(["snakemake", "--configfile", str(tmp_path / "mine.yaml")], mine, locks)
    assert capsys.readouterr().err == ""


def test_relative_lock_paths_are_read_from_the_repository(tmp_path):
    locks = tmp_path / "locks"
    _lock(locks, 0, ["results/lock-test-study/archive/report.html"])
    release_stale_lock(["snakemake", "--configfile", "x.yaml"], REPO_ROOT / "results" / "lock-test-study", locks)
    assert not any(locks.iterdir())


def test_a_live_run_on_the_same_configuration_keeps_its_lock(tmp_path):
    locks = tmp_path / "locks"
    mine = tmp_path / "mine"
    _lock(locks, 0, [mine / "archive" / "report.html"])
    cfg = str(tmp_path / "mine.yaml")
    # a process that looks like Snakemake on this configuration, working in the repository
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.write_text("import time\ntime.sleep(60)\n")
    live = subprocess.Popen([sys.executable, str(fake), "--configfile", cfg], cwd=REPO_ROOT)
    try:
        time.sleep(0.2)
        release_stale_lock(["snakemake", "--configfile", cfg], mine, locks)
        assert (locks / "0.output.lock").exists(), "the lock of a live run was released"
    finally:
        live.kill()
        live.wait()
    release_stale_lock(["snakemake", "--configfile", cfg], mine, locks)
    assert not (locks / "0.output.lock").exists()
