"""The pinned, patched llama.cpp build.

Steps (each checked, none skipped):

1. fetch the ``llama-cpp-python==0.3.36`` sdist with ``pip download --no-binary :all:``
   and verify its sha256 against the pin;
2. unpack it and apply ``native/patches/*.patch`` in name order to the vendored
   llama.cpp (``git apply --check`` first: a hunk that does not apply is an error);
3. configure and build the shared libraries (``llama``, ``ggml``) with CMake/Ninja; CPU by
   default, ``-DGGML_CUDA=ON`` for ``backend: cuda``, ``-DGGML_VULKAN=ON`` for ``backend: vulkan``
   with the pinned Vulkan headers (:mod:`refspec.native.vulkan`);
4. record ``BUILD.json``: the build key, the inputs' hashes and the sha256 of every
   built library;
5. build ``native/tools`` against those libraries: ``refspec-replay``, recorded in
   ``BUILD.json`` as ``replay_tool``, and ``refspec-opreplay``, recorded as ``opreplay_tool``.

Upstream ``llama-quantize`` and ``llama-speculative-simple`` link ``llama-common`` (about half
of the compile time); nothing in the workflow runs them (models are quantized through the
library's ``llama_model_quantize``), so they are compiled in the same build tree on first use
(``BuildResult.tool``) and recorded in ``TOOLS.json``.

The build lives in ``$REFSPEC_CACHE/native/<key>`` where the key hashes
(sdist sha256, patch hashes, build options). A second call with the same key
checks the recorded hashes and builds nothing.
"""

from __future__ import annotations

import ctypes.util
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.errors import BuildError
from ..core.fetch import fetch_package
from ..core.fsutil import atomic_write_text
from ..core.hashing import file_digest, sha256_file, sha256_json
from ..core.paths import REPO_ROOT, cache_dir
from . import vulkan

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
UPSTREAM_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


@dataclass(frozen=True)
class SdistPin:
    """One ``llama-cpp-python`` sdist that vendors llama.cpp, pinned by sha256."""

    version: str
    sha256: str
    upstream_commit: str
    name: str = SDIST_NAME

    @property
    def file(self) -> str:
        return f"llama_cpp_python-{self.version}.tar.gz"


PINNED_SDIST = SdistPin(SDIST_VERSION, SDIST_SHA256, UPSTREAM_COMMIT)
# an older release (2025-08-15, llama.cpp 4227c9be): the stock llama-server of another version,
# for qualifying a server against its own reference (build_other_server, tests -m other_server)
OLD_SERVER_SDIST = SdistPin(
    "0.3.16",
    "34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6",
    "4227c9be4268ac844921b90f31595f81236bd317",
)
PATCH_DIR = REPO_ROOT / "native" / "patches"

# targets every build provides: the libraries only (everything refspec runs loads them)
LIB_TARGETS = ["llama", "ggml"]
# upstream programs of the same build tree, compiled on first use (BuildResult.tool): they link
# llama-common, which is half of the build's compile time and nothing else needs
UPSTREAM_TOOLS = ("llama-quantize", "llama-speculative-simple")
BUILD_RECORD = "BUILD.json"
TOOLS_RECORD = "TOOLS.json"
# optional: llama-server from the same pinned source, stock (no patches) or patched (build_server)
SERVER_TARGET = "llama-server"
# refspec's own native tools (native/tools), built against the patched ggml of every build:
# the attention replay (E1, audit, admission) and the single-operation replay (projection replay)
REPLAY_TOOL = "refspec-replay"
OPREPLAY_TOOL = "refspec-opreplay"
NATIVE_TOOLS = {REPLAY_TOOL: "replay_tool", OPREPLAY_TOOL: "opreplay_tool"}  # program -> its BUILD.json key
TOOLS_SRC = REPO_ROOT / "native" / "tools"
SERVER_VARIANTS = ("stock", "patched")
# optional: llama.cpp's own tests of the same source (build_tests), in the same two variants: the
# model generator and the state tests that run on its models (tests/test_upstream_suite.py)
TEST_TARGETS = ["test-llama-archs", "test-save-load-state", "test-recurrent-state-rollback", "test-batch-alloc"]


