"""Python distribution names, compared as PEP 503 normalises them."""

from __future__ import annotations

import re


def normalize(name: str) -> str:
    """``name`` lower-cased with every run of ``-``, ``_`` and ``.`` as one ``-`` (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()
