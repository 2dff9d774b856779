"""Where refspec keeps things: the repository, the cache outside it, results."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def cache_dir() -> Path:
    """Cache for downloads, native builds and derived models, outside the clone."""
    d = Path(os.environ.get("REFSPEC_CACHE", Path.home() / ".cache" / "refspec"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def downloads_dir() -> Path:
    d = cache_dir() / "downloads"
    d.mkdir(parents=True, exist_ok=True)
    return d


def config_dir() -> Path:
    return REPO_ROOT / "config"


def schemas_dir() -> Path:
    return REPO_ROOT / "workflow" / "schemas"
