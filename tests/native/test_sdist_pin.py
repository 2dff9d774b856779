"""The pinned llama-cpp-python sdist is written once, in ``envs/llama-cpp-python.pin``: the native
build and ``./run`` (its virtual environment's key and its sdist check) read the same line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from refspec.native import sdist

ROOT = Path(__file__).resolve().parents[2]
PIN = ROOT / "envs" / "llama-cpp-python.pin"


def test_the_pin_file_is_one_line_version_and_sha256():
    version, sha256 = PIN.read_text(encoding="utf-8").split()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version) and re.fullmatch(r"[0-9a-f]{64}", sha256)
    assert (sdist.SDIST_VERSION, sdist.SDIST_SHA256) == (version, sha256) == sdist.read_sdist_pin()
    assert sdist.PINNED_SDIST.file == sdist.SDIST_FILE == f"llama_cpp_python-{version}.tar.gz"


def test_run_reads_the_same_pin_and_writes_none_of_its_own():
    text = (ROOT / "run").read_text(encoding="utf-8")
    assert sdist.SDIST_SHA256 not in text and not re.search(r"\b[0-9a-f]{64}\b", text)
    reads = [line for line in text.splitlines() if "envs/llama-cpp-python.pin" in line and line.startswith("read ")]
    assert len(reads) == 1, reads
    # the line ./run runs, then its venv key as ./run computes it
    script = (
        "set -euo pipefail\n" + reads[0] + "\n"
        'echo "$LLAMA_CPP_PYTHON_VERSION $LLAMA_CPP_PYTHON_SHA256"\n'
        'echo "$(cat envs/requirements.txt envs/python-version envs/pip.pin | sha256sum | cut -c1-16)-$LLAMA_CPP_PYTHON_VERSION"\n'
    )
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )
    assert out[0] == f"{sdist.SDIST_VERSION} {sdist.SDIST_SHA256}"
    assert re.fullmatch(r"[0-9a-f]{16}-" + re.escape(sdist.SDIST_VERSION), out[1])
    assert (
        'venv_key="$(cat envs/requirements.txt envs/python-version envs/pip.pin | sha256sum | cut -c1-16)-$LLAMA_CPP_PYTHON_VERSION"'
        in text
    )
