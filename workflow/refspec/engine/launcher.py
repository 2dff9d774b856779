"""One launcher: the arm's ``kind`` names its engine (:mod:`refspec.core.engine_registry`), whose
launcher starts the arm's process (:mod:`refspec.engine.process`).

Each engine's launcher starts a fresh process for a block, ledgers the start and records the
registered warmup (an excluded row). Only an engine that declares ``start_paired`` (refspec's own
worker) serves several arms in one process (the paired design).
"""

from __future__ import annotations

from ..core.arms import Arm
from ..core.engine_registry import engine
from ..core.errors import UsageError
from .context import RunContext
from .process import ArmProcess


def start_process(
    ctx: RunContext, arm: Arm, block: int, also_arms: tuple[Arm, ...] = ()
) -> tuple[ArmProcess, list[dict]]:
    """Start a fresh process for ``arm`` (and, paired, ``also_arms``); ledger its start and record
    every arm's warmup (excluded rows, one journal record each, in the order they ran)."""
    e = engine(arm.kind, arm.name)
    if not also_arms:
        proc, rec = e.load(e.start)(ctx, arm, block)
        return proc, [rec]
    kinds = {a.kind for a in (arm, *also_arms)}
    if kinds != {arm.kind} or e.start_paired is None:
        raise UsageError(
            f"only an engine that serves several arms in one process (refspec's own worker) pairs arms, "
            f"not {', '.join(sorted(kinds))}"
        )
    return e.load(e.start_paired)(ctx, arm, block, also_arms)
