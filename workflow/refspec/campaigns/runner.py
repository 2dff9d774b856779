"""Running a campaign: the frozen plan, runs and resumes, sessions of fresh-worker blocks, the timed audit.

Execution (:class:`CampaignRun`)
    Before the first session the plan is frozen (:mod:`refspec.provenance.plan`); every
    later start recomputes it and refuses on any difference. Sessions run in
    order; before a session starts the engine waits until ``gap_s`` seconds
    have passed since the previous session's end (the end is read from the
    ledger, so the gap also holds across a resume), runs the manifest freeze
    check when a manifest is given, and records ``session_start``. Blocks go to
    :func:`refspec.engine.driver.run_block`, which journals and ledgers every attempt
    as it ends. Just before each timed request the engine appends a ``submit``
    line to the ledger (outside the timed interval). Around every block it samples
    the machine (:mod:`refspec.engine.load`) and appends a ``block_load`` line,
    flagged ``busy`` when competing processes used more than half a core.

Audit of timed runs
    After each session every completed request is compared with the reference
    endpoint (the first completed ``R`` endpoint of its task and cap); each
    mismatch gets a ``mismatch`` ledger line (the pair is disqualified in the
    analysis, never dropped and never re-run).
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time

from ..core.endpoint import first_divergence
from ..core.errors import IntegrityError, UsageError
from ..engine import load
from ..engine.context import Planned, PromptBook, RunContext
from ..engine.driver import run_block
from ..provenance import plan as planmod
from ..provenance.manifest import FreezeCheckError, freeze_check
from .records import CampaignRecords, RunSettings
from .resume import recover
from .scheduler import BlockPlan, Req, SessionPlan

#: the ``session_end`` line of a session whose every planned request has a final attempt
SESSION_COMPLETE = (
    "every planned request of the session has a final attempt (completed, or failed as often as the retry rule allows)"
)


def parse_utc(s: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


class CampaignRun(CampaignRecords):
    """One campaign folder: its ledger, journal, frozen plan, and the sessions run into it."""

    def __init__(self, settings: RunSettings):
        super().__init__(settings)
        self.run_no = 0
        self.prompts = None
        self._bar = None
        self._mismatch_seen: set = set()

    # ------------------------------------------------------------------ plan
    def freeze_or_check(self, computed: dict, *, analyze_only: bool = False) -> dict:
        frozen = planmod.frozen_plan(self.ledger)
        if frozen is None:
            if analyze_only:
                raise UsageError(f"{self.out}: no frozen plan; nothing to analyse")
            if self.journal.path.exists() and self.journal.records():
                raise IntegrityError(f"{self.out}: a journal exists but the ledger holds no frozen plan")
            planmod.freeze(
                self.out, computed, self.ledger, reason="preregistration: the plan is frozen before the first session"
            )
            return planmod.read_plan(self.out)
        if not (self.s.resume or analyze_only):
            raise UsageError(
                f"{self.out} already holds a frozen plan and its ledger: pass --resume to continue "
                "that campaign, or choose another --out"
            )
        stored = planmod.check(self.out, self.ledger, computed)
        return stored

    # ------------------------------------------------------------------ runs
    def begin_run(self, planned_total: int) -> None:
        recs = self.ledger_records()
        starts = [r for r in recs if r.get("kind") == "run_start"]
        ends = {r.get("run") for r in recs if r.get("kind") == "run_end"}
        self.run_no = len(starts) + 1
        if starts and starts[-1].get("run") not in ends:
            last = starts[-1]
            self.note(
                "interruption",
                f"campaign run {last.get('run')} (pid {last.get('pid')}) ended without "
                f"closing: the process was interrupted after ledger line {recs[-1]['seq']}; resuming",
                run=last.get("run"),
                pid=last.get("pid"),
                last_seq=recs[-1]["seq"],
            )
        if self.run_no > 1:
            recover(self, recs)
        self.note(
            "run_start",
            "resume: only planned requests without a final attempt run"
            if self.run_no > 1
            else "first run of the campaign",
            run=self.run_no,
            pid=os.getpid(),
            planned_remaining=planned_total,
        )

    def end_run(self, reason: str) -> None:
        self.note("run_end", reason, run=self.run_no, pid=os.getpid())

    # ------------------------------------------------------------------ progress
    def open_progress(self, total: int) -> None:
        if not self.s.progress or total <= 0:
            return
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=self.campaign, unit="req", file=sys.stderr, disable=None)

    def close_progress(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _on_record(self, rec: dict) -> None:
        row = rec["row"]
        if self._bar is not None and row["status"] in ("ok", "failed"):
            self._bar.set_postfix_str(f"{row['session']} {row['arm']} {row['task_id']} {row['status']}", refresh=False)
            self._bar.update(1)

    def _log(self, text: str) -> None:
        if self._bar is not None and not self._bar.disable:
            self._bar.write(text, file=sys.stderr)
        else:
            # contract: the campaign's progress line on stderr where no progress bar shows it
            print(f"refspec campaign {self.campaign}: {text}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ sessions
    def run_session(self, sp: SessionPlan, previous: str | None) -> None:
        marks = self.session_marks()
        done, last, _ = self.slot_state()
        todo = self._session_todo(sp, done)
        mine = marks.get(sp.id, {})
        if not todo:
            if "end" not in mine and "start" in mine:
                self.note("session_end", SESSION_COMPLETE, session=sp.id)
            return
        started = "start" in mine
        if not started:
            self._wait_gap(sp.id, previous, marks)
        self._freeze_check(sp.id)
        self.note(
            "session_start",
            ("resumed: " if started else "") + f"{len(todo)} block(s), "
            f"{sum(len(r) for _b, r in todo)} request(s) to run on fresh workers",
            session=sp.id,
            resumed=started,
        )
        ctx = self._session_context(sp.id)
        for b, reqs in todo:
            self._run_session_block(ctx, sp.id, b, reqs, last)
        self.audit_session(sp.id)
        done, _, _ = self.slot_state()
        left = self._session_todo(sp, done)
        n_left = sum(len(reqs) for _b, reqs in left)
        self.note(
            "session_end",
            SESSION_COMPLETE if not n_left else f"{n_left} planned request(s) without a final attempt",
            session=sp.id,
            incomplete=n_left,
        )

    @staticmethod
    def _session_todo(sp: SessionPlan, done) -> list[tuple[BlockPlan, list[Req]]]:
        """(block, its planned requests without a final attempt) for each block of the session that has any."""
        todo = []
        for b in sp.blocks:
            reqs = [q for q in b.requests if (sp.id, b.index, b.arm_of(q), q.task_id, q.cap, q.repeat) not in done]
            if reqs:
                todo.append((b, reqs))
        return todo

    def _session_context(self, sid: str) -> RunContext:
        """The run context the session's blocks share (the campaign's prompts, read once per run)."""
        if self.prompts is None:
            self.prompts = PromptBook(self.s.tasks.values(), chat=True)
        n_workers = self.workers_used()
        ctx = RunContext(
            campaign=self.campaign,
            family=self.s.family,
            session=sid,
            files=self.s.files,
            lib_dir=self.s.lib_dir,
            out_dir=self.out,
            journal=self.journal,
            ledger=self.ledger,
            prompts=self.prompts,
            draft=self.s.draft,
            arms_file=str(self.s.arms_file),
            retries=int(self.defn.get("retries", 1)),
            request_timeout=float(self.defn.get("request_timeout_s", 600)),
            warmup_cap=int(self.defn.get("warmup_cap", 16)),
            n_workers=n_workers,
        )
        ctx.on_record = self._on_record
        return ctx

    def _run_session_block(self, ctx: RunContext, sid: str, b: BlockPlan, reqs: list[Req], last: dict) -> None:
        """Run one block's remaining requests on fresh workers: a ``submit`` line before each timed request,
        and the machine's load around the block."""
        arm = self.s.arms[b.arm]
        planned = [Planned(q.task_id, q.cap, q.repeat, arm=q.arm) for q in reqs]
        attempts = {
            (q.arm, q.task_id, q.repeat): last.get((sid, b.index, b.arm_of(q), q.task_id, q.cap, q.repeat), 0)
            for q in reqs
        }

        def on_submit(worker, p, order):
            self.note(
                "submit",
                "timed request submitted to the worker",
                session=sid,
                block=b.index,
                worker=worker.worker_id,
                arm=p.arm or b.arm,
                task_id=p.task_id,
                cap=p.cap,
                repeat=p.repeat,
                order_index=order,
            )

        ctx.on_submit = on_submit
        self._log(f"{sid} block {b.index}: {', '.join(b.arms)} ({b.role}), {len(reqs)} request(s)")
        before = load.sample()
        also = tuple(self.s.arms[a] for a in b.also_arms)
        run_block(ctx, arm, planned, block=b.index, attempts_before=attempts, also_arms=also)
        self.note_load(sid, b, before, load.sample())

    def note_load(self, sid: str, b, before: dict, after: dict) -> None:
        """The ``block_load`` ledger line: the machine before and after the block, busy or not."""
        self.note(
            "block_load",
            load.busy_reason(before, after),
            session=sid,
            block=b.index,
            arm=b.arm,
            before=before,
            after=after,
            busy_threshold=load.BUSY_CORES,
            busy=load.busy(before, after),
        )

    def _wait_gap(self, sid: str, previous: str | None, marks: dict) -> None:
        gap = float(self.defn.get("gap_s", 0) or 0)
        if previous is None or gap <= 0:
            return
        end = marks.get(previous, {}).get("end")
        if end is None:
            return
        ready_at = parse_utc(end["time"]) + _dt.timedelta(seconds=gap)
        wait = (ready_at - _dt.datetime.now(_dt.UTC)).total_seconds()
        if wait > 0:
            self.note(
                "gap_wait",
                f"waiting {wait:.1f} s so that at least {gap:g} s separate the end of session "
                f"{previous} and the start of session {sid}",
                session=sid,
                wait_s=round(wait, 3),
                gap_s=gap,
                not_before=ready_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            )
            self._log(f"waiting {wait:.0f} s before session {sid} (gap {gap:g} s)")
            time.sleep(wait)
            while _dt.datetime.now(_dt.UTC) < ready_at:
                time.sleep(0.05)

    def _freeze_check(self, sid: str) -> None:
        if self.s.manifest is None:
            return
        try:
            freeze_check(self.s.manifest)
        except FreezeCheckError as e:
            diffs = list(getattr(e, "differences", [str(e)]))
            self.note(
                "failure",
                "freeze check failed before the session: " + "; ".join(diffs[:10]),
                session=sid,
                outcome="refused",
            )
            raise
        self.note(
            "freeze_check",
            f"the source manifest {self.s.manifest.name} recomputes unchanged",
            session=sid,
            outcome="ok",
        )

    # ------------------------------------------------------------------ audit
    def audit_session(self, sid: str) -> None:
        """A ``mismatch`` ledger line for every completed request of the session that differs from R."""
        if not self._mismatch_seen:
            for r in self.ledger_records():
                if r.get("kind") == "mismatch":
                    self._mismatch_seen.add((r.get("session"), r.get("worker"), r.get("order_index"), r.get("attempt")))
        records = self.journal_records()
        refs = self.reference_endpoints(records)
        for r in records:
            row, ep = r["row"], r["endpoint"]
            if row["session"] != sid or ep is None:
                continue
            key = (row["session"], row["worker"], row["order_index"], row["attempt"])
            ref = refs.get((row["task_id"], row["cap"]))
            if ref is None or ep["endpoint_sha256"] == ref["endpoint_sha256"] or key in self._mismatch_seen:
                continue
            i = first_divergence(
                ref["tokens"], ref["eog"], ref["stop_reason"], ep["tokens"], ep["eog"], ep["stop_reason"]
            )
            what = (
                f"the reference {self.reference}"
                if row["arm"] != self.reference
                else f"the first reference endpoint ({self.reference} unstable)"
            )
            self.note(
                "mismatch",
                f"endpoint differs from {what} at generated index {i}: the pair "
                f"({row['arm']}, {row['task_id']}) is disqualified (kept, not re-run)",
                session=sid,
                worker=row["worker"],
                order_index=row["order_index"],
                attempt=row["attempt"],
                arm=row["arm"],
                task_id=row["task_id"],
                repeat=row["repeat"],
                first_diff_index=i,
                endpoint_sha256=ep["endpoint_sha256"],
                ref_endpoint_sha256=ref["endpoint_sha256"],
            )
            self._mismatch_seen.add(key)
