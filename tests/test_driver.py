"""The driver and ``refspec qualify`` with real workers, real models and real HTTP on 127.0.0.1.

* A worker killed with SIGKILL in the middle of a request: the attempt is a
  failed row with the reason, a fresh worker runs the rest of the block, the
  killed request is re-run as attempt 2, and nothing that completed is lost.
* A small qualification (2 tasks, cap 32, arms R, M3, C3 with the Q2_K draft):
  C3 qualifies and its counters show non-vacuity (multi-row verification,
  partial accepts, rollbacks, qb micrographs); the tables read back; a resumed
  run has nothing left to do and writes the same tables.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
import yaml

from refspec import cli
from refspec.arms import load_arms
from refspec.driver import Journal, Planned, PromptBook, RunContext, run_block
from refspec.ledger import Ledger, verify_chain
from refspec.panels import humaneval_tasks
from refspec.paths import config_dir
from refspec.qualify import format_summary, run_qualify
from refspec.tables import read_csv_records, read_records

FAMILY = "smollm2-135m"


def one_thread_arms(path):
    """config/arms.yaml with one thread per context (a shared 2-core machine runs tests in parallel)."""
    data = yaml.safe_load((config_dir() / "arms.yaml").read_text())
    data["defaults"]["threads"] = 1
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_worker_killed_mid_request(tmp_path, lib_path, family_files):
    arms_file = one_thread_arms(tmp_path / "arms.yaml")
    arm = load_arms(arms_file)["R"]
    tasks = humaneval_tasks([0, 1, 2])
    ctx = RunContext(campaign="confirmation", family=FAMILY, session="s-kill", files=family_files, lib_dir=lib_path,
                     out_dir=tmp_path, journal=Journal(tmp_path / "journal.jsonl"),
                     ledger=Ledger(tmp_path / "ledger.jsonl"), prompts=PromptBook(tasks), arms_file=arms_file,
                     warmup_cap=2)
    killed = {}

    def on_submit(worker, planned, order):
        # the first worker's second request: SIGKILL it while the request is being computed
        if worker.worker_id == "w01-R" and order == 2:
            killed["pid"] = worker.pid
            threading.Timer(0.4, os.kill, (worker.pid, signal.SIGKILL)).start()

    ctx.on_submit = on_submit
    planned = [Planned(t.task_id, 12, 1) for t in tasks]
    recs = run_block(ctx, arm, planned, block=0)

    rows = [r["row"] for r in recs]
    summary = [(r["worker"], r["task_id"], r["order_index"], r["attempt"], r["status"]) for r in rows]
    assert summary == [
        ("w01-R", "warmup", 0, 1, "excluded_warmup"),
        ("w01-R", "HumanEval/0", 1, 1, "ok"),
        ("w01-R", "HumanEval/1", 2, 1, "failed"),
        ("w02-R", "warmup", 0, 1, "excluded_warmup"),
        ("w02-R", "HumanEval/1", 1, 2, "ok"),
        ("w02-R", "HumanEval/2", 2, 1, "ok"),
    ]
    failed = rows[2]
    assert f"(pid {killed['pid']}) killed by signal 9 (SIGKILL) during the request" in failed["reason"]
    assert failed["t_ns"] is None and failed["endpoint_sha256"] is None
    assert all(r["t_ns"] > 0 for r in rows if r["status"] == "ok")
    # nothing completed is lost: the journal holds every attempt, in order
    assert [r["row"] for r in Journal(tmp_path / "journal.jsonl").records()] == rows
    led = Ledger(tmp_path / "ledger.jsonl").records()
    assert verify_chain(tmp_path / "ledger.jsonl") == []
    kinds = [r["kind"] for r in led]
    assert kinds.count("worker_start") == 2 and kinds.count("excluded_warmup") == 2
    assert kinds.count("interruption") == 1 and kinds.count("failure") == 1 and kinds.count("attempt") == 3
    fail = next(r for r in led if r["kind"] == "failure")
    retry = next(r for r in led if r["kind"] == "attempt" and r["task_id"] == "HumanEval/1")
    assert retry["retry_of"] == fail["seq"] and retry["attempt"] == 2
    assert led[-1]["kind"] == "worker_exit" and led[-1]["exit_code"] == 0
    assert all(r.get("reason") for r in led)


@pytest.fixture(scope="module")
def qualified(tmp_path_factory, lib_path, family_files):
    out = tmp_path_factory.mktemp("qualify")
    arms_file = one_thread_arms(out.parent / "arms-1t.yaml")
    tasks = humaneval_tasks([0, 1])
    panel = {"spec": "humaneval:0-1", "tasks": [t.task_id for t in tasks], "sha256": "x"}
    res = run_qualify(family=FAMILY, tasks=tasks, panel=panel, arm_names="R,M3,C3", repeats=1, cap=32, draft="q2_k",
                      out_dir=out / "run", arms_file=arms_file, lib_dir=lib_path, progress=False, warmup_cap=2)
    return res, arms_file, tasks, panel


def test_qualify_c3_qualifies_and_is_not_vacuous(qualified):
    res, *_ = qualified
    s = res.summary
    print(format_summary(s))
    assert res.complete and s["reference"]["unstable_tasks"] == [] and s["reference"]["stable_tasks"] == 2
    q = {(r["arm"], r["task_id"]): r for r in res.qualification}
    for t in ("HumanEval/0", "HumanEval/1"):
        assert q[("R", t)]["qualified"] and q[("R", t)]["n_required"] == 2  # two serial reference runs
        assert q[("C3", t)]["qualified"], q[("C3", t)]
        assert q[("C3", t)]["first_diff_index"] is None
    c3 = next(a for a in s["arms"] if a["arm"] == "C3")
    assert c3["tasks_qualified"] == 2 and c3["matching"] == c3["required"] == 2
    assert 0 < c3["acceptance"] < 1
    ev = c3["nonvacuity"]
    assert ev["checks"] == {"multi_row_verification": True, "partial_accepts": True, "rollbacks": True,
                            "layout_active": True}
    assert ev["rows_per_verify_caller"] > 1 and ev["partial_accepts"] > 0 and ev["micrographs_qb"] > 0
    assert c3["vacuous"] is False and "C3" not in s["vacuous_arms"]
    m3 = next(a for a in s["arms"] if a["arm"] == "M3")
    assert m3["nonvacuity"]["all_requests"]["micrographs_qb"] > 0
    assert all(a["median_t_ns"] > 0 for a in s["arms"])


def test_qualify_tables_and_ledger(qualified):
    res, *_ = qualified
    tdir = res.out_dir / "tables"
    reqs = read_records("requests", tdir)
    assert reqs == read_csv_records("requests", tdir)
    statuses = [r["status"] for r in reqs]
    assert statuses.count("excluded_warmup") == 4  # R, M3, C3, R: one fresh worker per block
    assert statuses.count("ok") == 8 and "failed" not in statuses
    assert len({r["worker"] for r in reqs}) == 4
    r_workers = {r["worker"] for r in reqs if r["arm"] == "R" and r["status"] == "ok"}
    assert len(r_workers) == 2  # the two reference runs ran in different processes
    eps = read_records("endpoints", tdir)
    assert len(eps) == 8 and all(e["n"] == len(e["tokens"]) for e in eps)
    assert len(read_records("qualification", tdir)) == 6
    assert verify_chain(res.out_dir / "ledger.jsonl") == []
    kinds = [r["kind"] for r in Ledger(res.out_dir / "ledger.jsonl").records()]
    assert kinds[0] == "session_start" and kinds[-1] == "session_end"


def test_resume_of_a_complete_run_runs_nothing(qualified, lib_path):
    res, arms_file, tasks, panel = qualified
    before = (res.out_dir / "tables" / "qualification.csv").read_bytes()
    n_journal = len(Journal(res.out_dir / "journal.jsonl").records())
    again = run_qualify(family=FAMILY, tasks=tasks, panel=panel, arm_names="R,M3,C3", repeats=1, cap=32,
                        draft="q2_k", out_dir=res.out_dir, arms_file=arms_file, lib_dir=lib_path, progress=False,
                        resume=True, warmup_cap=2)
    assert again.session == res.session
    assert len(Journal(res.out_dir / "journal.jsonl").records()) == n_journal
    assert (res.out_dir / "tables" / "qualification.csv").read_bytes() == before


def test_cli_refuses_to_mix_runs_and_unknown_arms(qualified, lib_path, capsys):
    res, arms_file, *_ = qualified
    base = ["qualify", "--family", FAMILY, "--panel", "humaneval:0-1", "--cap", "32", "--draft", "q2_k",
            "--arms-file", arms_file, "--lib-dir", str(lib_path), "--no-progress"]
    assert cli.main(base + ["--arms", "R,M3,C3", "--out", str(res.out_dir)]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert cli.main(base + ["--arms", "R,C9", "--out", str(res.out_dir / "x")]) == 2
    assert "unknown arm 'C9'" in capsys.readouterr().err
