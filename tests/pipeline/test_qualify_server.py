"""``refspec qualify server``: a llama-server against its own micro-batch-1 reference, end to
end on refspec's stock llama-server build of the pinned source, with a sealed archive that
report/check.py accepts. The end-to-end test is of the ``server_build`` opt-in group (it builds the
stock llama-server, or finds it cached: ``./run test -m server_build``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO_ROOT as REPO


def qualify(*args, cwd=REPO, timeout=1800):
    return subprocess.run(
        [sys.executable, "-m", "refspec.cli", "qualify", "server", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def stock_server():
    from refspec.native import build as native

    return native.build_server(native.BuildOptions(), "stock", quiet=True).tool("llama-server")


def test_usage_errors_exit_2(tmp_path, family_files):
    target = family_files.target.path
    p = qualify("--url", "http://127.0.0.1:9", "--model", target, "--out", tmp_path / "a")
    assert p.returncode == 2 and "--reference-url" in p.stderr
    p = qualify("--server-binary", tmp_path / "nope", "--model", target, "--out", tmp_path / "b")
    assert p.returncode == 2 and "no such file" in p.stderr
    p = qualify("--server-binary", tmp_path / "nope", "--out", tmp_path / "c")
    assert p.returncode == 2 and "--model" in p.stderr


@pytest.mark.server_build
def test_qualify_stock_server_end_to_end(tmp_path, stock_server, family_files):
    out = tmp_path / "q"
    draft = family_files.draft(family_files.default_draft).path
    p = qualify(
        "--server-binary", stock_server, "--model", family_files.target.path, "--draft", draft,
        "--panel", "humaneval:0-1", "--cap", "16", "--out", out, "--json", "--no-progress",
    )  # fmt: skip
    assert p.returncode in (0, 1), p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["reference"] == "S_ref" and doc["exit"] == p.returncode
    vs = {v["arm"]: v for v in doc["verdicts"]}
    assert set(vs) == {"S_ub512", "S_spec"}
    for v in vs.values():
        assert v["required"] == 2 and 0 <= v["matching"] <= 2 and v["median_ratio"] > 0
        assert (v["first_divergence"] is None) == v["reproduces"]
    assert vs["S_spec"]["acceptance"] is not None and vs["S_ub512"]["acceptance"] is None
    assert p.returncode == (0 if all(v["reproduces"] for v in vs.values()) else 1)
    # the reference ran as -ub 1 -np 1 without a draft (this server aborts at -b 1), same binary and model
    ready = json.loads(next((out / "campaigns/confirmation/workers").glob("*S_ref.ready.json")).read_text())
    cmd = ready["command"]
    assert cmd[0] == str(Path(stock_server).resolve()) and "-md" not in cmd
    assert [cmd[cmd.index(f) + 1] for f in ("-ub", "-np")] == ["1", "1"] and "-b" not in cmd
    plan = json.loads((out / "archive" / "plan.json").read_text())
    assert plan["campaigns"]["confirmation"]["definition"]["reference"] == "S_ref"
    chk = subprocess.run(
        [sys.executable, "-I", "-S", str(REPO / "report/check.py"), str(out / "archive"), "--pubkey", str(out / "signer.pub"), "--quiet"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert chk.returncode == 0, chk.stdout + chk.stderr
