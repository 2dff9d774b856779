"""What a CUDA build of the pinned llama.cpp needs from the host.

The toolkit's own ``nvcc`` (:func:`nvcc`: ``$CUDAToolkit_ROOT``, ``$CUDA_HOME``, ``$CUDA_PATH``,
/usr/local/cuda, else the toolkit of the one on PATH). A toolkit that ships without cuBLAS (nvcc
and cudart only) gets a cached copy with the pinned ``nvidia-cublas`` wheel (:data:`CUBLAS_REQUIREMENT`)
merged in; a host without the driver library (a build machine with no GPU) builds with
``GGML_CUDA_NO_VMM``. :func:`host_setup` gives the CMake flags and the facts they came from,
:func:`host_variant` what of this enters the build key (without fetching anything).
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..core.errors import BuildError
from ..core.hashing import sha256_json
from ..core.paths import cache_dir

# cuBLAS for a CUDA toolkit that ships without it (nvcc and cudart only): the registry's wheel of
# the toolkit's major.minor, merged into a cached copy of the toolkit.
CUBLAS_REQUIREMENT = ("nvidia-cublas", "13.0.2.14")


def _is_toolkit(root: Path) -> bool:
    return (root / "bin" / "nvcc").is_file() and any(
        (root / d / "cuda_runtime.h").is_file()
        for d in ("include", "targets/x86_64-linux/include", "targets/sbsa-linux/include")
    )


def nvcc() -> Path | None:
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


def driver_present() -> bool:
    return ctypes.util.find_library("cuda") is not None


def host_setup() -> tuple[list[str], dict]:
    """CMake flags this host needs for a CUDA build, and what they were derived from.

    A toolkit without cuBLAS gets a cached copy with the pinned ``nvidia-cublas`` wheel's
    headers and libraries merged in; a host without the driver library (a build machine
    with no GPU) builds with ``GGML_CUDA_NO_VMM`` (ggml's pool then uses plain
    allocations instead of the driver's virtual memory API), so the libraries link here.
    """
    compiler = nvcc()
    if compiler is None:
        raise BuildError("backend cuda needs the CUDA toolkit's nvcc (not on PATH, nor /usr/local/cuda/bin)")
    root = compiler.parent.parent
    flags: list[str] = []
    facts = {"nvcc": str(compiler), "toolkit": str(root), "cublas": "toolkit", "driver": driver_present()}
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


def host_variant() -> dict:
    """What of the host changes a CUDA build (without fetching anything): merged cuBLAS, no VMM."""
    compiler = nvcc()
    merged = compiler is not None and not _has_lib(compiler.parent.parent, "libcublas.so")
    return {"cublas": "==".join(CUBLAS_REQUIREMENT) if merged else "toolkit", "no_vmm": not driver_present()}