@dataclass(frozen=True)
class BuildOptions:
    backend: str = "cpu"  # cpu | cuda | vulkan
    cuda_arch: str = "90"
    build_type: str = "Release"

    def cmake_flags(self) -> list[str]:
        flags = [
            f"-DCMAKE_BUILD_TYPE={self.build_type}",
            "-DBUILD_SHARED_LIBS=ON",
            "-DGGML_NATIVE=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=ON",
            "-DLLAMA_BUILD_SERVER=OFF",
            "-DLLAMA_BUILD_TOOLS=ON",
            "-DLLAMA_OPENSSL=OFF",
            "-DLLAMA_CURL=OFF",
        ]
        if self.backend == "cuda":
            flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={self.cuda_arch}", "-DGGML_CUDA_FA=OFF"]
        elif self.backend == "vulkan":
            flags += ["-DGGML_VULKAN=ON"]
        elif self.backend != "cpu":
            raise BuildError(f"unknown native backend {self.backend!r} (cpu, cuda or vulkan)")
        return flags

    @classmethod
    def from_config(cls, config: dict | None) -> BuildOptions:
        native = (config or {}).get("native", {}) or {}
        return cls(
            backend=str(native.get("backend", "cpu")),
            cuda_arch=str(native.get("cuda_arch", "90")),
            build_type=str(native.get("build_type", "Release")),
        )


@dataclass
class BuildResult:
    key: str
    root: Path
    lib_dir: Path
    record: dict = field(default_factory=dict)
    built: bool = False
    replay_tool: Path | None = None  # refspec-replay built against these libraries (build() sets it)
    opreplay_tool: Path | None = None  # refspec-opreplay, built with it (build() sets it)

    @property
    def src_dir(self) -> Path:
        return self.root / "src" / "vendor" / "llama.cpp"

    def tool(self, name: str) -> Path:
        """A program of this build: one of refspec's :data:`NATIVE_TOOLS` (``refspec-replay``,
        ``refspec-opreplay``), one the build made (``llama-server`` of a server build), or an
        upstream tool of :data:`UPSTREAM_TOOLS`, compiled into the same build tree on first use
        (the libraries must come out unchanged)."""
        if name in NATIVE_TOOLS:
            path = getattr(self, NATIVE_TOOLS[name])
            if path is None:
                raise BuildError(f"{name} is built by build(), not for this build ({self.root})")
            return path
        if name in self.record.get("files", {}):
            return self.lib_dir / name
        if name in UPSTREAM_TOOLS and "variant" not in self.record:
            return build_upstream_tool(self, name)
        raise BuildError(f"build {self.root} has no program {name!r}")

    def env(self) -> dict[str, str]:
        """Environment entries that make the bindings load the patched libraries."""
        return {"LLAMA_CPP_LIB_PATH": str(self.lib_dir)}


def patch_files() -> list[Path]:
    return sorted(PATCH_DIR.glob("*.patch"))


def build_key(options: BuildOptions, sdist_sha256: str = SDIST_SHA256) -> str:
    return sha256_json(
        {
            "sdist": {"name": SDIST_NAME, "version": SDIST_VERSION, "sha256": sdist_sha256},
            "patches": [{"name": p.name, "sha256": sha256_file(p)} for p in patch_files()],
            "options": asdict(options),
            "flags": options.cmake_flags(),
            "targets": LIB_TARGETS,
            **_host_variant(options),
        }
    )


def _host_variant(options: BuildOptions) -> dict:
    """What of the host enters a build's key: the CUDA toolkit's variant, the pinned Vulkan headers."""
    if options.backend == "cuda":
        return {"cuda_host": cuda_host_variant()}
    if options.backend == "vulkan":
        return {"vulkan_host": vulkan.host_variant()}
    return {}


def cuda_host_variant() -> dict:
    """What of the host changes a CUDA build (without fetching anything): merged cuBLAS, no VMM."""
    nvcc = _nvcc()
    merged = nvcc is not None and not _has_lib(nvcc.parent.parent, "libcublas.so")
    return {"cublas": "==".join(CUBLAS_REQUIREMENT) if merged else "toolkit", "no_vmm": not _driver_present()}


def fetch_sdist(pin: SdistPin = PINNED_SDIST) -> Path:
    """Download (if needed) and verify the pinned sdist (or another pinned release); return its path."""
    return fetch_package(f"{pin.name}=={pin.version}", pin.file, pin.sha256, sdist=True)


