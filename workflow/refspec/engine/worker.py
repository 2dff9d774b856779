"""A worker: one fresh process that serves timed requests for one arm.

``python -m refspec.engine.worker --family F --arm A [--draft D] --port 0 --ready-file PATH``

The worker loads the family's target (and, for speculative arms, the draft)
once, creates the arm's contexts (:class:`refspec.engine.transaction.ArmRunner`), runs
the registered warmup (:data:`WARMUP_TEXT`, chat-templated, :data:`WARMUP_CAP`
new tokens; recorded, never timed) and then serves a loopback HTTP endpoint
shaped like OpenAI's ``/v1/completions`` (non-streaming, greedy only). The
chosen port and the worker's identity are written atomically to the ready file
once the warmup is done; the driver waits for that file. The ready file (mode
0600) also holds the worker's secret: every request must carry it as
``Authorization: Bearer <secret>`` (what OpenAI clients send as their API key),
name the bound address in ``Host`` and, for a POST, be ``application/json``.

Each connection is read on its own thread, under one deadline for the request
line and headers and one for the body, so a slow client cannot hold up
``/health`` for the others. The secret is checked as soon as the headers are
in, before any body is read; a refused connection is answered and closed at
once. A connection that has not yet shown the secret may hold at most
:data:`HEADER_DEADLINE_S` seconds and :data:`MAX_HEADER_BYTES` bytes, and at most
:data:`MAX_UNAUTHENTICATED` such connections are kept (a new one closes the
oldest), so clients without the secret cannot delay the driver's requests.
Completions (and tokenization) are computed one at a time, in the order their
requests were read (a ticket queue): a completion that arrives while another is
computed waits; it is never answered 503 and never runs concurrently. There is
no prompt cache: every request starts from cleared KV caches
(``Context.begin_request``).

SIGTERM (or SIGINT) lets the in-flight request finish and its response go out,
then closes the listening socket and exits 0. The HTTP API, its errors, the
exit codes and the environment the driver gives a worker are documented in
``anc/worker.md``.
"""

from __future__ import annotations

import argparse
import hmac
import http.server
import io
import ipaddress
import json
import math
import os
import re
import secrets
import signal
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..core.clock import utc_now
from ..core.errors import EXIT_OK, RefspecError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_json

DEFAULT_MAX_BODY = 1 << 20  # bytes
DRAIN_LIMIT = 8 << 20  # authenticated: an oversized body up to this size is read and discarded before the 413
READ_TIMEOUT_S = 30.0  # the whole body must arrive within this many seconds after the headers
HEADER_DEADLINE_S = 10.0  # the request line and every header must arrive within this many seconds
MAX_HEADER_BYTES = 32 << 10  # request line and headers together
MAX_UNAUTHENTICATED = 128  # connections not yet admitted; a new one beyond this closes the oldest
REFUSED_WRITE_S = 2.0  # the answer to a refused connection is written within this time, or dropped
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")
_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) ([\x21-\x7e]{1,8192}) HTTP/(\d+)\.(\d+)\r?\n")

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
_REFSPEC_FIELDS = ("chat", "request_id")


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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


