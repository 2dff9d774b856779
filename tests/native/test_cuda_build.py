"""The CUDA build compiles and links here, without a GPU (opt-in: ``./run test -m cuda_build``).

The machine needs CUDA's compiler (nvcc); cuBLAS comes from the pinned ``nvidia-cublas`` wheel
when the toolkit lacks it, and a host without the driver library builds with
``GGML_CUDA_NO_VMM``. Nothing CUDA runs here: the test checks that the patched libraries and
``refspec-replay`` were built for the configured architecture, that the build is recorded and cached, and
that the patch's symbols are in the CUDA build's ``libllama.so``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from refspec.native import build as native
from refspec.native import cmake, cuda, tools

pytestmark = pytest.mark.cuda_build


@pytest.fixture(scope="module")
def cuda_build():
    if cuda.nvcc() is None:
        pytest.skip("no nvcc on this machine")
    t0 = time.monotonic()
    res = native.build(native.BuildOptions(backend="cuda", cuda_arch="90"))
    print(f"CUDA build {'compiled' if res.built else 'cached'} in {time.monotonic() - t0:.0f} s: {res.lib_dir}")
    return res


def test_cuda_libraries_are_built_for_sm90(cuda_build):
    lib = cuda_build.lib_dir / "libggml-cuda.so"
    assert lib.is_file() and lib.stat().st_size > 10_000_000
    rec = cuda_build.record
    assert rec["options"]["backend"] == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=90" in rec["cmake_flags"]
    assert "-DGGML_CUDA_FA=OFF" in rec["cmake_flags"]
    assert any(n.startswith("libggml-cuda.so") for n in rec["files"]), sorted(rec["files"])
    assert not set(rec["files"]) & set(tools.UPSTREAM_TOOLS)
    assert cuda_build.replay_tool.is_file() and rec["replay_tool"]["sha256"]  # refspec-replay against the CUDA ggml
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if shutil.which(cuobjdump) or Path(cuobjdump).is_file():
        out = subprocess.run([cuobjdump, "--list-elf", str(lib)], capture_output=True, text=True).stdout
        assert "sm_90" in out, out[:2000]
    nm = subprocess.run(
        ["nm", "-D", "--defined-only", str(cuda_build.lib_dir / "libllama.so")], capture_output=True, text=True
    ).stdout
    assert "llama_attn_set_layout" in nm and "llama_attn_get_counters" in nm


def test_cuda_build_is_cached(cuda_build):
    t0 = time.monotonic()
    again = native.build(native.BuildOptions(backend="cuda", cuda_arch="90"), quiet=True)
    assert not again.built and again.key == cuda_build.key and time.monotonic() - t0 < 30
    assert cmake.check_record(again) == []
