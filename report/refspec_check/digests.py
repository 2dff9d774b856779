"""Digests of files, canonical JSON and endpoints."""

from __future__ import annotations

import hashlib
import json
import os


def sha256_file(path: str | os.PathLike) -> str:
    """The lowercase hex SHA-256 of a file's bytes (the checker's, the renderer's and the pipeline's)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def endpoint_digest(tokens, eog, stop) -> str:
    toks = [int(t) for t in tokens]
    return hashlib.sha256(
        canonical(
            {
                "eog": bool(eog),
                "last_token": toks[-1] if toks else None,
                "n": len(toks),
                "stop_reason": stop,
                "tokens": toks,
            }
        )
    ).hexdigest()
