"""The pinned ``llama-cpp-python`` sdists whose vendored llama.cpp the native builds compile.

:data:`PINNED_SDIST` is the one every build patches: its version and sha256 are read from
``envs/llama-cpp-python.pin`` (:func:`read_sdist_pin`), the same line ``./run`` reads for the
virtual environment.
:func:`fetch_sdist` downloads one (``pip download --no-binary :all:``) and verifies its sha256
against the pin.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BuildError
from ..core.fetch import fetch_package
from ..core.paths import REPO_ROOT

SDIST_NAME = "llama-cpp-python"
# the pinned sdist, ``<version> <sha256>``: the one line ./run reads for the virtual environment too
SDIST_PIN_FILE = REPO_ROOT / "envs" / "llama-cpp-python.pin"


def read_sdist_pin(path: Path = SDIST_PIN_FILE) -> tuple[str, str]:
    """The pinned ``llama-cpp-python`` version and sha256 from ``envs/llama-cpp-python.pin``."""
    fields = path.read_text(encoding="utf-8").split()
    if len(fields) != 2 or len(fields[1]) != 64:
        raise BuildError(f"{path}: expected one line '<version> <sha256>'")
    return fields[0], fields[1]


SDIST_VERSION, SDIST_SHA256 = read_sdist_pin()
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


def fetch_sdist(pin: SdistPin = PINNED_SDIST) -> Path:
    """Download (if needed) and verify the pinned sdist (or another pinned release); return its path."""
    return fetch_package(f"{pin.name}=={pin.version}", pin.file, pin.sha256, sdist=True)
