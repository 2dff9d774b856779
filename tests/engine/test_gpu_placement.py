"""GPU placement on the host the tests run on, with real workers and the real build.

* The run's GPU setting: ``gpu_layers: auto`` is every layer on ``cuda``/``vulkan`` and none on
  ``cpu``; an arm's own ``gpu_layers`` wins; campaigns write the resolved value into their
  arms file.
* A worker's ready record carries the placement llama.cpp actually made (from its load log and
  ggml's device registry), and every request row carries the device and the offloaded layers.
* Offload that cannot be faked: a worker asked for every layer on a host (or build) without a
  GPU reports 0 offloaded layers, and the driver refuses to time it (PlacementError, exit 5),
  with the refusal in the ledger.
* The worker environment: the GPU allowlist passes (CUDA_VISIBLE_DEVICES, LD_PRELOAD,
  LD_LIBRARY_PATH, SLURM's GPU binding), and nothing else does.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from refspec.core.arms import load_arms
from refspec.core.config import config_of, gpu_layers
from refspec.core.errors import EXIT_RUNTIME, ConfigError, PlacementError
from refspec.core.panels import humaneval_tasks
from refspec.engine.context import Planned, PromptBook, RunContext
from refspec.engine.driver import run_block
from refspec.engine.journal import Journal
from refspec.engine.spawn import ENV_GPU_PASSTHROUGH, ENV_PASSTHROUGH
from refspec.engines.worker.process import WorkerProcess as Worker
from refspec.engines.worker.process import WorkerSpec, placement_problems
from refspec.native import runtime
from refspec.provenance.ledger import Ledger
from support.arms import FAMILY, one_thread_arms


def _cfg(entries: dict):
    """A workflow config of ``entries`` (and the default family), resolved as the commands resolve it."""
    return config_of({"family": FAMILY, **entries})


def test_run_setting_resolves_by_backend():
    assert gpu_layers(_cfg({"native": {"backend": "cpu"}})) == 0
    assert gpu_layers(_cfg({"native": {"backend": "cuda"}})) == -1
    assert gpu_layers(_cfg({"native": {"backend": "vulkan"}, "gpu_layers": "auto"})) == -1
    assert gpu_layers(_cfg({"native": {"backend": "cuda"}, "gpu_layers": "none"})) == 0
    assert gpu_layers(_cfg({"native": {"backend": "cpu"}, "gpu_layers": "all"})) == -1
    assert gpu_layers(_cfg({"native": {"backend": "cuda"}, "gpu_layers": 7})) == 7
    with pytest.raises(ConfigError):
        gpu_layers(_cfg({"gpu_layers": -3}))  # refused by the schema
    assert gpu_layers(None) == 0 and gpu_layers(None, backend="vulkan") == -1
    assert gpu_layers(_cfg({"native": {"backend": "cuda"}, "gpu_layers": "none"}), backend="cpu") == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        _cfg({}).native.backend = "cuda"  # resolved once: nothing below the command changes it
    arm = load_arms()["M3"]
    assert arm.gpu_layers is None
    assert arm.placed(_cfg({"native": {"backend": "cuda"}})).gpu_layers == -1
    assert arm.placed(_cfg({"native": {"backend": "cpu"}})).gpu_layers == 0
    assert arm.with_(gpu_layers=5).placed(_cfg({"native": {"backend": "cuda"}})).gpu_layers == 5


def test_campaign_arms_file_holds_the_resolved_setting(tmp_path):
    from refspec.campaigns.context import apply_overrides, write_arms_file

    arms = apply_overrides(list(load_arms().values())[:3], {}, 1, 16, _cfg({"native": {"backend": "cuda"}}))
    assert {a.gpu_layers for a in arms.values()} == {-1}
    write_arms_file(arms, tmp_path / "arms.yaml")
    back = load_arms(tmp_path / "arms.yaml")
    assert {a.gpu_layers for a in back.values()} == {-1}


def test_model_placement_on_this_host(lib_path, family_files):
    """The CPU build registers no GPU: asking for every layer offloads none, and says so."""
    runtime.load(lib_path)
    devs = runtime.devices()
    assert devs and any(d["type"] == "cpu" for d in devs)
    if runtime.accelerators():
        pytest.skip("hardware: this host has a GPU backend (tests/gpu/check.sh covers it)")
    m = runtime.Model(family_files.target.path, sha256=family_files.target.sha256, n_gpu_layers=-1)
    try:
        p = m.placement
        assert p["requested"] == -1 and p["offloadable"] == m.n_layer + 1 == p["expected"]
        assert p["offloaded"] == 0 and p["device"] == "CPU"
        assert any(k.upper().startswith("CPU") for k in p["buffers_mib"]), p["buffers_mib"]
        arm = load_arms()["R"].with_(gpu_layers=-1)
        problems = placement_problems(arm, {"target": p, "devices": devs})
        assert problems and "0 of" in problems[0] and "no GPU" in problems[0]
        assert (
            placement_problems(
                arm.with_(gpu_layers=0), {"target": {**p, "requested": 0, "expected": 0}, "devices": devs}
            )
            == []
        )
    finally:
        m.close()


def test_placement_log_parser_counts_device_layers():
    """llama.cpp's per-layer lines decide, and a device without weight buffers offloads nothing."""
    runtime.load()
    log = "".join(
        f"load_tensors: layer {i:3d} assigned to device {'CUDA0' if i >= 2 else 'CPU'}, is_swa = 0\n" for i in range(5)
    )
    log += "load_tensors:        CUDA0 model buffer size =   120.50 MiB\n"
    log += "load_tensors:   CPU_Mapped model buffer size =    28.13 MiB\n"
    p = runtime.placement_from_log(log, requested=3, n_layer=4)
    assert p["offloaded"] == 3 and p["expected"] == 3 and p["buffers_mib"] == {"CUDA0": 120.5, "CPU_Mapped": 28.13}
    no_buf = runtime.placement_from_log(log.split("load_tensors:        CUDA0")[0], requested=3, n_layer=4)
    assert no_buf["offloaded"] == 0 and no_buf["device"] == "CPU"


