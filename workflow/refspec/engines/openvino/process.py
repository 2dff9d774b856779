"""OpenVINO GenAI arms (``kind: openvino``, ``anc/openvino.md``): a second engine behind the process interface.

:func:`start_openvino` is what :func:`refspec.engine.launcher.start_process` runs for such an arm:

1. the engine's environment and the IR of the target (and, speculative, the draft) converted from
   the run's pinned GGUF files (:mod:`refspec.engines.openvino.env`, cached by their inputs' hashes,
   each IR file checked against the sha256 recorded at its conversion);
2. a fresh process of :mod:`refspec.engines.openvino.program` with the engine's interpreter, on a free
   loopback port, under the scrubbed worker environment (:func:`refspec.engine.spawn.process_env`),
   its log in ``workers/<id>.log``; the arm's ``threads`` are the engine's ``INFERENCE_NUM_THREADS``;
   the end-of-generation tokens are the pinned reference model's;
3. the same checks a server arm passes before it is timed (one slot, the target file refspec gave it,
   the reference's vocabulary size and pieces, and every prompt tokenized alike), then the
   registered warmup (:func:`refspec.engine.server.start_checked`).

Its :class:`OpenVINOProcess` is a :class:`refspec.engine.server.ServerProcess`: the same request
body, the same complete-endpoint validation (:func:`refspec.engine.server.endpoint_from_response`),
the same journal and ledger. What differs: a speculative arm's response must carry the engine's
draft counters, with draft tokens in every request of :data:`MIN_PROPOSING` tokens or more, and a
target-only arm's none; an arm whose draft did not run is refused, never scored as speculative.
"""

from __future__ import annotations

from pathlib import Path

from ...core.arms import Arm
from ...engine.context import RunContext
from ...engine.server import (
    ResponseRefused,
    ServerProcess,
    ServerRefused,
    open_program,
    reference_vocabulary,
    start_checked,
)
from .env import SERVER_SCRIPT, EngineUnavailable, ensure_env, ensure_ir, environ, verify_ir

# From this many generated tokens on, the engine's draft has run (cap 2: the first token comes from
# the prompt's inference and the second from the target alone; cap 4: the draft generated 3)
MIN_PROPOSING = 4


class OpenVINOProcess(ServerProcess):
    """An OpenVINO GenAI arm's process: an :class:`refspec.engine.process.ArmProcess`."""

    def complete(self, prompt_ids: list[int], cap: int, *, request_id: str | None = None, timeout: float = 600.0):
        c = super().complete(prompt_ids, cap, request_id=request_id, timeout=timeout)
        tm = c.response["server"].get("timings") or {}
        if self.arm.speculative:
            if "draft_n" not in tm:
                raise ResponseRefused("a speculative arm's response has no draft counters: its draft did not run")
            if c.endpoint.n >= MIN_PROPOSING and not tm["draft_n"]:
                raise ResponseRefused(
                    f"a speculative arm's draft generated no token in a request of {c.endpoint.n} tokens"
                )
        elif "draft_n" in tm:
            raise ResponseRefused("a target-only arm's response has draft counters: a draft ran")
        c.extra["engine_ns"] = tm.get("engine_ns")
        return c


def open_openvino(ctx: RunContext, arm: Arm, wid: str) -> OpenVINOProcess:
    """Start the arm's OpenVINO GenAI process and check it; :class:`ServerRefused` when it cannot be timed."""
    o = arm.settings
    try:  # a failure here is the arm's failed start: ledgered by start_checked, never dropped
        env = ensure_env()
        target = ensure_ir(env, Path(ctx.files.target.path), ctx.files.target.sha256)
        irs = {"target": target}
        if arm.speculative:
            d = ctx.files.draft(ctx.draft)
            irs["draft"] = ensure_ir(env, Path(d.path), d.sha256)
    except EngineUnavailable as e:
        raise ServerRefused(f"OpenVINO GenAI for arm {arm.name}: {e}") from e
    bad = [p for ir in irs.values() for p in verify_ir(ir)]
    if bad:
        raise ServerRefused(f"OpenVINO IR of arm {arm.name} changed since its conversion: " + "; ".join(bad))
    eog = reference_vocabulary(ctx.files.target.path, ctx.files.target.sha256, Path(ctx.lib_dir)).eog

    def command(port: int) -> list:
        cmd = [str(env.python), "-I", str(SERVER_SCRIPT), "--model", str(target.folder)]
        cmd += ["--gguf", str(ctx.files.target.path), "--pipeline", o.pipeline, "--batched-tokens", str(arm.ub)]
        if arm.speculative:
            cmd += ["--draft", str(irs["draft"].folder), "--proposals", str(arm.k)]
        cmd += ["--eog", ",".join(str(t) for t in sorted(eog)), "--threads", str(arm.threads)]
        return cmd + ["--execution-mode", o.execution_mode, "--port", str(port)]

    ready = {
        "placement": {"device": "CPU", "engine": "openvino-genai", "threads": arm.threads},
        "env": {"VIRTUAL_ENV": str(env.root)},
        "engine": env.record(),
        "ir": {k: v.record() for k, v in irs.items()},
    }
    return open_program(
        ctx,
        arm,
        wid,
        command,
        cls=OpenVINOProcess,
        ready_timeout_s=o.ready_timeout_s,
        env=environ(env),
        ready=ready,
        who="OpenVINO process",
    )


def start_openvino(ctx: RunContext, arm: Arm, block: int) -> tuple[OpenVINOProcess, dict]:
    """Start, check, warm up and record an OpenVINO GenAI arm's process (its launcher entry)."""
    return start_checked(ctx, arm, block, open_openvino)
