"""One launcher: the arm's ``kind`` picks the implementation of its process (:mod:`refspec.engine.process`).

``worker``: refspec's own worker (:mod:`refspec.engine.worker_process`); ``server``: a black-box
llama.cpp server (:mod:`refspec.engine.server`). Each starts a fresh process for a block,
ledgers the start and records the registered warmup (an excluded row).
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.arms import Arm
from .context import RunContext
from .process import ArmProcess
from .server import start_server
from .worker_process import start_worker

Launch = Callable[[RunContext, Arm, int], tuple[ArmProcess, dict]]
LAUNCHERS: dict[str, Launch] = {"worker": start_worker, "server": start_server}


def start_process(ctx: RunContext, arm: Arm, block: int) -> tuple[ArmProcess, dict]:
    """Start a fresh process for ``arm``; ledger its start and record its warmup (an excluded row)."""
    return LAUNCHERS[arm.kind](ctx, arm, block)
