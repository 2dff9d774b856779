"""The worker's HTTP front door, in process on 127.0.0.1 (no model is loaded).

A :class:`refspec.engines.worker.http.WorkerServer` without an engine answers
``/health`` and applies every check that comes before the engine: the secret
is checked before any body is read, a refused connection is answered and
closed at once (its declared body never waited for), ``Content-Length`` is
strict, only HTTP/1.0 and HTTP/1.1 are spoken, the head of a request is
bounded in bytes, and connections without the secret are bounded in number
(a new one closes the oldest), so they never keep an authenticated request
waiting. Latency under a flood is measured in ``bench/worker_flood.py``.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from refspec.engines.worker import http as W

SECRET = "s3cr3t-" + "x" * 40


@pytest.fixture()
def server():
    srv = W.WorkerServer(("127.0.0.1", 0), secret=SECRET)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(10)


def authority(srv) -> str:
    return f"127.0.0.1:{srv.server_address[1]}"


def connect(srv) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=5)


def read_all(s: socket.socket, limit_s: float = 5.0) -> tuple[bytes, float, bool]:
    """Everything until the worker closes: (bytes, seconds, closed cleanly or reset)."""
    t0 = time.monotonic()
    s.settimeout(limit_s)
    buf = b""
    try:
        while time.monotonic() - t0 < limit_s:
            chunk = s.recv(65536)
            if not chunk:
                return buf, time.monotonic() - t0, True
            buf += chunk
    except ConnectionResetError:
        return buf, time.monotonic() - t0, True
    except TimeoutError:
        pass
    return buf, time.monotonic() - t0, False


def exchange(srv, data: bytes, limit_s: float = 5.0) -> tuple[bytes, float, bool]:
    with connect(srv) as s:
        s.sendall(data)
        return read_all(s, limit_s)


def status_of(answer: bytes) -> int:
    line = answer.split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1.0 "), answer[:200]
    return int(line.split()[1])


def body_of(answer: bytes) -> dict:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


def head(srv, method="GET", path="/health", *, auth=True, extra=b"", version=b"HTTP/1.1") -> bytes:
    h = b"%s %s %s\r\nHost: %s\r\n" % (method.encode(), path.encode(), version, authority(srv).encode())
    if auth:
        h += b"Authorization: Bearer %s\r\n" % SECRET.encode()
    return h + extra + b"\r\n"


def test_health_with_the_secret(server):
    answer, _, closed = exchange(server, head(server))
    assert status_of(answer) == 200 and closed
    assert body_of(answer)["auth"] == "bearer"


@pytest.mark.parametrize("declared", [13, 8 << 20, 1 << 40])
def test_a_refused_request_is_answered_and_closed_without_waiting_for_its_body(server, declared):
    """No secret, a declared body that never comes: 401 and the connection closed at once."""
    data = head(server, "POST", "/v1/completions", auth=False, extra=b"Content-Type: application/json\r\n")
    data = data[:-2] + b"Content-Length: %d\r\n\r\n" % declared
    with connect(server) as s:
        s.sendall(data)
        answer, took, closed = read_all(s, limit_s=W.HEADER_DEADLINE_S + 5)
    assert status_of(answer) == 401 and body_of(answer)["error"]["type"] == "authentication_error"
    assert closed and took < 2.0, took  # neither drained nor waited for (before: up to 30 s)


def test_a_refused_connection_is_not_drained(server):
    """Body bytes sent after a refusal are never read: the worker has closed the connection."""
    data = head(server, "POST", "/v1/completions", auth=False, extra=b"Content-Type: application/json\r\n")
    with connect(server) as s:
        s.sendall(data[:-2] + b"Content-Length: %d\r\n\r\n" % (4 << 20))
        answer, took, closed = read_all(s, limit_s=5)
        assert status_of(answer) == 401 and closed and took < 2.0
        sent, t0 = 0, time.monotonic()
        with pytest.raises(OSError):  # EPIPE or ECONNRESET: nobody reads it
            while time.monotonic() - t0 < 10:
                s.sendall(b" " * 65536)
                sent += 65536
        assert sent < 4 << 20


@pytest.mark.parametrize(
    "value",
    [b"+13", b"1_3", b"0x0d", b"13.0", b"-13", b"1 3", b"\xd9\xa1\xd9\xa3", b"", b"9" * 19, b"13, 13"],
)
def test_content_length_is_decimal_digits_only(server, value):
    body = b'{"text": "hi"}'
    extra = b"Content-Type: application/json\r\nContent-Length: %s\r\n" % value
    answer, _, closed = exchange(server, head(server, "POST", "/refspec/tokenize", extra=extra) + body)
    assert status_of(answer) == 400 and closed
    assert "Content-Length" in body_of(answer)["error"]["message"]


def test_two_content_length_headers_are_refused(server):
    body = b'{"text": "hi"}'
    extra = b"Content-Type: application/json\r\nContent-Length: 14\r\nContent-Length: 14\r\n"
    answer, _, _ = exchange(server, head(server, "POST", "/refspec/tokenize", extra=extra) + body)
    assert status_of(answer) == 400 and "exactly one Content-Length" in body_of(answer)["error"]["message"]


def test_an_http_09_request_gets_a_status_line_and_a_refusal(server):
    answer, _, closed = exchange(server, b"GET /health\r\n")
    assert answer.startswith(b"HTTP/1.0 400 ") and closed  # never a bare body
    assert "HTTP/0.9" in body_of(answer)["error"]["message"]


@pytest.mark.parametrize(
    "version,status", [(b"HTTP/2.0", 505), (b"HTTP/1.2", 505), (b"HTTP/0.9", 505), (b"http/1.1", 400)]
)
def test_only_http_1_0_and_1_1(server, version, status):
    answer, _, closed = exchange(server, head(server, version=version))
    assert status_of(answer) == status and closed


def test_the_head_of_a_request_is_bounded(server):
    pad = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    answer, took, closed = exchange(server, head(server, extra=pad * (W.MAX_HEADER_BYTES // 1000 + 2)))
    assert status_of(answer) == 431 and closed and took < 2.0


def test_connections_without_the_secret_are_bounded_and_never_delay_the_secret(server, monkeypatch):
    """More silent connections than the bound: the oldest are closed, /health is answered at once."""
    monkeypatch.setattr(W, "MAX_UNAUTHENTICATED", 8)
    silent = [connect(server) for _ in range(12)]
    try:
        time.sleep(0.3)
        assert server.unadmitted_connections() <= 8
        t0 = time.monotonic()
        answer, _, _ = exchange(server, head(server))
        assert status_of(answer) == 200 and time.monotonic() - t0 < 2.0
        closed = 0
        for s in silent[:4]:  # the four oldest made room
            data, _, was_closed = read_all(s, limit_s=2)
            closed += was_closed and data == b""
        assert closed == 4
    finally:
        for s in silent:
            s.close()


def test_a_flood_of_slow_token_less_connections_does_not_hold_up_health(server):
    """64 connections trickling headers without the secret: /health with it is still answered."""
    stop = threading.Event()
    socks = []

    def trickle(s):
        data = b"GET /health HTTP/1.1\r\nHost: %s\r\nX-Pad: " % authority(server).encode() + b"a" * 100
        for i in range(len(data)):  # bounded: ~25 s at most, the stop flag ends it first
            if stop.is_set():
                return
            try:
                s.sendall(data[i : i + 1])
            except OSError:
                return
            time.sleep(0.25)

    for _ in range(64):
        s = connect(server)
        socks.append(s)
    threads = [threading.Thread(target=trickle, args=(s,), daemon=True) for s in socks]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        for _ in range(5):
            t0 = time.monotonic()
            answer, _, _ = exchange(server, head(server))
            assert status_of(answer) == 200 and time.monotonic() - t0 < 2.0
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        for s in socks:
            s.close()