def test_driver_refuses_to_time_without_the_device(tmp_path, lib_path, family_files):
    arms_file = one_thread_arms(tmp_path / "arms.yaml")
    runtime.load(lib_path)
    if runtime.accelerators():
        pytest.skip("hardware: this host has a GPU backend")
    arm = load_arms(arms_file)["R"].with_(gpu_layers=-1)
    tasks = humaneval_tasks([0])
    ctx = RunContext(
        campaign="confirmation",
        family=FAMILY,
        session="s-gpu",
        files=family_files,
        lib_dir=lib_path,
        out_dir=tmp_path,
        journal=Journal(tmp_path / "journal.jsonl"),
        ledger=Ledger(tmp_path / "ledger.jsonl"),
        prompts=PromptBook(tasks),
        arms_file=arms_file,
        warmup_cap=2,
    )
    with pytest.raises(PlacementError) as e:
        run_block(ctx, arm, [Planned(t.task_id, 4, 1) for t in tasks])
    assert e.value.exit_code == EXIT_RUNTIME
    assert "0 of" in str(e.value) and "refusing to time" in str(e.value)
    led = Ledger(tmp_path / "ledger.jsonl").records()
    assert led and led[-1]["kind"] == "failure" and "placement refused" in led[-1]["reason"]
    assert not [r for r in Journal(tmp_path / "journal.jsonl").records() if r.get("type") == "request"]


