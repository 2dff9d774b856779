"""The environment policy and process spawning of every process refspec times or asks for a result.

Workers, server arms and ``state`` jobs start through :func:`spawn`: a fresh session, no
stdin, output appended to a log, and the complete environment built by :func:`process_env`
(nothing else is inherited).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from ..core.fsutil import atomic_write_text
from ..core.paths import cache_dir, package_path

ENV_PASSTHROUGH = ("PATH", "HOME", "VIRTUAL_ENV", "TMPDIR")
# GPU hosts: which devices a process may use and how its libraries are found (SLURM binds
# GPUs through CUDA_VISIBLE_DEVICES and its SLURM_*GPU* variables; some hosts need LD_PRELOAD
# or LD_LIBRARY_PATH for their C++ or CUDA runtime). Kept as they are; nothing else is.
ENV_GPU_PASSTHROUGH = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "SLURM_GPUS",
    "SLURM_GPUS_ON_NODE",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK",
    "SLURM_GPU_BIND",
    "SLURM_GPU_FREQ",
    "SLURM_STEP_GPUS_ON_NODE",
    "GGML_VK_VISIBLE_DEVICES",
)
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def spawn(
    cmd: list[str], lib_dir: str | Path, threads: int, *, log_path: Path, cwd: Path, extra: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start a fresh process under the worker environment policy (:func:`process_env`): its own
    session, no stdin, stdout and stderr appended to ``log_path``. Every process refspec
    times or asks for a result (workers, server arms, state jobs) starts here."""
    env = process_env(lib_dir, threads, extra=extra)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd,
            env=env,
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def process_env(
    lib_dir: str | Path, threads: int, *, extra: dict[str, str] | None = None, base: dict[str, str] | None = None
) -> dict[str, str]:
    """The complete environment of a worker: nothing else is inherited.

    Kept from the driver: PATH, HOME, VIRTUAL_ENV, TMPDIR and the GPU allowlist
    :data:`ENV_GPU_PASSTHROUGH` (device selection, SLURM's GPU binding, LD_PRELOAD and
    LD_LIBRARY_PATH), each when set. Set:
    LANG = LC_ALL = C, PYTHONHASHSEED = 0, PYTHONPATH = the packages' folders (:func:`refspec.core.paths.package_path`),
    PYTHONUNBUFFERED = 1, PYTHONDONTWRITEBYTECODE = 1, LLAMA_CPP_LIB_PATH,
    REFSPEC_CACHE, and the thread variables (OMP_NUM_THREADS = ``threads``,
    BLAS pools = 1). ``extra`` entries are added last.
    """
    base = os.environ if base is None else base
    env = {k: base[k] for k in ENV_PASSTHROUGH + ENV_GPU_PASSTHROUGH if k in base}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "LANG": "C",
            "LC_ALL": "C",
            "PYTHONHASHSEED": "0",
            "PYTHONPATH": package_path(),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LLAMA_CPP_LIB_PATH": str(lib_dir),
            "REFSPEC_CACHE": str(cache_dir()),
        }
    )
    for k in THREAD_VARS:
        env[k] = "1"
    env["OMP_NUM_THREADS"] = str(int(threads))
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


def describe_exit(code: int | None) -> str:
    """A process's exit status in words (``None``: still running)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


def kill_process(proc: subprocess.Popen) -> None:
    """SIGKILL a started process (when it still runs) and reap it."""
    if proc.poll() is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
        proc.wait()


def log_tail(path: Path, n: int = 15) -> str:
    """The last ``n`` lines of a process's log, indented (for error messages)."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in lines[-n:])


# --------------------------------------------------------------------------- process records

PROCESS_RECORD = ".process.json"  # workers/<worker id>.process.json


def _start_ticks(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot, state letter) of a running process, from /proc."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state is field 3, starttime field 22
    try:
        return int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
    except OSError:
        return None


def record_process(folder: Path, worker_id: str, pid: int) -> Path:
    """Write ``<folder>/<worker id>.process.json``: the pid, the worker id and the process's start
    time (clock ticks since boot, and the boot's id), so that a later run can stop exactly this
    process and never another that reuses its pid."""
    st = _start_ticks(pid)
    rec = {"worker": worker_id, "pid": int(pid), "start_ticks": st[0] if st else None, "boot_id": _boot_id()}
    path = Path(folder) / f"{worker_id}{PROCESS_RECORD}"
    atomic_write_text(path, json.dumps(rec, sort_keys=True) + "\n")
    return path


def _matches(rec: dict, worker_id: str, pid: int) -> bool:
    """The running process ``pid`` is the one the record names (same worker, pid, boot and start time)."""
    if rec.get("worker") != worker_id or rec.get("pid") != int(pid) or rec.get("start_ticks") is None:
        return False
    st = _start_ticks(pid)
    return st is not None and st[1] != "Z" and st[0] == rec["start_ticks"] and rec.get("boot_id") == _boot_id()


def kill_recorded(folder: Path, worker_id: str, pid: int) -> bool:
    """SIGKILL a process refspec started and recorded (:func:`record_process`); True if one was stopped.

    Only the process whose record in ``folder`` names this worker id and pid, with the same
    start time, is touched.
    """
    try:
        rec = json.loads((Path(folder) / f"{worker_id}{PROCESS_RECORD}").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(rec, dict) or not _matches(rec, worker_id, pid):
        return False
    try:
        os.kill(int(pid), signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    for _ in range(100):
        st = _start_ticks(pid)
        if st is None or st[1] == "Z" or st[0] != rec["start_ticks"]:
            break
        time.sleep(0.02)
    return True
