"""The driver and ``refspec qualify`` with real workers, real models and real HTTP on 127.0.0.1.

* A worker killed with SIGKILL in the middle of a request: the attempt is a
  failed row with the reason, a fresh worker runs the rest of the block, the
  killed request is re-run as attempt 2, and nothing that completed is lost.
* A small qualification (2 tasks, cap 32, arms R, M3, C3 with the Q2_K draft),
  run as a confirmation campaign: C3 qualifies and its counters show
  non-vacuity (multi-row verification, partial accepts, rollbacks, qb
  micrographs); the plan holds the written definition; the tables read back; a
  resumed run has nothing left to do and writes the same tables; the command
  line refuses to mix runs and unknown arms.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from refspec import cli
from refspec.campaigns.arm_qualification import format_summary, run_qualify
from refspec.campaigns.definitions import load_definition
from refspec.core.arms import load_arms
from refspec.core.config import load_config
from refspec.core.hashing import sha256_file
from refspec.core.panels import humaneval_tasks
from refspec.core.tables import read_csv_records, read_records
from refspec.engine.context import Planned, PromptBook, RunContext
from refspec.engine.driver import run_block
from refspec.engine.journal import Journal
from refspec.provenance.ledger import Ledger, verify_chain
from support.arms import FAMILY, one_thread_arms


def test_worker_killed_mid_request(tmp_path, lib_path, family_files):
    arms_file = one_thread_arms(tmp_path / "arms.yaml")
    arm = load_arms(arms_file)["R"]
    tasks = humaneval_tasks([0, 1, 2])
    ctx = RunContext(
        campaign="confirmation",
        family=FAMILY,
        session="s-kill",
        files=family_files,
        lib_dir=lib_path,
        out_dir=tmp_path,
        journal=Journal(tmp_path / "journal.jsonl"),
        ledger=Ledger(tmp_path / "ledger.jsonl"),
        prompts=PromptBook(tasks),
        arms_file=arms_file,
        warmup_cap=2,
    )
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
    """One qualification (the confirmation campaign's engine) with one thread per worker."""
    root = tmp_path_factory.mktemp("qualify") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
        res = run_qualify(
            load_config(None),
            family=FAMILY,
            panel="humaneval:0-1",
            arms="R,M3,C3",
            repeats=1,
            cap=32,
            draft="q2_k",
            out=root,
            threads=1,
            progress=False,
        )
        yield res, root


def test_qualify_c3_qualifies_and_is_not_vacuous(qualified):
    res, *_ = qualified
    s = res.summary
    print(format_summary(s))
    assert res.complete and s["reference"]["unstable_tasks"] == [] and s["reference"]["stable_tasks"] == 2
    assert s["reference"]["runs_per_task"] == 2 and s["incomplete"] == []
    q = {(r["arm"], r["task_id"]): r for r in res.qualification}
    for t in ("HumanEval/0", "HumanEval/1"):
        assert q[("R", t)]["qualified"] and q[("R", t)]["n_required"] == 2  # two serial reference runs
        assert q[("C3", t)]["qualified"], q[("C3", t)]
        assert q[("C3", t)]["first_diff_index"] is None
    c3 = next(a for a in s["arms"] if a["arm"] == "C3")
    assert c3["tasks_qualified"] == 2 and c3["matching"] == c3["required"] == 2
    assert 0 < c3["acceptance"] < 1
    ev = c3["nonvacuity"]
    assert ev["checks"] == {
        "multi_row_verification": True,
        "partial_accepts": True,
        "rollbacks": True,
        "layout_active": True,
    }
    assert ev["rows_per_verify_caller"] > 1 and ev["partial_accepts"] > 0 and ev["micrographs_qb"] > 0
    assert c3["vacuous"] is False and "C3" not in s["vacuous_arms"]
    m3 = next(a for a in s["arms"] if a["arm"] == "M3")
    assert m3["nonvacuity"]["all_requests"]["micrographs_qb"] > 0
    assert all(a["median_t_ns"] > 0 for a in s["arms"])
    assert [a["arm"] for a in s["arms"]] == ["R", "M3", "C3"]
    assert set(s["prompt_sha256"]) == {"HumanEval/0", "HumanEval/1"}
    # summary.json is the returned summary
    assert json.loads((res.out_dir / "summary.json").read_text()) == s


def test_qualify_is_a_confirmation_campaign(qualified):
    res, root, *_ = qualified
    assert res.out_dir == root / "campaigns" / "confirmation"
    # the definition that ran is in the campaign folder and is the frozen plan's definition
    defn, _ = load_definition("confirmation", path=res.out_dir / "qualify.yaml")
    plan = json.loads((res.out_dir / "plan.json").read_text())
    assert plan["definition"] == defn and plan["campaign"] == "confirmation" and plan["sessions"] == 1
    assert defn["arms"] == ["R", "M3", "C3"] and defn["panel"] == {"source": "humaneval", "tasks": "0-1"}
    assert defn["cap"] == 32 and defn["repeats"] == 1 and defn["draft"] == "q2_k" and defn["family"] == FAMILY
    assert plan["threads"] == 1 and all(a["threads"] == 1 for a in plan["arms"].values())
    assert res.summary["plan_sha256"] == sha256_file(res.out_dir / "plan.json")


def test_qualify_tables_and_ledger(qualified):
    res, *_ = qualified
    tdir = res.out_dir
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
    assert kinds[0] == "plan_frozen" and kinds.count("plan_frozen") == 1
    assert kinds.count("session_start") == 1 and kinds.count("session_end") == 1
    assert kinds.index("session_start") < kinds.index("session_end") < kinds.index("run_end")
    assert kinds.count("submit") == 8 and kinds.count("attempt") == 8 and kinds.count("worker_start") == 4
    # the run ledger of the results folder pins the campaign ledger
    run_led = Ledger(res.root / "ledger.jsonl").records()
    assert [r["kind"] for r in run_led] == ["campaign_run"] and run_led[0]["outcome"] == "complete"


def test_resume_of_a_complete_run_runs_nothing(qualified, lib_path, monkeypatch):
    res, root = qualified
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    before = (res.out_dir / "qualification.csv").read_bytes()
    n_journal = len(Journal(res.out_dir / "journal.jsonl").records())
    again = run_qualify(
        load_config(None),
        family=FAMILY,
        panel="humaneval:0-1",
        arms="R,M3,C3",
        repeats=1,
        cap=32,
        draft="q2_k",
        out=root,
        threads=1,
        progress=False,
        resume=True,
    )
    assert again.session == res.session and again.complete
    assert len(Journal(res.out_dir / "journal.jsonl").records()) == n_journal
    assert (res.out_dir / "qualification.csv").read_bytes() == before
    assert again.qualification == res.qualification
    kinds = [r["kind"] for r in Ledger(res.out_dir / "ledger.jsonl").records()]
    assert kinds.count("plan_frozen") == 1 and kinds.count("run_start") == 2 and kinds.count("worker_start") == 4


def test_cli_refuses_to_mix_runs_and_unknown_arms(qualified, lib_path, capsys, monkeypatch):
    res, root = qualified
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    base = [
        "qualify",
        "arms",
        "--family",
        FAMILY,
        "--panel",
        "humaneval:0-1",
        "--cap",
        "32",
        "--draft",
        "q2_k",
        "--threads",
        "1",
        "--no-progress",
    ]
    assert cli.main(base + ["--arms", "R,M3,C3", "--out", str(root)]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert cli.main(base + ["--arms", "R,M3,C3", "--out", str(root), "--repeats", "2", "--resume"]) == 2
    assert "refusing to mix runs" in capsys.readouterr().err
    assert cli.main(base + ["--arms", "R,C9", "--out", str(root / "x")]) == 2
    assert "unknown arm(s) C9" in capsys.readouterr().err
    assert not (root / "x" / "campaigns" / "confirmation" / "plan.json").exists()
    assert cli.main(base + ["--arms", "R,M3,M3", "--out", str(root / "y")]) == 2
    assert "an arm is named twice" in capsys.readouterr().err
    # the complete run, resumed from the command line: nothing to run, exit 0
    assert cli.main(base + ["--arms", "R,M3,C3", "--out", str(root), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "refspec qualify: smollm2-135m, panel humaneval:0-1 (2 tasks)" in out and "INCOMPLETE" not in out


def test_qualify_states_whether_its_panel_is_vacuous(tmp_path, lib_path, family_files, monkeypatch):
    """With an unrepaired arm (M0) on the panel, the summary and the verdict lines state the panel's
    vacuity exactly as the qualification rows give it: vacuous where M0 never leaves R."""
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    res = run_qualify(
        load_config(None),
        family=FAMILY,
        panel="humaneval:0",
        arms="R,M0,M3",
        repeats=1,
        cap=8,
        out=tmp_path / "run",
        threads=1,
        progress=False,
    )
    s = res.summary
    m0 = next(q for q in res.qualification if q["arm"] == "M0")
    assert s["exposure"]["unrepaired"] == ["M0"] and s["exposure"]["screened"] == 1
    assert s["exposure"]["vacuous"] is (m0["first_diff_index"] is None)
    text = format_summary(s)
    m3 = next(ln for ln in text.splitlines() if ln.startswith("M3 "))
    assert m3.endswith("vacuous: no exposed input in 1 screened") is s["exposure"]["vacuous"], text
    assert [a["unrepaired"] for a in s["arms"]] == [False, True, False]
