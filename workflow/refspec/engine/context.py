"""What every block of a campaign shares (:class:`RunContext`), and how an outcome is written down.

Every outcome goes to two places as soon as it is known: a ledger line (:func:`ledger_line`,
through the :class:`LedgerSink` the campaign hands in: the hash-chained ledger of
:mod:`refspec.provenance.ledger`) and a journal record (:func:`record`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..core.hashing import sha256_json
from ..native.models import FamilyFiles
from .journal import Journal
from .process import ArmProcess


class LedgerSink(Protocol):
    """Where ledger lines go: ``append`` completes a record (sequence number, time, chain) and returns it."""

    def append(self, rec: dict) -> dict: ...


@dataclass
class Planned:
    """One required request: ``repeat`` from 1; ``arm``: which of a paired block's arms serves it
    (None: the block's one arm)."""

    task_id: str
    cap: int
    repeat: int
    prompt_ids: list[int] | None = None  # None: resolved by ``prompts`` once a worker is up
    arm: str | None = None

    @property
    def key(self) -> tuple[str | None, str, int]:
        """What identifies the request within its block: (arm, task, repeat)."""
        return (self.arm, self.task_id, self.repeat)


class PromptBook:
    """Token IDs of the panel's prompts; text prompts are tokenized once, by the first worker (untimed)."""

    def __init__(self, tasks: Iterable, chat: bool = True):
        self.tasks = {t.task_id: t for t in tasks}
        self.chat = chat
        self.ids: dict[str, list[int]] = {
            t.task_id: list(t.prompt_ids) for t in self.tasks.values() if t.prompt_ids is not None
        }

    def ensure(self, worker: ArmProcess) -> None:
        for tid, t in self.tasks.items():
            if tid not in self.ids:
                self.ids[tid] = worker.tokenize(t.text, chat=self.chat)

    def get(self, task_id: str) -> list[int]:
        return self.ids[task_id]

    def digests(self) -> dict[str, str]:
        return {tid: sha256_json(ids) for tid, ids in self.ids.items()}


@dataclass
class RunContext:
    """What every block of a campaign shares."""

    campaign: str
    family: str
    session: str
    files: FamilyFiles
    lib_dir: Path
    out_dir: Path
    journal: Journal
    ledger: LedgerSink
    prompts: PromptBook | None = None
    draft: str | None = None
    arms_file: str | None = None
    host: str = "127.0.0.1"
    retries: int = 1
    max_worker_starts: int = 3  # per block, counting the first
    request_timeout: float = 600.0
    ready_timeout: float = 600.0
    warmup_cap: int | None = None
    on_submit: Callable[[ArmProcess, Planned, int], None] | None = None  # called just before each timed request
    on_record: Callable[[dict], None] | None = None  # called after each journal record
    n_workers: int = 0

    def next_worker_id(self, arm: str) -> str:
        self.n_workers += 1
        return f"w{self.n_workers:02d}-{arm}"


def process_number(worker_id: str) -> int:
    """The number in a worker id made by :meth:`RunContext.next_worker_id` (``wNN-<arm>``); 0 for any other id."""
    if worker_id.startswith("w"):
        head = worker_id[1:].split("-", 1)[0]
        if head.isdigit():
            return int(head)
    return 0


def ledger_line(ctx: RunContext, kind: str, reason: str, **kw) -> dict:
    """Append one ledger line of this campaign, family and session (``None`` fields left out)."""
    rec = {"kind": kind, "reason": reason, "campaign": ctx.campaign, "family": ctx.family, "session": ctx.session}
    rec.update({k: v for k, v in kw.items() if v is not None})
    return ctx.ledger.append(rec)


def record(ctx: RunContext, rec: dict) -> dict:
    """Append one journal record (then tell ``on_record``); returns ``rec``."""
    ctx.journal.append(rec)
    if ctx.on_record is not None:
        ctx.on_record(rec)
    return rec
