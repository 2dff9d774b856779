"""The worker's engine: the models, the runners of the arms it serves, and the request logic,
independent of HTTP.

The worker loads the family's target (and, when an arm is speculative, the draft) once,
creates each arm's contexts (:class:`refspec.engine.transaction.ArmRunner`), runs each arm's
registered warmup (:data:`WARMUP_TEXT`, chat-templated, :data:`WARMUP_CAP` new tokens;
recorded, never timed) and then serves requests shaped like OpenAI's ``/v1/completions``
(non-streaming, greedy only; the HTTP side is :mod:`refspec.engines.worker.http`, the command
line :mod:`refspec.commands.worker`). There is no prompt cache: every request starts from
cleared KV caches (``Context.begin_request``).

A worker serves one arm (the fresh design: one process per arm and block) or several (the
paired design, ``anc/worker.md``): then a request names its arm in ``refspec.arm`` (or
``model``), and each arm has contexts of its own. What the arms of one process share: the
model weights (one load, read-only), the process (its allocator, page placement, threads'
CPU affinity, what ran before). What they do not: KV buffers, compute buffers, the graph
cache (all per context) and the draft context (one per speculative arm); ``request_index``
counts the process's requests over every arm.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

from ...core.clock import utc_now
from ...core.errors import UsageError
from ...core.hashing import sha256_json
from ...engine.transaction import ArmRunner
from ...native import runtime

# The registered warmup: a fixed user turn, chat-templated with the family's
# template, decoded with the worker's arm before the worker reports ready.
WARMUP_TEXT = "Write a Python function that returns the n-th Fibonacci number."
WARMUP_CAP = 16

# Request fields of /v1/completions: accepted as given, or only with the value that
# greedy, non-streaming, single-choice decoding implies.
_NEUTRAL = {
    "temperature": (0, 0.0),
    "top_p": (1, 1.0),
    "n": (1,),
    "best_of": (1,),
    "stream": (False,),
    "echo": (False,),
    "logprobs": (None,),
    "suffix": (None,),
    "stop": (None, []),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "logit_bias": (None, {}),
}
_FREE = ("model", "prompt", "max_tokens", "seed", "user", "refspec")
_REFSPEC_FIELDS = ("chat", "request_id", "arm")


class HTTPError(Exception):
    """An error answered to the client: status code, OpenAI-style error type and message."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


def _same_value(v: Any, allowed: tuple) -> bool:
    """``v`` equals one of ``allowed`` (numbers by value, booleans and null by identity)."""
    for a in allowed:
        if isinstance(a, bool) or isinstance(v, bool) or a is None or v is None:
            if v is a:
                return True
        elif isinstance(a, (int, float)) and isinstance(v, (int, float)):
            if v == a:
                return True
        elif type(v) is type(a) and v == a:
            return True
    return False


# --------------------------------------------------------------------------- cycle trace


class CycleTrace:
    """Per-cycle (proposals, accepted) of speculative requests, observed on the target context.

    The transaction evaluates each verification batch with one ``decode(...,
    outputs="all")`` call on the target and removes rejected positions with one
    ``seq_rm`` right after it; this wrapper records both, so the worker can show
    partial accepts (0 < accepted < proposals within one cycle), which the
    request totals alone cannot prove. The trace is cross-checked against the
    request's own counters and dropped (reported as null) when they disagree.
    """

    def __init__(self, ctx):
        self.cycles: list[list[int]] = []
        self._pos0 = None
        self._decode = ctx.decode
        self._seq_rm = ctx.seq_rm
        ctx.decode = self.decode
        ctx.seq_rm = self.seq_rm

    def reset(self) -> None:
        self.cycles = []
        self._pos0 = None

    def decode(self, tokens, pos0, outputs="last"):
        out = self._decode(tokens, pos0, outputs=outputs)
        if isinstance(outputs, str) and outputs == "all":
            p = len(tokens) - 1
            self.cycles.append([p, p])
            self._pos0 = pos0
        else:
            self._pos0 = None
        return out

    def seq_rm(self, p0):
        self._seq_rm(p0)
        if self._pos0 is not None and self.cycles:
            self.cycles[-1][1] = int(p0) - self._pos0 - 1
            self._pos0 = None

    def summary(self, stats) -> dict | None:
        cyc = self.cycles
        ok = (
            sum(c[0] for c in cyc) == stats.proposals
            and sum(c[1] for c in cyc) == stats.accepted
            and sum(1 for c in cyc if c[1] < c[0]) == stats.rollbacks
            and len(cyc) == stats.cycles
        )
        if not ok:
            return None
        return {
            "cycles": [list(c) for c in cyc],
            "verify_callers": len(cyc),
            "verify_rows": sum(c[0] + 1 for c in cyc),
            "partial_accepts": sum(1 for c in cyc if 0 < c[1] < c[0]),
            "full_accepts": sum(1 for c in cyc if c[0] > 0 and c[1] == c[0]),
            "full_rejects": sum(1 for c in cyc if c[0] > 0 and c[1] == 0),
        }


