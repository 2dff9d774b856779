"""The append-only ledger: one JSON object per line, chained by SHA-256.

Every attempt a campaign makes (runs, failures, interruptions, amendments,
excluded warmups) is appended here with a reason; nothing is ever rewritten.
Each line is the canonical JSON (sorted keys, no whitespace, UTF-8) of a record
with three fields added by :meth:`Ledger.append`:

``seq``
    0 for the first line, then 1, 2, ... without gaps.
``time``
    UTC time of the append, ISO 8601 with microseconds and a ``Z`` suffix.
``prev_sha256``
    SHA-256 (lowercase hex) of the previous line's bytes, without its newline;
    64 zeros (:data:`GENESIS`) on the first line.

Deleting, reordering or editing any line but the last breaks the chain at the
next line. The last line is protected by whoever records the head
(:meth:`Ledger.head`): a seal stores the line count and the SHA-256 of the last
line, and :func:`verify_chain` checks them when given. The format is described
field by field in ``anc/ledger.md``.

Appends are atomic and serialised: the file is opened with ``O_APPEND``, an
exclusive ``flock`` is held while the tail is read and the new line is written
with one ``write`` call, then the file is flushed to disk. A ledger whose last
line is incomplete (a torn write) or does not chain is refused, never repaired.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..core.clock import utc_now
from ..core.errors import IntegrityError
from ..core.hashing import canonical_json, sha256_bytes

LEDGER_NAME = "ledger.jsonl"
GENESIS = "0" * 64
RESERVED = ("seq", "time", "prev_sha256")
_TAIL_BLOCK = 1 << 16


def _check_strict_json(obj: Any, where: str = "record") -> None:
    """Refuse values that JSON cannot carry exactly (NaN, infinities, non-string keys)."""
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{where}: {obj!r} is not valid JSON")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            _check_strict_json(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_strict_json(v, f"{where}[{i}]")
    elif obj is None or isinstance(obj, (str, int, bool)):
        pass
    else:
        raise ValueError(f"{where}: {type(obj).__name__} is not JSON")


def _last_line(fd: int) -> bytes | None:
    """The last line of the file open at ``fd`` (without newline), None if empty.

    Raises IntegrityError when the file does not end with a newline.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return None
    end = os.pread(fd, 1, size - 1)
    if end != b"\n":
        raise IntegrityError("ledger ends with an incomplete line (torn write); refusing to append")
    buf = b""
    pos = size - 1  # position of the final newline
    while True:
        start = max(0, pos - _TAIL_BLOCK)
        chunk = os.pread(fd, pos - start, start)
        buf = chunk + buf
        nl = buf.rfind(b"\n")
        if nl >= 0:
            return buf[nl + 1 :]
        if start == 0:
            return buf
        pos = start


class Ledger:
    """An append-only JSON-lines ledger with a SHA-256 hash chain."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append ``record`` and return it as stored (with seq, time and prev_sha256).

        The record must be a JSON object of strict JSON values and must not
        contain the reserved keys ``seq``, ``time`` or ``prev_sha256``.
        """
        if not isinstance(record, dict):
            raise TypeError("a ledger record is a dict")
        clash = [k for k in RESERVED if k in record]
        if clash:
            raise ValueError(f"ledger record uses reserved key(s): {', '.join(clash)}")
        _check_strict_json(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            last = _last_line(fd)
            if last is None:
                seq, prev = 0, GENESIS
            else:
                try:
                    prev_rec = json.loads(last)
                    seq = int(prev_rec["seq"]) + 1
                except (ValueError, KeyError, TypeError) as e:
                    raise IntegrityError(f"ledger {self.path}: last line is not a ledger record ({e})") from e
                prev = sha256_bytes(last)
            stored = dict(record)
            stored.update(seq=seq, time=utc_now(), prev_sha256=prev)
            line = canonical_json(stored) + b"\n"
            n = os.write(fd, line)
            if n != len(line):  # pragma: no cover - a short write on a regular file
                raise IntegrityError(f"ledger {self.path}: short write ({n} of {len(line)} bytes)")
            os.fsync(fd)
            return stored
        finally:
            os.close(fd)  # also releases the lock

    def records(self) -> list[dict[str, Any]]:
        """All records in order (an empty list if the ledger does not exist)."""
        return list(self)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for raw in f:
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                yield json.loads(raw)

    def head(self) -> tuple[int, str]:
        """``(number of lines, SHA-256 of the last line)``; ``(0, GENESIS)`` when empty."""
        count, last = 0, None
        if self.path.exists():
            with open(self.path, "rb") as f:
                for raw in f:
                    count += 1
                    last = raw
        if last is None:
            return 0, GENESIS
        return count, sha256_bytes(last[:-1] if last.endswith(b"\n") else last)

    def verify(self, expect_count: int | None = None, expect_head: str | None = None) -> list[str]:
        return verify_chain(self.path, expect_count=expect_count, expect_head=expect_head)


def verify_lines(
    lines: Iterable[bytes],
    expect_count: int | None = None,
    expect_head: str | None = None,
    name: str = "ledger",
) -> list[str]:
    """Problems with a ledger given as raw lines (each with its newline, as read from a file)."""
    problems: list[str] = []
    prev = GENESIS
    count = 0
    for i, raw in enumerate(lines, start=1):
        count = i
        complete = raw.endswith(b"\n")
        body = raw[:-1] if complete else raw
        if not complete:
            problems.append(f"{name}: line {i} is incomplete (no final newline)")
        digest = sha256_bytes(body)
        try:
            rec = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            problems.append(f"{name}: line {i} is not JSON ({e.__class__.__name__})")
            prev = digest
            continue
        if not isinstance(rec, dict):
            problems.append(f"{name}: line {i} is not a JSON object")
            prev = digest
            continue
        if canonical_json(rec) != body:
            problems.append(f"{name}: line {i} is not in canonical form (edited?)")
        seq = rec.get("seq")
        if type(seq) is not int or seq != i - 1:
            problems.append(f"{name}: line {i} has seq {seq!r}, expected {i - 1}")
        if not isinstance(rec.get("time"), str):
            problems.append(f"{name}: line {i} has no time")
        got_prev = rec.get("prev_sha256")
        if got_prev != prev:
            problems.append(
                f"{name}: line {i} breaks the chain (prev_sha256 {str(got_prev)[:16]}..., "
                f"previous line hashes to {prev[:16]}...)"
            )
        prev = digest
    if expect_count is not None and count != expect_count:
        problems.append(f"{name}: has {count} lines, expected {expect_count}")
    if expect_head is not None and prev != expect_head:
        problems.append(f"{name}: last line hashes to {prev[:16]}..., expected {expect_head[:16]}...")
    return problems


def verify_chain(path: str | Path, expect_count: int | None = None, expect_head: str | None = None) -> list[str]:
    """Every problem with the ledger at ``path``; an empty list means the chain is intact.

    ``expect_count`` and ``expect_head`` (SHA-256 of the last line) pin the end
    of the chain, which the chain alone cannot protect.
    """
    p = Path(path)
    if not p.is_file():
        return [f"{p.name}: ledger not found"]
    with open(p, "rb") as f:
        return verify_lines(f, expect_count=expect_count, expect_head=expect_head, name=p.name)
