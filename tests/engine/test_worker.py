"""The worker over real HTTP on 127.0.0.1 with the real SmolLM2 models.

One speculative worker (C3, Q2_K draft) serves the whole module: a completion,
every kind of bad request (each answered with a clear error, after which the
worker keeps serving), two concurrent clients (served one after the other) and
finally SIGTERM in the middle of a request (the response still arrives, the
worker exits 0). A non-loopback bind without the explicit flag is refused
before anything is loaded (exit 2).
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from refspec.core.arms import load_arms
from refspec.core.hashing import sha256_json
from refspec.engine.spawn import ENV_GPU_PASSTHROUGH, process_env
from refspec.engines.worker.process import WorkerProcess as Worker
from refspec.engines.worker.process import WorkerSpec
from support.arms import one_thread_arms

CAP = 6


@pytest.fixture(scope="module")
def worker(tmp_path_factory, lib_path, family_files):
    d = tmp_path_factory.mktemp("worker")
    arms_file = one_thread_arms(d / "arms.yaml")
    arm = load_arms(arms_file)["C3"]
    spec = WorkerSpec(
        family="smollm2-135m",
        arm=arm,
        files=family_files,
        lib_dir=lib_path,
        worker_id="t-C3",
        run_dir=d,
        draft="q2_k",
        arms_file=arms_file,
        warmup_cap=4,
    )
    w = Worker.start(spec, ready_timeout=600)
    yield w
    w.stop(timeout=30)


def call(w, method, path, body=None, headers=None, raw=None):
    """One HTTP exchange with http.client; returns (status, parsed JSON)."""
    host, port = w.url.rsplit("/", 1)[-1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json", "Authorization": f"Bearer {w.secret}", **(headers or {})}
    if data is not None:
        h.setdefault("Content-Length", str(len(data)))
    conn.request(method, path, body=data, headers=h)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, json.loads(payload)


def assert_serving(w):
    status, h = call(w, "GET", "/health")
    assert status == 200 and h["ready"] is True and h["pid"] == w.pid


def test_health_reports_identity(worker, family_files):
    status, h = call(worker, "GET", "/health")
    assert status == 200
    assert h["status"] == "ready" and h["ready"] is True
    assert h["pid"] == worker.pid and h["arm"] == "C3" and h["draft"] == "q2_k"
    assert h["models"]["target"]["sha256"] == family_files.target.sha256
    assert h["models"]["draft"]["sha256"] == family_files.draft("q2_k").sha256
    assert h["warmup"]["done"] is True and h["warmup"]["cap"] == 4
    assert h["warmup"]["endpoint"]["n"] == 4
    assert h["prompt_cache"] is False
    assert h["host"] == "127.0.0.1"


def test_completion_is_openai_shaped_with_refspec_extra(worker):
    status, tok = call(
        worker, "POST", "/refspec/tokenize", {"text": "Write a function that adds two numbers.", "chat": True}
    )
    assert status == 200
    ids = tok["tokens"]
    status, out = call(
        worker,
        "POST",
        "/v1/completions",
        {"model": "C3", "prompt": ids, "max_tokens": CAP, "temperature": 0, "refspec": {"request_id": "t1"}},
    )
    assert status == 200
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    assert isinstance(out["created"], int) and out["model"] == "smollm2-135m/C3+q2_k"
    (choice,) = out["choices"]
    ext = out["refspec"]
    ep = ext["endpoint"]
    assert ep["tokens"] == ext["tokens"] and ep["n"] == len(ext["tokens"]) <= CAP
    assert choice["finish_reason"] == ("stop" if ep["eog"] else "length")
    assert isinstance(choice["text"], str)
    assert out["usage"] == {"prompt_tokens": len(ids), "completion_tokens": ep["n"], "total_tokens": len(ids) + ep["n"]}
    assert ext["request_id"] == "t1" and ext["pid"] == worker.pid and ext["arm"]["name"] == "C3"
    assert ext["prompt_sha256"] == sha256_json(ids)
    assert len(ext["margins"]) == ep["n"] and all(m >= 0 for m in ext["margins"])
    c = ext["counters"]
    assert c["proposals"] >= c["accepted"] >= 0 and c["micrographs_qb"] > 0
    ev = ext["evidence"]
    assert ev is not None and sum(p for p, _ in ev["cycles"]) == c["proposals"]
    # the same prompt as chat text gives the same endpoint (prompt caching is off: each request starts cleared)
    status, out2 = call(
        worker,
        "POST",
        "/v1/completions",
        {"prompt": "Write a function that adds two numbers.", "max_tokens": CAP, "refspec": {"chat": True}},
    )
    assert status == 200 and out2["refspec"]["endpoint"] == ep
    assert out2["refspec"]["request_index"] == ext["request_index"] + 1


@pytest.mark.parametrize(
    "case",
    [
        "malformed_json",
        "not_an_object",
        "oversized_body",
        "oversized_header_only",
        "temperature",
        "n",
        "stream",
        "unknown_field",
        "prompt_too_long",
        "empty_prompt",
        "token_out_of_vocab",
        "batch_of_prompts",
        "bad_max_tokens",
        "unknown_path",
        "wrong_method",
    ],
)
def test_bad_requests_get_clear_errors_and_the_worker_keeps_serving(worker, case):
    big = 2 * (1 << 20)
    cases = {
        "malformed_json": (400, "POST", "/v1/completions", None, b'{"prompt": [1, 2', "malformed JSON"),
        "not_an_object": (400, "POST", "/v1/completions", [1, 2], None, "JSON object"),
        "oversized_body": (
            413,
            "POST",
            "/v1/completions",
            None,
            json.dumps({"prompt": "x" * big}).encode(),
            "exceeds the limit",
        ),
        "temperature": (422, "POST", "/v1/completions", {"prompt": [1, 2], "temperature": 0.7}, None, "temperature 0"),
        "n": (422, "POST", "/v1/completions", {"prompt": [1, 2], "n": 2}, None, "n = 1"),
        "stream": (422, "POST", "/v1/completions", {"prompt": [1, 2], "stream": True}, None, "streaming"),
        "unknown_field": (
            422,
            "POST",
            "/v1/completions",
            {"prompt": [1, 2], "grammar": "x"},
            None,
            "unsupported field 'grammar'",
        ),
        "prompt_too_long": (
            400,
            "POST",
            "/v1/completions",
            {"prompt": [198] * 2100, "max_tokens": 8},
            None,
            "the context holds 2048",
        ),
        "empty_prompt": (400, "POST", "/v1/completions", {"prompt": []}, None, "empty"),
        "token_out_of_vocab": (400, "POST", "/v1/completions", {"prompt": [1, 10**7]}, None, "vocabulary"),
        "batch_of_prompts": (422, "POST", "/v1/completions", {"prompt": ["a", "b"]}, None, "batches"),
        "bad_max_tokens": (400, "POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 0}, None, "max_tokens"),
        "unknown_path": (404, "GET", "/v2/whatever", None, None, "no such path"),
        "wrong_method": (405, "GET", "/v1/completions", None, None, "POST"),
    }
    if case == "oversized_header_only":
        # announce a huge body and send none of it: answered from the header alone
        host, port = worker.url.rsplit("/", 1)[-1].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.putrequest("POST", "/v1/completions")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Authorization", f"Bearer {worker.secret}")
        conn.putheader("Content-Length", str(64 << 20))
        conn.endheaders()
        resp = conn.getresponse()
        body = json.loads(resp.read())
        conn.close()
        assert resp.status == 413 and "exceeds the limit" in body["error"]["message"]
    else:
        want, method, path, body, raw, text = cases[case]
        status, out = call(worker, method, path, body=body, raw=raw)
        assert status == want, out
        assert text in out["error"]["message"], out
        assert out["error"]["code"] == want
    assert_serving(worker)


def test_concurrent_requests_wait_and_are_served_in_turn(worker):
    results = []

    def client():
        results.append(call(worker, "POST", "/v1/completions", {"prompt": [1, 9690, 198], "max_tokens": 3}))

    threads = [threading.Thread(target=client) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert [s for s, _ in results] == [200, 200]
    a, b = (o["refspec"] for _, o in results)
    assert a["endpoint"] == b["endpoint"]
    idx = sorted([a["request_index"], b["request_index"]])
    assert idx[1] == idx[0] + 1


def test_sigterm_finishes_the_request_in_flight_and_exits_0(worker):
    got = {}

    def client():
        got["resp"] = call(
            worker,
            "POST",
            "/v1/completions",
            {"prompt": "Write a quicksort in Python.", "max_tokens": 24, "refspec": {"chat": True}},
        )

    t = threading.Thread(target=client)
    t.start()
    time.sleep(0.5)
    worker.proc.send_signal(signal.SIGTERM)
    t.join(300)
    status, out = got["resp"]
    assert status == 200 and out["refspec"]["endpoint"]["n"] > 0
    assert worker.wait_exit(60) == 0
    log = worker.log_path.read_text()
    assert "signal SIGTERM" in log and "stopped after" in log


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1"])
def test_non_loopback_bind_needs_the_explicit_flag(tmp_path, lib_path, host):
    ready = tmp_path / "ready.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "refspec.commands.worker",
            "--family",
            "smollm2-135m",
            "--arm",
            "R",
            "--host",
            host,
            "--port",
            "0",
            "--ready-file",
            str(ready),
        ],
        env=process_env(lib_path, 1),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "not a loopback address" in proc.stderr and "--allow-non-loopback" in proc.stderr
    assert not ready.exists()


def test_with_the_flag_a_non_loopback_host_is_tried(tmp_path, lib_path):
    # 192.0.2.1 (TEST-NET-1) is not an address of this machine: the bind itself fails, before any model load
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "refspec.commands.worker",
            "--family",
            "smollm2-135m",
            "--arm",
            "R",
            "--host",
            "192.0.2.1",
            "--allow-non-loopback",
            "--port",
            "0",
        ],
        env=process_env(lib_path, 1),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "cannot bind 192.0.2.1" in proc.stderr


def test_worker_environment_is_scrubbed(lib_path):
    env = process_env(
        lib_path,
        2,
        base={
            "PATH": "/bin",
            "HOME": "/root",  # abspath: an environment the worker must not pass on
            "SECRET_TOKEN": "x",
            "PYTHONPATH": "/evil",
            "LD_PRELOAD": "/evil.so",
            "OMP_NUM_THREADS": "64",
        },
    )
    assert "SECRET_TOKEN" not in env
    assert env["LD_PRELOAD"] == "/evil.so"  # on the GPU allowlist (hosts whose C++/CUDA runtime needs it)
    assert env["PYTHONHASHSEED"] == "0" and env["LANG"] == env["LC_ALL"] == "C"
    assert env["OMP_NUM_THREADS"] == "2" and env["LLAMA_CPP_LIB_PATH"] == str(lib_path)
    assert env["PYTHONPATH"] != "/evil"
    assert set(env) <= {
        "PATH",
        "HOME",
        "VIRTUAL_ENV",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "PYTHONHASHSEED",
        "PYTHONPATH",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "LLAMA_CPP_LIB_PATH",
        "REFSPEC_CACHE",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        *ENV_GPU_PASSTHROUGH,
    }
