"""The worker's HTTP side: a loopback endpoint for one :class:`refspec.engines.worker.engine.WorkerEngine`.

The chosen port and the worker's identity are written atomically to the ready file
once the warmup is done (:func:`serve`); the driver waits for that file. The ready file (mode
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
computed waits; it is never answered 503 and never runs concurrently.

SIGTERM (or SIGINT) lets the in-flight request finish and its response go out,
then closes the listening socket and exits 0. The HTTP API, its errors, the
exit codes and the environment the driver gives a worker are documented in
``anc/worker.md``.
"""

from __future__ import annotations

import hmac
import http.server
import io
import ipaddress
import json
import os
import re
import secrets
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.arms import Arm
from ...core.clock import utc_now
from ...core.errors import RefspecError, UsageError
from ...core.fsutil import atomic_write_text
from ...core.hashing import sha256_json
from ...native.models import ModelFile
from .engine import HTTPError, WorkerEngine

DEFAULT_MAX_BODY = 1 << 20  # bytes
DRAIN_LIMIT = 8 << 20  # authenticated: an oversized body up to this size is read and discarded before the 413
READ_TIMEOUT_S = 30.0  # the whole body must arrive within this many seconds after the headers
HEADER_DEADLINE_S = 10.0  # the request line and every header must arrive within this many seconds
MAX_HEADER_BYTES = 32 << 10  # request line and headers together
MAX_UNAUTHENTICATED = 128  # connections not yet admitted; a new one beyond this closes the oldest
REFUSED_WRITE_S = 2.0  # the answer to a refused connection is written within this time, or dropped
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")
_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) ([\x21-\x7e]{1,8192}) HTTP/(\d+)\.(\d+)\r?\n")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
                    "data": [
                        {"id": eng.model_name(a), "object": "model", "created": 0, "owned_by": "refspec"}
                        for a in eng.arms.values()
                    ],
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
        except TimeoutError as e:
            raise HTTPError(408, f"the body did not arrive within {READ_TIMEOUT_S:g} s", type_="timeout") from e
        if len(raw) != n:
            raise HTTPError(400, f"request body ended after {len(raw)} of {n} bytes")
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as e:
            raise HTTPError(400, f"malformed JSON: {e}") from e

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
        self.engine: WorkerEngine | None = None
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
            **({"warmups": eng.warmups} if eng and eng.paired else {}),
            "requests_served": eng.served if eng else 0,
            "started_utc": eng.started_utc if eng else None,
            "load_s": eng.load_s if eng else None,
            "host": self.server_address[0],
            "port": self.server_address[1],
            "max_body": self.max_body,
            "auth": "bearer",
        }


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# --------------------------------------------------------------------------- serving


@dataclass
class ServeOptions:
    """What one worker serves, and where: the command line's settings, checked."""

    family: str
    arm: Arm  # its gpu_layers set
    host: str
    port: int
    ready_file: str | None
    # the target file, the draft file and the draft's name (None for a target-only arm); resolved once bound
    files: Callable[[], tuple[ModelFile, ModelFile | None, str | None]]
    lib_dir: str | None = None
    worker_id: str | None = None
    max_body: int = 0
    warmup_cap: int = 0
    exit_with_parent: int | None = None
    also_arms: tuple[Arm, ...] = ()  # the other arms of a paired worker (the same gpu_layers)


def serve(o: ServeOptions) -> None:
    """Bind, load, warm up, write the ready file, then serve until SIGTERM/SIGINT (or the parent is gone)."""
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
        server = WorkerServer((o.host, o.port), max_body=o.max_body)
    except OSError as e:
        raise UsageError(f"cannot bind {o.host}:{o.port}: {e}") from e
    if not o.ready_file:
        server.server_close()
        raise UsageError("--ready-file is required: it is where the worker's secret is written")
    server.stopping = stop["flag"]
    server.timeout = 0.25  # handle_request() returns this often to look at the stop flag
    try:
        tf, df, draft_name = o.files()
        engine = WorkerEngine(
            family=o.family,
            arm=o.arm,
            target_file=tf,
            draft_file=df,
            draft_name=draft_name,
            lib_dir=o.lib_dir,
            worker_id=o.worker_id,
            also_arms=o.also_arms,
        )
        server.engine = engine
        if stop["flag"]:
            return
        engine.run_warmup(o.warmup_cap)
        _write_ready(server, engine, o.ready_file)
        while not stop["flag"]:
            server.handle_request()  # never blocked by connections without the secret (see process_request)
            if o.exit_with_parent and os.getppid() != o.exit_with_parent:
                sys.stderr.write(f"{utc_now()} parent {o.exit_with_parent} is gone: exiting\n")
                break
        server.stopping = True
        server.server_close()  # no new connections; the request in flight finishes and is answered
        sys.stderr.write(f"{utc_now()} worker {engine.worker_id} stopped after {engine.served} requests\n")
        engine.close()
    finally:
        server.server_close()


def _write_ready(server: WorkerServer, engine: WorkerEngine, ready_file: str) -> None:
    """The ready file: the worker's health, URL and secret, written once the warmup is done."""
    host, port = server.server_address[:2]
    ready = {
        **server.health(),
        "url": f"http://{_url_host(host)}:{port}",
        "ready_utc": utc_now(),
        "secret": server.secret,
    }
    # owner-only from the start (a temporary file of mode 0600, renamed): the secret is never readable by others
    atomic_write_text(ready_file, json.dumps(ready, indent=1, sort_keys=True) + "\n", mode=0o600)
    sys.stderr.write(
        f"{utc_now()} worker {engine.worker_id} (pid {os.getpid()}) ready on {ready['url']}: "
        f"arm {', '.join(engine.arms)}, load {engine.load_s:.2f} s, warmup {engine.warmup['engine_ns'] / 1e9:.2f} s\n"
    )
