"""Running the native replay tool (``refspec-replay``) over operand files: which tool
(:func:`resolve_tool`), the ggml device it uses on each backend (:data:`BACKEND_DEVICES`), one
batch of :class:`ReplayRun` in one process (:func:`run_replay`) and the faults it can inject
(:data:`FAULTS`)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import Config
from ..core.errors import IntegrityError, ReplayToolError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file
from ..core.layouts import REPLAYED_LAYOUTS
from ..native import build as native
from .operands import read_operands

# the ggml device the replay tools use by default on a build of each backend
BACKEND_DEVICES = {"cpu": "CPU", "cuda": "CUDA0", "vulkan": "Vulkan0"}
FAULTS = ("gqa_interleaved", "mask_shared", "output_swapped", "stride_off_by_one")


@dataclass
class ReplayRun:
    input: str | Path
    layouts: Sequence[str] = REPLAYED_LAYOUTS
    fault: str = "none"
    out_prefix: str | Path | None = None
    write_stages: bool = True

    def as_json(self) -> dict[str, Any]:
        for lay in self.layouts:
            if lay not in REPLAYED_LAYOUTS:
                raise UsageError(f"unknown layout {lay!r}")
        if self.fault != "none" and self.fault not in FAULTS:
            raise UsageError(f"unknown fault {self.fault!r}")
        d: dict[str, Any] = {
            "input": str(self.input),
            "layouts": list(self.layouts),
            "fault": self.fault,
            "write_stages": self.write_stages,
        }
        if self.out_prefix is not None:
            d["out_prefix"] = str(self.out_prefix)
        return d


def run_replay(
    tool: str | Path,
    jobs: Iterable[ReplayRun],
    *,
    backend: str = "CPU",
    threads: int = 1,
    workdir: str | Path | None = None,
    timeout: float | None = None,
    check_inputs: bool = True,
    validate: bool = True,
    attempts: int = 1,
) -> dict[str, Any]:
    """Run the replay tool once over a batch of jobs and return its JSON report.

    A tool process killed by a signal (negative exit status) observed nothing: with ``attempts``
    above one it runs again in a fresh process, at most that often, and each killed attempt is
    listed in the report's ``tool_crashes`` (``attempt``, ``returncode``, ``error``); any other
    failure, or a kill on the last attempt, raises :class:`ReplayToolError`.

    With ``validate`` every operand file is read and validated first (:func:`read_operands`):
    a wrong shape, a truncated tensor or a non-finite masked-in value raises
    :class:`OperandError` and nothing runs. Operand files are hashed before and after the run;
    a change is an :class:`IntegrityError`. Errors the tool meets inside a job are reported in
    the job's entry (``status: error``), not raised.
    """
    jobs = list(jobs)
    if validate:
        for j in {str(j.input) for j in jobs}:
            read_operands(j)
    tmp_ctx = tempfile.TemporaryDirectory(prefix="refspec-replay-") if workdir is None else None
    wd = Path(tmp_ctx.name if tmp_ctx else workdir)  # type: ignore[arg-type]
    wd.mkdir(parents=True, exist_ok=True)
    try:
        before = {str(j.input): sha256_file(j.input) for j in jobs} if check_inputs else {}
        jobs_path = wd / "jobs.json"
        report_path = wd / "report.json"
        atomic_write_text(jobs_path, json.dumps([j.as_json() for j in jobs]))
        cmd = [
            str(tool),
            "--backend",
            backend,
            "--threads",
            str(threads),
            "--jobs",
            str(jobs_path),
            "--report",
            str(report_path),
        ]
        crashes: list[dict[str, Any]] = []
        for attempt in range(1, attempts + 1):
            report_path.unlink(missing_ok=True)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except FileNotFoundError as e:
                raise ReplayToolError(f"replay tool not found: {tool}") from e
            except subprocess.TimeoutExpired as e:
                raise ReplayToolError(f"replay tool timed out after {timeout} s") from e
            if proc.returncode in (0, 1) and report_path.exists():
                break
            tail = (proc.stderr or "")[-2000:]
            err = f"replay tool failed with exit status {proc.returncode}: {tail}"
            if proc.returncode >= 0 or attempt == attempts:
                raise ReplayToolError(err)
            crashes.append({"attempt": attempt, "returncode": proc.returncode, "error": err[-1000:]})
        report = json.loads(report_path.read_text())
        report["tool_crashes"] = crashes
        report["stderr"] = proc.stderr[-4000:] if proc.stderr else ""
        if check_inputs:
            for path, digest in before.items():
                if sha256_file(path) != digest:
                    raise IntegrityError(f"operand file changed during replay: {path}")
            report["input_sha256"] = before
        return report
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()


def resolve_tool(tool: str | Path | None = None, config: Config | None = None) -> Path:
    """The replay tool to use: an explicit path, ``REFSPEC_REPLAY_TOOL``, or the one that
    :func:`refspec.native.build.build` builds with the configured llama.cpp (cached)."""
    if tool:
        p = Path(tool)
        if not p.exists():
            raise UsageError(f"replay tool not found: {p}")
        return p
    env = os.environ.get("REFSPEC_REPLAY_TOOL")
    if env:
        return resolve_tool(env)
    return native.current(config).replay_tool
