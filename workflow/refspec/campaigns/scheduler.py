"""The campaign engine: schedules drawn from a seed, sessions of fresh-worker blocks, resume.

Schedules
    A campaign's schedule is a list of sessions; a session is an ordered list of
    *blocks*; a block is one arm and an ordered list of planned requests
    ``(task_id, cap, repeat)`` served by one fresh worker (the driver starts a
    new worker for every block, runs its registered warmup, then the requests).
    Every order is drawn from the definition's ``seed`` with
    :func:`derive_rng`, so the same definition always gives the same schedule
    (it is frozen into the plan before the first session).

Execution (:class:`CampaignRun`)
    Before the first session the plan is frozen (:mod:`refspec.provenance.plan`); every
    later start recomputes it and refuses on any difference. Sessions run in
    order; before a session starts the engine waits until ``gap_s`` seconds
    have passed since the previous session's end (the end is read from the
    ledger, so the gap also holds across a resume), runs the manifest freeze
    check when a manifest is given, and records ``session_start``. Blocks go to
    :func:`refspec.engine.driver.run_block`, which journals and ledgers every attempt
    as it ends. Just before each timed request the engine appends a ``submit``
    line to the ledger (outside the timed interval).

Resume
    A campaign process killed at any point is resumed with ``--resume``. The
    engine reads the ledger and the journal: a run without ``run_end`` is
    recorded as an ``interruption``; a ``submit`` without a journaled outcome
    becomes a failed attempt ("interrupted: ...", a ``requests`` row and an
    ``interruption`` ledger line); workers the killed process left running are
    stopped (only processes whose command line names ``refspec.engine.worker`` and the
    recorded worker id); then only the planned requests without a completed
    attempt are run, on fresh workers, as new attempts. Completed requests are
    never re-run and their journal lines are never rewritten.

Audit of timed runs
    After each session every completed request is compared with the reference
    endpoint (the first completed ``R`` endpoint of its task and cap); each
    mismatch gets a ``mismatch`` ledger line (the pair is disqualified in the
    analysis, never dropped and never re-run).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..core.arms import REFERENCE_ARM, Arm
from ..core.errors import IntegrityError, UsageError
from ..provenance import plan as planmod
from ..provenance.ledger import Ledger
from .derived import qualification_table, session_gaps

# --------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class Req:
    task_id: str
    cap: int
    repeat: int

    def record(self) -> list:
        return [self.task_id, self.cap, self.repeat]


@dataclass
class BlockPlan:
    session: str
    index: int
    arm: str
    requests: list[Req]
    role: str = ""  # what the block is in the design: "reference", "A", "B", "round 2", ...

    def record(self) -> dict:
        return {
            "index": self.index,
            "arm": self.arm,
            "role": self.role,
            "requests": [r.record() for r in self.requests],
        }


@dataclass
class SessionPlan:
    id: str
    blocks: list[BlockPlan]
    note: str = ""

    def record(self) -> dict:
        return {"session": self.id, "note": self.note, "blocks": [b.record() for b in self.blocks]}

    @property
    def n_requests(self) -> int:
        return sum(len(b.requests) for b in self.blocks)


def session_ids(n: int, suffixes: Sequence[str] | None = None) -> list[str]:
    """``s01``, ``s02``, ... (plain string order = chronological order, as the statistics sort them)."""
    width = max(2, len(str(n)))
    out = [f"s{i + 1:0{width}d}" for i in range(n)]
    if suffixes:
        out = [f"{s}-{x}" for s, x in zip(out, suffixes)]
    return out


def derive_rng(seed: int, *parts: Any) -> random.Random:
    """A ``random.Random`` seeded from sha256 of the seed and ``parts`` (stable across processes)."""
    text = "/".join([str(int(seed)), *(str(p) for p in parts)])
    return random.Random(int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big"))


def balanced(n: int, rng: random.Random, odd_extra: int = 0) -> list[int]:
    """``n`` values in {0, 1}, as many 0s as 1s (the odd one is ``odd_extra % 2``), in a seeded order."""
    vals = [0, 1] * (n // 2)
    if n % 2:
        vals.append(odd_extra % 2)
    rng.shuffle(vals)
    return vals


def factorial_orders(n: int, rng: random.Random, session_index: int = 0) -> list[tuple[int, int]]:
    """``n`` (orientation, path order) pairs covering the 2 x 2 factorial as evenly as possible.

    Every full set of four groups gets each combination once (so orientation,
    path order and the layout that opens the group all balance); the remainder
    takes a rotation of the combinations that moves on with the session index
    (so the leftovers balance over sessions). The order is drawn from ``rng``.
    """
    base = [(0, 0), (1, 1), (0, 1), (1, 0)]
    r = n % 4
    rot = (session_index * r) % 4
    rotated = base[rot:] + base[:rot]
    out = base * (n // 4) + rotated[:r]
    rng.shuffle(out)
    return out


def _shuffled(items: Sequence, rng: random.Random) -> list:
    out = list(items)
    rng.shuffle(out)
    return out


def round_schedule(
    sessions: Sequence[str],
    others: Sequence[str],
    task_ids: Sequence[str],
    *,
    caps: Sequence[int],
    repeats: int,
    block_by: str,
    seed: int,
    reference: str = REFERENCE_ARM,
    reference_repeats: int | None = None,
) -> list[SessionPlan]:
    """Blocks of whole arms, counterbalanced by reversing the arm order.

    The arm order (without the reference) is drawn once from the seed; session
    ``i`` in round ``r`` uses it forward when ``i + r`` is even and reversed
    otherwise (so positions balance over sessions and rounds). ``block_by =
    arm_repeat``: one round per repeat, each round the reference block then
    every other arm (one repeat each); ``arm``: the reference, every arm with
    all its repeats, the reference again. The reference runs
    ``max(2, repeats)`` times per session (``reference_repeats``): repeats
    beyond the rounds run in reference blocks at the end. Within a block the
    requests go cap by cap, repeat by repeat, tasks in a seeded order.
    """
    ref_reps = reference_repeats or max(2, repeats)
    base = _shuffled(others, derive_rng(seed, "arm-order"))

    def order(si: int, r: int) -> list[str]:
        return list(base) if (si + r) % 2 == 0 else list(reversed(base))

    out = []
    for si, sid in enumerate(sessions):
        blocks: list[BlockPlan] = []

        def add(arm: str, reps: Iterable[int], role: str) -> None:
            reps = list(reps)
            if not reps:
                return
            idx = len(blocks)
            rng = derive_rng(seed, "tasks", sid, idx)
            reqs = [Req(t, c, r) for c in caps for r in reps for t in _shuffled(task_ids, rng)]
            blocks.append(BlockPlan(sid, idx, arm, reqs, role))

        if block_by == "arm_repeat":
            for r in range(1, repeats + 1):
                add(reference, [r] if r <= ref_reps else [], f"reference, round {r}")
                for a in order(si, r):
                    add(a, [r], f"round {r}")
            for r in range(repeats + 1, ref_reps + 1):
                add(reference, [r], "reference, closing")
        elif block_by == "arm":
            first = (ref_reps + 1) // 2
            add(reference, range(1, first + 1), "reference, opening")
            for a in order(si, 1):
                add(a, range(1, repeats + 1), "all repeats")
            add(reference, range(first + 1, ref_reps + 1), "reference, closing")
        else:  # pragma: no cover - the schema allows only these two
            raise UsageError(f"unknown block_by {block_by!r}")
        out.append(SessionPlan(sid, blocks))
    return out


def abba_schedule(
    sessions: Sequence[str],
    task_ids: Sequence[str],
    *,
    paths: Sequence[str],
    layouts: Sequence[str],
    arm_for: Callable[[str, str], str],
    block_tasks: int,
    cap: int,
    repeats: int,
    references: int,
    seed: int,
    reference: str = REFERENCE_ARM,
) -> list[SessionPlan]:
    """Short counterbalanced blocks (replication E2).

    Per session, the tasks are put in a seeded order and cut into groups of
    ``block_tasks``. Each group is one short sequence of fresh workers::

        R  |  path1: A B  |  path2: B A  |  R

    A and B are the two layouts; the two paths of a group always take
    opposite orders, so each group reads ABBA. Which layout the first
    configured path runs first and which path goes first are crossed over the
    groups of a session (:func:`factorial_orders`: each of the four
    combinations once per four groups, leftovers rotating over sessions) in an
    order drawn from the seed -- so within each path as many groups start with
    either layout, and as many groups open with either layout. The
    reference blocks carry the serial-reference endpoints: ``references`` per
    task and session, the first half before and the rest after the PQ/QB
    blocks. Every block runs its group's tasks in the same order.
    """
    out = []
    first_refs = (references + 1) // 2
    for si, sid in enumerate(sessions):
        rng = derive_rng(seed, "abba", sid)
        tasks = _shuffled(task_ids, rng)
        groups = [tasks[i : i + block_tasks] for i in range(0, len(tasks), block_tasks)]
        combos = factorial_orders(len(groups), rng, si)
        lay_first = [o for o, _p in combos]
        path_first = [p for _o, p in combos]
        blocks: list[BlockPlan] = []

        def add(arm: str, gtasks: list[str], reps: Iterable[int], role: str) -> None:
            reps = list(reps)
            if reps:
                blocks.append(BlockPlan(sid, len(blocks), arm, [Req(t, cap, r) for r in reps for t in gtasks], role))

        for g, gtasks in enumerate(groups):
            add(reference, gtasks, range(1, first_refs + 1), f"group {g}: reference")
            ps = list(paths) if path_first[g] == 0 else list(reversed(paths))
            for path in ps:
                # the first configured path takes the drawn orientation, the other path its reverse: ABBA
                flip = (lay_first[g] + list(paths).index(path)) % 2
                lays = list(layouts) if flip == 0 else list(reversed(layouts))
                for pos, lay in zip("AB", lays):
                    add(arm_for(path, lay), gtasks, range(1, repeats + 1), f"group {g}: {path} {pos}")
            add(reference, gtasks, range(first_refs + 1, references + 1), f"group {g}: reference")
        out.append(SessionPlan(sid, blocks))
    return out


def schedule_record(sessions: Sequence[SessionPlan]) -> list[dict]:
    return [s.record() for s in sessions]


# --------------------------------------------------------------------------- helpers


def parse_utc(s: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def _proc_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def stop_leftover_worker(pid: int, worker_id: str) -> bool:
    """SIGKILL a worker process the interrupted campaign left running; True if one was stopped.

    Only a process whose command line runs ``refspec.engine.worker`` with this worker id is touched.
    """
    cmd = _proc_cmdline(pid)
    if "refspec.engine.worker" not in cmd or f"--worker-id {worker_id}" not in cmd:
        return False
    try:
        os.kill(int(pid), signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    for _ in range(100):
        if not Path(f"/proc/{int(pid)}").exists() or _proc_cmdline(pid) == "":
            break
        time.sleep(0.02)
    return True


def _worker_number(wid: str) -> int:
    # driver worker ids are "wNN-<arm>"
    if wid.startswith("w"):
        head = wid[1:].split("-", 1)[0]
        if head.isdigit():
            return int(head)
    return 0


# --------------------------------------------------------------------------- the run


@dataclass
class RunSettings:
    campaign: str
    out_dir: Path
    family: str
    files: Any  # refspec.native.models.FamilyFiles
    draft: str | None
    arms: dict[str, Arm]
    arms_file: Path
    lib_dir: Path
    tasks: dict[str, Any]  # task_id -> refspec.core.panels.Task (all panels of the campaign)
    definition: dict
    manifest: Path | None = None
    progress: bool = True
    resume: bool = False


class CampaignRun:
    """One campaign folder: its ledger, journal, frozen plan, and the sessions run into it."""

    def __init__(self, settings: RunSettings):
        from ..engine.driver import Journal

        self.s = settings
        self.out = Path(settings.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(self.out / "ledger.jsonl")
        self.journal = Journal(self.out / "journal.jsonl")
        self.defn = settings.definition
        self.campaign = settings.campaign
        self.run_no = 0
        self.prompts = None
        self._bar = None
        self._mismatch_seen: set = set()

    # ------------------------------------------------------------------ ledger helpers
    def note(self, kind: str, reason: str, **kw) -> dict:
        rec = {"kind": kind, "reason": reason, "campaign": self.campaign, "family": self.s.family}
        rec.update({k: v for k, v in kw.items() if v is not None})
        return self.ledger.append(rec)

    def ledger_records(self) -> list[dict]:
        return self.ledger.records()

    def journal_records(self) -> list[dict]:
        self._check_journal_tail()
        return [r for r in self.journal.records() if r.get("type") == "request"]

    def _check_journal_tail(self) -> None:
        p = self.journal.path
        if p.exists() and p.stat().st_size:
            with open(p, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    raise IntegrityError(f"{p} ends with an incomplete line (torn write); refusing to append to it")

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
            self._recover(recs)
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

    def _recover(self, recs: list[dict]) -> None:
        """Interrupted requests become failed attempts; leftover workers are stopped."""
        from ..engine.driver import request_row

        journal = self.journal_records()
        seen = {(r["row"]["session"], r["row"]["worker"], r["row"]["order_index"]) for r in journal}
        attempts: dict[tuple, int] = {}
        for r in journal:
            row = r["row"]
            k = (row["session"], row["block"], row["arm"], row["task_id"], row["repeat"])
            attempts[k] = max(attempts.get(k, 0), row["attempt"])
        exited = {r.get("worker") for r in recs if r.get("kind") in ("worker_exit", "worker_stopped")}
        for r in recs:
            if r.get("kind") != "submit":
                continue
            key = (r["session"], r["worker"], r["order_index"])
            if key in seen:
                continue
            seen.add(key)
            arm = self.s.arms[r["arm"]]
            sk = (r["session"], r["block"], r["arm"], r["task_id"], r["repeat"])
            attempt = attempts.get(sk, 0) + 1
            attempts[sk] = attempt
            reason = (
                f"interrupted: the campaign process ended while this request was in flight on worker "
                f"{r['worker']} (submitted at ledger line {r['seq']}); no response was recorded"
            )
            ctx = SimpleNamespace(
                campaign=self.campaign, session=r["session"], family=self.s.family, draft=self.s.draft
            )
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
            led = self.note(
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
            self.journal.append(
                {
                    "type": "request",
                    "row": row,
                    "endpoint": None,
                    "margins": None,
                    "evidence": None,
                    "counters": None,
                    "prompt_sha256": None,
                    "ledger_seq": led["seq"],
                }
            )
        # workers the killed process left running: recorded starts, and ready files of starts it never recorded
        candidates: dict[str, tuple[str | None, int]] = {}
        for r in recs:
            if r.get("kind") == "worker_start" and r.get("pid"):
                candidates[r["worker"]] = (r.get("session"), int(r["pid"]))
        wdir = self.out / "workers"
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
            if stop_leftover_worker(pid, wid):
                self.note(
                    "worker_stopped",
                    f"worker {wid} (pid {pid}) was left running by the interrupted "
                    "campaign process; stopped with SIGKILL",
                    session=sess,
                    worker=wid,
                    pid=pid,
                )

    # ------------------------------------------------------------------ state
    def workers_used(self) -> int:
        """The highest worker number used so far (worker ids are unique in the whole campaign)."""
        n = 0
        for r in self.ledger_records():
            if r.get("worker"):
                n = max(n, _worker_number(str(r["worker"])))
        wdir = self.out / "workers"
        if wdir.is_dir():
            for p in wdir.iterdir():
                n = max(n, _worker_number(p.name.split(".", 1)[0]))
        return n

    def slot_state(self) -> tuple[set, dict, dict]:
        """(final slots, last attempt per slot, failures per slot); slot = (session, block, arm, task, cap, repeat).

        A slot is final when it has a completed attempt, when the driver could not start a
        worker for it after its allowed starts ("no worker: ..."), or when it failed
        ``retries + 1`` times (interruptions of the campaign process not counted).
        """
        done, last, fails = set(), {}, {}
        for r in self.journal_records():
            row = r["row"]
            if row["status"] == "excluded_warmup":
                continue
            k = (row["session"], row["block"], row["arm"], row["task_id"], row["cap"], row["repeat"])
            last[k] = max(last.get(k, 0), row["attempt"])
            reason = str(row["reason"] or "")
            if row["status"] == "ok":
                done.add(k)
            elif reason.startswith("no worker:"):
                done.add(k)  # the driver used up its worker starts for the block (e.g. admission refused)
            elif not reason.startswith("interrupted:"):
                fails[k] = fails.get(k, 0) + 1
        retries = int(self.defn.get("retries", 1))
        for k, n in fails.items():
            if n >= retries + 1:
                done.add(k)  # a final failure: recorded, not re-run again
        return done, last, fails

    def start_failures(self) -> dict[str, list[str]]:
        """arm -> the error lines of its failed worker starts (ledger ``failure`` records)."""
        out: dict[str, list[str]] = {}
        for r in self.ledger_records():
            reason = str(r.get("reason") or "")
            if r.get("kind") == "failure" and reason.startswith("worker start failed") and r.get("arm"):
                lines = [ln.strip() for ln in reason.splitlines() if "error:" in ln]
                out.setdefault(r["arm"], []).append(lines[-1] if lines else reason.splitlines()[0])
        return out

    def remaining(self, sessions: Sequence[SessionPlan]) -> int:
        done, _, _ = self.slot_state()
        n = 0
        for s in sessions:
            for b in s.blocks:
                n += sum(1 for q in b.requests if (s.id, b.index, b.arm, q.task_id, q.cap, q.repeat) not in done)
        return n

    def session_marks(self) -> dict[str, dict]:
        """session -> {"start": rec, "end": rec} from the ledger."""
        out: dict[str, dict] = {}
        for r in self.ledger_records():
            k = r.get("kind")
            if k in ("session_start", "session_end") and r.get("session"):
                d = out.setdefault(r["session"], {})
                if k == "session_start":
                    d.setdefault("start", r)
                else:
                    d["end"] = r
        return out

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
            print(f"refspec campaign {self.campaign}: {text}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ sessions
    def run_session(self, sp: SessionPlan, previous: str | None) -> None:
        from ..engine.driver import Planned, PromptBook, RunContext, run_block

        marks = self.session_marks()
        done, last, _ = self.slot_state()
        todo = []
        for b in sp.blocks:
            reqs = [q for q in b.requests if (sp.id, b.index, b.arm, q.task_id, q.cap, q.repeat) not in done]
            if reqs:
                todo.append((b, reqs))
        mine = marks.get(sp.id, {})
        if not todo:
            if "end" not in mine and "start" in mine:
                self.note(
                    "session_end",
                    "every planned request of the session has a final attempt (completed, or failed as often as the retry rule allows)",
                    session=sp.id,
                )
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
        if self.prompts is None:
            self.prompts = PromptBook(self.s.tasks.values(), chat=True)
        n_workers = self.workers_used()
        ctx = RunContext(
            campaign=self.campaign,
            family=self.s.family,
            session=sp.id,
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
        for b, reqs in todo:
            arm = self.s.arms[b.arm]
            planned = [Planned(q.task_id, q.cap, q.repeat) for q in reqs]
            attempts = {
                (q.task_id, q.repeat): last.get((sp.id, b.index, b.arm, q.task_id, q.cap, q.repeat), 0) for q in reqs
            }

            def on_submit(worker, p, order, _b=b):
                self.note(
                    "submit",
                    "timed request submitted to the worker",
                    session=sp.id,
                    block=_b.index,
                    worker=worker.worker_id,
                    arm=_b.arm,
                    task_id=p.task_id,
                    cap=p.cap,
                    repeat=p.repeat,
                    order_index=order,
                )

            ctx.on_submit = on_submit
            self._log(f"{sp.id} block {b.index}: {b.arm} ({b.role}), {len(reqs)} request(s)")
            run_block(ctx, arm, planned, block=b.index, attempts_before=attempts)
        self.audit_session(sp.id)
        done, _, _ = self.slot_state()
        left = [
            (b.index, q)
            for b in sp.blocks
            for q in b.requests
            if (sp.id, b.index, b.arm, q.task_id, q.cap, q.repeat) not in done
        ]
        self.note(
            "session_end",
            "every planned request of the session has a final attempt (completed, or failed as often as the retry rule allows)"
            if not left
            else f"{len(left)} planned request(s) without a final attempt",
            session=sp.id,
            incomplete=len(left),
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
        from ..provenance.manifest import FreezeCheckError, freeze_check

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
    def reference_endpoints(self, records: list[dict] | None = None) -> dict[tuple[str, int], dict]:
        """(task_id, cap) -> the first completed R endpoint row in (session, repeat) order."""
        records = self.journal_records() if records is None else records
        refs = sorted(
            (r for r in records if r["row"]["arm"] == REFERENCE_ARM and r["endpoint"] is not None),
            key=lambda r: (r["row"]["session"], r["row"]["repeat"]),
        )
        out: dict[tuple[str, int], dict] = {}
        for r in refs:
            out.setdefault((r["row"]["task_id"], r["row"]["cap"]), r["endpoint"])
        return out

    def audit_session(self, sid: str) -> None:
        """A ``mismatch`` ledger line for every completed request of the session that differs from R."""
        from ..core.endpoint import first_divergence

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
            what = "the reference R" if row["arm"] != REFERENCE_ARM else "the first reference endpoint (R unstable)"
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

    # ------------------------------------------------------------------ tables
    def base_tables(self) -> dict[str, list[dict]]:
        """requests, endpoints, qualification and sessions from the journal and the ledger."""
        records = self.journal_records()
        requests = [r["row"] for r in records]
        endpoints = [r["endpoint"] for r in records if r["endpoint"] is not None]
        margins: dict = {}
        for r in sorted(
            (r for r in records if r["row"]["arm"] == REFERENCE_ARM and r["endpoint"] is not None),
            key=lambda r: (r["row"]["session"], r["row"]["repeat"]),
        ):
            row = r["row"]
            if r.get("margins") is not None:
                margins.setdefault((row["campaign"], row["family"], row["task_id"], row["cap"]), r["margins"])
        qual = qualification_table(requests, endpoints, campaign=self.campaign, margins=margins)
        # sessions: first submit .. last recorded outcome, from the ledger's times
        first: dict[str, str] = {}
        last: dict[str, str] = {}
        for r in self.ledger_records():
            sess = r.get("session")
            if not sess:
                continue
            if r.get("kind") == "submit":
                first.setdefault(sess, r["time"])
            if r.get("kind") in ("attempt", "failure", "interruption", "excluded_warmup", "submit") and r.get("worker"):
                last[sess] = r["time"]
        rows = []
        for sess in sorted({q["session"] for q in requests}):
            srows = [q for q in requests if q["session"] == sess]
            start = first.get(sess)
            end = last.get(sess)
            if start is None or end is None:
                continue
            rows.append(
                dict(
                    campaign=self.campaign,
                    family=self.s.family,
                    session=sess,
                    started_utc=start,
                    ended_utc=end,
                    gap_before_s=None,
                    n_requests=len(srows),
                    n_workers=len({q["worker"] for q in srows}),
                )
            )
        sessions = session_gaps(rows)
        return {
            "requests": requests,
            "endpoints": endpoints,
            "qualification": qual,
            "sessions": sessions,
            "_records": records,
        }