class Engine:
    """Models, the arm's runner and the request logic; independent of HTTP."""

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
    ):
        from ..native import runtime
        from .transaction import ArmRunner

        t_load = time.perf_counter()
        self.lib = runtime.load(lib_dir)
        self.family = family
        self.arm = arm
        self.draft_name = draft_name if arm.speculative else None
        self.target_file = target_file
        self.draft_file = draft_file if arm.speculative else None
        self.worker_id = worker_id or f"{arm.name}-{os.getpid()}"
        ngl = 0 if arm.gpu_layers is None else int(arm.gpu_layers)
        self.target = runtime.Model(target_file.path, sha256=target_file.sha256, n_gpu_layers=ngl)
        self.draft = None
        if arm.speculative:
            if draft_file is None:
                raise UsageError(f"arm {arm.name} is speculative: a draft model is needed")
            self.draft = runtime.Model(draft_file.path, sha256=draft_file.sha256, n_gpu_layers=ngl)
        self.runner = ArmRunner(arm, self.target, self.draft)
        self.trace = CycleTrace(self.runner.tctx) if arm.speculative else None
        self.load_s = time.perf_counter() - t_load
        self.started_utc = utc_now()
        self.served = 0
        self.warmup: dict = {"done": False}

    @property
    def model_name(self) -> str:
        return f"{self.family}/{self.arm.name}" + (f"+{self.draft_name}" if self.draft_name else "")

    def identity(self) -> dict:
        models = {"target": {"path": str(self.target_file.path), "sha256": self.target_file.sha256}}
        if self.draft_file is not None:
            models["draft"] = {
                "name": self.draft_name,
                "path": str(self.draft_file.path),
                "sha256": self.draft_file.sha256,
            }
        return {
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
        if "prompt" not in body:
            raise HTTPError(400, "prompt is required", param="prompt")
        cap = body.get("max_tokens", self.arm.cap)
        if type(cap) is not int or cap < 1:
            raise HTTPError(400, "max_tokens must be a positive integer", param="max_tokens")
        ids = self.prompt_ids(body["prompt"], chat)
        need = len(ids) + cap + self.arm.k + 1
        if need > self.arm.n_ctx:
            raise HTTPError(
                400,
                f"prompt of {len(ids)} tokens plus max_tokens {cap} (and {self.arm.k + 1} "
                f"verification rows) needs {need} positions; the context holds {self.arm.n_ctx}",
                param="prompt",
                type_="context_length_exceeded",
            )
        return ids, cap, ext

    def complete(self, body: Any) -> dict:
        ids, cap, ext = self.check_request(body)
        return self._run(ids, cap, ext.get("request_id"))

    def _run(self, ids: list[int], cap: int, request_id: str | None, *, count: bool = True) -> dict:
        if self.trace is not None:
            self.trace.reset()
        t0 = time.perf_counter_ns()
        res = self.runner.run(ids, cap)
        engine_ns = time.perf_counter_ns() - t0
        ep = res.endpoint
        flat = res.stats.flat()
        evidence = None
        if self.trace is not None:
            evidence = self.trace.summary(res.stats)
        index = self.served if count else -1
        if count:
            self.served += 1
        margins = [float(m) if math.isfinite(m) else None for m in res.margins]
        return {
            "id": f"cmpl-{os.getpid()}-{index}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
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
                "arm": self.arm.record(),
                "draft": self.draft_name,
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
        ids = self.tokenize(WARMUP_TEXT, chat=True)
        t0 = time.perf_counter_ns()
        out = self._run(ids, cap, "warmup", count=False)
        r = out["refspec"]
        self.warmup = {
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
        return self.warmup

    def close(self) -> None:
        self.runner.close()


# --------------------------------------------------------------------------- HTTP


def bearer_matches(value: str | None, secret: str) -> bool:
    """``value`` is ``Bearer <secret>`` (scheme case-insensitive; compared in constant time)."""
    if not value or not secret:
        return False
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode("utf-8", "replace"), secret.encode("utf-8"))


def is_json_media_type(value: str | None) -> bool:
    """``application/json``, optionally with ``charset=utf-8`` (any case); nothing else."""
    if not value:
        return False
    media, *params = [p.strip() for p in value.split(";")]
    if media.lower() != "application/json":
        return False
    for p in params:
        k, _, v = p.partition("=")
        if k.strip().lower() != "charset" or v.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False
    return True


class _DeadlineReader(io.RawIOBase):
    """The connection's reads, each bounded by what is left of the current deadline.

    A per-read socket timeout alone lets a client that sends one byte at a time
    hold a connection forever; here the request line and headers share one
    deadline (:data:`HEADER_DEADLINE_S`) and the body another (:data:`READ_TIMEOUT_S`).
    """

    def __init__(self, sock: socket.socket, deadline: float):
        super().__init__()
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline has passed")
        self.sock.settimeout(left)
        return self.sock.recv_into(b)


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "refspec-worker/1"
    protocol_version = "HTTP/1.0"  # one request per connection; the response closes it
    timeout = None  # reads are bounded by _DeadlineReader, writes by READ_TIMEOUT_S

    @property
    def app(self) -> WorkerServer:
        return self.server  # type: ignore[return-value]

    def setup(self):
        super().setup()
        self.requestline, self.request_version, self.command = "", "HTTP/1.0", None  # until a request line is read
        self._answered = False
        self._admitted = False
        self._phase = "headers"
        self._reader = _DeadlineReader(self.connection, time.monotonic() + HEADER_DEADLINE_S)
        old, self.rfile = self.rfile, io.BufferedReader(self._reader, 1 << 16)
        old.close()

    def finish(self):
        try:
            super().finish()
        finally:
            self.app.forget(self.connection)

    def log_message(self, fmt, *args):  # to the worker's log (stderr), with a UTC time
        sys.stderr.write(f"{utc_now()} {self.address_string()} {fmt % args}\n")

    def _send_json(self, status: int, obj: dict, headers: dict | None = None) -> None:
        data = json.dumps(obj, allow_nan=False, separators=(",", ":")).encode("utf-8")
        self._answered = True
        # the answer is written whatever is left of a read deadline; to a client without the secret only briefly
        self.connection.settimeout(READ_TIMEOUT_S if self._admitted else REFUSED_WRITE_S)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.close_connection = True

    def send_error(self, code, message=None, explain=None):  # JSON errors, also for malformed request lines
        try:
            self._send_json(
                code, HTTPError(code, message or self.responses.get(code, ("error",))[0], type_="http_error").body()
            )
        except Exception:
            self.close_connection = True

    def _error(self, e: HTTPError) -> None:
        headers = {"WWW-Authenticate": 'Bearer realm="refspec-worker"'} if e.status == 401 else None
        self._send_json(e.status, e.body(), headers)

    # ------------------------------------------------------------ one request
    def handle_one_request(self):
        """The standard library's loop body, with the deadlines, the admission checks and JSON errors.

        Until the secret is checked the connection may send at most :data:`MAX_HEADER_BYTES`
        within :data:`HEADER_DEADLINE_S`; a refused request is answered and the connection
        closed at once, its body (if any) never read.
        """
        self.close_connection = True  # one request per connection
        try:
            head = self._read_head()
            if head is None:
                return
            refused = self._parse_head(head)
            if self._answered:  # a malformed header, answered by parse_request
                return
            if refused is None:
                refused = self._admit()
            if refused is not None:
                return self._error(refused)  # no body is read: the connection is closed after the answer
            self._admitted = True
            self.app.forget(self.connection)
            self._phase = "body"
            self._reader.deadline = time.monotonic() + READ_TIMEOUT_S
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self._drain_body()
                return self._error(HTTPError(501, f"method {self.command} is not supported"))
            method()
            self.wfile.flush()
        except TimeoutError:
            if not self._answered:
                what = (
                    f"the request line and headers did not arrive within {HEADER_DEADLINE_S:g} s"
                    if self._phase == "headers"
                    else f"the body did not arrive within {READ_TIMEOUT_S:g} s"
                )
                self.log_message("%s", what)
                try:
                    self._error(HTTPError(408, what, type_="timeout"))
                except OSError:
                    pass
        except ConnectionError as e:  # the client went away (or its connection was closed to make room)
            self.log_message("connection ended: %s", type(e).__name__)

    def _read_head(self) -> list[bytes] | None:
        """The request line and header lines (to the empty line), at most :data:`MAX_HEADER_BYTES`.

        None when the connection ended first or the head was too large (then answered).
        """
        lines: list[bytes] = []
        left = MAX_HEADER_BYTES
        while True:
            line = self.rfile.readline(left + 1)
            if not line:
                return None  # the client closed (or the connection was closed to make room)
            left -= len(line)
            if left < 0:
                self._error(
                    HTTPError(431, f"request line and headers exceed {MAX_HEADER_BYTES} bytes", type_="too_large")
                )
                return None
            if not line.endswith(b"\n"):
                return None  # closed in the middle of a line
            lines.append(line)
            if len(lines) == 1 and not _REQUEST_LINE.fullmatch(line):
                return lines  # refused from the request line alone (an HTTP/0.9 request has no headers)
            if len(lines) > 1 and line in (b"\r\n", b"\n"):
                return lines

    def _parse_head(self, head: list[bytes]) -> HTTPError | None:
        """A strict request line (``METHOD TARGET HTTP/1.0`` or ``HTTP/1.1``), then the headers."""
        self.raw_requestline = head[0]
        m = _REQUEST_LINE.fullmatch(head[0])
        if m is None:
            self.requestline = head[0].decode("latin-1").rstrip("\r\n")[:200]
            if len(head[0].split()) == 2:
                return HTTPError(400, "HTTP/0.9 requests are not supported: send HTTP/1.0 or HTTP/1.1")
            return HTTPError(400, "malformed request line")
        if (m.group(3), m.group(4)) not in ((b"1", b"0"), (b"1", b"1")):
            return HTTPError(505, "only HTTP/1.0 and HTTP/1.1 are supported", type_="http_version_not_supported")
        self.rfile, real = io.BytesIO(b"".join(head[1:])), self.rfile
        try:
            ok = self.parse_request()
        finally:
            self.rfile = real
        self.request_version = "HTTP/1.0"  # what the answer says (one request per connection)
        self.close_connection = True
        if not ok and not self._answered:
            return HTTPError(400, "malformed request")
        return None

    def _admit(self) -> HTTPError | None:
        """Host, Origin and the bearer secret: every request, before anything else is looked at."""
        app = self.app
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1:
            return HTTPError(400, f"exactly one Host header is required ({app.authority})", type_="invalid_host")
        if hosts[0].strip().lower() != app.authority:
            return HTTPError(
                421, f"Host {hosts[0][:100]!r} is not this worker's address {app.authority}", type_="invalid_host"
            )
        if self.headers.get("Origin") is not None:
            return HTTPError(403, "requests with an Origin header (from web pages) are refused", type_="forbidden")
        auths = self.headers.get_all("Authorization") or []
        if len(auths) != 1 or not bearer_matches(auths[0], app.secret):
            return HTTPError(
                401,
                "missing or wrong secret: send 'Authorization: Bearer <secret>' with the secret "
                "from the worker's ready file",
                type_="authentication_error",
            )
        return None

    # ------------------------------------------------------------ routing
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/health":
            return self._send_json(200, self.app.health())
        if path == "/v1/models":
            eng = self.app.engine
            return self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": eng.model_name, "object": "model", "created": 0, "owned_by": "refspec"}],
                },
            )
        if path in ("/v1/completions", "/refspec/tokenize"):
            return self._error(HTTPError(405, f"{path} takes POST"))
        return self._error(HTTPError(404, f"no such path: {path}"))

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/completions", "/refspec/tokenize"):
            self._drain_body()
            return self._error(HTTPError(404, f"no such path: {path}"))
        types = self.headers.get_all("Content-Type") or []
        if len(types) != 1 or not is_json_media_type(types[0]):
            self._drain_body()
            got = ", ".join(repr(t[:100]) for t in types) or "none"
            return self._error(
                HTTPError(415, f"Content-Type must be application/json (got {got})", type_="unsupported_media_type")
            )
        try:
            body = self._read_json()
            with self.app.engine_turn:  # one at a time, in the order the requests were read
                if path == "/refspec/tokenize":
                    out = self._tokenize(body)
                else:
                    if self.app.stopping:
                        raise HTTPError(503, "the worker is shutting down", type_="unavailable")
                    out = self.app.engine.complete(body)
        except HTTPError as e:
            return self._error(e)
        except RefspecError as e:
            return self._error(HTTPError(500, f"{type(e).__name__}: {e}", type_="engine_error"))
        except TimeoutError:
            raise
        except Exception as e:  # keep serving; the log has the traceback
            import traceback

            traceback.print_exc()
            return self._error(HTTPError(500, f"internal error: {type(e).__name__}: {e}", type_="internal_error"))
        self._send_json(200, out)

    def do_PUT(self):
        self._drain_body()
        self._error(HTTPError(405, f"method {self.command} is not supported"))

    do_DELETE = do_PATCH = do_PUT

    # ------------------------------------------------------------ bodies
    def _content_length(self) -> int:
        if self.headers.get("Transfer-Encoding"):
            raise HTTPError(411, "chunked bodies are not supported: send Content-Length")
        cls = self.headers.get_all("Content-Length") or []
        if not cls:
            raise HTTPError(411, "Content-Length is required")
        if len(cls) > 1:
            raise HTTPError(400, f"exactly one Content-Length header is allowed (got {len(cls)})")
        cl = cls[0].strip(" \t")
        if not _CONTENT_LENGTH.fullmatch(cl):
            raise HTTPError(400, f"bad Content-Length {cls[0][:40]!r}: decimal digits only")
        return int(cl)

    def _drain_body(self) -> None:
        try:
            n = self._content_length()
        except HTTPError:
            return
        try:
            self._discard(n)
        except OSError:  # a body that does not arrive in time is not waited for: the answer goes out anyway
            pass

    def _discard(self, n: int) -> None:
        if n > DRAIN_LIMIT:
            return  # not read: the connection is closed after the answer
        while n > 0:
            chunk = self.rfile.read1(min(n, 1 << 16))
            if not chunk:
                break
            n -= len(chunk)

    def _read_json(self) -> Any:
        n = self._content_length()
        limit = self.app.max_body
        if n > limit:
            try:
                self._discard(n)
            except OSError:
                pass
            raise HTTPError(
                413, f"request body of {n} bytes exceeds the limit of {limit} bytes", type_="request_too_large"
            )
        try:
            raw = self.rfile.read(n)
        except TimeoutError:
            raise HTTPError(408, f"the body did not arrive within {READ_TIMEOUT_S:g} s", type_="timeout") from None
        if len(raw) != n:
            raise HTTPError(400, f"request body ended after {len(raw)} of {n} bytes")
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as e:
            raise HTTPError(400, f"malformed JSON: {e}") from None

    def _tokenize(self, body: Any) -> dict:
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise HTTPError(400, 'tokenize takes {"text": string, "chat": bool}')
        extra = set(body) - {"text", "chat"}
        if extra:
            raise HTTPError(422, f"unsupported field {sorted(extra)[0]!r}")
        chat = body.get("chat", False)
        if not isinstance(chat, bool):
            raise HTTPError(400, "chat must be true or false")
        ids = self.app.engine.tokenize(body["text"], chat)
        return {"tokens": ids, "n": len(ids), "chat": chat, "prompt_sha256": sha256_json(ids)}


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class TicketLock:
    """A first-come, first-served lock: holders get it in the order they asked for it."""

    def __init__(self):
        self._cv = threading.Condition()
        self._next = 0
        self._serving = 0

    def __enter__(self):
        with self._cv:
            ticket = self._next
            self._next += 1
            while self._serving != ticket:
                self._cv.wait()
        return self

    def __exit__(self, *exc):
        with self._cv:
            self._serving += 1
            self._cv.notify_all()
        return False


class WorkerServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Each connection is read on its own thread; the engine is used by one request at a time.

    ``server_close`` closes the listening socket and waits for every connection thread
    (each is bounded by its deadlines and, for a completion, by the decode).
    """

    allow_reuse_address = False
    request_queue_size = 128
    daemon_threads = False
    block_on_close = True

    def __init__(self, addr, *, max_body: int = DEFAULT_MAX_BODY, secret: str | None = None):
        self.engine: Engine | None = None
        self.max_body = max_body
        self.secret = secret or secrets.token_urlsafe(32)
        if ":" in str(addr[0]):
            self.address_family = socket.AF_INET6
        self.stopping = False
        self.engine_turn = TicketLock()
        self._active = 0
        self._active_lock = threading.Lock()
        self._unadmitted: dict[int, socket.socket] = {}  # id -> connection not yet admitted, oldest first
        super().__init__(addr, Handler, bind_and_activate=True)

    @property
    def authority(self) -> str:
        """What ``Host`` must say: the bound address and port."""
        host, port = self.server_address[:2]
        return f"{_url_host(host)}:{port}".lower()

    def active_connections(self) -> int:
        with self._active_lock:
            return self._active

    def forget(self, conn: socket.socket) -> None:
        """``conn`` is admitted (or finished): it no longer counts against :data:`MAX_UNAUTHENTICATED`."""
        with self._active_lock:
            if self._unadmitted.get(id(conn)) is conn:
                del self._unadmitted[id(conn)]

    def unadmitted_connections(self) -> int:
        with self._active_lock:
            return len(self._unadmitted)

    def process_request(self, request, client_address):
        with self._active_lock:
            while len(self._unadmitted) >= MAX_UNAUTHENTICATED:  # room for the new one: close the oldest
                _k, oldest = next(iter(self._unadmitted.items()))
                del self._unadmitted[_k]
                try:
                    oldest.shutdown(socket.SHUT_RDWR)  # its reader sees the end at once and its thread ends
                except OSError:
                    pass
            self._unadmitted[id(request)] = request
            self._active += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self._active_lock:
                self._active -= 1
                self._unadmitted.pop(id(request), None)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._active_lock:
                self._active -= 1

    def health(self) -> dict:
        eng = self.engine
        return {
            "status": "stopping" if self.stopping else ("ready" if eng and eng.warmup.get("done") else "loading"),
            "ready": bool(eng and eng.warmup.get("done") and not self.stopping),
            **(eng.identity() if eng else {"pid": os.getpid()}),
            "warmup": eng.warmup if eng else {"done": False},
            "requests_served": eng.served if eng else 0,
            "started_utc": eng.started_utc if eng else None,
            "load_s": eng.load_s if eng else None,
            "host": self.server_address[0],
            "port": self.server_address[1],
            "max_body": self.max_body,
            "auth": "bearer",
        }


# --------------------------------------------------------------------------- main


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", required=True)
    p.add_argument("--arm", required=True, help="arm name from the arms file")
    p.add_argument("--arms-file", help="arms YAML (default config/arms.yaml)")
    p.add_argument(
        "--gpu-layers",
        type=int,
        default=None,
        help="n_gpu_layers for an arm without its own gpu_layers (-1 every layer; default 0)",
    )
    p.add_argument("--draft", help="draft model name (speculative arms; default: the family's default draft)")
    p.add_argument("--target-file", help="target GGUF (with --target-sha256; default: the family's files)")
    p.add_argument("--target-sha256")
    p.add_argument("--draft-file", help="draft GGUF (with --draft-sha256)")
    p.add_argument("--draft-sha256")
    p.add_argument("--models-dir", help="where user-placed family files live")
    p.add_argument("--lib-dir", help="patched llama.cpp libraries (default LLAMA_CPP_LIB_PATH or the cached build)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--allow-non-loopback", action="store_true", help="allow --host to be an address other than loopback"
    )
    p.add_argument("--port", type=int, default=0, help="0 = any free port (written to the ready file)")
    p.add_argument(
        "--ready-file",
        required=False,
        help="required: written atomically, mode 0600 (JSON: port, pid, identity, warmup, secret) once warm",
    )
    p.add_argument("--worker-id")
    p.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, help="largest request body in bytes")
    p.add_argument("--warmup-cap", type=int, default=WARMUP_CAP)
    p.add_argument(
        "--exit-with-parent",
        type=int,
        metavar="PID",
        help="stop (as on SIGTERM) once the process PID is no longer this worker's parent",
    )


def _files(args):
    from ..native.models import ModelFile, ensure_family

    tf = df = None
    if args.target_file:
        if not args.target_sha256:
            raise UsageError("--target-file needs --target-sha256")
        tf = ModelFile("target", "target", Path(args.target_file), args.target_sha256)
    if args.draft_file:
        if not args.draft_sha256:
            raise UsageError("--draft-file needs --draft-sha256")
        df = ModelFile("draft", args.draft or "draft", Path(args.draft_file), args.draft_sha256)
    draft_name = args.draft
    if tf is None or (df is None):
        fam = ensure_family(args.family, models_dir=args.models_dir)
        tf = tf or fam.target
        draft_name = draft_name or fam.default_draft
        if df is None:
            df = fam.draft(draft_name)
    return tf, df, draft_name


def serve(args: argparse.Namespace) -> int:
    from ..core.arms import load_arms

    if not is_loopback(args.host) and not args.allow_non_loopback:
        raise UsageError(
            f"--host {args.host} is not a loopback address; the worker is meant for this host "
            "only (plain HTTP), so binding elsewhere needs --allow-non-loopback"
        )
    if args.max_body < 1:
        raise UsageError("--max-body must be positive")
    arms = load_arms(args.arms_file)
    if args.arm not in arms:
        raise UsageError(f"unknown arm {args.arm!r} (known: {', '.join(arms)})")
    arm = arms[args.arm]
    if arm.gpu_layers is None:
        arm = arm.with_(gpu_layers=0 if args.gpu_layers is None else int(args.gpu_layers))

    stop = {"flag": False}
    server: WorkerServer | None = None

    def on_signal(signum, _frame):
        stop["flag"] = True
        if server is not None:
            server.stopping = True
        sys.stderr.write(f"{utc_now()} signal {signal.Signals(signum).name}: finishing and exiting\n")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        server = WorkerServer((args.host, args.port), max_body=args.max_body)
    except OSError as e:
        raise UsageError(f"cannot bind {args.host}:{args.port}: {e}") from None
    if not args.ready_file:
        server.server_close()
        raise UsageError("--ready-file is required: it is where the worker's secret is written")
    server.stopping = stop["flag"]
    server.timeout = 0.25  # handle_request() returns this often to look at the stop flag
    try:
        tf, df, draft_name = _files(args) if arm.speculative else (_files_target(args), None, None)
        engine = Engine(
            family=args.family,
            arm=arm,
            target_file=tf,
            draft_file=df,
            draft_name=draft_name,
            lib_dir=args.lib_dir,
            worker_id=args.worker_id,
        )
        server.engine = engine
        if stop["flag"]:
            return EXIT_OK
        engine.run_warmup(args.warmup_cap)
        host, port = server.server_address[:2]
        ready = {
            **server.health(),
            "url": f"http://{_url_host(host)}:{port}",
            "ready_utc": utc_now(),
            "secret": server.secret,
        }
        # owner-only from the start (a temporary file of mode 0600, renamed): the secret is never readable by others
        atomic_write_text(args.ready_file, json.dumps(ready, indent=1, sort_keys=True) + "\n", mode=0o600)
        sys.stderr.write(
            f"{utc_now()} worker {engine.worker_id} (pid {os.getpid()}) ready on {ready['url']}: "
            f"arm {arm.name}, load {engine.load_s:.2f} s, warmup {engine.warmup['engine_ns'] / 1e9:.2f} s\n"
        )
        while not stop["flag"]:
            server.handle_request()  # never blocked by connections without the secret (see process_request)
            if args.exit_with_parent and os.getppid() != args.exit_with_parent:
                sys.stderr.write(f"{utc_now()} parent {args.exit_with_parent} is gone: exiting\n")
                break
        server.stopping = True
        server.server_close()  # no new connections; the request in flight finishes and is answered
        sys.stderr.write(f"{utc_now()} worker {engine.worker_id} stopped after {engine.served} requests\n")
        engine.close()
        return EXIT_OK
    finally:
        server.server_close()


def _files_target(args):
    from ..native.models import ModelFile, ensure_family

    if args.target_file:
        if not args.target_sha256:
            raise UsageError("--target-file needs --target-sha256")
        return ModelFile("target", "target", Path(args.target_file), args.target_sha256)
    return ensure_family(args.family, models_dir=args.models_dir).target


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def run(args: argparse.Namespace) -> int:
    return serve(args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m refspec.engine.worker", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return serve(args)
    except RefspecError as e:
        print(f"refspec worker: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
