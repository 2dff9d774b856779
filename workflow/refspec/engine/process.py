"""The process interface of an arm: what the driver needs from the process that serves a block.

One implementation per engine (``refspec/engines/``: refspec's own worker's
:class:`refspec.engines.worker.process.WorkerProcess`; every other engine's a
:class:`refspec.engine.server.ServerProcess`, the server interface).
:func:`refspec.engine.launcher.start_process` picks the engine the arm's ``kind`` names; each
starts its process, checks it, runs and records its registered warmup, and hands back an
:class:`ArmProcess`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..core.endpoint import Endpoint

WARMUP_TASK = "warmup"


@dataclass
class Completion:
    """A validated response and its client-side latency."""

    t_ns: int
    endpoint: Endpoint
    margins: list
    counters: dict
    evidence: dict | None
    response: dict

    @property
    def extra(self) -> dict:
        return self.response["refspec"]


@runtime_checkable
class ArmProcess(Protocol):
    """A started process serving one arm: ready (warmed up, listening), then requests, then stop.

    ``ready`` is its ready record (what it reported when it was ready; ``placement`` in it
    says where it runs), ``pid`` its process id (None: not started by refspec),
    ``next_index`` the ``request_index`` its next completion must carry.
    """

    worker_id: str
    pid: int | None
    url: str
    ready: dict
    next_index: int

    @property
    def placement(self) -> dict | None:
        """Where the arm runs (devices, offloaded layers), from the ready record."""
        ...

    def alive(self) -> bool: ...

    def wait_exit(self, timeout: float) -> int | None: ...

    def stop(self, timeout: float = ...) -> int | None:
        """End the process gracefully (SIGKILL when it does not end in time); its exit status."""
        ...

    def kill(self) -> int | None: ...

    def describe_exit(self) -> str: ...

    def tokenize(self, text: str, chat: bool = True, timeout: float = 60.0) -> list[int]: ...

    def complete(
        self, prompt_ids: list[int], cap: int, *, request_id: str | None = None, timeout: float = 600.0
    ) -> Completion:
        """One timed request: submit -> parsed, validated response."""
        ...
