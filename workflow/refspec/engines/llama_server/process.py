"""llama.cpp's own server as an engine (``kind: server``, ``anc/servers.md``).

A server arm is qualified and timed like refspec's own arms: :func:`start_server` is what
:func:`refspec.engine.launcher.start_process` runs for it, and the :class:`ServerProcess` it returns is
an arm's process (:class:`refspec.engine.process.ArmProcess`: ``complete``, ``alive``, ``stop``, ``kill``, ...), so
:func:`refspec.engine.driver.run_block` journals, ledgers and retries its requests the same way.

- ``server.build: stock | patched``: refspec starts ``llama-server`` of the pinned source
  (:func:`refspec.native.build.build_server`) on a free loopback port, fresh for every block, with
  the scrubbed worker environment (:func:`refspec.engine.spawn.process_env`) plus
  ``LLAMA_ATTN_LAYOUT`` when the arm names one; it waits for ``/health`` (``ready_timeout_s``)
  and keeps the server's log in ``workers/<id>.log``.
- ``server.url``: an existing server on a loopback address. refspec neither starts nor stops
  it, so fresh processes cannot be guaranteed; the ledger and the summary say so.

Before a server is timed: the URL must be loopback, ``/props`` must report one slot (and,
for a started server, the target file refspec gave it), and its vocabulary must be the
reference model's (``/v1/models`` size and type, and ``/detokenize`` of a sample of token
IDs spread over the whole vocabulary plus every prompt ID of the panel must equal the
reference model's pieces). A registered warmup request follows (an excluded row).

Requests go to llama.cpp's native ``/completion``: prompt as token IDs, ``n_predict`` = cap,
greedy (``temperature`` 0, ``top_k`` 1), ``cache_prompt`` false, ``return_tokens`` true. The
endpoint (IDs, EOG flag, length, stop reason) is built from ``tokens`` and ``stop_type``
exactly as for refspec's own arms (:class:`refspec.core.endpoint.Endpoint`). A response without
token IDs, with a stop other than EOG or the cap, or inconsistent with its own counts, is
refused (:class:`ServerRefused`, exit 5): the attempt is recorded as failed and nothing is
scored from it. Time is the complete HTTP request (submit to parsed, validated response).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...core.arms import Arm
from ...core.errors import UsageError
from ...engine.client import get_json
from ...engine.context import RunContext
from ...engine.server import (
    ENV_LAYOUT,
    ServerProcess,
    ServerRefused,
    Vocabulary,
    check_loopback,
    free_port,
    piece_problems,
    reference_vocabulary,
    start_checked,
    wait_health,
)
from ...engine.spawn import spawn
from ...native import build as native
from ...native.cmake import BUILD_RECORD
from .cli import ServerOptions, probe_binary, server_command


def vocabulary_problems(base_url: str, ref: Vocabulary, prompt_ids: list[int]) -> list[str]:
    """How the server's tokenizer differs from the reference (empty: the same vocabulary)."""
    problems = []
    models = get_json(base_url + "/v1/models")
    metas = [m.get("meta") or {} for m in models.get("data") or [] if isinstance(m, dict)]
    if not metas:
        return ["/v1/models lists no model"]
    meta = metas[0]
    if meta.get("n_vocab") != ref.n_vocab:
        problems.append(f"vocabulary size {meta.get('n_vocab')} != the reference's {ref.n_vocab}")
    if meta.get("vocab_type") != ref.vocab_type:
        problems.append(f"vocabulary type {meta.get('vocab_type')} != the reference's {ref.vocab_type}")
    if problems:
        return problems
    return piece_problems(base_url, ref, prompt_ids)


def _server_build(ctx: RunContext, variant: str):
    rec = json.loads((Path(ctx.lib_dir).parent.parent / BUILD_RECORD).read_text())
    opts = native.BuildOptions(**rec["options"])
    return native.build_server(opts, variant, quiet=True)


