"""Where refspec keeps things: the repository, the cache outside it, results."""

from __future__ import annotations

import os
from pathlib import Path

import refspec_check

REPO_ROOT = Path(__file__).resolve().parents[3]
# the folders holding the project's packages: refspec (workflow/) and the checker's refspec_check (report/:
# the renderer and the definitions the pipeline shares with it); every process that imports refspec needs both
PACKAGE_DIRS = (Path(__file__).resolve().parents[2], Path(refspec_check.__file__).resolve().parents[1])


def package_path() -> str:
    """:data:`PACKAGE_DIRS` as a ``PYTHONPATH`` value (a process started with a scrubbed environment)."""
    return os.pathsep.join(str(d) for d in dict.fromkeys(PACKAGE_DIRS))


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
