"""The steps every native build shares: a logged build command, and the record of what it made.

:func:`run_logged` runs one command (CMake's configure or build) with its output in the build's
log and raises :class:`BuildError` with the last lines when it fails; :func:`built_files` digests a
build's libraries (and named programs); :func:`check_record` compares a recorded build
(``BUILD.json``) with the files on disk. :class:`BuiltTree` is what these steps and the tools
built against a build (:mod:`refspec.native.tools`) read of a build's result.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Protocol

from ..core.errors import BuildError
from ..core.hashing import file_digest

BUILD_RECORD = "BUILD.json"


class BuiltTree(Protocol):
    """A build as the shared steps read it: its folder, the folder of its libraries (``build/bin``),
    its record (``BUILD.json``) and the llama.cpp source tree it was built from."""

    root: Path
    lib_dir: Path
    record: dict

    @property
    def src_dir(self) -> Path: ...


def run_logged(cmd: list[str], cwd: Path, log, what: str, progress=None) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    step = re.compile(r"^\[(\d+)/(\d+)\]")
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        tail = (tail + [line])[-40:]
        m = step.match(line)
        if m and progress is not None:
            progress(int(m.group(1)), int(m.group(2)))
    rc = proc.wait()
    log.flush()
    if rc != 0:
        raise BuildError(f"{what} failed (exit {rc}); last lines:\n{''.join(tail)}")


def built_files(lib_dir: Path, tools: tuple[str, ...] | list[str] = ()) -> dict[str, dict]:
    files = {}
    for p in sorted(lib_dir.iterdir()):
        if p.is_symlink() or not p.is_file():
            continue
        if p.name.endswith(".so") or ".so." in p.name or p.name in tools:
            files[p.name] = file_digest(p)
    return files


def check_record(result: BuiltTree) -> list[str]:
    """Differences between the recorded hashes and the files on disk."""
    problems = []
    for name, want in result.record.get("files", {}).items():
        p = result.lib_dir / name
        if not p.exists():
            problems.append(f"{name}: missing")
        elif file_digest(p) != want:
            problems.append(f"{name}: sha256/size differs from {BUILD_RECORD}")
    return problems
