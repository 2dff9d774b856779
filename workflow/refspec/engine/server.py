"""The server interface: how refspec times an engine that answers llama.cpp's server protocol.

Every engine but refspec's own worker is asked through it (``refspec/engines/``: llama-server, and
the engines whose own program speaks it, :mod:`refspec.engines.loopback_http`). The
:class:`ServerProcess` an engine's launcher returns is an arm's process
(:class:`refspec.engine.process.ArmProcess`: ``complete``, ``alive``, ``stop``, ``kill``, ...), so
:func:`refspec.engine.driver.run_block` journals, ledgers and retries its requests the same way.

:func:`open_program` starts an engine's program on a free loopback port with the scrubbed worker
environment (:func:`refspec.engine.spawn.process_env`), waits for ``/health`` and keeps its log in
``workers/<id>.log``. Before a process is timed: ``/props`` must report one slot and the target
file refspec gave it, and its vocabulary must be the reference model's (its size, and
``/detokenize`` of a sample of token IDs spread over the whole vocabulary plus every prompt ID of
the panel must equal the reference model's pieces). :func:`start_checked` then ledgers its start
and runs a registered warmup request (an excluded row).

Requests go to ``/completion``: prompt as token IDs, ``n_predict`` = cap, greedy (``temperature``
0, ``top_k`` 1), ``cache_prompt`` false, ``return_tokens`` true. The endpoint (IDs, EOG flag,
length, stop reason) is built from ``tokens`` and ``stop_type`` exactly as for refspec's own arms
(:class:`refspec.core.endpoint.Endpoint`). A response without token IDs, with a stop other than EOG
or the cap, or inconsistent with its own counts, is refused (:class:`ServerRefused`, exit 5): the
attempt is recorded as failed and nothing is scored from it. Time is the complete HTTP request
(submit to parsed, validated response).
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..core.arms import Arm
from ..core.endpoint import Endpoint
from ..core.errors import EXIT_RUNTIME, RefspecError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_json
from ..native.runtime import Model
from .client import get_json, send_json
from .context import RunContext, ledger_line, record
from .errors import InvalidResponse
from .process import WARMUP_TASK, Completion
from .rows import request_row, warmup_record
from .spawn import describe_exit, log_tail, spawn

ENV_LAYOUT = "LLAMA_ATTN_LAYOUT"
_VOCAB_SAMPLE = 2048


class ServerRefused(RefspecError):
    """A server arm refused before timing: not loopback, no health in time, another vocabulary (exit 5).

    Deterministic, so never retried: :func:`start_server` ledgers it as a failed attempt and the
    campaign stops with this message.
    """

    exit_code = EXIT_RUNTIME


class ResponseRefused(InvalidResponse):
    """A server response that cannot give a complete endpoint: no token IDs, odd stop, wrong counts (exit 5)."""

    exit_code = EXIT_RUNTIME


# --------------------------------------------------------------------------- small helpers


def check_loopback(url: str) -> str:
    """The URL without a trailing slash; refused unless its host is a loopback address."""
    u = urllib.parse.urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ServerRefused(f"server URL {url!r} is not an http(s) URL")
    host = u.hostname
    ok = host == "localhost"
    if not ok:
        try:
            ok = ipaddress.ip_address(host).is_loopback
        except ValueError:
            ok = False
    if not ok:
        raise ServerRefused(
            f"server URL {url!r} is not on a loopback address (127.0.0.0/8, ::1 or localhost): "
            "refspec times requests on this host only"
        )
    return url.rstrip("/")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the reference vocabulary


@dataclass
class Vocabulary:
    """What a server's tokenizer must agree with: the reference target's vocabulary."""

    n_vocab: int
    vocab_type: int
    eog: frozenset
    pieces: dict  # token ID -> piece bytes (special tokens rendered), for the probe

    def probe_ids(self, extra: list[int] | None = None) -> list[int]:
        step = max(1, self.n_vocab // _VOCAB_SAMPLE)
        ids = set(range(0, self.n_vocab, step)) | {self.n_vocab - 1} | set(extra or [])
        return [i for i in sorted(ids) if 0 <= i < self.n_vocab and self.piece(i) is not None]

    def piece(self, i: int) -> str | None:
        raw = self.pieces.get(i)
        try:
            return None if raw is None else raw.decode("utf-8")
        except UnicodeDecodeError:  # partial byte tokens cannot travel in JSON text: not probed
            return None


_VOCABS: dict[str, Vocabulary] = {}


def reference_vocabulary(target_path: Path, sha256: str, lib_dir: Path) -> Vocabulary:
    """The reference target's vocabulary, read with the native build (once per process and file)."""
    if sha256 in _VOCABS:
        return _VOCABS[sha256]
    m = Model(target_path, sha256=sha256, lib_dir=lib_dir)
    try:
        lib = m._l
        buf = ctypes.create_string_buffer(256)
        pieces = {}
        for i in range(m.n_vocab):
            n = lib.llama_token_to_piece(m.vocab, i, buf, len(buf), 0, True)
            if n >= 0:
                pieces[i] = buf.raw[:n]
        eog = frozenset(i for i in range(m.n_vocab) if m.is_eog(i))
        v = Vocabulary(n_vocab=int(m.n_vocab), vocab_type=int(lib.llama_vocab_type(m.vocab)), eog=eog, pieces=pieces)
    finally:
        m.close()
    _VOCABS[sha256] = v
    return v


