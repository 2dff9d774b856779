"""The report's figures: :class:`Canvas`, a drawing list rendered both as inline SVG and as
TikZ, and the chart shapes the sections draw on it (interval, strip and bar charts).

``report/check.py`` redraws every figure from the archive's tables with its own copy of this
drawing (``report/refspec_check/figures.py``: the same scale, marks, order and decimals) and
refuses a figure whose marks differ, so a change to a chart here, or to a section's figure call,
needs the same change there (tests/checker/test_report_figures.py renders and checks them)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .document import DASH
from .tex import tex_escape

COLORS = {
    "diag": "#7a4e9c",
    "target": "#2c6db0",
    "spec": "#d2691e",
    "mixed": "#6a8a3a",
    "ref": "#7f7f7f",
    "thr": "#b22222",
    "grid": "#d9d9d9",
    "axis": "#333333",
    "fail": "#b22222",
    "bar": "#4a7fb5",
}


@dataclass
class _Item:
    kind: str
    args: tuple
    cls: str = "axis"
    extra: dict = field(default_factory=dict)


class Canvas:
    """A tiny drawing list rendered both as inline SVG and as TikZ.

    Coordinates are pixels with y pointing down (SVG convention).
    """

    def __init__(self, width: float, height: float, title: str):
        self.width = width
        self.height = height
        self.title = title
        self.items: list[_Item] = []

    def line(self, x1, y1, x2, y2, cls="axis", dash=False, width=1.0):
        self.items.append(_Item("line", (x1, y1, x2, y2), cls, {"dash": dash, "width": width}))

    def rect(self, x, y, w, h, cls="bar"):
        self.items.append(_Item("rect", (x, y, max(w, 0.0), max(h, 0.0)), cls))

    def circle(self, x, y, r, cls="target"):
        self.items.append(_Item("circle", (x, y, r), cls))

    def text(self, x, y, s, anchor="start", cls="axis", size=11):
        self.items.append(_Item("text", (x, y, str(s)), cls, {"anchor": anchor, "size": size}))

    # ---- SVG
    def to_svg(self) -> str:
        from markupsafe import escape

        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width:.0f} {self.height:.0f}" '
            f'role="img" aria-label="{escape(self.title)}" class="fig">',
            f"<title>{escape(self.title)}</title>",
        ]
        for it in self.items:
            col = COLORS.get(it.cls, "#333333")
            if it.kind == "line":
                x1, y1, x2, y2 = it.args
                dash = ' stroke-dasharray="4 3"' if it.extra["dash"] else ""
                out.append(
                    f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{col}" '
                    f'stroke-width="{it.extra["width"]:.1f}"{dash}/>'
                )
            elif it.kind == "rect":
                x, y, w, h = it.args
                out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{col}"/>')
            elif it.kind == "circle":
                x, y, r = it.args
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{col}"/>')
            elif it.kind == "text":
                x, y, s = it.args
                anchor = it.extra["anchor"]
                out.append(
                    f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{it.extra["size"]}" '
                    f'fill="{col if it.cls in ("thr", "fail", "target", "spec", "mixed", "diag") else "#222"}">{escape(s)}</text>'
                )
        out.append("</svg>")
        return "".join(out)

    # ---- TikZ
    def to_tikz(self, width_cm: float | None = None) -> str:
        # 0.0235 cm per px keeps \footnotesize labels within the margin computed for 11 px text;
        # wider canvases are scaled down to the landscape text width (and the font with them)
        if width_cm is None:
            width_cm = min(25.0, self.width * 0.0235)
        k = width_cm / self.width

        def X(v):
            return f"{v * k:.3f}"

        def Y(v):
            return f"{(self.height - v) * k:.3f}"

        out = [r"\begin{tikzpicture}[font=\sffamily]"]
        out.append(rf"\useasboundingbox (0,0) rectangle ({X(self.width)},{Y(0)});")
        for it in self.items:
            col = "rs" + it.cls
            if it.kind == "line":
                x1, y1, x2, y2 = it.args
                st = f"draw={col},line width={0.4 * it.extra['width']:.2f}pt" + (",dashed" if it.extra["dash"] else "")
                out.append(rf"\draw[{st}] ({X(x1)},{Y(y1)}) -- ({X(x2)},{Y(y2)});")
            elif it.kind == "rect":
                x, y, w, h = it.args
                out.append(rf"\fill[{col}] ({X(x)},{Y(y + h)}) rectangle ({X(x + w)},{Y(y)});")
            elif it.kind == "circle":
                x, y, r = it.args
                out.append(rf"\fill[{col}] ({X(x)},{Y(y)}) circle ({r * k:.3f});")
            elif it.kind == "text":
                x, y, s = it.args
                anchor = {"start": "base west", "middle": "base", "end": "base east"}[it.extra["anchor"]]
                size = r"\scriptsize" if it.extra["size"] <= 10 else r"\footnotesize"
                scale = f",scale={min(1.0, width_cm / (self.width * 0.0235)):.3f}"
                out.append(
                    rf"\node[anchor={anchor},inner sep=0pt{scale}] at ({X(x)},{Y(y)}) {{{size} {tex_escape(s)}}};"
                )
        out.append(r"\end{tikzpicture}")
        return "\n".join(out)


def label_width(labels: Iterable[str], size: float = 11, minimum: float = 60.0) -> float:
    """Left margin (px) that holds the longest label at ``size`` px, with a gap before the axis.

    0.62 em per character is a safe average for the sans-serif faces the report uses
    (DejaVu Sans digits are 0.636 em, lower case about 0.55 em)."""
    longest = max((len(str(s)) for s in labels), default=0)
    return max(minimum, math.ceil(longest * size * 0.62) + 16)


PLOT_W = 500  # width of the plotting area of every figure (px); the label margin comes on top


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.ceil(lo / step) * step
    out = []
    v = start
    while v <= hi + 1e-12 * step:
        out.append(round(v, 10))
        v += step
    return out


def _fmt_tick(v: float) -> str:
    s = f"{v:.4f}".rstrip("0").rstrip(".")
    return s if s not in ("-0", "") else "0"


def interval_figure(title: str, rows: list[dict], ref_lines: Sequence[tuple[float, str, str]]) -> Canvas:
    """Horizontal point-and-interval chart. rows: label, value, lo, hi (lo/hi may be None), cls, note.

    A reference line is labelled above the plot, each label on its own line (so that a threshold
    close to 1 never overlaps another label), unless its label is the axis tick drawn at its value."""
    vals = [v for r in rows for v in (r.get("value"), r.get("lo"), r.get("hi")) if v is not None]
    vals += [v for v, _c, _l in ref_lines]
    lo, hi = (min(vals), max(vals)) if vals else (0.9, 1.1)
    pad = (hi - lo) * 0.08 or 0.02
    lo, hi = lo - pad, hi + pad
    ticks = nice_ticks(lo, hi, 6)
    tick_text = {_fmt_tick(t) for t in ticks}
    labelled = [(v, cls, lab) for v, cls, lab in ref_lines if not (lab == _fmt_tick(v) and lab in tick_text)]
    right, top, row_h = 20, 16 + 13 * len(labelled), 26
    label_w = label_width(r["label"] for r in rows)
    width = label_w + PLOT_W + right
    height = top + row_h * max(len(rows), 1) + 42
    c = Canvas(width, height, title)
    x0, x1 = label_w, width - right

    def sx(v):
        return x0 + (v - lo) / (hi - lo) * (x1 - x0)

    ybot = top + row_h * max(len(rows), 1)
    for t in ticks:
        c.line(sx(t), top - 6, sx(t), ybot, cls="grid")
        c.text(sx(t), ybot + 16, _fmt_tick(t), anchor="middle", size=10)
    for v, cls, _lab in ref_lines:
        c.line(sx(v), top - 4, sx(v), ybot, cls=cls, dash=(cls == "thr"), width=1.2)
    for j, (v, cls, lab) in enumerate(labelled):
        c.text(sx(v), 12 + 13 * j, lab, anchor="middle", cls=cls, size=10)
    c.line(x0, ybot, x1, ybot)
    for i, r in enumerate(rows):
        y = top + row_h * i + row_h / 2
        c.text(x0 - 8, y + 4, r["label"], anchor="end", size=11)
        if r.get("value") is None:
            c.text(x0 + 6, y + 4, r.get("note") or DASH, cls="fail", size=10)
            continue
        if r.get("lo") is not None and r.get("hi") is not None:
            c.line(sx(r["lo"]), y, sx(r["hi"]), y, cls=r.get("cls", "target"), width=2.0)
            c.line(sx(r["lo"]), y - 5, sx(r["lo"]), y + 5, cls=r.get("cls", "target"), width=1.5)
            c.line(sx(r["hi"]), y - 5, sx(r["hi"]), y + 5, cls=r.get("cls", "target"), width=1.5)
        else:
            c.line(sx(1.0) if lo <= 1.0 <= hi else x0, y, sx(r["value"]), y, cls=r.get("cls", "target"), width=2.0)
        c.circle(sx(r["value"]), y, 4.5, cls=r.get("cls", "target"))
    c.text(
        x0 + (x1 - x0) / 2,
        height - 6,
        "ratio (numerator time / denominator time); above 1 favours the denominator",
        anchor="middle",
        size=10,
    )
    return c


def strip_figure(title: str, groups: list[tuple[str, list[int]]], xlabel: str) -> Canvas:
    right, top, row_h = 20, 16, 26
    label_w = label_width(f"{lab} (n={len(vs)})" for lab, vs in groups)
    width = label_w + PLOT_W + right
    height = top + row_h * max(len(groups), 1) + 40
    c = Canvas(width, height, title)
    allv = [v for _l, vs in groups for v in vs]
    hi = max(allv) if allv else 1
    hi = max(hi, 1) * 1.05
    x0, x1 = label_w, width - right

    def sx(v):
        return x0 + v / hi * (x1 - x0)

    ybot = top + row_h * max(len(groups), 1)
    for t in nice_ticks(0, hi, 6):
        c.line(sx(t), top, sx(t), ybot, cls="grid")
        c.text(sx(t), ybot + 16, _fmt_tick(t), anchor="middle", size=10)
    c.line(x0, ybot, x1, ybot)
    for i, (lab, vs) in enumerate(groups):
        y = top + row_h * i + row_h / 2
        c.text(x0 - 8, y + 4, f"{lab} (n={len(vs)})", anchor="end", size=11)
        seen: dict[int, int] = defaultdict(int)
        for v in sorted(vs):
            j = seen[v]
            seen[v] += 1
            c.circle(sx(v), y - 6 + (j % 4) * 4, 3.2, cls="fail")
    c.text(x0 + (x1 - x0) / 2, height - 6, xlabel, anchor="middle", size=10)
    return c


def bar_figure(title: str, rows: list[tuple[str, float, str]], xlabel: str, xmax: float = 1.0) -> Canvas:
    right, top, row_h = 60, 16, 24
    label_w = label_width(lab for lab, _v, _t in rows)
    width = label_w + PLOT_W + right
    height = top + row_h * max(len(rows), 1) + 40
    c = Canvas(width, height, title)
    x0, x1 = label_w, width - right

    def sx(v):
        return x0 + v / xmax * (x1 - x0)

    ybot = top + row_h * max(len(rows), 1)
    for t in nice_ticks(0, xmax, 5):
        c.line(sx(t), top, sx(t), ybot, cls="grid")
        c.text(sx(t), ybot + 16, _fmt_tick(t), anchor="middle", size=10)
    for i, (lab, v, txt) in enumerate(rows):
        y = top + row_h * i
        c.text(x0 - 8, y + row_h / 2 + 4, lab, anchor="end", size=11)
        c.rect(x0, y + 4, sx(v) - x0, row_h - 8, cls="bar")
        c.text(sx(v) + 4, y + row_h / 2 + 4, txt, size=10)
    c.line(x0, ybot, x1, ybot)
    c.text(x0 + (x1 - x0) / 2, height - 6, xlabel, anchor="middle", size=10)
    return c
