"""The driver: fresh worker processes, timed requests over loopback, every attempt kept.

A campaign hands the driver *blocks*: one arm and an ordered list of planned
requests (task, prompt token IDs, cap, repeat). :func:`run_block` starts a fresh
worker for the block (``python -m refspec.commands.worker`` with a scrubbed environment,
see :func:`refspec.engine.spawn.process_env`), waits for its ready file, records the worker's
registered warmup as an excluded row, then submits the requests one by one and
times each complete request as a client sees it: ``time.perf_counter_ns()``
just before the (already encoded) request is submitted with ``urllib`` and
just after the response has been parsed and validated. Model loading, the
warmup, tokenization, journal and ledger writes are outside that interval.

Nothing completed is lost: each attempt is appended to a JSON-lines journal
(one ``write`` + ``fsync`` per line) and to the hash-chained ledger as soon as
it ends. When a worker dies (for example killed with SIGKILL in the middle of
a request) the attempt is recorded as failed with the reason (exit status,
transport error), the ledger gets an ``interruption`` line, a fresh worker is
started and the rest of the block runs; the failed request is re-run as a new
attempt (``attempt`` + 1, ``retry_of`` in the ledger) up to ``retries`` times.
A request the worker answers with an HTTP error is recorded as failed and not
re-run (the same input would give the same answer).

The arm's process is an :class:`refspec.engine.process.ArmProcess`, started by
:func:`refspec.engine.launcher.start_process`; the retry rule is :mod:`refspec.engine.attempts`.
The worker protocol is documented in ``anc/worker.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.arms import Arm
from ..core.errors import PlacementError, RefspecError, UsageError
from ..core.hashing import sha256_json
from .attempts import Attempt, AttemptQueue
from .context import Planned, RunContext, ledger_line, record
from .errors import InvalidResponse, ProcessStartError, RequestError, SequenceGap, TransportError
from .launcher import start_process
from .load import process_cpu_ns
from .process import ArmProcess, Completion
from .rows import endpoint_row, failed_record, request_row
from .spawn import describe_exit

# what a step of the block loop tells the loop
_GO, _AGAIN, _STOP = "go", "again", "stop"


@dataclass
class _Block:
    """One block while it runs: its attempts left, its current process and what it has recorded."""

    ctx: RunContext
    arm: Arm
    index: int
    queue: AttemptQueue
    out: list[dict] = field(default_factory=list)
    worker: ArmProcess | None = None
    order: int = 0  # the order index of the next request on the current worker
    starts: int = 0  # processes started for the block
    also_arms: tuple[Arm, ...] = ()  # the other arms a paired block's process serves

    def arm_of(self, p: Planned) -> Arm:
        """The arm that serves ``p``: its own in a paired block, else the block's."""
        if p.arm is None or p.arm == self.arm.name:
            return self.arm
        for a in self.also_arms:
            if a.name == p.arm:
                return a
        raise UsageError(f"block {self.index}: planned arm {p.arm} is not served by its process")

    def ledger(self, kind: str, reason: str, **kw) -> dict:
        return ledger_line(self.ctx, kind, reason, **kw)


def run_block(
    ctx: RunContext,
    arm: Arm,
    planned: list[Planned],
    *,
    block: int = 0,
    attempts_before: dict[tuple, int] | None = None,
    also_arms: tuple[Arm, ...] = (),
) -> list[dict]:
    """Run ``planned`` on fresh workers for ``arm``; return the journal records of every attempt.

    With ``also_arms`` (the paired design) one process serves ``arm`` and ``also_arms`` side by
    side and each planned request names its arm (:attr:`Planned.arm`); the requests run in the
    planned order, interleaving the arms.

    Records are ``{"type": "request", "row": <requests row>, "endpoint": <endpoints row or None>,
    "margins": [...], "evidence": {...}, "counters": {...}, "prompt_sha256": ...}``, the warmup
    rows included. ``attempts_before`` maps a request's :attr:`Planned.key` (arm, task_id, repeat)
    to the last attempt number already recorded (when a campaign resumes).
    """
    b = _Block(ctx, arm, block, AttemptQueue(planned, attempts_before or {}, ctx.retries), also_arms=tuple(also_arms))
    try:
        while b.queue:
            _drop_dead_worker(b)
            if b.worker is None:
                step = _start_worker(b)
                if step == _STOP:
                    break
                if step == _AGAIN:
                    continue
            if _run_attempt(b) == _STOP:
                break
    finally:
        _stop_worker(b)
    return b.out


