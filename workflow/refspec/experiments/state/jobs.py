"""The crosses' job protocol: one JSON job file per (task, repeat), run in a fresh ``python -c``
process started through :func:`refspec.engine.spawn.spawn` (the workers' scrubbed environment,
the job's device selection added), its result read back from a JSON file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ...core.errors import DecodeError, RefspecError
from ...core.fsutil import atomic_write_text
from ...engine.spawn import spawn
from ...native.runtime import load
from .receiver import run_job

JOB_CODE = (
    "import sys; from refspec.experiments.state.jobs import job_main; sys.exit(job_main(sys.argv[1], sys.argv[2]))"
)


def job_main(job_path: str, out_path: str) -> int:
    """The job process's entry point: load the job's native library, run the job, write its result."""
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    try:
        load(job.get("lib_dir"))
        res = run_job(job)
    except RefspecError as e:
        # contract: the job process's own error line (job_main is the main of JOB_CODE's process)
        print(f"refspec state job: error: {e}", file=sys.stderr)
        return e.exit_code
    atomic_write_text(out_path, json.dumps(res, sort_keys=True) + "\n")
    return 0


def spawn_job(job: dict, workdir: str | Path, tag: str, *, timeout: float | None = None) -> dict:
    """Run one job in a fresh Python process; return its result (raise on failure)."""
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    jp, op = wd / f"{tag}.job.json", wd / f"{tag}.out.json"
    atomic_write_text(jp, json.dumps(job, sort_keys=True, indent=1) + "\n")
    if op.exists():
        op.unlink()
    lib_dir = job.get("lib_dir") or os.environ.get("LLAMA_CPP_LIB_PATH")
    if not lib_dir:
        load()
        lib_dir = os.environ["LLAMA_CPP_LIB_PATH"]
    log_path = wd / f"{tag}.log"
    log_path.write_bytes(b"")
    # the job's paths are the caller's: the job process runs in the caller's folder
    proc = spawn(
        [sys.executable, "-c", JOB_CODE, str(jp), str(op)],
        lib_dir,
        int(job.get("threads", 1)),
        log_path=log_path,
        cwd=Path.cwd(),
        extra=job.get("env") or None,
    )
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        proc.kill()
        proc.wait()
        raise DecodeError(f"state job {tag} did not finish within {timeout} s (log {log_path})") from e
    if rc != 0 or not op.is_file():
        tail = log_path.read_text(errors="replace")[-2000:]
        raise DecodeError(f"state job {tag} failed (exit {rc}):\n{tail}")
    return json.loads(op.read_text(encoding="utf-8"))
