"""The programs built against a native build's libraries.

refspec's own tools (``native/tools``, :data:`NATIVE_TOOLS`): ``refspec-replay``, the attention
replay (E1, audit, admission), and ``refspec-opreplay``, the single-operation replay (projection
replay), built by :func:`build_replay_tool` in the build's folder under ``tools/<key16>``
(:func:`replay_tool_key`: their sources, the ggml libraries they link, the headers they compile
against). Upstream ``llama-quantize`` and ``llama-speculative-simple`` (:data:`UPSTREAM_TOOLS`) are
compiled in the build's own tree on first use (:func:`build_upstream_tool`) and recorded in
``TOOLS.json``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..core.errors import BuildError
from ..core.fsutil import atomic_write_text
from ..core.hashing import file_digest, sha256_file, sha256_json
from ..core.paths import REPO_ROOT
from .cmake import BuiltTree, check_record, run_logged

# upstream programs of the same build tree, compiled on first use (BuildResult.tool): they link
# llama-common, which is half of the build's compile time and nothing else needs
UPSTREAM_TOOLS = ("llama-quantize", "llama-speculative-simple")
TOOLS_RECORD = "TOOLS.json"
# refspec's own native tools (native/tools), built against the patched ggml of every build:
# the attention replay (E1, audit, admission) and the single-operation replay (projection replay)
REPLAY_TOOL = "refspec-replay"
OPREPLAY_TOOL = "refspec-opreplay"
NATIVE_TOOLS = {REPLAY_TOOL: "replay_tool", OPREPLAY_TOOL: "opreplay_tool"}  # program -> its BUILD.json key
TOOLS_SRC = REPO_ROOT / "native" / "tools"


def _ggml_libs(lib_dir: Path) -> list[Path]:
    libs = sorted({p.resolve() for p in lib_dir.glob("libggml*.so*") if p.is_file()})
    if not libs:
        raise BuildError(f"no libggml*.so in {lib_dir}")
    return libs


def replay_tool_key(result: BuiltTree) -> str:
    """sha256 over the tool's sources, the ggml libraries it links and the headers it compiles against."""
    src = result.src_dir
    tool_files = sorted(p for p in TOOLS_SRC.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    headers = sorted((src / "ggml" / "include").glob("*.h")) + [src / "vendor" / "nlohmann" / "json.hpp"]
    return sha256_json(
        {
            "tool": {str(p.relative_to(TOOLS_SRC)): sha256_file(p) for p in tool_files},
            "libs": {p.name: sha256_file(p) for p in _ggml_libs(result.lib_dir)},
            "headers": {p.name: sha256_file(p) for p in headers if p.exists()},
        }
    )


def _rpath_link_flags(result: BuiltTree) -> list[str]:
    """Where the linker finds what the backend libraries need (``libggml-cuda`` needs cuBLAS and
    cudart of the toolkit the build used, which need not be on the linker's path: the cached
    toolkit copy with cuBLAS merged in never is). Link-time only; nothing is embedded."""
    flags = result.record.get("cmake_flags", [])
    roots = [f.split("=", 1)[1] for f in flags if f.startswith("-DCUDAToolkit_ROOT=")]
    roots += [t for t in [result.record.get("host_setup", {}).get("toolkit")] if t]
    dirs = [
        str(Path(r) / d) for r in roots for d in ("lib64", "lib", "targets/x86_64-linux/lib") if (Path(r) / d).is_dir()
    ]
    return [f"-DCMAKE_EXE_LINKER_FLAGS={' '.join(f'-Wl,-rpath-link,{d}' for d in dirs)}"] if dirs else []


def build_replay_tool(result: BuiltTree, *, jobs: int = 1) -> Path:
    """Configure and build ``native/tools`` (:data:`NATIVE_TOOLS`) against a built llama.cpp;
    returns ``refspec-replay``'s path (``refspec-opreplay`` is beside it).

    Kept in the build's folder under ``tools/<key16>`` by :func:`replay_tool_key`: a second
    call with the same sources and libraries rebuilds nothing; a record that does not match
    its binaries is rebuilt.
    """
    src, lib_build = result.src_dir.resolve(), result.lib_dir.parent.resolve()
    if not (src / "ggml" / "include" / "ggml.h").exists():
        raise BuildError(f"{src} is not a llama.cpp source tree (no ggml/include/ggml.h)")
    key = replay_tool_key(result)
    root = result.root / "tools"
    final = root / key[:16]
    exe, stamp = final / REPLAY_TOOL, final / "build.json"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lockf:  # one builder at a time; the others find its tool
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if all((final / name).exists() for name in NATIVE_TOOLS) and stamp.exists():
            rec = json.loads(stamp.read_text())
            if rec.get("key") == key and rec.get("files") == {n: file_digest(final / n) for n in NATIVE_TOOLS}:
                return exe
        work = Path(tempfile.mkdtemp(prefix=f"{key[:16]}.", dir=root))
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        with open(work / "build.log", "w") as log:
            run_logged(
                [
                    "cmake",
                    "-S",
                    str(TOOLS_SRC),
                    "-B",
                    str(work),
                    *gen,
                    f"-DLLAMA_SRC={src}",
                    f"-DLLAMA_BUILD={lib_build}",
                    "-DCMAKE_BUILD_TYPE=Release",
                    *_rpath_link_flags(result),
                ],
                work,
                log,
                f"{REPLAY_TOOL} configure",
            )
            run_logged(["cmake", "--build", str(work), "-j", str(max(1, jobs))], work, log, f"{REPLAY_TOOL} build")
        for name in NATIVE_TOOLS:
            if not (work / name).exists():
                raise BuildError(f"build finished but {name} is missing in {work}")
        atomic_write_text(
            work / "build.json",
            json.dumps(
                {
                    "key": key,
                    "files": {n: file_digest(work / n) for n in NATIVE_TOOLS},
                    "llama_src": str(src),
                    "llama_build": str(lib_build),
                }
            ),
        )
        if final.exists():
            shutil.rmtree(final)
        os.replace(work, final)
    return exe


def build_upstream_tool(result: BuiltTree, name: str) -> Path:
    """Compile upstream ``name`` (:data:`UPSTREAM_TOOLS`) in the build's own tree, once.

    Recorded with its digest in ``TOOLS.json`` beside ``BUILD.json``; the libraries of
    ``BUILD.json`` are checked afterwards, so a tool build that relinked one is an error, not a
    silently different build.
    """
    if name not in UPSTREAM_TOOLS:
        raise BuildError(f"{name!r} is not an upstream tool refspec builds ({', '.join(UPSTREAM_TOOLS)})")
    build_dir = result.lib_dir.parent
    if not (build_dir / "build.ninja").is_file():
        raise BuildError(f"{name}: the build tree of {result.root} is not here (an installed bundle ships bin/ only)")
    record_path = result.root / TOOLS_RECORD
    exe = result.lib_dir / name
    with open(result.root / ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        tools = json.loads(record_path.read_text()) if record_path.exists() else {}
        if name in tools and exe.is_file() and file_digest(exe) == tools[name]:
            return exe
        with open(result.root / f"build-{name}.log", "w") as log:
            run_logged(
                ["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 2), "--target", name],
                result.root,
                log,
                f"{name} build",
            )
        problems = check_record(result)
        if problems:
            raise BuildError(f"building {name} changed the libraries of {result.root}: {'; '.join(problems)}")
        tools[name] = file_digest(exe)
        atomic_write_text(record_path, json.dumps(tools, indent=2, sort_keys=True) + "\n")
    return exe
