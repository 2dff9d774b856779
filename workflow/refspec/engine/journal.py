"""The journal: JSON lines, one record per completed attempt, each line written and fsynced at once."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..core.errors import RefspecError
from ..core.hashing import canonical_json

# warnings on stderr (the text alone, where logging is not configured)
_log = logging.getLogger(__name__)


class Journal:
    """JSON lines, one record per completed attempt; each line is one ``write`` followed by ``fsync``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: dict) -> None:
        line = canonical_json(record) + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            n = os.write(fd, line)
            if n != len(line):  # pragma: no cover
                raise RefspecError(f"journal {self.path}: short write")
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[dict]:
        """Every complete line; an incomplete last line (a torn write) is skipped."""
        if not self.path.exists():
            return []
        out = []
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    _log.warning("refspec: %s: skipping an incomplete last line", self.path)
                    break
                out.append(json.loads(raw))
        return out
