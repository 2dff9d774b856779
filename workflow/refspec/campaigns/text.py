"""Plain-text pieces of a campaign's ``summary.txt``: ratios and aligned tables."""

from __future__ import annotations

from typing import Any


def fmt_ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.6f}"


def table_text(header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in header]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