def test_rows_carry_the_placement(tmp_path, lib_path, family_files):
    arms_file = one_thread_arms(tmp_path / "arms.yaml")
    arm = load_arms(arms_file)["R"].with_(gpu_layers=0)
    tasks = humaneval_tasks([0])
    ctx = RunContext(
        campaign="confirmation",
        family=FAMILY,
        session="s-cpu",
        files=family_files,
        lib_dir=lib_path,
        out_dir=tmp_path,
        journal=Journal(tmp_path / "journal.jsonl"),
        ledger=Ledger(tmp_path / "ledger.jsonl"),
        prompts=PromptBook(tasks),
        arms_file=arms_file,
        warmup_cap=2,
    )
    recs = run_block(ctx, arm, [Planned(t.task_id, 4, 1) for t in tasks])
    rows = [r["row"] for r in recs]
    assert [r["status"] for r in rows] == ["excluded_warmup", "ok"]
    for r in rows:
        assert r["device"] == "CPU" and r["gpu_layers"] == 0 and r["draft_gpu_layers"] is None
        assert r["device_description"]
    start = next(r for r in Ledger(tmp_path / "ledger.jsonl").records() if r["kind"] == "worker_start")
    assert start["device"] == "CPU" and start["gpu_layers"] == 0


def test_worker_environment_allowlist(tmp_path, lib_path, family_files, monkeypatch):
    """A real worker sees the GPU variables it needs and nothing else from the driver's environment."""
    libstdcxx = next(
        (
            p
            for p in ("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/aarch64-linux-gnu/libstdc++.so.6")
            if Path(p).exists()
        ),
        None,
    )
    gpu_vars = {
        "CUDA_VISIBLE_DEVICES": "0",
        "LD_LIBRARY_PATH": str(lib_path),
        "SLURM_JOB_GPUS": "0",
        "SLURM_STEP_GPUS": "0",
        "SLURM_GPUS_ON_NODE": "1",
        "SLURM_GPU_BIND": "closest",
    }
    if libstdcxx:
        gpu_vars["LD_PRELOAD"] = libstdcxx
    foreign = {
        "REFSPEC_SECRET_PROBE": "must-not-pass",
        "CUDA_LAUNCH_BLOCKING": "1",
        "SLURM_JOB_ID": "42",
        "LLAMA_ARG_N_GPU_LAYERS": "0",
        "PYTHONSTARTUP": "/nonexistent",
    }
    for k, v in {**gpu_vars, **foreign}.items():
        monkeypatch.setenv(k, v)
    arms_file = one_thread_arms(tmp_path / "arms.yaml")
    arm = load_arms(arms_file)["R"].with_(gpu_layers=0)
    spec = WorkerSpec(
        family=FAMILY,
        arm=arm,
        files=family_files,
        lib_dir=lib_path,
        worker_id="env-probe",
        run_dir=tmp_path,
        arms_file=arms_file,
        warmup_cap=2,
    )
    w = Worker.start(spec, ready_timeout=300)
    try:
        raw = Path(f"/proc/{w.pid}/environ").read_bytes()
    finally:
        w.stop()
    env = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    for k, v in gpu_vars.items():
        assert env.get(k) == v, f"{k} did not reach the worker"
    for k in foreign:
        assert k not in env, f"{k} leaked into the worker"
    set_by_driver = {
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
    }
    allowed = set(ENV_PASSTHROUGH) | set(ENV_GPU_PASSTHROUGH) | set_by_driver
    assert set(env) <= allowed, f"unexpected variables in the worker: {sorted(set(env) - allowed)}"
    assert os.environ.get("REFSPEC_SECRET_PROBE") == "must-not-pass"


def test_device_check_skips_without_cuda(tmp_path):
    """On a machine without a CUDA device the device check says so and succeeds."""
    import shutil
    import subprocess

    from refspec.core.paths import REPO_ROOT

    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0:
        pytest.skip("hardware: this host has a CUDA device (tests/gpu/check.sh covers it)")
    r = subprocess.run(
        ["bash", str(REPO_ROOT / "tests" / "gpu" / "check.sh"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "no CUDA device: skipped"
    assert not any(tmp_path.iterdir())
    bad = subprocess.run(
        ["bash", str(REPO_ROOT / "tests" / "gpu" / "check.sh"), "--nonsense"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown argument" in bad.stderr
