"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` to write (by this process or a tool it runs); on
    success it is synced and renamed over ``path``, on any failure removed. Readers see the
    old file or the complete new one, never a part."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    dfd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None) -> None:
    with atomic_output(path, mode) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)