def _safe_extract(tar_path: Path, dest: Path) -> None:
    with tarfile.open(tar_path) as tf:
        tf.extractall(dest, filter="data")


def apply_patches(llama_dir: Path, patches: list[Path]) -> list[dict]:
    """Apply patches with ``git apply``; any hunk that does not apply is an error."""
    # the sdist ships a submodule pointer file that would confuse git
    gitfile = llama_dir / ".git"
    if gitfile.is_file():
        gitfile.unlink()
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(llama_dir.parent))
    applied = []
    for patch in patches:
        for args in (["--check"], []):
            proc = subprocess.run(
                ["git", "apply", "--verbose", *args, str(patch)], cwd=llama_dir, capture_output=True, text=True, env=env
            )
            if proc.returncode != 0:
                raise BuildError(f"patch {patch.name} does not apply to the pinned llama.cpp:\n{proc.stderr.strip()}")
        applied.append({"name": patch.name, "sha256": sha256_file(patch)})
    return applied


def _run_logged(cmd: list[str], cwd: Path, log, what: str, progress=None) -> None:
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


def _built_files(lib_dir: Path, tools: tuple[str, ...] | list[str] = ()) -> dict[str, dict]:
    files = {}
    for p in sorted(lib_dir.iterdir()):
        if p.is_symlink() or not p.is_file():
            continue
        if p.name.endswith(".so") or ".so." in p.name or p.name in tools:
            files[p.name] = file_digest(p)
    return files


def check_record(result: BuildResult) -> list[str]:
    """Differences between the recorded hashes and the files on disk."""
    problems = []
    for name, want in result.record.get("files", {}).items():
        p = result.lib_dir / name
        if not p.exists():
            problems.append(f"{name}: missing")
        elif file_digest(p) != want:
            problems.append(f"{name}: sha256/size differs from {BUILD_RECORD}")
    return problems


# cuBLAS for a CUDA toolkit that ships without it (nvcc and cudart only): the registry's wheel of
# the toolkit's major.minor, merged into a cached copy of the toolkit.
CUBLAS_REQUIREMENT = ("nvidia-cublas", "13.0.2.14")


def _is_toolkit(root: Path) -> bool:
    return (root / "bin" / "nvcc").is_file() and any(
        (root / d / "cuda_runtime.h").is_file()
        for d in ("include", "targets/x86_64-linux/include", "targets/sbsa-linux/include")
    )