def _start_binary(ctx: RunContext, arm: Arm, wid: str, wdir: Path, ready: dict):
    """Start the arm's server (a build of the pinned source, or a user's binary of any version) on a
    free loopback port; (url, process, log path, the binary's :class:`ServerOptions`)."""
    s = arm.settings
    if s.binary is not None:
        binary = Path(s.binary).expanduser().resolve()
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise UsageError(f"arm {arm.name}: server.binary {s.binary} is not an executable file")
        lib_dir = binary.parent
        probe = probe_binary(binary, lib_dir)
        opts = probe["options"]
        ident = {
            "binary": str(binary),
            "binary_sha256": probe["sha256"],
            "version": probe["version"],
            "help_sha256": probe["help_sha256"],
            "options": opts.record(),
        }
    else:
        build = _server_build(ctx, s.build)
        binary, lib_dir, opts = build.tool("llama-server"), build.lib_dir, ServerOptions()
        ident = {"build_key": build.key, "binary_sha256": build.record["files"]["llama-server"]["sha256"]}
    draft = ctx.files.draft(ctx.draft).path if arm.speculative else None
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    slot_dir = None
    if draft is not None and opts.legacy_draft:
        slot_dir = wdir / f"{wid}.slots"
        slot_dir.mkdir(parents=True, exist_ok=True)
    cmd = server_command(binary, arm, ctx.files.target.path, draft, port, opts, slot_dir)
    extra = {ENV_LAYOUT: s.attn_layout} if s.attn_layout is not None else None
    log_path = wdir / f"{wid}.log"
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        if extra:
            log.write(f"  with {ENV_LAYOUT}={s.attn_layout}\n".encode())
    proc = spawn(cmd, lib_dir, arm.threads, log_path=log_path, cwd=wdir, extra=extra)
    wait_health(url, proc, s.ready_timeout_s, log_path, wid)
    ready.update({"url": url, "fresh": True, "command": cmd, "env": extra or {}, **ident})
    if slot_dir is not None:
        ready["prompt_cache"] = "legacy draft path: cache_prompt true with a slot erase before every request"
    return url, proc, log_path, opts


def open_server(ctx: RunContext, arm: Arm, wid: str) -> ServerProcess:
    """Start (or attach to) the arm's server and check it; :class:`ServerRefused` when it cannot be timed."""
    s = arm.settings
    ref = reference_vocabulary(ctx.files.target.path, ctx.files.target.sha256, Path(ctx.lib_dir))
    prompt_ids = sorted({t for ids in (ctx.prompts.ids.values() if ctx.prompts else []) for t in ids})
    wdir = Path(ctx.out_dir).resolve() / "workers"
    wdir.mkdir(parents=True, exist_ok=True)
    proc = None
    log_path = None
    opts = None
    ready: dict = {"arm": arm.name, "arm_record": arm.record(), "prompt_cache": False, "placement": None}
    if s.url is not None:
        url = check_loopback(s.url)
        try:
            get_json(url + "/health", timeout=min(10.0, s.ready_timeout_s))
        except Exception as e:
            raise ServerRefused(f"server {wid} at {url} does not answer /health: {e}") from e
        ready.update({"url": url, "fresh": False, "command": None})
    else:
        url, proc, log_path, opts = _start_binary(ctx, arm, wid, wdir, ready)
    try:
        props = get_json(url + "/props")
        problems = []
        if props.get("total_slots") != 1:
            problems.append(f"the server has {props.get('total_slots')} slots, not 1 (start it with -np 1)")
        if proc is not None and props.get("model_path") != str(ctx.files.target.path):
            problems.append(f"the server loaded {props.get('model_path')}, not {ctx.files.target.path}")
        problems += vocabulary_problems(url, ref, prompt_ids)
        if problems:
            raise ServerRefused(f"server {wid} ({url}) refused: " + "; ".join(problems))
    except BaseException:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    ready["props"] = {k: props.get(k) for k in ("model_path", "total_slots", "build_info")}
    ready["vocabulary"] = {"n_vocab": ref.n_vocab, "vocab_type": ref.vocab_type, "checked": True}
    w = ServerProcess(wid, arm, url, proc, log_path, ready, ref, legacy_draft=bool(opts and opts.legacy_draft))
    w.tokenizer = (ctx.files.target.path, ctx.files.target.sha256, Path(ctx.lib_dir))
    return w


def start_server(ctx: RunContext, arm: Arm, block: int) -> tuple[ServerProcess, dict]:
    """Start, check, warm up and record a server arm's server (its engine's launcher)."""
    return start_checked(ctx, arm, block, open_server)
