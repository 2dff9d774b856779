"""The one place where refspec hashes things.

Every digest in manifests, seals, plans, ledgers and tables is a lowercase hex
SHA-256. JSON objects are hashed in their canonical form (sorted keys, no
whitespace, UTF-8) so that two processes agree on the digest of a record.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

# a file's digest has one owner, the checker's (the renderer it carries shows digests of the archive's records)
from refspec_check.digests import sha256_file


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: str | Path) -> dict[str, Any]:
    """``{"sha256": ..., "size": ...}`` of a file."""
    p = Path(path)
    return {"sha256": sha256_file(p), "size": p.stat().st_size}


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_json(obj: Any) -> str:
    return sha256_bytes(canonical_json(obj))


def short(digest: str, n: int = 12) -> str:
    return digest[:n]
