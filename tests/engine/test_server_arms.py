"""Black-box server arms (anc/servers.md): real llama-server processes on 127.0.0.1, real HTTP.

The ``servers`` campaign on a small panel qualifies stock and patched llama-server against
refspec's reference R; every bad input (a server that does not start or answer /health, a
non-loopback URL, a server of another vocabulary, an unknown layout in LLAMA_ATTN_LAYOUT) is
refused with exit 5 and a ``failure`` line in the campaign ledger, and nothing is scored from it;
a real response without token IDs is refused by the endpoint builder.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from support.paths import REPO_ROOT as REPO

ARM_BASE = {"ub": 4, "cap": 128, "threads": 2, "kv_type": "f16", "n_ctx": 2048, "k": 3, "draft_ub": 512}


@pytest.fixture(scope="module")
def server_builds(native_build):
    from refspec.native import build as native

    opts = native.BuildOptions()
    return {v: native.build_server(opts, v) for v in native.SERVER_VARIANTS}


def _campaign(tmp: Path, arms: dict, names: list[str], *, tasks: str = "0-1", cap: int = 16, timeout: float = 1500):
    """Run ``refspec campaign servers`` with these arms; return (process, campaign folder)."""
    arms_file = tmp / "arms.yaml"
    base = yaml.safe_load((REPO / "config" / "arms.yaml").read_text())
    doc = {"defaults": base["defaults"], "arms": {"R": base["arms"]["R"], "C3": base["arms"]["C3"], **arms}}
    arms_file.write_text(yaml.safe_dump(doc))
    cfg = yaml.safe_load((REPO / "config" / "servers.example.yaml").read_text())
    cfg.update(arms_file=str(arms_file), results=str(tmp / "results"))
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    defn = {
        "campaign": "servers",
        "arms": names,
        "panel": {"source": "humaneval", "tasks": tasks},
        "cap": cap,
        "repeats": 1,
        "sessions": 1,
        "warmup_cap": 2,
        "retries": 1,
    }
    (tmp / "servers.yaml").write_text(yaml.safe_dump(defn))
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_ATTN_LAYOUT"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "refspec.cli",
            "campaign",
            "servers",
            "--config",
            str(tmp / "config.yaml"),
            "--definition",
            str(tmp / "servers.yaml"),
            "--no-progress",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p, tmp / "results" / "campaigns" / "servers"


def _ledger(cdir: Path) -> list[dict]:
    return [json.loads(line) for line in (cdir / "ledger.jsonl").read_text().splitlines() if line.strip()]


def _journal_rows(cdir: Path) -> list[dict]:
    p = cdir / "journal.jsonl"
    return [json.loads(line)["row"] for line in p.read_text().splitlines()] if p.exists() else []


def _assert_refused(p, cdir: Path, arm: str, needle: str) -> None:
    assert p.returncode == 5, p.stdout[-1500:] + p.stderr[-3000:]
    assert needle in p.stderr, p.stderr[-3000:]
    fails = [r for r in _ledger(cdir) if r.get("kind") == "failure" and r.get("arm") == arm]
    assert fails and all(r["outcome"] == "failed" for r in fails)
    assert needle in fails[0]["reason"]
    assert all(not (r["arm"] == arm and r["status"] == "ok") for r in _journal_rows(cdir)), "something was scored"


# --------------------------------------------------------------------------- the campaign


@pytest.mark.server_build  # builds llama-server twice (stock and patched): ./run test -m server_build
def test_servers_campaign_qualifies_and_times(tmp_path, server_builds):
    from refspec.core.arms import load_arms

    cat = yaml.safe_load((REPO / "config" / "arms.yaml").read_text())["arms"]
    names = ["R", "S_stock", "S_qb", "S_qb_spec", "C3"]
    p, cdir = _campaign(tmp_path, {n: cat[n] for n in names if n.startswith("S_")}, names, cap=32)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert set(load_arms(tmp_path / "arms.yaml")) >= set(names)
    rows = (
        [json.loads(line) for line in (cdir / "qualification.jsonl").read_text().splitlines()]
        if (cdir / "qualification.jsonl").exists()
        else None
    )
    import pandas as pd

    q = pd.read_parquet(cdir / "qualification.parquet") if rows is None else pd.DataFrame(rows)
    req = pd.read_parquet(cdir / "requests.parquet")
    for arm in ("S_stock", "S_qb", "S_qb_spec"):
        ok = req[(req.arm == arm) & (req.status == "ok")]
        assert len(ok) == 2 and (ok.t_ns > 0).all() and (ok.n_generated > 0).all()
        assert len(req[(req.arm == arm) & (req.status == "excluded_warmup")]) == 1
    # the patched server with LLAMA_ATTN_LAYOUT=qb returns R's complete endpoints, draft or not
    for arm in ("S_qb", "S_qb_spec", "C3"):
        assert q[q.arm == arm].qualified.all(), q[q.arm == arm]
    spec = req[(req.arm == "S_qb_spec") & (req.status == "ok")]
    assert (spec.proposals > 0).all() and (spec.accepted >= 0).all()
    ratios = pd.read_parquet(cdir / "ratios.parquet")
    pairs = set(zip(ratios.numerator, ratios.denominator))
    assert {("S_qb", "R"), ("S_qb_spec", "R"), ("C3", "S_qb_spec"), ("S_qb_spec", "S_qb")} <= pairs
    assert ratios[(ratios.numerator == "C3") & (ratios.denominator == "S_qb_spec")].qualified.all()
    text = (cdir / "summary.txt").read_text()
    assert "started by refspec on a loopback port, fresh per block" in text
    # every server ran with the arm's environment and command, its log kept
    readies = {f.name: json.loads(f.read_text()) for f in (cdir / "workers").glob("w*-S_*.ready.json")}
    assert readies and all(r["fresh"] and r["props"]["total_slots"] == 1 for r in readies.values())
    for name, r in readies.items():
        assert r["env"] == ({"LLAMA_ATTN_LAYOUT": "qb"} if "-S_qb" in name else {}), name
        log = (cdir / "workers" / name.replace(".ready.json", ".log")).read_text()
        assert log.startswith("$ ") and ("with LLAMA_ATTN_LAYOUT=qb" in log) == ("-S_qb" in name)


# --------------------------------------------------------------------------- bad input


@pytest.mark.server_build  # builds llama-server twice (stock and patched): ./run test -m server_build
def test_unknown_layout_in_the_variable_is_refused(tmp_path, server_builds):
    arm = {
        "kind": "server",
        "mode": "target",
        "layout": "qb",
        "ub": 4,
        "mask": 15,
        "server": {"build": "patched", "attn_layout": "xx", "ready_timeout_s": 60},
    }
    p, cdir = _campaign(tmp_path, {"S_bad": arm}, ["R", "S_bad"], tasks="0", cap=4)
    _assert_refused(p, cdir, "S_bad", "before it answered /health")
    assert "LLAMA_ATTN_LAYOUT refused, context not created: malformed LLAMA_ATTN_LAYOUT='xx'" in p.stderr


@pytest.mark.server_build  # builds llama-server twice (stock and patched): ./run test -m server_build
def test_server_that_does_not_start_is_refused(tmp_path, server_builds):
    arm = {
        "kind": "server",
        "mode": "target",
        "layout": "mq",
        "ub": 4,
        "mask": 0,
        "server": {"build": "stock", "args": ["--no-such-option"], "ready_timeout_s": 60},
    }
    p, cdir = _campaign(tmp_path, {"S_bad": arm}, ["R", "S_bad"], tasks="0", cap=4)
    _assert_refused(p, cdir, "S_bad", "before it answered /health")


def test_non_loopback_url_is_refused(tmp_path, native_build):
    arm = {
        "kind": "server",
        "mode": "target",
        "layout": "mq",
        "ub": 4,
        "mask": 0,
        "server": {"url": "http://192.0.2.1:8080"},
    }
    p, cdir = _campaign(tmp_path, {"S_remote": arm}, ["R", "S_remote"], tasks="0", cap=4)
    _assert_refused(p, cdir, "S_remote", "is not on a loopback address")


def test_server_silent_on_health_is_refused(tmp_path, native_build):
    """A loopback port that accepts connections and never answers: no /health within the timeout."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        port = s.getsockname()[1]
        arm = {
            "kind": "server",
            "mode": "target",
            "layout": "mq",
            "ub": 4,
            "mask": 0,
            "server": {"url": f"http://127.0.0.1:{port}", "ready_timeout_s": 3},
        }
        p, cdir = _campaign(tmp_path, {"S_silent": arm}, ["R", "S_silent"], tasks="0", cap=4)
    _assert_refused(p, cdir, "S_silent", "does not answer /health")