def piece_problems(base_url: str, ref: Vocabulary, prompt_ids: list[int]) -> list[str]:
    """How the server's ``/detokenize`` of a sample of the vocabulary (and every prompt ID) differs
    from the reference's pieces (empty: it does not)."""
    problems = []
    ids = ref.probe_ids(prompt_ids)
    _, raw = send_json("POST", base_url + "/detokenize", {"tokens": ids})
    got = json.loads(raw).get("content")
    want = "".join(ref.piece(i) for i in ids)
    if got != want:
        # name the first token whose piece differs
        for i in ids:
            _, r1 = send_json("POST", base_url + "/detokenize", {"tokens": [i]})
            if json.loads(r1).get("content") != ref.piece(i):
                problems.append(
                    f"token {i} is {json.loads(r1).get('content')!r} on the server, {ref.piece(i)!r} in the reference"
                )
                break
        else:
            problems.append("the detokenized probe of the vocabulary differs from the reference")
    return problems


# --------------------------------------------------------------------------- the worker-shaped server


class ServerProcess:
    """A server arm's server: an :class:`refspec.engine.process.ArmProcess`."""

    def __init__(
        self,
        worker_id: str,
        arm: Arm,
        url: str,
        proc: subprocess.Popen | None,
        log_path: Path | None,
        ready: dict,
        vocab: Vocabulary,
        legacy_draft: bool = False,
    ):
        self.worker_id = worker_id
        self.arm = arm
        self.url = url
        self.proc = proc
        self.pid = proc.pid if proc is not None else None
        self.log_path = log_path
        self.ready = ready
        self.vocab = vocab
        # an older server's draft path runs only with cache_prompt true: a slot erase before each request
        self.legacy_draft = bool(self.arm.speculative and legacy_draft and proc is not None)
        self.next_index = 0
        self.tokenizer: tuple | None = None  # (target path, sha256, lib dir): see tokenize

    @property
    def placement(self) -> dict | None:
        return self.ready.get("placement")

    @property
    def fresh(self) -> bool:
        return self.proc is not None

    # ---------------------------------------------------------------- lifecycle
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        try:
            get_json(self.url + "/health", timeout=5.0)
            return True
        except Exception:
            return False

    def wait_exit(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None  # an existing server is not ours to stop
        if self.proc.poll() is None:
            self.proc.terminate()
            if self.wait_exit(timeout) is None:
                self.proc.kill()
        return self.proc.wait()

    def kill(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait()

    def describe_exit(self) -> str:
        if self.proc is None:
            return "an existing server (not started by refspec)"
        return describe_exit(self.proc.poll())

    def tokenize(self, text: str, chat: bool = True, timeout: float = 60.0) -> list[int]:
        """Prompt token IDs for a campaign whose reference is a server: tokenized in process with the
        pinned tokenizer of the target file (the chat template embedded in it), then checked against
        the server's own ``/tokenize`` of the same text; a difference refuses the server."""
        if self.tokenizer is None:
            raise ServerRefused(
                "prompt token IDs come from refspec's own reference worker or the pinned tokenizer, "
                "never from a server at a URL alone: run the reference first in every session"
            )
        path, sha, lib_dir = self.tokenizer
        m = Model(path, sha256=sha, lib_dir=lib_dir)
        try:
            prompt = m.chat_prompt(text) if chat else text
            ids = m.tokenize(prompt, add_special=True, parse_special=True)
        finally:
            m.close()
        body = {"content": prompt, "add_special": True, "parse_special": True}
        _, raw = send_json("POST", self.url + "/tokenize", body, timeout=timeout)
        got = json.loads(raw).get("tokens")
        if got != ids:
            i = next((j for j, (a, b) in enumerate(zip(ids, got or [])) if a != b), min(len(ids), len(got or [])))
            raise ServerRefused(
                f"server {self.worker_id} tokenizes a prompt differently from the pinned tokenizer "
                f"(first difference at index {i} of {len(ids)}): its vocabulary or template differs"
            )
        return ids

    # ---------------------------------------------------------------- requests
    def request_body(self, prompt_ids: list[int], cap: int) -> dict:
        return {
            "prompt": [int(t) for t in prompt_ids],
            "n_predict": int(cap),
            "temperature": 0,
            "top_k": 1,
            "cache_prompt": self.legacy_draft,
            "return_tokens": True,
            "stream": False,
            "seed": 0,
            "n_probs": 0,
        }

    def erase_slot(self) -> dict:
        """Erase slot 0 (an older server's draft path reuses the cached prefix otherwise)."""
        try:
            _, raw = send_json("POST", self.url + "/slots/0?action=erase", {}, timeout=60.0)
            return json.loads(raw)
        except Exception as e:  # no erase: the request would reuse the previous prompt's cache
            raise ResponseRefused(f"slot erase before the request failed: {e}") from e

    def complete(self, prompt_ids: list[int], cap: int, *, request_id: str | None = None, timeout: float = 600.0):
        """One timed request: submit -> parsed, validated response with a complete endpoint."""
        data = self.request_body(prompt_ids, cap)
        erased = self.erase_slot() if self.legacy_draft else None  # not timed
        t0 = time.perf_counter_ns()
        _status, raw = send_json("POST", self.url + "/completion", data, timeout=timeout)
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ResponseRefused(f"response is not JSON: {e}") from e
        ep, counters, notes = endpoint_from_response(
            obj,
            n_prompt=len(prompt_ids),
            cap=cap,
            eog=self.vocab.eog,
            speculative=self.arm.speculative,
            legacy_draft=self.legacy_draft,
            with_notes=True,
        )
        t1 = time.perf_counter_ns()
        self.next_index += 1
        acc = (counters["accepted"] / counters["proposals"]) if counters.get("proposals") else None
        extra = {
            "engine_ns": None,
            "acceptance": acc,
            "request_id": request_id,
            "server": {"url": self.url, "pid": self.pid, "timings": obj.get("timings")},
        }
        if self.legacy_draft:
            notes = {
                "draft_path": "legacy: cache_prompt true, slot erased before the request",
                "erase": erased,
                **notes,
            }
        if notes:
            extra["server_notes"] = notes
        return Completion(t1 - t0, ep, None, counters, None, {"refspec": extra, "server": obj})


def endpoint_from_response(
    obj, *, n_prompt: int, cap: int, eog: frozenset, speculative: bool, legacy_draft: bool = False, with_notes=False
):
    """The complete endpoint of a ``/completion`` response and its counters; refused when incomplete.

    ``legacy_draft`` (an older server's draft path, ``anc/servers.md``): such a server counts every
    accepted draft token in ``tokens_predicted`` before it checks the stop, so the count may exceed
    the IDs (EOG inside an accepted run) and a request may end a few IDs before the cap with
    ``stop_type`` ``limit``. The IDs are then taken as they are: the count difference is noted, and
    a stop short of the cap stays short (``notes['short_of_cap']``): its endpoint has fewer IDs
    than the reference's and so does not match it. Nothing is padded or re-requested.
    With ``with_notes`` the notes are returned third."""
    notes: dict = {}

    def need(cond, what):
        if not cond:
            raise ResponseRefused(f"server response refused: {what}")

    need(isinstance(obj, dict), "not a JSON object")
    toks = obj.get("tokens")
    need(
        isinstance(toks, list) and len(toks) > 0 and all(type(t) is int for t in toks),
        "no generated token IDs ('tokens' missing or empty: the server must support return_tokens)",
    )
    if legacy_draft and obj.get("tokens_predicted") != len(toks):
        notes["tokens_predicted"] = obj.get("tokens_predicted")
    else:
        need(
            obj.get("tokens_predicted") == len(toks),
            f"tokens_predicted {obj.get('tokens_predicted')} != {len(toks)} token IDs",
        )
    need(
        obj.get("tokens_evaluated") == n_prompt,
        f"tokens_evaluated {obj.get('tokens_evaluated')} != the prompt's {n_prompt} tokens",
    )
    stop = obj.get("stop_type")
    need(stop in ("eos", "limit"), f"stop_type {stop!r} (only EOG or the cap end a greedy request)")
    need(len(toks) <= cap, f"{len(toks)} tokens exceed the cap {cap}")
    need(not any(t in eog for t in toks[:-1]), "an EOG token before the last generated token")
    if stop == "eos":
        need(toks[-1] in eog, f"stop_type eos but the last token {toks[-1]} is not an EOG token")
        ep = Endpoint(tuple(toks), True, "eog")
    else:
        if legacy_draft and len(toks) < cap and toks[-1] not in eog:
            notes["short_of_cap"] = cap - len(toks)
        else:
            need(len(toks) == cap and toks[-1] not in eog, "stop_type limit before the cap")
        ep = Endpoint(tuple(toks), False, "cap")
    tm = obj.get("timings") or {}
    counters = {}
    if speculative:
        counters["proposals"] = int(tm.get("draft_n") or 0)
        counters["accepted"] = int(tm.get("draft_n_accepted") or 0)
    return (ep, counters, notes) if with_notes else (ep, counters)


# --------------------------------------------------------------------------- start (driver dispatch)


def wait_health(url: str, proc: subprocess.Popen, timeout: float, log_path: Path, wid: str) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        code = proc.poll()
        if code is not None:
            raise ServerRefused(
                f"server {wid} {describe_exit(code)} before it answered /health; last log lines:\n"
                f"{log_tail(log_path, 40)}"
            )
        try:
            st, raw = send_json("GET", url + "/health", timeout=2.0)
            if st == 200 and json.loads(raw).get("status") == "ok":
                return
            last = raw.decode("utf-8", "replace")[:200]
        except Exception as e:  # not listening yet, or loading (503)
            last = str(e)
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise ServerRefused(f"server {wid} did not answer /health within {timeout:g} s ({last}); log {log_path}")
        time.sleep(0.1)


def open_program(
    ctx: RunContext,
    arm: Arm,
    wid: str,
    command,
    *,
    cls: type[ServerProcess],
    ready_timeout_s: float,
    env: dict | None = None,
    ready: dict | None = None,
    who: str = "process",
) -> ServerProcess:
    """Start an engine's own program (``command(port)``: its command line on a free loopback port)
    under the scrubbed worker environment (:func:`refspec.engine.spawn.process_env`, plus ``env``),
    its log in ``workers/<id>.log``, and check it as a server arm is checked before it is timed: one
    slot, the target file refspec gave it, the reference's vocabulary size and pieces (every prompt
    ID among them); :class:`ServerRefused` when it cannot be timed. ``ready``: the engine's own
    entries of the ready record (placement, engine, ...)."""
    ref = reference_vocabulary(ctx.files.target.path, ctx.files.target.sha256, Path(ctx.lib_dir))
    prompt_ids = sorted({t for ids in (ctx.prompts.ids.values() if ctx.prompts else []) for t in ids})
    wdir = Path(ctx.out_dir).resolve() / "workers"
    wdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(c) for c in command(port)]
    log_path = wdir / f"{wid}.log"
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        for k, v in sorted((env or {}).items()):
            log.write(f"  with {k}={v}\n".encode())
    proc = spawn(cmd, ctx.lib_dir, arm.threads, log_path=log_path, cwd=wdir, extra=env)
    wait_health(url, proc, ready_timeout_s, log_path, wid)
    try:
        props = get_json(url + "/props")
        problems = []
        if props.get("total_slots") != 1:
            problems.append(f"the {who} has {props.get('total_slots')} slots, not 1")
        if props.get("model_path") != str(ctx.files.target.path):
            problems.append(f"the {who} names {props.get('model_path')}, not {ctx.files.target.path}")
        if props.get("n_vocab") != ref.n_vocab:
            problems.append(f"vocabulary size {props.get('n_vocab')} != the reference's {ref.n_vocab}")
        else:
            problems += piece_problems(url, ref, prompt_ids)
        if problems:
            raise ServerRefused(f"{who} {wid} ({url}) refused: " + "; ".join(problems))
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    rec = {
        "arm": arm.name,
        "arm_record": arm.record(),
        "prompt_cache": False,
        "url": url,
        "fresh": True,
        "command": cmd,
        **(ready or {}),
        "props": {k: props.get(k) for k in ("model_path", "total_slots", "build_info")},
        "vocabulary": {"n_vocab": ref.n_vocab, "vocab_type": None, "checked": True},
    }
    rec["engine"] = {**rec.get("engine", {}), **props.get("engine", {})}
    w = cls(wid, arm, url, proc, log_path, rec, ref)
    w.tokenizer = (ctx.files.target.path, ctx.files.target.sha256, Path(ctx.lib_dir))
    return w


def start_checked(ctx: RunContext, arm: Arm, block: int, opener) -> tuple[ServerProcess, dict]:
    """``opener(ctx, arm, worker_id)`` starts and checks the process (:class:`ServerRefused` when it
    cannot be timed); then its start is ledgered and its registered warmup run and recorded (an
    excluded row). Every arm served through the server interface (a llama.cpp server, an engine's own
    GenAI process) starts here."""
    wid = ctx.next_worker_id(arm.name)
    try:
        w = opener(ctx, arm, wid)
    except ServerRefused as e:
        ledger_line(ctx, "failure", f"server refused: {e}", worker=wid, arm=arm.name, block=block, outcome="failed")
        raise
    ledger_line(
        ctx,
        "worker_start",
        "fresh server for a block"
        if w.fresh
        else "existing server at a loopback URL: not started by refspec, fresh process not guaranteed",
        worker=wid,
        arm=arm.name,
        block=block,
        pid=w.pid,
        url=w.url,
        identity_sha256=sha256_json({k: w.ready.get(k) for k in ("arm_record", "command", "env", "props")}),
    )
    # registered warmup (excluded, not timed): the first prompt of the panel, cut short
    ids = next(iter(ctx.prompts.ids.values()))[:16] if ctx.prompts and ctx.prompts.ids else [0]
    cap = int(ctx.warmup_cap or 4)
    try:
        c = w.complete(ids, cap, request_id=f"{ctx.session}/{wid}/warmup")
    except Exception as e:
        w.kill()
        ledger_line(
            ctx,
            "failure",
            f"server refused: warmup request failed: {e}",
            worker=wid,
            arm=arm.name,
            block=block,
            outcome="failed",
        )
        raise ServerRefused(f"server {wid}: warmup request failed: {e}") from e
    w.next_index = 0
    psha = sha256_json(list(ids))
    row = request_row(
        ctx,
        arm,
        block=block,
        worker=wid,
        task_id=WARMUP_TASK,
        cap=cap,
        repeat=0,
        order_index=0,
        attempt=1,
        status="excluded_warmup",
        reason=f"registered warmup (prompt sha256 {psha[:16]}, not timed)",
        endpoint=c.endpoint,
        counters=c.counters,
    )
    ledger_line(
        ctx, "excluded_warmup", row["reason"], worker=wid, arm=arm.name, task_id=WARMUP_TASK, outcome="excluded"
    )
    rec = record(ctx, warmup_record(row, c.counters, psha))
    w.ready["warmup"] = {"done": True, "cap": cap, "prompt_sha256": psha, "endpoint": c.endpoint.record()}
    ready_path = Path(ctx.out_dir).resolve() / "workers" / f"{wid}.ready.json"
    atomic_write_text(ready_path, json.dumps(w.ready, indent=1, sort_keys=True, default=str) + "\n", mode=0o644)
    return w, rec
