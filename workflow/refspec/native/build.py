"""The pinned, patched llama.cpp build.

Steps (each checked, none skipped):

1. fetch the pinned ``llama-cpp-python`` sdist (:mod:`refspec.native.sdist`:
   ``envs/llama-cpp-python.pin``, version and sha256, the same line ``./run`` reads) with
   ``pip download --no-binary :all:`` and verify its sha256 against the pin;
2. unpack it and apply ``native/patches/*.patch`` in name order to the vendored
   llama.cpp (``git apply --check`` first: a hunk that does not apply is an error);
3. configure and build the shared libraries (``llama``, ``ggml``) with CMake/Ninja; CPU by
   default, ``-DGGML_CUDA=ON`` for ``backend: cuda`` with what the host's toolkit needs
   (:mod:`refspec.native.cuda`), ``-DGGML_VULKAN=ON`` for ``backend: vulkan`` with the pinned
   Vulkan headers (:mod:`refspec.native.vulkan`);
4. record ``BUILD.json``: the build key, the inputs' hashes and the sha256 of every
   built library;
5. build ``native/tools`` against those libraries (:mod:`refspec.native.tools`):
   ``refspec-replay``, recorded in ``BUILD.json`` as ``replay_tool``, and ``refspec-opreplay``,
   recorded as ``opreplay_tool``.

Upstream ``llama-quantize`` and ``llama-speculative-simple`` link ``llama-common`` (about half
of the compile time); nothing in the workflow runs them (models are quantized through the
library's ``llama_model_quantize``), so they are compiled in the same build tree on first use
(``BuildResult.tool``) and recorded in ``TOOLS.json``.

The build lives in ``$REFSPEC_CACHE/native/<key>`` where the key (:func:`build_key`, also of
the optional builds of other targets of the same source, :func:`build_variant`: ``llama-server``,
llama.cpp's own tests) hashes (sdist sha256, patch hashes, build options). A second call with the
same key checks the recorded hashes and builds nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.config import Config
from ..core.errors import BuildError
from ..core.fsutil import atomic_write_text
from ..core.hashing import file_digest, sha256_file, sha256_json
from ..core.paths import REPO_ROOT, cache_dir
from . import cuda, vulkan
from .cmake import BUILD_RECORD, built_files, check_record, run_logged
from .sdist import PINNED_SDIST, SdistPin, fetch_sdist
from .tools import NATIVE_TOOLS, OPREPLAY_TOOL, UPSTREAM_TOOLS, build_replay_tool, build_upstream_tool, replay_tool_key

PATCH_DIR = REPO_ROOT / "native" / "patches"

# targets every build provides: the libraries only (everything refspec runs loads them)
LIB_TARGETS = ["llama", "ggml"]
# optional: llama-server from the same pinned source, stock (no patches) or patched (build_server);
# every optional build (build_variant) comes in these two variants
SERVER_TARGET = "llama-server"
SERVER_VARIANTS = ("stock", "patched")


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
    def from_config(cls, config: Config | None) -> BuildOptions:
        """The configured build (no config: the defaults, a CPU Release build)."""
        if config is None:
            return cls()
        native = config.native
        return cls(backend=str(native.backend), cuda_arch=str(native.cuda_arch), build_type=str(native.build_type))


@dataclass(frozen=True)
class BuildKind:
    """What one build of the pinned source compiles: its CMake flags (of the build options), its
    targets and its name in messages (:func:`build_key`, :func:`build_variant`)."""

    flags: Callable[[BuildOptions], list[str]]
    targets: list[str]
    label: str


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


def build_key(
    options: BuildOptions,
    what: str | BuildKind = "libs",
    variant: str | None = None,
    *,
    pin: SdistPin = PINNED_SDIST,
    sdist_sha256: str | None = None,
) -> str:
    """The key (cache folder ``native/<key16>``) of one build of ``pin``'s source with ``options``.

    ``what``: ``libs`` (the patched libraries every run loads, :func:`build`), ``server``
    (``llama-server``, :func:`build_server`) or the :class:`BuildKind` of another optional build
    (:func:`build_variant`); an optional build names its ``variant``, ``stock`` (no patch) or
    ``patched`` (all of them). The key hashes the sdist, the patches applied, the options, the
    CMake flags, the targets, the variant and what of the host the build depends on;
    ``sdist_sha256`` stands in for the pin's sha256 (a test of the key)."""
    kind = _BUILDS[what] if isinstance(what, str) else what
    flags, targets, label = kind.flags, kind.targets, kind.label
    if what == "libs":
        if variant is not None:
            raise BuildError("the library build has no variant")
        patches = patch_files()
    else:
        if variant not in SERVER_VARIANTS:
            raise BuildError(f"unknown {label} variant {variant!r} ({' or '.join(SERVER_VARIANTS)})")
        patches = patch_files() if variant == "patched" else []
    return sha256_json(
        {
            "sdist": {"name": pin.name, "version": pin.version, "sha256": sdist_sha256 or pin.sha256},
            "patches": [{"name": p.name, "sha256": sha256_file(p)} for p in patches],
            "options": asdict(options),
            "flags": flags(options),
            "targets": targets,
            **({} if variant is None else {"variant": variant}),
            **_host_variant(options),
        }
    )