def _drop_dead_worker(b: _Block) -> None:
    """A worker that died between requests: an ``interruption`` line, and a fresh one next."""
    w = b.worker
    if w is not None and not w.alive():
        b.ledger(
            "interruption",
            f"worker {w.worker_id} {w.describe_exit()} between requests",
            worker=w.worker_id,
            arm=b.arm.name,
            block=b.index,
            pid=w.pid,
        )
        b.worker = None


def _start_worker(b: _Block) -> str:
    """Start a fresh process for the block (within its allowed starts) and make sure the prompts are tokenized."""
    ctx, arm, block = b.ctx, b.arm, b.index
    if b.starts >= ctx.max_worker_starts:
        _fail_rest(b, f"none-b{block}", 0, f"no worker: {b.starts} worker starts for block {block} used up")
        return _STOP
    b.starts += 1
    try:
        worker, wrecs = start_process(ctx, arm, block, b.also_arms)
    except PlacementError as e:  # not a transient failure: record it, then stop the campaign
        b.ledger("failure", f"placement refused: {e}", arm=arm.name, block=block, outcome="failed")
        raise
    except ProcessStartError as e:
        b.ledger("failure", f"worker start failed: {e}", arm=arm.name, block=block, outcome="failed")
        return _AGAIN
    b.worker = worker
    b.out.extend(wrecs)
    b.order = len(wrecs)
    if ctx.prompts is not None:
        try:
            ctx.prompts.ensure(worker)
        except RefspecError as e:
            worker.kill()
            b.ledger(
                "failure",
                f"tokenizing the panel on worker {worker.worker_id} failed: {e}",
                worker=worker.worker_id,
                arm=arm.name,
                block=block,
                outcome="failed",
            )
            b.worker = None
            return _AGAIN
    return _GO


def _run_attempt(b: _Block) -> str:
    """Submit the next attempt to the worker and record its outcome."""
    ctx, worker = b.ctx, b.worker
    a = b.queue.next()
    p = a.planned
    ids = p.prompt_ids if p.prompt_ids is not None else ctx.prompts.get(p.task_id)
    rid = f"{ctx.session}/{worker.worker_id}/{b.order}"
    if ctx.on_submit is not None:
        ctx.on_submit(worker, p, b.order)

    def failed(reason: str) -> dict:
        """The failed record of this request (its prompt hashed only when it fails)."""
        return failed_attempt(
            ctx, b.arm_of(p), b.index, worker.worker_id, p, b.order, a.attempt, reason, a.retry_of, sha256_json(ids)
        )

    which = {"arm": b.arm_of(p).name} if b.also_arms else {}  # a paired process: the request's arm
    cpu0 = process_cpu_ns(worker.pid)
    try:
        c = worker.complete(ids, p.cap, request_id=rid, timeout=ctx.request_timeout, **which)
    except RequestError as e:
        b.out.append(failed(f"worker answered {e}"))
        b.order += 1
        return _GO
    except SequenceGap as e:
        _fail_after_gap(b, failed, e)
        return _STOP
    except (TransportError, InvalidResponse) as e:
        _lost_worker(b, a, failed, e)
        return _GO
    cpu1 = process_cpu_ns(worker.pid)
    _record_ok(b, a, ids, c, None if cpu0 is None or cpu1 is None else cpu1 - cpu0)
    b.order += 1
    return _GO


def _fail_after_gap(b: _Block, failed, e: SequenceGap) -> None:
    """Foreign requests were served between timed ones: nothing more is timed in this block."""
    worker = b.worker
    reason = f"request_index gap on worker {worker.worker_id} (pid {worker.pid}): {e}; the block is failed"
    rec = failed(reason)
    b.out.append(rec)
    _ledger_exit(b, worker, "stopped after a request_index gap", worker.kill())
    left = f"block {b.index} failed: request_index gap on worker {worker.worker_id} (ledger line {rec['ledger_seq']})"
    _fail_rest(b, worker.worker_id, b.order + 1, left)
    b.worker = None


