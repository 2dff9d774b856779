"""The retry rule of a block: which planned request runs next, as which attempt.

A request whose worker died or gave no valid answer is re-run as a new attempt
(``attempt`` + 1, ``retry_of`` = the ledger line of the failed one) up to ``retries``
times, before anything else; a request the worker answered with an HTTP error is not
re-run (the same input would give the same answer).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from .context import Planned


@dataclass
class Attempt:
    planned: Planned
    attempt: int
    retry_of: int | None = None  # the ledger line of the failed attempt this one re-runs


class AttemptQueue:
    """The attempts still to run in a block, in order."""

    def __init__(self, planned: list[Planned], attempts_before: dict[tuple, int], retries: int):
        """``attempts_before`` maps a request's :attr:`Planned.key` (arm, task, repeat) to the last
        attempt number already recorded."""
        self.retries = retries
        self._q = deque(Attempt(p, attempts_before.get(p.key, 0) + 1) for p in planned)

    def __bool__(self) -> bool:
        return bool(self._q)

    def next(self) -> Attempt:
        return self._q.popleft()

    def retry(self, a: Attempt, failed_seq: int) -> None:
        """Re-run ``a`` next, as a new attempt, unless it has used up its retries."""
        if a.attempt <= self.retries:
            self._q.appendleft(Attempt(a.planned, a.attempt + 1, failed_seq))

    def drain(self) -> Iterator[Attempt]:
        """Every attempt left (each removed as it is handed out)."""
        while self._q:
            yield self._q.popleft()