def _host_variant(options: BuildOptions) -> dict:
    """What of the host enters a build's key: the CUDA toolkit's variant, the pinned Vulkan headers."""
    if options.backend == "cuda":
        return {"cuda_host": cuda.host_variant()}
    if options.backend == "vulkan":
        return {"vulkan_host": vulkan.host_variant()}
    return {}


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


def server_flags(options: BuildOptions) -> list[str]:
    """The build's CMake flags with the server on and its web UI off (no assets, nothing fetched)."""
    flags = [f for f in options.cmake_flags() if not f.startswith("-DLLAMA_BUILD_SERVER=")]
    return flags + ["-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"]


SERVER_BUILD = BuildKind(server_flags, [SERVER_TARGET], "llama-server")
# the builds build_key names, and what each compiles
_BUILDS = {"libs": BuildKind(BuildOptions.cmake_flags, LIB_TARGETS, "library"), "server": SERVER_BUILD}


def build_variant(
    kind: BuildKind,
    options: BuildOptions,
    variant: str,
    *,
    jobs: int | None = None,
    quiet: bool = False,
    pin: SdistPin = PINNED_SDIST,
) -> BuildResult:
    """Build (or find cached) an optional build of ``pin``'s source, ``stock`` (no patch) or
    ``patched``: ``kind``'s targets in a folder of their own (``$REFSPEC_CACHE/native/<key16>``,
    :func:`build_key`) with their own libraries next to them; ``BuildResult.tool(name)`` names
    each program."""
    key = build_key(options, kind, variant, pin=pin)
    patches = patch_files() if variant == "patched" else []
    flags, targets = kind.flags(options), kind.targets
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
            pin=pin,
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
    return build_variant(SERVER_BUILD, options or BuildOptions(), variant, jobs=jobs, quiet=quiet)


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


def _unpack_sdist(root: Path, pin: SdistPin) -> Path:
    """The pinned sdist unpacked afresh into ``root/src`` (any earlier tree removed); returns that folder."""
    sdist = fetch_sdist(pin)
    src_root = root / "src"
    if src_root.exists():
        shutil.rmtree(src_root)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        _safe_extract(sdist, Path(tmp))
        (Path(tmp) / f"llama_cpp_python-{pin.version}").rename(src_root)
    return src_root


def _host_flags(options: BuildOptions, flags: list[str]) -> tuple[list[str], dict]:
    """(the CMake flags with the host's own for a GPU backend, the host setup the record keeps)."""
    host: dict = {}
    if options.backend == "cuda":
        extra, host = cuda.host_setup()
        flags = flags + extra
    elif options.backend == "vulkan":
        extra, host = vulkan.host_setup()
        flags = flags + extra
    return flags, host


def _run_cmake(llama_dir: Path, root: Path, flags: list[str], targets: list[str], *, jobs: int, quiet: bool) -> None:
    """Configure and build ``targets`` into ``root/build`` with Ninja, logged to ``root/build.log`` (a
    progress bar on stderr unless ``quiet``)."""
    build_dir = root / "build"
    log_path = root / "build.log"
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
        run_logged(
            ["cmake", "-S", str(llama_dir), "-B", str(build_dir), "-G", "Ninja", *flags], root, log, "cmake configure"
        )
        run_logged(
            ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *targets],
            root,
            log,
            "cmake build",
            progress,
        )
    if bar is not None:
        bar.close()


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
    src_root = _unpack_sdist(root, pin)
    llama_dir = src_root / "vendor" / "llama.cpp"
    patches = apply_patches(llama_dir, patch_files() if patches is None else patches)
    flags, host = _host_flags(options, options.cmake_flags() if flags is None else flags)
    targets = LIB_TARGETS if targets is None else targets
    _run_cmake(llama_dir, root, flags, targets, jobs=jobs or os.cpu_count() or 2, quiet=quiet)
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
        "files": built_files(lib_dir, tools),
        **({"variant": variant, "targets": targets} if variant else {}),
    }
    atomic_write_text(root / BUILD_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return BuildResult(key=key, root=root, lib_dir=lib_dir, record=record, built=True)


def current(config: Config | None = None) -> BuildResult:
    """The build for a config, building it if needed (quietly when already cached); on
    ``vulkan`` the config's device is selected for this process and the ones it starts."""
    vulkan.select_device(config)
    return build(BuildOptions.from_config(config), quiet=False)