# --------------------------------------------------------------------------- the engine side


class WorkerEngine:
    """Models, the runners of the arms served and the request logic; independent of HTTP.

    ``arm`` is the process's first arm (the one a request that names none gets, and the one a
    single-arm worker's identity names); ``also_arms`` the others of a paired worker, served
    side by side with their own contexts over the same loaded models."""

    def __init__(
        self,
        *,
        family: str,
        arm,
        target_file,
        draft_file=None,
        draft_name: str | None = None,
        lib_dir: str | None = None,
        worker_id: str | None = None,
        also_arms=(),
    ):
        t_load = time.perf_counter()
        arms = [arm, *also_arms]
        names = [a.name for a in arms]
        if len(set(names)) != len(names):
            raise UsageError(f"an arm is named twice among {', '.join(names)}")
        if len({a.gpu_layers for a in arms}) != 1:
            raise UsageError("the arms of one worker share the loaded models: they need one gpu_layers")
        speculative = any(a.speculative for a in arms)
        self.lib = runtime.load(lib_dir)
        self.family = family
        self.arm = arm
        self.arms = {a.name: a for a in arms}
        self.draft_name = draft_name if speculative else None
        self.target_file = target_file
        self.draft_file = draft_file if speculative else None
        self.worker_id = worker_id or f"{arm.name}-{os.getpid()}"
        ngl = 0 if arm.gpu_layers is None else int(arm.gpu_layers)
        self.target = runtime.Model(target_file.path, sha256=target_file.sha256, n_gpu_layers=ngl)
        self.draft = None
        if speculative:
            if draft_file is None:
                raise UsageError(
                    f"arm {next(a.name for a in arms if a.speculative)} is speculative: a draft model is needed"
                )
            self.draft = runtime.Model(draft_file.path, sha256=draft_file.sha256, n_gpu_layers=ngl)
        self.runners = {a.name: ArmRunner(a, self.target, self.draft) for a in arms}
        self.traces = {n: CycleTrace(r.tctx) for n, r in self.runners.items() if r.arm.speculative}
        self.load_s = time.perf_counter() - t_load
        self.started_utc = utc_now()
        self.served = 0
        self.warmup: dict = {"done": False}  # the first arm's; every arm's in ``warmups``
        self.warmups: dict[str, dict] = {}

    @property
    def paired(self) -> bool:
        """Whether the process serves several arms (the paired design)."""
        return len(self.arms) > 1

    def model_name(self, arm) -> str:
        return f"{self.family}/{arm.name}" + (f"+{self.draft_name}" if arm.speculative and self.draft_name else "")

    def identity(self) -> dict:
        models = {"target": {"path": str(self.target_file.path), "sha256": self.target_file.sha256}}
        if self.draft_file is not None:
            models["draft"] = {
                "name": self.draft_name,
                "path": str(self.draft_file.path),
                "sha256": self.draft_file.sha256,
            }
        paired = {"arms": {n: a.record() for n, a in self.arms.items()}} if self.paired else {}
        return {
            **paired,
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "family": self.family,
            "arm": self.arm.name,
            "arm_record": self.arm.record(),
            "draft": self.draft_name,
            "models": models,
            "lib_dir": os.environ.get("LLAMA_CPP_LIB_PATH"),
            "python": sys.version.split()[0],
            "prompt_cache": False,
            "placement": self.placement(),
        }

    def placement(self) -> dict:
        """Where the weights actually are (from llama.cpp's load log and ggml's device registry)."""
        out = {
            "target": {k: v for k, v in self.target.placement.items() if k != "devices"},
            "devices": self.target.placement["devices"],
        }
        if self.draft is not None:
            out["draft"] = {k: v for k, v in self.draft.placement.items() if k != "devices"}
        return out

    # ---------------------------------------------------------------- requests
    def tokenize(self, text: str, chat: bool) -> list[int]:
        s = self.target.chat_prompt(text) if chat else text
        return self.target.tokenize(s, add_special=True, parse_special=True)

    def prompt_ids(self, prompt: Any, chat: bool) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise HTTPError(400, "prompt is empty", param="prompt")
            return self.tokenize(prompt, chat)
        if isinstance(prompt, list):
            if not prompt:
                raise HTTPError(400, "prompt is an empty list", param="prompt")
            if all(type(x) is int for x in prompt):
                if chat:
                    raise HTTPError(422, "refspec.chat applies to a text prompt, not to token IDs", param="refspec")
                nv = self.target.n_vocab
                bad = [x for x in prompt if not 0 <= x < nv]
                if bad:
                    raise HTTPError(
                        400, f"prompt token {bad[0]} is outside the vocabulary (0..{nv - 1})", param="prompt"
                    )
                return list(prompt)
            raise HTTPError(
                422,
                "prompt must be one string or one list of token IDs (batches of prompts are not supported)",
                param="prompt",
            )
        raise HTTPError(400, "prompt must be a string or a list of token IDs", param="prompt")

    def check_request(self, body: Any) -> tuple[list[int], int, dict]:
        if not isinstance(body, dict):
            raise HTTPError(400, "the request body must be a JSON object")
        for k in body:
            if k not in _FREE and k not in _NEUTRAL:
                raise HTTPError(422, f"unsupported field {k!r}", param=k)
        for k, allowed in _NEUTRAL.items():
            if k in body and not _same_value(body[k], allowed):
                what = {
                    "temperature": "only greedy decoding (temperature 0) is supported",
                    "n": "only one choice per request (n = 1) is supported",
                    "best_of": "only best_of = 1 is supported",
                    "stream": "streaming is not supported (stream must be false)",
                }.get(k, f"only {allowed[0]!r} is supported")
                raise HTTPError(422, f"{k} = {json.dumps(body[k])}: {what}", param=k)
        if "model" in body and not isinstance(body["model"], str):
            raise HTTPError(400, "model must be a string", param="model")
        ext = body.get("refspec", {})
        if not isinstance(ext, dict):
            raise HTTPError(400, "refspec must be an object", param="refspec")
        for k in ext:
            if k not in _REFSPEC_FIELDS:
                raise HTTPError(422, f"unsupported field refspec.{k}", param=f"refspec.{k}")
        chat = ext.get("chat", False)
        if not isinstance(chat, bool):
            raise HTTPError(400, "refspec.chat must be true or false", param="refspec.chat")
        if "request_id" in ext and not isinstance(ext["request_id"], str):
            raise HTTPError(400, "refspec.request_id must be a string", param="refspec.request_id")
        arm = self.request_arm(body, ext)
        if "prompt" not in body:
            raise HTTPError(400, "prompt is required", param="prompt")
        cap = body.get("max_tokens", arm.cap)
        if type(cap) is not int or cap < 1:
            raise HTTPError(400, "max_tokens must be a positive integer", param="max_tokens")
        ids = self.prompt_ids(body["prompt"], chat)
        need = len(ids) + cap + arm.k + 1
        if need > arm.n_ctx:
            raise HTTPError(
                400,
                f"prompt of {len(ids)} tokens plus max_tokens {cap} (and {arm.k + 1} "
                f"verification rows) needs {need} positions; the context holds {arm.n_ctx}",
                param="prompt",
                type_="context_length_exceeded",
            )
        return ids, cap, {**ext, "arm": arm.name}

    def request_arm(self, body: dict, ext: dict):
        """The arm a request names (``refspec.arm``, else a ``model`` that is one of the arms' names),
        or the first arm; a paired worker refuses a request whose two names disagree."""
        named = ext.get("arm")
        if named is not None and not isinstance(named, str):
            raise HTTPError(400, "refspec.arm must be a string", param="refspec.arm")
        model = body.get("model")
        if named is None and model in self.arms:
            named = model
        elif named is not None and model in self.arms and model != named:
            raise HTTPError(422, f"model {model!r} and refspec.arm {named!r} name different arms", param="refspec.arm")
        if named is None:
            return self.arm
        if named not in self.arms:
            raise HTTPError(
                422,
                f"this worker serves {', '.join(self.arms)}, not {named!r}",
                param="refspec.arm",
                type_="unknown_arm",
            )
        return self.arms[named]

    def complete(self, body: Any) -> dict:
        ids, cap, ext = self.check_request(body)
        return self._run(ids, cap, ext.get("request_id"), self.arms[ext["arm"]])

    def _run(self, ids: list[int], cap: int, request_id: str | None, arm, *, count: bool = True) -> dict:
        trace = self.traces.get(arm.name)
        if trace is not None:
            trace.reset()
        t0 = time.perf_counter_ns()
        res = self.runners[arm.name].run(ids, cap)
        engine_ns = time.perf_counter_ns() - t0
        ep = res.endpoint
        flat = res.stats.flat()
        evidence = None
        if trace is not None:
            evidence = trace.summary(res.stats)
        index = self.served if count else -1
        if count:
            self.served += 1
        margins = [float(m) if math.isfinite(m) else None for m in res.margins]
        return {
            "id": f"cmpl-{os.getpid()}-{index}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name(arm),
            "choices": [
                {
                    "index": 0,
                    "text": self.target.detokenize(list(ep.tokens)),
                    "finish_reason": "stop" if ep.stop_reason == "eog" else "length",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": ep.n, "total_tokens": len(ids) + ep.n},
            "refspec": {
                "request_id": request_id,
                "request_index": index,
                "worker_id": self.worker_id,
                "pid": os.getpid(),
                "arm": arm.record(),
                "draft": self.draft_name if arm.speculative else None,
                "prompt_sha256": sha256_json(ids),
                "prompt_tokens": len(ids),
                "cap": cap,
                "tokens": list(ep.tokens),
                "endpoint": {**ep.record(), "sha256": ep.sha256},
                "counters": flat,
                "acceptance": res.stats.acceptance,
                "margins": margins,
                "evidence": evidence,
                "engine_ns": engine_ns,
                "prompt_cache": False,
            },
        }

    def run_warmup(self, cap: int = WARMUP_CAP) -> dict:
        """Every arm's registered warmup, in the order the arms were given; returns the first arm's."""
        ids = self.tokenize(WARMUP_TEXT, chat=True)
        for arm in self.arms.values():
            t0 = time.perf_counter_ns()
            out = self._run(ids, cap, "warmup", arm, count=False)
            r = out["refspec"]
            self.warmups[arm.name] = {
                "done": True,
                "text": WARMUP_TEXT,
                "chat": True,
                "prompt_sha256": r["prompt_sha256"],
                "prompt_tokens": r["prompt_tokens"],
                "cap": cap,
                "endpoint": r["endpoint"],
                "counters": r["counters"],
                "engine_ns": r["engine_ns"],
                "wall_ns": time.perf_counter_ns() - t0,
            }
        self.warmup = self.warmups[self.arm.name]
        return self.warmup

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()
