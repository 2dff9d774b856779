"""The Vulkan backend for real: the pinned build, device selection, offload and its refusal,
and what the device does with the attention layouts (lavapipe on a machine without a GPU).

* The build: Debian's runtime, the pinned header packages (sha256) in the build key and record,
  ``libggml-vulkan`` among the built libraries.
* The device is chosen explicitly: ``native.vulkan_device`` becomes ``GGML_VK_VISIBLE_DEVICES``
  (ggml-vulkan skips a CPU-type device such as lavapipe unless that variable names it); a
  different value in the environment is a configuration error.
* Offload: a worker asked for every layer holds all 31 offloadable layers on ``Vulkan0`` and
  every row says so; with the device hidden (the variable unset, as a user who forgets it) the
  same worker holds 0 and the driver refuses to time it (exit 5, ledgered).
* The layouts: QB's lifted query axis is refused on the device at graph build, naming the
  device and the operator (ggml-vulkan supports no MUL_MAT whose operands differ in dim 3),
  never run on the CPU in its place; PQ and QH (the queries folded into the head batch axis,
  which the device broadcasts) run on the device and reproduce R.
* Admission on the device observes the same: qb's matmuls at q >= 2 are ``false`` with the
  CPU fallback observed; at q = 1 and for pq and qh they run on ``Vulkan0``.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from refspec.core.arms import load_arms
from refspec.core.config import config_of
from refspec.core.errors import EXIT_RUNTIME, ConfigError, PlacementError
from refspec.core.panels import Task
from refspec.core.paths import REPO_ROOT, package_path
from refspec.engine.context import Planned, PromptBook, RunContext
from refspec.engine.driver import run_block
from refspec.engine.journal import Journal
from refspec.experiments import bitwise, operands, replay_runner
from refspec.native import build as native
from refspec.native import vulkan
from refspec.provenance.ledger import Ledger
from support.arms import FAMILY, one_thread_arms
from support.operandcases import random_case

pytestmark = pytest.mark.vulkan

OFFLOADABLE = 31  # SmolLM2-135M: 30 repeating layers and the output layer


def _config(tmp_path: Path, **extra) -> Path:
    cfg = {"family": FAMILY, "native": {"backend": "vulkan", "vulkan_device": 0}, "threads": 2, **extra}
    p = tmp_path / "vulkan.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _refspec(args: list[str], env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = package_path()
    return subprocess.run(
        [sys.executable, "-m", "refspec.cli", *args],
        cwd=REPO_ROOT,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --------------------------------------------------------------------------- no device needed


def test_header_source_is_derived_from_the_machines_own_entry():
    deb822 = (
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n"
    )
    entry = vulkan.debian_source_entry(deb822, "trixie")
    assert "Suites: trixie\n" in entry and "Components: main\n" in entry
    assert "URIs: http://mirror.example/debian\n" in entry and "security" not in entry
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in entry
    one_line = "# comment\ndeb http://sec.example/debian-security bookworm-security main\ndeb [arch=amd64] http://m.example/debian bookworm main\n"
    assert vulkan.debian_source_entry(one_line, "trixie") == "deb [arch=amd64] http://m.example/debian trixie main\n"
    assert vulkan.debian_source_entry("deb http://x/debian-security bookworm-security main\n", "trixie") is None


def test_device_is_selected_by_the_config(monkeypatch):
    monkeypatch.delenv(vulkan.DEVICE_VAR, raising=False)
    assert vulkan.device_env(None) == {}
    assert vulkan.device_env(config_of({"family": "smollm2-135m", **{"native": {"backend": "cpu"}}})) == {}
    assert vulkan.device_env(config_of({"family": "smollm2-135m", **{"native": {"backend": "vulkan"}}})) == {
        vulkan.DEVICE_VAR: "0"
    }
    assert vulkan.device_env(
        config_of({"family": "smollm2-135m", **{"native": {"backend": "vulkan", "vulkan_device": 2}}})
    ) == {vulkan.DEVICE_VAR: "2"}
    monkeypatch.setenv(vulkan.DEVICE_VAR, "1")
    with pytest.raises(ConfigError, match="vulkan_device is 0"):
        vulkan.device_env(config_of({"family": "smollm2-135m", **{"native": {"backend": "vulkan"}}}))
    monkeypatch.setenv(vulkan.DEVICE_VAR, "0")
    assert vulkan.device_env(config_of({"family": "smollm2-135m", **{"native": {"backend": "vulkan"}}})) == {
        vulkan.DEVICE_VAR: "0"
    }


def test_header_pins_are_in_the_build_key(monkeypatch):
    opts = native.BuildOptions(backend="vulkan")
    key = native.build_key(opts)
    assert native.build_key(native.BuildOptions()) != key
    other = list(vulkan.HEADER_DEBS)
    other[0] = (*other[0][:3], "0" * 64)
    monkeypatch.setattr(vulkan, "HEADER_DEBS", tuple(other))
    assert native.build_key(opts) != key


def test_vulkaninfo_summary_is_parsed():
    text = (
        "Devices:\n========\nGPU0:\n\tapiVersion         = 1.3.230\n\tdriverVersion      = 0.0.1\n"
        "\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU\n\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)\n"
        "\tdriverID           = DRIVER_ID_MESA_LLVMPIPE\n\tdriverName         = llvmpipe\n"
        "\tdriverInfo         = Mesa 22.3.6 (LLVM 15.0.6)\n"
        "GPU1:\n\tapiVersion         = 1.4.0\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU\n"
        "\tdeviceName         = NVIDIA H200\n"
    )
    devs = vulkan.parse_vulkaninfo(text)
    assert [d["index"] for d in devs] == [0, 1]
    assert devs[0]["name"].startswith("llvmpipe") and devs[0]["api_version"] == "1.3.230"
    assert devs[0]["driver_info"] == "Mesa 22.3.6 (LLVM 15.0.6)"
    assert vulkan.is_software_device(devs[0]["name"]) and not vulkan.is_software_device(devs[1]["name"])


# --------------------------------------------------------------------------- the real device


def test_build_record_pins_the_headers(vulkan_build):
    rec = vulkan_build.record
    assert "-DGGML_VULKAN=ON" in rec["cmake_flags"]
    inc = next(f for f in rec["cmake_flags"] if f.startswith("-DVulkan_INCLUDE_DIR="))
    assert "vulkan-headers" in inc and Path(inc.split("=", 1)[1], "vulkan", "vulkan.hpp").is_file()
    assert [h["sha256"] for h in rec["host_setup"]["headers"]] == [d[3] for d in vulkan.HEADER_DEBS]
    assert rec["host_setup"]["glslc"] and "shaderc" in rec["host_setup"]["glslc"]
    assert any(n.startswith("libggml-vulkan.so") for n in rec["files"]), sorted(rec["files"])
    assert vulkan_build.key != native.build_key(native.BuildOptions())


# a short prompt of valid token IDs: the reference prefills one token per graph, which on lavapipe
# costs a graph build and a device submission per prompt token
SHORT_PROMPT = (1, 4093, 1145, 30, 2, 1, 520, 1035, 28, 253)


def _short_panel(tmp_path: Path) -> Path:
    p = tmp_path / "short-panel.jsonl"
    p.write_text(json.dumps({"task_id": "short/0", "prompt_ids": list(SHORT_PROMPT)}) + "\n")
    return p


def _ctx(tmp_path, lib_dir, family_files, session):
    tasks = [Task("short/0", prompt_ids=SHORT_PROMPT)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    arms_file = one_thread_arms(tmp_path / "arms.yaml")
    ctx = RunContext(
        campaign="confirmation",
        family=FAMILY,
        session=session,
        files=family_files,
        lib_dir=lib_dir,
        out_dir=tmp_path,
        journal=Journal(tmp_path / "journal.jsonl"),
        ledger=Ledger(tmp_path / "ledger.jsonl"),
        prompts=PromptBook(tasks),
        arms_file=arms_file,
        warmup_cap=1,
    )
    return ctx, load_arms(arms_file)["R"].with_(gpu_layers=-1), tasks


def test_worker_offloads_every_layer_and_refuses_without_the_device(tmp_path, vulkan_build, family_files, monkeypatch):
    """Both outcomes on the same machine: the device selected, then hidden."""
    monkeypatch.setenv(vulkan.DEVICE_VAR, "0")
    ctx, arm, tasks = _ctx(tmp_path / "on", vulkan_build.lib_dir, family_files, "s-vk")
    recs = run_block(ctx, arm, [Planned(t.task_id, 2, 1) for t in tasks])
    rows = [r["row"] for r in recs]
    assert [r["status"] for r in rows] == ["excluded_warmup", "ok"]
    for r in rows:
        assert r["device"] == "Vulkan0" and r["gpu_layers"] == OFFLOADABLE, r
        assert "llvmpipe" in r["device_description"]
    start = next(r for r in Ledger(tmp_path / "on" / "ledger.jsonl").records() if r["kind"] == "worker_start")
    assert start["device"] == "Vulkan0" and start["gpu_layers"] == OFFLOADABLE

    # hidden: ggml-vulkan skips the CPU-type lavapipe device when no variable names it
    monkeypatch.delenv(vulkan.DEVICE_VAR)
    ctx, arm, tasks = _ctx(tmp_path / "off", vulkan_build.lib_dir, family_files, "s-vk-hidden")
    with pytest.raises(PlacementError) as e:
        run_block(ctx, arm, [Planned(t.task_id, 2, 1) for t in tasks])
    assert e.value.exit_code == EXIT_RUNTIME
    assert f"0 of {OFFLOADABLE} layers" in str(e.value) and "refusing to time" in str(e.value)
    led = Ledger(tmp_path / "off" / "ledger.jsonl").records()
    assert led[-1]["kind"] == "failure" and "placement refused" in led[-1]["reason"]
    assert not [r for r in Journal(tmp_path / "off" / "journal.jsonl").records() if r.get("type") == "request"]


def test_in_process_decode_refuses_a_hidden_device(tmp_path, vulkan_build, family_files):
    env = {k: v for k, v in os.environ.items() if k != vulkan.DEVICE_VAR}
    env["VK_ICD_FILENAMES"] = str(tmp_path / "no-driver.json")  # the loader finds no driver at all
    cfg = _config(tmp_path)
    # the config selects device 0, but no driver offers one: nothing may run on the CPU instead
    r = _refspec(["decode", "--config", str(cfg), "--panel", "humaneval:0-0", "--arms", "R", "--cap", "2"], env=env)
    assert r.returncode == EXIT_RUNTIME, r.stderr[-2000:]
    assert f"0 of {OFFLOADABLE} layers asked for are on a device" in r.stderr


def test_qb_is_refused_on_the_device_and_pq_and_qh_reproduce_r(tmp_path, vulkan_build, family_files):
    cfg = _config(tmp_path)
    out = tmp_path / "rows.json"
    r = _refspec(
        [
            "decode",
            "--config",
            str(cfg),
            "--panel",
            str(_short_panel(tmp_path)),
            "--arms",
            "R,M_pq,M_qh",
            "--cap",
            "6",
            "--json",
            str(out),
        ]
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "target on Vulkan0 (31/31 layers offloaded)" in r.stderr
    rows = json.loads(out.read_text())
    by = {row["arm"]: row for row in rows}
    assert by["M_pq"]["device"] == "Vulkan0" and by["M_pq"]["gpu_layers"] == OFFLOADABLE
    assert by["M_pq"]["qualified"] is True and by["R"]["n"] == 6
    assert by["M_qh"]["device"] == "Vulkan0" and by["M_qh"]["gpu_layers"] == OFFLOADABLE
    assert by["M_qh"]["qualified"] is True

    # refused before any request of the arm: the worker's probe meets the graph-build guard
    r = _refspec(
        ["decode", "--config", str(cfg), "--panel", str(_short_panel(tmp_path)), "--arms", "R,M3", "--cap", "1"]
    )
    assert r.returncode == EXIT_RUNTIME, r.stderr[-3000:]
    assert "arm M3: layout qb refused on Vulkan0" in r.stderr
    assert "attention layout qb: device Vulkan0 does not support MUL_MAT kq-0" in r.stderr


def test_qh_equals_pq_bitwise_on_the_device(tmp_path, vulkan_build, monkeypatch):
    """On Vulkan0 QH reduces every dot product in PQ's kernel: QK, softmax and AV bitwise equal at
    q = 1..4 over SmolLM2's GQA shape (h 9, h_kv 3: QH's batch ratios 3, 6, 9 and 12 take p021's
    grouped and one-entry variants). With a contiguous Q view the device took its generic mat-vec
    and QK differed from PQ by millions of ULP. MQ's batched matmul at q >= 2 must differ from PQ
    on the device, or the comparison could not tell a layout that fell back to MQ's numerics."""
    monkeypatch.setenv(vulkan.DEVICE_VAR, "0")
    mq_differs = set()
    for nq in (1, 2, 3, 4):
        q, k, v, m = random_case(nq, 96, h=9, hkv=3, seed=40 + nq)
        p = tmp_path / f"q{nq}.rsop"
        operands.write_operands(p, operands.make_operands(q, k, v, m, kv_size=104))
        # one query width per run of the tool, as in E1 (jobs of four widths in one run, mq among
        # the layouts, ended in a heap corruption on lavapipe)
        report = replay_runner.run_replay(
            vulkan_build.replay_tool, [replay_runner.ReplayRun(p, layouts=("mq", "pq", "qh"))], backend="Vulkan0"
        )
        assert report["backend"]["device"] == "Vulkan0"
        (job,) = report["jobs"]
        assert job["status"] == "ok", job
        by = {ev["layout"]: ev for ev in job["evaluations"]}
        assert all(ev["status"] == "ok" and ev["fallback"] is False for ev in by.values()), by
        st = {lay: operands.read_stages(ev["stages"]) for lay, ev in by.items()}
        for s in operands.STAGES:
            c = bitwise.compare(st["pq"][s], st["qh"][s])
            assert c.bitwise_equal, (nq, s, c.as_dict())
        if not bitwise.compare(st["mq"]["kq"], st["pq"]["kq"]).bitwise_equal:
            mq_differs.add(nq)
    assert mq_differs == {2, 3, 4}


