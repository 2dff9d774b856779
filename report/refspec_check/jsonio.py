"""Sealed JSON read with limits: a document nested deeper than :data:`MAX_DEPTH` or larger than
:data:`MAX_BYTES` is refused with a ValueError (what every caller already reports as a malformed or
unreadable input), before the standard library's parser would recurse past Python's stack."""

from __future__ import annotations

import json

MAX_DEPTH = 64  # the deepest record the project writes is under ten levels
MAX_BYTES = 256 * 1024 * 1024


def nesting(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` (brackets inside strings not counted)."""
    depth = deepest = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads(data: str | bytes):
    """``json.loads`` of ``data`` within the limits (ValueError beyond them)."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    if len(text) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    if "[" in text or "{" in text:
        d = nesting(text)
        if d > MAX_DEPTH:
            raise ValueError(f"nested {d} levels deep (at most {MAX_DEPTH})")
    return json.loads(text)


def load(f):
    """``json.load`` of the open file ``f`` within the limits."""
    return loads(f.read())