def _nvcc() -> Path | None:
    """The toolkit's own nvcc (``$CUDA_HOME``, ``$CUDA_PATH``, /usr/local/cuda, else the one on PATH
    when it sits in a toolkit; a wrapper script on PATH is not a toolkit root)."""
    cands = [os.environ.get(k) for k in ("CUDAToolkit_ROOT", "CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    on_path = shutil.which("nvcc")
    if on_path:
        cands.append(str(Path(on_path).resolve().parent.parent))
    for c in cands:
        if c and _is_toolkit(Path(c).resolve()):
            return Path(c).resolve() / "bin" / "nvcc"
    return None


def _has_lib(root: Path, name: str) -> bool:
    return any((root / d / name).exists() for d in ("lib64", "lib", "targets/x86_64-linux/lib"))


def _driver_present() -> bool:
    return ctypes.util.find_library("cuda") is not None


def cuda_host_setup() -> tuple[list[str], dict]:
    """CMake flags this host needs for a CUDA build, and what they were derived from.

    A toolkit without cuBLAS gets a cached copy with the pinned ``nvidia-cublas`` wheel's
    headers and libraries merged in; a host without the driver library (a build machine
    with no GPU) builds with ``GGML_CUDA_NO_VMM`` (ggml's pool then uses plain
    allocations instead of the driver's virtual memory API), so the libraries link here.
    """
    nvcc = _nvcc()
    if nvcc is None:
        raise BuildError("backend cuda needs the CUDA toolkit's nvcc (not on PATH, nor /usr/local/cuda/bin)")
    root = nvcc.parent.parent
    flags: list[str] = []
    facts = {"nvcc": str(nvcc), "toolkit": str(root), "cublas": "toolkit", "driver": _driver_present()}
    if not _has_lib(root, "libcublas.so"):
        root = _toolkit_with_cublas(root)
        flags += [f"-DCUDAToolkit_ROOT={root}", f"-DCMAKE_CUDA_COMPILER={root}/bin/nvcc"]
        facts["cublas"] = "==".join(CUBLAS_REQUIREMENT)
    if not facts["driver"]:
        flags.append("-DGGML_CUDA_NO_VMM=ON")
    return flags, facts


def _toolkit_with_cublas(root: Path) -> Path:
    name, version = CUBLAS_REQUIREMENT
    dest = cache_dir() / "cuda-toolkit" / f"{sha256_json([str(root), name, version])[:16]}"
    if (dest / ".complete").is_file():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".toolkit-", dir=dest.parent))
    try:
        shutil.copytree(root, tmp / "tk", symlinks=True)
        wheels = tmp / "wheels"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(wheels),
                f"{name}=={version}",
            ],
            capture_output=True,
            text=True,
        )
        whl = next(iter(sorted(wheels.glob("*.whl"))), None)
        if r.returncode != 0 or whl is None:
            raise BuildError(f"could not fetch {name}=={version} for the CUDA build: {r.stderr.strip()[-800:]}")
        lib = tmp / "tk" / "lib64"
        lib = lib.resolve() if lib.exists() else (tmp / "tk" / "lib")
        inc = (tmp / "tk" / "include").resolve()
        with zipfile.ZipFile(whl) as z:
            for m in z.infolist():
                parts = Path(m.filename).parts
                if len(parts) < 4 or parts[0] != "nvidia" or m.is_dir() or parts[2] not in ("include", "lib"):
                    continue
                target = (inc if parts[2] == "include" else lib) / Path(*parts[3:])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(m))
        for so in list(lib.glob("libcublas*.so.*")):  # the unversioned names the linker looks for
            plain = lib / (so.name.split(".so.")[0] + ".so")
            if not plain.exists():
                plain.symlink_to(so.name)
        (tmp / "tk").rename(dest)
        (dest / ".complete").write_text(f"{name}=={version} from {whl.name}\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def server_flags(options: BuildOptions) -> list[str]:
    """The build's CMake flags with the server on and its web UI off (no assets, nothing fetched)."""
    flags = [f for f in options.cmake_flags() if not f.startswith("-DLLAMA_BUILD_SERVER=")]
    return flags + ["-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"]


def _variant_key(
    options: BuildOptions, variant: str, flags: list[str], targets: list[str], what: str, sdist_sha256: str
) -> str:
    """Key of an optional build of the pinned source: ``stock`` applies no patch, ``patched`` all of them."""
    if variant not in SERVER_VARIANTS:
        raise BuildError(f"unknown {what} variant {variant!r} ({' or '.join(SERVER_VARIANTS)})")
    patches = patch_files() if variant == "patched" else []
    return sha256_json(
        {
            "sdist": {"name": SDIST_NAME, "version": SDIST_VERSION, "sha256": sdist_sha256},
            "patches": [{"name": p.name, "sha256": sha256_file(p)} for p in patches],
            "options": asdict(options),
            "flags": flags,
            "targets": targets,
            "variant": variant,
            **_host_variant(options),
        }
    )


def server_key(options: BuildOptions, variant: str, sdist_sha256: str = SDIST_SHA256) -> str:
    """Key of the optional ``llama-server`` build: ``stock`` applies no patch, ``patched`` all of them."""
    return _variant_key(options, variant, server_flags(options), [SERVER_TARGET], "llama-server", sdist_sha256)


def tests_flags(options: BuildOptions) -> list[str]:
    """The build's CMake flags with llama.cpp's tests on."""
    flags = [f for f in options.cmake_flags() if not f.startswith("-DLLAMA_BUILD_TESTS=")]
    return flags + ["-DLLAMA_BUILD_TESTS=ON"]


def tests_key(options: BuildOptions, variant: str, sdist_sha256: str = SDIST_SHA256) -> str:
    """Key of the optional build of llama.cpp's tests (:data:`TEST_TARGETS`), ``stock`` or ``patched``."""
    return _variant_key(options, variant, tests_flags(options), TEST_TARGETS, "upstream tests", sdist_sha256)


def _build_variant(
    options: BuildOptions,
    variant: str,
    key: str,
    flags: list[str],
    targets: list[str],
    *,
    jobs: int | None,
    quiet: bool,
) -> BuildResult:
    """Build (or find cached) an optional build of the pinned source (its own folder
    ``$REFSPEC_CACHE/native/<key16>`` with its own libraries next to ``targets``), ``stock`` (no
    patch) or ``patched``; ``key`` is its :func:`_variant_key`."""
    patches = patch_files() if variant == "patched" else []
    return _cached(
        key,
        lambda root, lib_dir: _build_into(
            options,
            key,
            root,
            lib_dir,
            jobs=jobs,
            quiet=quiet,
            patches=patches,
            flags=flags,
            targets=targets,
            tools=targets,
            variant=variant,
        ),
        quiet=quiet,
    )


def build_server(
    options: BuildOptions | None = None, variant: str = "patched", *, jobs: int | None = None, quiet: bool = False
) -> BuildResult:
    """Build (or find cached) ``llama-server`` of the pinned source, ``stock`` or ``patched``.

    A folder of its own (``$REFSPEC_CACHE/native/<key16>``) with its own libraries next to the
    server binary, so the default build never compiles the server.
    """
    options = options or BuildOptions()
    key = server_key(options, variant)
    return _build_variant(options, variant, key, server_flags(options), [SERVER_TARGET], jobs=jobs, quiet=quiet)


def other_server_key(pin: SdistPin, options: BuildOptions | None = None) -> str:
    """Key of the stock ``llama-server`` of another pinned release: its sdist and the build's flags."""
    options = options or BuildOptions()
    return sha256_json(
        {
            "sdist": {"name": pin.name, "version": pin.version, "sha256": pin.sha256},
            "patches": [],
            "options": asdict(options),
            "flags": server_flags(options),
            "targets": [SERVER_TARGET],
            "variant": "stock",
            **_host_variant(options),
        }
    )


def build_other_server(
    pin: SdistPin = OLD_SERVER_SDIST,
    options: BuildOptions | None = None,
    *,
    jobs: int | None = None,
    quiet: bool = False,
) -> BuildResult:
    """Build (or find cached) the stock ``llama-server`` of another pinned ``llama-cpp-python``
    release (:data:`OLD_SERVER_SDIST` by default): the same flags and cache as :func:`build_server`
    (``$REFSPEC_CACHE/native/<key16>``, keyed by the sdist's pin and the flags), no patch applied.
    Flags an older CMake project does not know are reported by CMake as unused and change nothing."""
    options = options or BuildOptions()
    key = other_server_key(pin, options)
    targets = [SERVER_TARGET]
    return _cached(
        key,
        lambda root, lib_dir: _build_into(
            options,
            key,
            root,
            lib_dir,
            jobs=jobs,
            quiet=quiet,
            patches=[],
            flags=server_flags(options),
            targets=targets,
            tools=targets,
            variant="stock",
            pin=pin,
        ),
        quiet=quiet,
    )


def build_tests(
    options: BuildOptions | None = None, variant: str = "patched", *, jobs: int | None = None, quiet: bool = False
) -> BuildResult:
    """Build (or find cached) llama.cpp's own tests (:data:`TEST_TARGETS`) of the pinned source,
    ``stock`` or ``patched``, in a folder of their own with their own libraries next to them;
    ``BuildResult.tool(name)`` names each program."""
    options = options or BuildOptions()
    key = tests_key(options, variant)
    return _build_variant(options, variant, key, tests_flags(options), TEST_TARGETS, jobs=jobs, quiet=quiet)


def build(options: BuildOptions | None = None, *, jobs: int | None = None, quiet: bool = False) -> BuildResult:
    """Build (or find cached) the patched llama.cpp for these options, and ``native/tools``
    against it; the result's record names each tool's key and digest beside the libraries'
    (``replay_tool``, ``opreplay_tool``: :data:`NATIVE_TOOLS`)."""
    options = options or BuildOptions()
    key = build_key(options)
    result = _cached(
        key, lambda root, lib_dir: _build_into(options, key, root, lib_dir, jobs=jobs, quiet=quiet), quiet=quiet
    )
    result.replay_tool = build_replay_tool(result, jobs=jobs or os.cpu_count() or 2)
    result.opreplay_tool = result.replay_tool.parent / OPREPLAY_TOOL
    key = replay_tool_key(result)
    result.record = {
        **result.record,
        **{
            rec_key: {"name": name, "key": key, **file_digest(result.tool(name))}
            for name, rec_key in NATIVE_TOOLS.items()
        },
    }
    return result


def _ggml_libs(lib_dir: Path) -> list[Path]:
    libs = sorted({p.resolve() for p in lib_dir.glob("libggml*.so*") if p.is_file()})
    if not libs:
        raise BuildError(f"no libggml*.so in {lib_dir}")
    return libs


def replay_tool_key(result: BuildResult) -> str:
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


def _rpath_link_flags(result: BuildResult) -> list[str]:
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


def build_replay_tool(result: BuildResult, *, jobs: int = 1) -> Path:
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
            _run_logged(
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
            _run_logged(["cmake", "--build", str(work), "-j", str(max(1, jobs))], work, log, f"{REPLAY_TOOL} build")
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


def build_upstream_tool(result: BuildResult, name: str) -> Path:
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
            _run_logged(
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


def _cached(key: str, make, *, quiet: bool) -> BuildResult:
    root = cache_dir() / "native" / key[:16]
    lib_dir = root / "build" / "bin"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        record_path = root / BUILD_RECORD
        if record_path.exists():
            record = json.loads(record_path.read_text())
            result = BuildResult(key=key, root=root, lib_dir=lib_dir, record=record)
            problems = check_record(result)
            if not problems and record.get("key") == key:
                return result
            if not quiet:
                print(  # contract: a notice on stderr before the rebuild, unless quiet
                    f"refspec build: cached build {root} is inconsistent ({'; '.join(problems)}); rebuilding",
                    file=sys.stderr,
                )
            record_path.unlink()
        return make(root, lib_dir)


def _build_into(
    options: BuildOptions,
    key: str,
    root: Path,
    lib_dir: Path,
    *,
    jobs: int | None,
    quiet: bool,
    patches: list[Path] | None = None,
    flags: list[str] | None = None,
    targets: list[str] | None = None,
    tools: tuple[str, ...] | list[str] = (),
    variant: str | None = None,
    pin: SdistPin = PINNED_SDIST,
) -> BuildResult:
    t0 = time.monotonic()
    sdist = fetch_sdist(pin)
    src_root = root / "src"
    if src_root.exists():
        shutil.rmtree(src_root)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        _safe_extract(sdist, Path(tmp))
        (Path(tmp) / f"llama_cpp_python-{pin.version}").rename(src_root)
    llama_dir = src_root / "vendor" / "llama.cpp"
    patches = apply_patches(llama_dir, patch_files() if patches is None else patches)

    build_dir = root / "build"
    log_path = root / "build.log"
    flags = options.cmake_flags() if flags is None else flags
    targets = LIB_TARGETS if targets is None else targets
    host: dict = {}
    if options.backend == "cuda":
        extra, host = cuda_host_setup()
        flags = flags + extra
    elif options.backend == "vulkan":
        extra, host = vulkan.host_setup()
        flags = flags + extra
    jobs = jobs or os.cpu_count() or 2
    bar = None
    if not quiet:
        try:
            from tqdm import tqdm

            bar = tqdm(total=0, desc="native build", unit="step", file=sys.stderr)
        except ImportError:  # pragma: no cover
            bar = None

    def progress(n: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            bar.n = n
            bar.refresh()

    with open(log_path, "w") as log:
        _run_logged(
            ["cmake", "-S", str(llama_dir), "-B", str(build_dir), "-G", "Ninja", *flags], root, log, "cmake configure"
        )
        _run_logged(
            ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *targets],
            root,
            log,
            "cmake build",
            progress,
        )
    if bar is not None:
        bar.close()
    t_build = time.monotonic() - t0

    record = {
        "key": key,
        "sdist": {
            "name": pin.name,
            "version": pin.version,
            "file": pin.file,
            "sha256": pin.sha256,
            "upstream_commit": pin.upstream_commit,
        },
        "patches": patches,
        "options": asdict(options),
        "cmake_flags": flags,
        "host_setup": host,
        "build_seconds": round(t_build, 1),
        "files": _built_files(lib_dir, tools),
        **({"variant": variant, "targets": targets} if variant else {}),
    }
    atomic_write_text(root / BUILD_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return BuildResult(key=key, root=root, lib_dir=lib_dir, record=record, built=True)


def current(config: dict | None = None) -> BuildResult:
    """The build for a config, building it if needed (quietly when already cached); on
    ``vulkan`` the config's device is selected for this process and the ones it starts."""
    vulkan.select_device(config)
    return build(BuildOptions.from_config(config), quiet=False)
