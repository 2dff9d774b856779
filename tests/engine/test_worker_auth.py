"""Who may talk to a worker: real worker processes, real HTTP on 127.0.0.1.

One target-only worker (arm R, one thread) serves the module. Every request
must carry the worker's secret (from its 0600 ready file) as a bearer token,
name the bound address in ``Host`` and, for a POST, be ``application/json``;
anything else is refused with a JSON error before the request is looked at. A
client trickling its headers does not hold up ``/health`` for the others. The
official ``openai`` client works with the secret as its API key. A request the
driver did not send, served between two timed ones, shows as a gap in
``request_index`` and fails the block.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import threading
import time

import pytest

from refspec.core.arms import load_arms
from refspec.engine.context import Planned, RunContext
from refspec.engine.driver import run_block
from refspec.engine.journal import Journal
from refspec.engines.worker.http import HEADER_DEADLINE_S
from refspec.engines.worker.process import WorkerProcess as Worker
from refspec.engines.worker.process import WorkerSpec
from refspec.provenance.ledger import Ledger, verify_chain
from support.arms import one_thread_arms

FAMILY = "smollm2-135m"
PROMPT = [1, 9690, 198]


@pytest.fixture(scope="module")
def worker(tmp_path_factory, lib_path, family_files):
    d = tmp_path_factory.mktemp("auth")
    arms_file = one_thread_arms(d / "arms.yaml")
    arm = load_arms(arms_file)["R"]
    spec = WorkerSpec(
        family=FAMILY,
        arm=arm,
        files=family_files,
        lib_dir=lib_path,
        worker_id="t-auth-R",
        run_dir=d,
        arms_file=arms_file,
        warmup_cap=2,
    )
    w = Worker.start(spec, ready_timeout=600)
    yield w
    w.stop(timeout=30)


def host_port(w):
    host, port = w.url.rsplit("/", 1)[-1].rsplit(":", 1)
    return host, int(port)


def exchange(w, method, path, *, headers, body=None, host=None):
    """One request with exactly ``headers`` (plus Host unless ``host`` is False); returns (status, headers, JSON)."""
    h, port = host_port(w)
    conn = http.client.HTTPConnection(h, port, timeout=120)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    if host is not False:
        conn.putheader("Host", host if host is not None else f"{h}:{port}")
    for k, v in headers.items():
        conn.putheader(k, v)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), json.loads(payload)


def good(w, **extra):
    return {"Authorization": f"Bearer {w.secret}", "Content-Type": "application/json", **extra}


def served(w) -> int:
    return w.health()["requests_served"]


def completion_body(cap=2):
    return json.dumps({"prompt": PROMPT, "max_tokens": cap}).encode()


def test_ready_file_is_owner_only_and_holds_the_secret(worker):
    st = os.stat(worker.ready_path)
    assert stat.S_IMODE(st.st_mode) == 0o600
    ready = json.loads(worker.ready_path.read_text())
    assert isinstance(ready["secret"], str) and len(ready["secret"]) >= 32 and ready["secret"] == worker.secret
    h = worker.health()
    assert h["auth"] == "bearer" and worker.secret not in json.dumps(h)


@pytest.mark.parametrize(
    "auth", [None, "Bearer wrong-secret", "Basic {secret}", "Bearer {secret}x", "{secret}", "Bearer "]
)
@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/health"),
        ("GET", "/v1/models"),
        ("POST", "/v1/completions"),
        ("POST", "/refspec/tokenize"),
        ("GET", "/no/such/path"),
    ],
)
def test_requests_without_the_secret_get_401(worker, auth, method, path):
    before = served(worker)
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth.format(secret=worker.secret)
    body = completion_body() if method == "POST" else None
    status, resp_headers, out = exchange(worker, method, path, headers=headers, body=body)
    assert status == 401, out
    assert out["error"]["code"] == 401 and out["error"]["type"] == "authentication_error"
    assert "Authorization: Bearer" in out["error"]["message"] and worker.secret not in json.dumps(out)
    assert resp_headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert served(worker) == before  # nothing was computed


@pytest.mark.parametrize(
    "ctype",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/jsonp",
        "application/json; charset=latin-1",
        "multipart/form-data; boundary=x",
    ],
)
def test_posts_need_a_json_content_type(worker, ctype):
    before = served(worker)
    headers = {"Authorization": f"Bearer {worker.secret}"}
    if ctype is not None:
        headers["Content-Type"] = ctype
    status, _, out = exchange(worker, "POST", "/v1/completions", headers=headers, body=completion_body())
    assert status == 415, out
    assert out["error"]["code"] == 415 and "application/json" in out["error"]["message"]
    assert served(worker) == before


def test_json_with_a_utf8_charset_is_accepted(worker):
    status, _, out = exchange(
        worker,
        "POST",
        "/refspec/tokenize",
        headers=good(worker, **{"Content-Type": "application/json; charset=utf-8"}),
        body=json.dumps({"text": "hello", "chat": False}).encode(),
    )
    assert status == 200 and out["n"] > 0


@pytest.mark.parametrize("case", ["localhost", "other_name", "other_port", "no_port", "missing", "two"])
def test_host_must_be_the_bound_address(worker, case):
    h, port = host_port(worker)
    hosts = {
        "localhost": f"localhost:{port}",
        "other_name": f"rebound.example:{port}",
        "other_port": f"{h}:{port + 1}",
        "no_port": h,
    }
    before = served(worker)
    if case == "missing":
        status, _, out = exchange(worker, "GET", "/health", headers=good(worker), host=False)
        assert status == 400
    elif case == "two":
        status, _, out = exchange(worker, "GET", "/health", headers={**good(worker), "host": "rebound.example"})
        assert status == 400
    else:
        status, _, out = exchange(
            worker, "POST", "/v1/completions", headers=good(worker), body=completion_body(), host=hosts[case]
        )
        assert status == 421
    assert out["error"]["type"] == "invalid_host" and f"{h}:{port}" in out["error"]["message"]
    assert served(worker) == before


def test_requests_from_web_pages_are_refused(worker):
    status, _, out = exchange(
        worker, "POST", "/v1/completions", headers=good(worker, Origin="http://rebound.example"), body=completion_body()
    )
    assert status == 403 and out["error"]["code"] == 403


def test_a_trickling_client_does_not_stall_health(worker):
    """One client sends its headers a byte every 0.25 s; /health stays fast and the slow one is cut off."""
    h, port = host_port(worker)
    slow = socket.create_connection((h, port), timeout=5)
    got = {}

    def trickle():
        data = (
            f"GET /health HTTP/1.1\r\nHost: {h}:{port}\r\nAuthorization: Bearer {worker.secret}\r\n"
            + "X-Pad: "
            + "a" * 200
            + "\r\n\r\n"
        ).encode()
        t0 = time.monotonic()
        try:
            for i in range(len(data)):  # bounded: at most ~60 s of bytes, and the server cuts it off long before
                slow.sendall(data[i : i + 1])
                time.sleep(0.25)
        except OSError:
            pass
        got["send_stopped_s"] = time.monotonic() - t0

    def read_answer():
        slow.settimeout(HEADER_DEADLINE_S + 20)
        t0 = time.monotonic()
        buf = b""
        try:
            while True:
                chunk = slow.recv(4096)
                if not chunk:
                    break
                buf += chunk
        except OSError:
            pass
        got["answer"] = buf
        got["answer_s"] = time.monotonic() - t0

    tt = threading.Thread(target=trickle, daemon=True)
    tr = threading.Thread(target=read_answer, daemon=True)
    tt.start()
    tr.start()
    time.sleep(0.5)
    latencies = []
    for _ in range(6):
        t0 = time.monotonic()
        h_ = worker.health()
        latencies.append(time.monotonic() - t0)
        assert h_["ready"] is True
        time.sleep(0.5)
    tr.join(HEADER_DEADLINE_S + 25)
    slow.close()
    tt.join(10)
    print(
        f"/health latency under a trickling client: max {max(latencies) * 1000:.1f} ms, "
        f"slow client cut off after {got.get('answer_s', -1):.1f} s"
    )
    assert max(latencies) < 2.0, latencies
    # the slow client got a 408 when its header deadline passed, not later
    assert got["answer"].startswith(b"HTTP/1.0 408"), got["answer"][:200]
    assert HEADER_DEADLINE_S - 1 <= got["answer_s"] <= HEADER_DEADLINE_S + 5


def test_the_openai_client_works_with_the_secret(worker):
    import openai  # pinned in envs/requirements.txt

    client = openai.OpenAI(api_key=worker.secret, base_url=worker.url + "/v1", max_retries=0, timeout=120)
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [f"{FAMILY}/R"]
    before = served(worker)
    out = client.completions.create(model=ids[0], prompt=PROMPT, max_tokens=3, temperature=0)
    assert out.object == "text_completion" and len(out.choices) == 1
    assert isinstance(out.choices[0].text, str) and out.choices[0].finish_reason in ("stop", "length")
    assert out.usage.prompt_tokens == len(PROMPT) and 0 < out.usage.completion_tokens <= 3
    assert (out.model_extra or {})["refspec"]["request_index"] == before
    assert served(worker) == before + 1
    with pytest.raises(openai.UnprocessableEntityError) as e:
        client.completions.create(model=ids[0], prompt=PROMPT, max_tokens=3, temperature=0, stream=True)
    assert e.value.status_code == 422
    wrong = openai.OpenAI(api_key="not-the-secret", base_url=worker.url + "/v1", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError) as e:
        wrong.models.list()
    assert e.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        wrong.completions.create(model=ids[0], prompt=PROMPT, max_tokens=3, temperature=0)
    assert served(worker) == before + 1


def test_a_foreign_request_between_timed_ones_fails_the_block(tmp_path, lib_path, family_files):
    arms_file = one_thread_arms(tmp_path / "arms.yaml")
    arm = load_arms(arms_file)["R"]
    ctx = RunContext(
        campaign="confirmation",
        family=FAMILY,
        session="s-gap",
        files=family_files,
        lib_dir=lib_path,
        out_dir=tmp_path,
        journal=Journal(tmp_path / "journal.jsonl"),
        ledger=Ledger(tmp_path / "ledger.jsonl"),
        arms_file=arms_file,
        warmup_cap=2,
    )
    foreign = {}

    def on_submit(w, planned, order):
        # before the second timed request, someone holding the secret gets a completion served
        if order == 2:
            foreign["status"] = exchange(w, "POST", "/v1/completions", headers=good(w), body=completion_body())[0]
            foreign["ready_path"] = w.ready_path

    ctx.on_submit = on_submit
    planned = [Planned(f"t{i}", 3, 1, prompt_ids=PROMPT) for i in range(4)]
    recs = run_block(ctx, arm, planned, block=0)
    rows = [r["row"] for r in recs]
    assert foreign["status"] == 200
    assert [(r["task_id"], r["order_index"], r["status"]) for r in rows] == [
        ("warmup", 0, "excluded_warmup"),
        ("t0", 1, "ok"),
        ("t1", 2, "failed"),
        ("t2", 3, "failed"),
        ("t3", 4, "failed"),
    ]
    gap = rows[2]
    assert "request_index gap" in gap["reason"] and "request_index 2 where 1 was due" in gap["reason"]
    assert "1 request(s) the driver did not send" in gap["reason"] and gap["t_ns"] is None
    assert all("block 0 failed: request_index gap" in r["reason"] for r in rows[3:])
    # one worker only: a gap is not retried on a fresh one
    led = Ledger(tmp_path / "ledger.jsonl").records()
    assert verify_chain(tmp_path / "ledger.jsonl") == []
    kinds = [r["kind"] for r in led]
    assert kinds.count("worker_start") == 1 and kinds.count("attempt") == 1
    failures = [r for r in led if r["kind"] == "failure"]
    assert len(failures) == 3 and "request_index gap" in failures[0]["reason"]
    assert any(r["kind"] == "worker_exit" and "request_index gap" in r["reason"] for r in led)
    assert [r["row"] for r in Journal(tmp_path / "journal.jsonl").records()] == rows
    # the exited worker's ready file no longer holds its secret
    assert json.loads(foreign["ready_path"].read_text())["secret"] is None