def _lost_worker(b: _Block, a: Attempt, failed, e: RefspecError) -> None:
    """No valid answer: the attempt failed, the worker is stopped, and the request is re-run (retry rule)."""
    worker = b.worker
    code = worker.wait_exit(2.0)
    if code is not None:
        reason = f"worker {worker.worker_id} (pid {worker.pid}) {describe_exit(code)} during the request ({e})"
    else:
        reason = f"{type(e).__name__} from worker {worker.worker_id}: {e}; the worker was stopped"
    rec = failed(reason)
    b.out.append(rec)
    if code is None:
        worker.kill()
    b.ledger("interruption", reason, worker=worker.worker_id, arm=b.arm.name, block=b.index, pid=worker.pid)
    b.worker = None
    b.queue.retry(a, rec["ledger_seq"])


def _record_ok(b: _Block, a: Attempt, ids: list[int], c: Completion, cpu_ns: int | None) -> None:
    """A completed attempt: its ``requests`` row, an ``attempt`` ledger line and its journal record."""
    ctx, worker, p = b.ctx, b.worker, a.planned
    arm = b.arm_of(p)
    row = request_row(
        ctx,
        arm,
        block=b.index,
        worker=worker.worker_id,
        task_id=p.task_id,
        cap=p.cap,
        repeat=p.repeat,
        order_index=b.order,
        attempt=a.attempt,
        status="ok",
        reason=None,
        t_ns=c.t_ns,
        cpu_ns=cpu_ns,
        endpoint=c.endpoint,
        counters=c.counters,
        placement=worker.placement,
    )
    led = b.ledger(
        "attempt",
        "planned request" if a.retry_of is None else "re-run of a failed attempt",
        outcome="ok",
        worker=worker.worker_id,
        arm=arm.name,
        task_id=p.task_id,
        repeat=p.repeat,
        attempt=a.attempt,
        retry_of=a.retry_of,
        t_ns=c.t_ns,
        endpoint_sha256=c.endpoint.sha256,
    )
    b.out.append(
        record(
            ctx,
            {
                "type": "request",
                "row": row,
                "endpoint": endpoint_row(row, c.endpoint),
                "margins": c.margins,
                "evidence": c.evidence,
                "counters": c.counters,
                "prompt_sha256": sha256_json(ids),
                "engine_ns": c.extra.get("engine_ns"),
                "acceptance": c.extra.get("acceptance"),
                "ledger_seq": led["seq"],
                # a server's own caveats for this request (e.g. an older draft path's count shortfall)
                **({"server_notes": c.extra["server_notes"]} if c.extra.get("server_notes") else {}),
            },
        )
    )


def _fail_rest(b: _Block, worker_id: str, first_index: int, reason: str) -> None:
    """Every attempt left in the block fails with ``reason`` (order indexes from ``first_index``)."""
    for i, q in enumerate(b.queue.drain(), start=first_index):
        b.out.append(
            failed_attempt(b.ctx, b.arm_of(q.planned), b.index, worker_id, q.planned, i, q.attempt, reason, q.retry_of)
        )


def _stop_worker(b: _Block) -> None:
    """The block is over: stop its worker (SIGTERM, then SIGKILL) and ledger how it ended."""
    w = b.worker
    if w is None:
        return
    _ledger_exit(b, w, "block done", w.stop())


def _ledger_exit(b: _Block, w, why: str, code: int | None) -> None:
    """The block's ``worker_exit`` ledger line: why the worker ended and how it exited."""
    b.ledger(
        "worker_exit",
        f"{why}: worker {describe_exit(code)}",
        worker=w.worker_id,
        arm=b.arm.name,
        block=b.index,
        pid=w.pid,
        exit_code=code,
    )


def failed_attempt(
    ctx: RunContext,
    arm: Arm,
    block: int,
    worker_id: str,
    p: Planned,
    order: int,
    attempt: int,
    reason: str,
    retry_of: int | None,
    prompt_sha256: str | None = None,
) -> dict:
    """A failed attempt: its ``requests`` row, a ``failure`` ledger line and its journal record."""
    row = request_row(
        ctx,
        arm,
        block=block,
        worker=worker_id,
        task_id=p.task_id,
        cap=p.cap,
        repeat=p.repeat,
        order_index=order,
        attempt=attempt,
        status="failed",
        reason=reason,
    )
    led = ledger_line(
        ctx,
        "failure",
        reason,
        outcome="failed",
        worker=worker_id,
        arm=arm.name,
        task_id=p.task_id,
        repeat=p.repeat,
        attempt=attempt,
        retry_of=retry_of,
    )
    return record(ctx, failed_record(row, led["seq"], prompt_sha256))
