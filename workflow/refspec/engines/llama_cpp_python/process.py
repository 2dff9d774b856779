"""llama-cpp-python arms (``kind: llama_cpp_python``): the pinned package's own ``Llama`` behind the process interface.

:func:`start` is the engine's launcher (:func:`refspec.engine.launcher.start_process` runs it for
such an arm): a fresh process of :mod:`refspec.engines.llama_cpp_python.program` with refspec's own
interpreter on a free loopback port, under the scrubbed worker environment, on the project's patched
llama.cpp build (``LLAMA_CPP_LIB_PATH``); checked like a server arm (one slot, the target file, the
reference's vocabulary and pieces, every prompt tokenized alike), then its registered warmup
(:func:`refspec.engine.server.start_checked`).

The arm's recipe maps onto the library's own settings: ``ub`` is the context's ``n_ubatch``;
``mode: spec`` drafts ``k`` tokens by prompt lookup (``LlamaPromptLookupDecoding``); a layout other
than the native ``mq`` (or a phase mask other than 0) is set from outside the library, unmodified,
as ``LLAMA_ATTN_LAYOUT=<layout>:<mask>`` in the process's environment (``anc/native.md``).

Its :class:`LlamaCppPythonProcess` is a :class:`refspec.engine.server.ServerProcess`: the same
request body and complete-endpoint validation. A speculative arm's response must carry the draft's
counters (the draft ran, though prompt lookup may find nothing to propose), a target-only arm's none.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ...core.arms import Arm
from ...engine.context import RunContext
from ...engine.server import (
    ENV_LAYOUT,
    ResponseRefused,
    ServerProcess,
    open_program,
    reference_vocabulary,
    start_checked,
)

PROGRAM = Path(__file__).resolve().with_name("program.py")
READY_TIMEOUT_S = 120.0


def layout_env(arm: Arm) -> dict[str, str]:
    """The process's ``LLAMA_ATTN_LAYOUT`` for the arm's layout and phase mask (none for the native one)."""
    if arm.layout == "mq" and arm.mask == 0:
        return {}
    return {ENV_LAYOUT: f"{arm.layout}:{arm.mask}"}


class LlamaCppPythonProcess(ServerProcess):
    """A llama-cpp-python arm's process: an :class:`refspec.engine.process.ArmProcess`."""

    def complete(self, prompt_ids: list[int], cap: int, *, request_id: str | None = None, timeout: float = 600.0):
        c = super().complete(prompt_ids, cap, request_id=request_id, timeout=timeout)
        tm = c.response["server"].get("timings") or {}
        if self.arm.speculative and "draft_n" not in tm:
            raise ResponseRefused("a speculative arm's response has no draft counters: its draft did not run")
        if not self.arm.speculative and "draft_n" in tm:
            raise ResponseRefused("a target-only arm's response has draft counters: a draft ran")
        c.extra["engine_ns"] = tm.get("engine_ns")
        return c


def open_process(ctx: RunContext, arm: Arm, wid: str) -> LlamaCppPythonProcess:
    """Start the arm's process and check it; :class:`refspec.engine.server.ServerRefused` when it cannot be timed."""
    eog = reference_vocabulary(ctx.files.target.path, ctx.files.target.sha256, Path(ctx.lib_dir)).eog
    env = layout_env(arm)

    def command(port: int) -> list:
        cmd = [sys.executable, "-I", str(PROGRAM), "--model", str(ctx.files.target.path)]
        cmd += ["--n-ubatch", str(arm.ub), "--n-ctx", str(arm.n_ctx), "--threads", str(arm.threads)]
        cmd += ["--eog", ",".join(str(t) for t in sorted(eog))]
        if arm.speculative:
            cmd += ["--prompt-lookup", str(arm.k)]
        return cmd + ["--port", str(port)]

    ready = {
        "placement": {"device": "CPU", "engine": "llama-cpp-python", "threads": arm.threads},
        "env": {"LLAMA_CPP_LIB_PATH": str(ctx.lib_dir), **env},
    }
    return open_program(
        ctx,
        arm,
        wid,
        command,
        cls=LlamaCppPythonProcess,
        ready_timeout_s=READY_TIMEOUT_S,
        env=env or None,
        ready=ready,
        who="llama-cpp-python process",
    )


def start(ctx: RunContext, arm: Arm, block: int) -> tuple[LlamaCppPythonProcess, dict]:
    """Start, check, warm up and record a llama-cpp-python arm's process (its launcher entry)."""
    return start_checked(ctx, arm, block, open_process)
