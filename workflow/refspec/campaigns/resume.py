"""Resuming an interrupted campaign.

A campaign process killed at any point is resumed with ``--resume``. The engine reads the ledger
and the journal: a run without ``run_end`` is recorded as an ``interruption``; a ``submit``
without a journaled outcome becomes a failed attempt ("interrupted: ...", a ``requests`` row and
an ``interruption`` ledger line); workers the killed process left running are stopped (only a
process whose record, written by the driver when it started the worker, names the same worker
id, pid and start time); then only the planned requests without a completed attempt are run, on
fresh workers, as new attempts. Completed requests are never re-run and their journal lines are
never rewritten.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from ..engine.rows import failed_record, request_row
from ..engine.spawn import kill_recorded
from .records import CampaignRecords


def recover(run: CampaignRecords, recs: list[dict]) -> None:
    """Interrupted requests become failed attempts; leftover workers are stopped."""
    record_interrupted(run, recs)
    stop_leftover_processes(run, recs)


def record_interrupted(run: CampaignRecords, recs: list[dict]) -> None:
    """Every ``submit`` without a journaled outcome becomes a failed attempt ("interrupted: ...")."""
    journal = run.journal_records()
    seen = {(r["row"]["session"], r["row"]["worker"], r["row"]["order_index"]) for r in journal}
    attempts: dict[tuple, int] = {}
    for r in journal:
        row = r["row"]
        k = (row["session"], row["block"], row["arm"], row["task_id"], row["repeat"])
        attempts[k] = max(attempts.get(k, 0), row["attempt"])
    for r in recs:
        if r.get("kind") != "submit":
            continue
        key = (r["session"], r["worker"], r["order_index"])
        if key in seen:
            continue
        seen.add(key)
        arm = run.s.arms[r["arm"]]
        sk = (r["session"], r["block"], r["arm"], r["task_id"], r["repeat"])
        attempt = attempts.get(sk, 0) + 1
        attempts[sk] = attempt
        reason = (
            f"interrupted: the campaign process ended while this request was in flight on worker "
            f"{r['worker']} (submitted at ledger line {r['seq']}); no response was recorded"
        )
        ctx = SimpleNamespace(campaign=run.campaign, session=r["session"], family=run.s.family, draft=run.s.draft)
        row = request_row(
            ctx,
            arm,
            block=r["block"],
            worker=r["worker"],
            task_id=r["task_id"],
            cap=r["cap"],
            repeat=r["repeat"],
            order_index=r["order_index"],
            attempt=attempt,
            status="failed",
            reason=reason,
        )
        led = run.note(
            "interruption",
            reason,
            session=r["session"],
            worker=r["worker"],
            arm=r["arm"],
            block=r["block"],
            task_id=r["task_id"],
            repeat=r["repeat"],
            attempt=attempt,
            outcome="failed",
            submit_seq=r["seq"],
        )
        run.journal.append(failed_record(row, led["seq"]))


def stop_leftover_processes(run: CampaignRecords, recs: list[dict]) -> None:
    """Stop the workers the killed process left running (only a process its record names)."""
    exited = {r.get("worker") for r in recs if r.get("kind") in ("worker_exit", "worker_stopped")}
    # workers the killed process left running: recorded starts, and ready files of starts it never recorded
    candidates: dict[str, tuple[str | None, int]] = {}
    for r in recs:
        if r.get("kind") == "worker_start" and r.get("pid"):
            candidates[r["worker"]] = (r.get("session"), int(r["pid"]))
    wdir = run.out / "workers"
    if wdir.is_dir():
        for p in sorted(wdir.glob("*.ready.json")):
            wid = p.name[: -len(".ready.json")]
            if wid in candidates:
                continue
            try:
                pid = int(json.loads(p.read_text(encoding="utf-8")).get("pid"))
            except (OSError, ValueError, TypeError):
                continue
            candidates[wid] = (None, pid)
    for wid, (sess, pid) in candidates.items():
        if wid in exited:
            continue
        if kill_recorded(run.out / "workers", wid, pid):
            run.note(
                "worker_stopped",
                f"worker {wid} (pid {pid}) was left running by the interrupted campaign process; stopped with SIGKILL",
                session=sess,
                worker=wid,
                pid=pid,
            )
