"""One launcher: the arm's ``kind`` picks the implementation of its process (:mod:`refspec.engine.process`).

``worker``: refspec's own worker (:mod:`refspec.engine.worker_process`); ``server``: a black-box
llama.cpp server (:mod:`refspec.engine.server`); ``openvino``: an OpenVINO GenAI pipeline
(:mod:`refspec.engine.openvino`). Each starts a fresh process for a block,
ledgers the start and records the registered warmup (an excluded row). Only refspec's own
worker serves several arms in one process (the paired design).
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.arms import Arm
from ..core.errors import UsageError
from .context import RunContext
from .openvino import start_openvino
from .process import ArmProcess
from .server import start_server
from .worker_process import start_paired_worker, start_worker

Launch = Callable[[RunContext, Arm, int], tuple[ArmProcess, dict]]
LAUNCHERS: dict[str, Launch] = {"worker": start_worker, "server": start_server, "openvino": start_openvino}


def start_process(
    ctx: RunContext, arm: Arm, block: int, also_arms: tuple[Arm, ...] = ()
) -> tuple[ArmProcess, list[dict]]:
    """Start a fresh process for ``arm`` (and, paired, ``also_arms``); ledger its start and record
    every arm's warmup (excluded rows, one journal record each, in the order they ran)."""
    if not also_arms:
        proc, rec = LAUNCHERS[arm.kind](ctx, arm, block)
        return proc, [rec]
    kinds = {a.kind for a in (arm, *also_arms)}
    if kinds != {"worker"}:
        raise UsageError(
            f"only refspec's own worker serves several arms in one process, not {', '.join(sorted(kinds))}"
        )
    return start_paired_worker(ctx, arm, block, also_arms)