def test_admission_on_the_device_observes_the_fallback(tmp_path, vulkan_build, family_files):
    cfg = _config(tmp_path)
    out = tmp_path / "adm"
    r = _refspec(
        ["admission", "--config", str(cfg), "--backend", "auto", "--n-kv", "32", "--queries", "1-2", "--out", str(out)]
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rows = json.loads((out / "admission.json").read_text())["rows"]
    cell = {(x["layout"], x["q"], x["op"]): x for x in rows}
    assert all(x["device"] == "Vulkan0" for x in rows)
    qb2 = cell[("qb", 2, "qk_mul_mat")]
    assert qb2["verdict"] == "false" and qb2["supports_main"] is False
    assert qb2["observed"] == "CPU" and qb2["fallback"] is True
    assert cell[("qb", 2, "av_mul_mat")]["verdict"] == "false"
    for key in [("qb", 1, "qk_mul_mat"), ("pq", 2, "qk_mul_mat"), ("mq", 2, "qk_mul_mat")]:
        assert cell[key]["verdict"] == "unknown" and cell[key]["observed"] == "Vulkan0", cell[key]
    # qh: every node of the lifted shape on the device, none on the CPU
    qh = [x for x in rows if x["layout"] == "qh"]
    assert {x["q"] for x in qh} == {1, 2} and qh
    for x in qh:
        assert x["verdict"] == "unknown" and x["observed"] == "Vulkan0" and x["fallback"] is False, x
    # the graph sizes of the family's target on the device: QB's two-row caller is refused at graph
    # build (and the callers after it still run on the same context), QH's graph does not grow
    size = {(r["layout"], int(r["q"])): r for r in csv.DictReader((out / "graph_size.csv").open())}
    assert size[("qb", 2)]["status"] == "refused at build", size[("qb", 2)]
    assert "device Vulkan0 does not support MUL_MAT" in size[("qb", 2)]["reason"]
    assert size[("qb", 1)]["status"] == size[("qh", 1)]["status"] == size[("qh", 2)]["status"] == "ok"
    assert all(r["device"] == "Vulkan0" for r in size.values())
    assert size[("qh", 1)]["dispatches"] == size[("qh", 2)]["dispatches"]
    assert int(size[("pq", 2)]["dispatches"]) > int(size[("pq", 1)]["dispatches"])


def test_manifest_records_the_device_and_the_headers(tmp_path, vulkan_build, monkeypatch):
    from refspec.provenance.manifest import build_manifest

    monkeypatch.setenv(vulkan.DEVICE_VAR, "0")
    cfg = {"family": FAMILY, "native": {"backend": "vulkan", "vulkan_device": 0}}
    m = build_manifest([], cfg, include_source=False, include_environment=False)
    vk = m["buildDefinition"]["internalParameters"]["vulkan"]
    assert vk["selected"]["name"].startswith("llvmpipe") and vk["selected"]["api_version"]
    assert vk["selected"]["driver_info"].startswith("Mesa") and vk["software_device"] is True
    assert [h["sha256"] for h in vk["headers"]] == [d[3] for d in vulkan.HEADER_DEBS]
    assert vk["glslc"] and vk["env"] == {vulkan.DEVICE_VAR: "0"}
