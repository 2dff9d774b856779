"""The host facts a manifest records (``internalParameters.host``, ``anc/manifest.md``).

:func:`host_facts` collects them: the CPU (:func:`cpu_facts`: model, cores, the SIMD flags among
a fixed list and a digest of all its flags), the memory (:func:`memory_bytes`), the NVIDIA GPUs
and driver (:func:`gpu_facts`, with the CUDA versions of :func:`cuda_versions`) and the operating
system (:func:`os_facts`). The hostname and user name are not recorded.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from ..core.hashing import sha256_bytes

_SIMD_FLAGS = (
    "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
    "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile",
    "fp", "asimd", "asimddp", "sve", "sve2", "i8mm", "bf16",
)  # fmt: skip


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def cpu_facts() -> dict[str, Any]:
    model = None
    flags: list[str] = []
    physical: set[tuple[str, str]] = set()
    info = _read("/proc/cpuinfo")
    if info:
        phys_id = core_id = None
        for line in info.splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip().lower(), v.strip()
            if model is None and k in ("model name", "hardware", "cpu model", "processor") and v and not v.isdigit():
                model = v
            elif not flags and k in ("flags", "features"):
                flags = v.split()
            elif k == "physical id":
                phys_id = v
            elif k == "core id":
                core_id = v
            elif not line.strip():
                if phys_id is not None and core_id is not None:
                    physical.add((phys_id, core_id))
                phys_id = core_id = None
        if phys_id is not None and core_id is not None:
            physical.add((phys_id, core_id))
    if model is None:
        model = platform.processor() or None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    flagset = sorted(set(flags))
    return {
        "model": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": len(physical) or None,
        "usable_cores": usable,
        "simd": [f for f in _SIMD_FLAGS if f in flagset],
        "flags_sha256": sha256_bytes(" ".join(flagset).encode()) if flagset else None,
    }


def memory_bytes() -> int | None:
    info = _read("/proc/meminfo")
    if info:
        m = re.search(r"^MemTotal:\s+(\d+)\s*kB", info, re.M)
        if m:
            return int(m.group(1)) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_facts(timeout: float = 20.0) -> dict[str, Any]:
    """GPUs and driver from ``nvidia-smi``; ``{"query": "absent", "devices": []}`` without one."""
    cmd = [
        "nvidia-smi",
        "--query-gpu=name,driver_version,memory.total,uuid,compute_cap",
        "--format=csv,noheader,nounits",
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return {"query": "absent", "devices": []}
    except (OSError, subprocess.TimeoutExpired):
        return {"query": "error", "devices": []}
    if r.returncode != 0:
        return {"query": "error", "devices": []}
    devices = []
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        mem = parts[2]
        devices.append(
            {
                "name": parts[0],
                "driver_version": parts[1],
                "memory_mib": int(mem) if mem.isdigit() else mem,
                "uuid": parts[3],
                "compute_capability": parts[4] if len(parts) > 4 else None,
            }
        )
    out: dict[str, Any] = {"query": "ok", "devices": devices}
    out.update(cuda_versions(timeout))
    return out


def cuda_versions(timeout: float = 20.0) -> dict[str, Any]:
    """The CUDA version the driver supports (``nvidia-smi``'s header) and the CUDA runtime
    that the build's ``libggml-cuda.so`` links (``cudaRuntimeGetVersion``), when present."""
    out: dict[str, Any] = {"cuda_driver_version": None, "cuda_runtime_version": None, "cuda_runtime_library": None}
    try:
        r = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=timeout, check=False)
        m = re.search(r"CUDA Version:\s*([0-9.]+)", r.stdout or "")
        out["cuda_driver_version"] = m.group(1) if m else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    lib_dir = os.environ.get("LLAMA_CPP_LIB_PATH")
    cuda_lib = Path(lib_dir) / "libggml-cuda.so" if lib_dir else None
    if cuda_lib is None or not cuda_lib.is_file():
        return out
    try:
        r = subprocess.run(["ldd", str(cuda_lib)], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return out
    m = re.search(r"libcudart\.so\S*\s+=>\s+(\S+)", r.stdout or "")
    if not m:
        return out
    out["cuda_runtime_library"] = m.group(1)
    try:
        import ctypes

        cudart = ctypes.CDLL(m.group(1))
        v = ctypes.c_int(0)
        if cudart.cudaRuntimeGetVersion(ctypes.byref(v)) == 0:
            out["cuda_runtime_version"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    except (OSError, AttributeError):
        pass
    return out


def os_facts() -> dict[str, Any]:
    distro = None
    rel = _read("/etc/os-release")
    if rel:
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', rel, re.M)
        distro = m.group(1) if m else None
    libc = platform.libc_ver()
    return {
        "system": platform.system(),
        "release": platform.release(),
        "version": platform.version(),
        "machine": platform.machine(),
        "distribution": distro,
        "libc": " ".join(x for x in libc if x) or None,
    }


def host_facts(gpu: bool = True) -> dict[str, Any]:
    return {
        "cpu": cpu_facts(),
        "memory_bytes": memory_bytes(),
        "gpu": gpu_facts() if gpu else {"query": "skipped", "devices": []},
        "os": os_facts(),
    }