def _start_server(binary: Path, model: Path, *, env_extra: dict | None = None):
    from refspec.engine.server import free_port
    from refspec.engine.spawn import process_env

    port = free_port()
    env = process_env(binary.parent, 2, extra=env_extra)
    proc = subprocess.Popen(
        [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-np",
            "1",
            "-t",
            "2",
            "-c",
            "512",
            "-fa",
            "off",
            "-fit",
            "off",
            "--no-ui",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if json.loads(r.read()).get("status") == "ok":
                    return proc, url
        except Exception:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("test server did not start")
        time.sleep(0.2)


@pytest.mark.server_build  # builds llama-server twice (stock and patched): ./run test -m server_build
def test_server_of_another_vocabulary_is_refused(tmp_path, server_builds):
    from support.tinygguf import write_tiny

    model = tmp_path / "tiny.gguf"
    write_tiny(model)
    proc, url = _start_server(server_builds["stock"].tool("llama-server"), model)
    try:
        arm = {"kind": "server", "mode": "target", "layout": "mq", "ub": 4, "mask": 0, "server": {"url": url}}
        p, cdir = _campaign(tmp_path, {"S_other": arm}, ["R", "S_other"], tasks="0", cap=4)
    finally:
        proc.kill()
        proc.wait()
    _assert_refused(p, cdir, "S_other", "vocabulary size 259 != the reference's")


@pytest.mark.server_build  # builds llama-server twice (stock and patched): ./run test -m server_build
def test_response_without_token_ids_is_refused(server_builds, family_files):
    """A real llama-server answer that leaves the token IDs out cannot give an endpoint."""
    from refspec.engine.server import ResponseRefused, endpoint_from_response

    proc, url = _start_server(server_builds["stock"].tool("llama-server"), family_files.target.path)
    try:

        def post(extra):
            body = {"prompt": [1, 2, 3], "n_predict": 4, "temperature": 0, "top_k": 1, "cache_prompt": False, **extra}
            req = urllib.request.Request(
                url + "/completion",
                data=json.dumps(body).encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=120) as r:
                return json.loads(r.read())

        full = post({"return_tokens": True})
        ep, _ = endpoint_from_response(full, n_prompt=3, cap=4, eog=frozenset(), speculative=False)
        assert ep.n == 4 and ep.stop_reason == "cap"
        for extra in ({"return_tokens": False}, {"return_tokens": True, "response_fields": ["content", "stop_type"]}):
            with pytest.raises(ResponseRefused, match="no generated token IDs"):
                endpoint_from_response(post(extra), n_prompt=3, cap=4, eog=frozenset(), speculative=False)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.server_build  # builds llama-server twice (stock and patched): ./run test -m server_build
def test_server_builds_are_cached_and_pinned(native_build, server_builds, tmp_path):
    import json

    from refspec.core.config import load_config
    from refspec.core.hashing import file_digest
    from refspec.native import build as native
    from refspec.pipeline import provenance_inputs as archive

    stock, patched = server_builds["stock"], server_builds["patched"]
    assert len({stock.key, patched.key, native_build.key}) == 3
    assert stock.record["patches"] == [] and stock.record["variant"] == "stock"
    assert [p["name"] for p in patched.record["patches"]] == [p.name for p in native.patch_files()]
    assert "-DLLAMA_BUILD_SERVER=ON" in stock.record["cmake_flags"]
    assert "-DLLAMA_BUILD_SERVER=OFF" in native_build.record["cmake_flags"]  # the default build has no server
    assert not (native_build.lib_dir / "llama-server").exists()
    for b in (stock, patched):
        assert file_digest(b.tool("llama-server")) == b.record["files"]["llama-server"]
        again = native.build_server(native.BuildOptions(), b.record["variant"], quiet=True)
        assert not again.built and again.key == b.key  # cached: nothing compiled
    # the record the workflow keeps (refspec build --record): the libraries and refspec-replay
    record = tmp_path / "BUILD.json"
    record.write_text(json.dumps(native_build.record))
    items = archive.artifacts(load_config(REPO / "config" / "servers.example.yaml"), record, [])
    names = {(i["role"], i["name"]): i["path"] for i in items}
    assert names[("tool", "stock/llama-server")] == str(stock.tool("llama-server"))
    assert names[("tool", "patched/llama-server")] == str(patched.tool("llama-server"))
    plain = archive.artifacts(load_config(REPO / "config" / "config.yaml"), record, [])
    assert not any("llama-server" in i["name"] for i in plain)  # off by default: not pinned
