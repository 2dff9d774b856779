"""The report's figures: :class:`Canvas`, a drawing list rendered both as inline SVG and as
TikZ, and the chart shapes the sections draw on it (interval, strip, bar charts and the forest plot).

``report/check.py`` redraws every figure from the archive's tables with its own copy of this
drawing (``report/refspec_check/figures.py``: the same scale, marks, order and decimals) and
refuses a figure whose marks differ, so a change to a chart here, or to a section's figure call,
needs the same change there (tests/checker/test_report_figures.py renders and checks them)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from refspec_check.stats import DECIDED

from .document import DASH
from .page import escape
from .sections.verdicts import verdict_word
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


# ---- forest plot: every qualified ratio and E2 estimate with an interval, on one log axis

FOREST_W = 384  # viewBox width of a column: its 11 px text stays 11 px at the 393 px a 412 px phone gives a figure
FOREST_TEXT = 11  # the size of every text of the forest plot
FOREST_MIN_PLOT = 160  # a plot narrower than this beside the labels puts each label on its own line above
FOREST_PAGE_ROWS_H = 600  # height of a column's rows on the page (report.tex): a picture of 15.4 cm at most


@dataclass
class ForestGroup:
    """The rows of one campaign and family (and cap) with their decision lines and A/A band.

    rows: (label, value, lo, hi, verdict); lines: the values of the dashed decision lines;
    band: the A/A twin's (lo, hi), or None without a control interval."""

    header: str
    rows: list[tuple[str, float, float, float, str]]
    lines: list[float]
    band: tuple[float, float] | None


def forest_ratio_groups(ratios: Sequence[dict], noise: Sequence[dict], tau: float) -> list[ForestGroup]:
    """One group per campaign, family and cap (table order) of the qualified ratios with an interval;
    decision lines at tau F and 1/(tau F), F the floor of the control the verdict weighs
    (refspec.campaigns.intervals.aa_floor: the first arm by name with a twin; 1 without a floor)."""
    keys: list[tuple] = []
    rows: dict[tuple, list] = defaultdict(list)
    for r in ratios:
        if not r["qualified"] or r["ratio"] is None or r["lo"] is None or r["hi"] is None:
            continue
        k = (r["campaign"], r["family"], r["cap"])
        if k not in rows:
            keys.append(k)
        rows[k].append((f"{r['numerator']}/{r['denominator']}", r["ratio"], r["lo"], r["hi"], r["verdict"]))
    out = []
    for camp, fam, cap in keys:
        several = sum(1 for c, f, _ in keys if (c, f) == (camp, fam)) > 1
        ctl = [n for n in noise if (n["campaign"], n["family"], n["cap"]) == (camp, fam, cap)]
        aa = min(ctl, key=lambda n: n["arm"]) if ctl else None
        floor = aa["floor"] if aa is not None and aa["floor"] is not None else 1.0
        band = (aa["lo"], aa["hi"]) if aa is not None and aa["floor"] is not None else None
        header = f"{camp}, {fam}" + (f", cap {cap}" if several else "")
        out.append(ForestGroup(header, rows[(camp, fam, cap)], [tau * floor, 1.0 / (tau * floor)], band))
    return out


def forest_estimate_groups(estimates: Sequence[dict], noise: Sequence[dict]) -> list[ForestGroup]:
    """One group per family (table order) of the E2 estimates with an interval; decision lines at
    threshold x F and threshold / F (F the estimates' floor), the band of the control that sets F
    (refspec.campaigns.noise.weigh_estimates: the family's largest floor, the first on a tie)."""
    fams: list[str] = []
    rows: dict[str, list] = defaultdict(list)
    first: dict[str, dict] = {}
    for r in estimates:
        if r["estimate"] is None or r["lo"] is None or r["hi"] is None:
            continue
        if r["family"] not in rows:
            fams.append(r["family"])
            first[r["family"]] = r
        rows[r["family"]].append((f"{r['comparison']} {r['path']}", r["estimate"], r["lo"], r["hi"], r["decision"]))
    out = []
    for fam in fams:
        thr = first[fam]["threshold"]
        floor = first[fam]["floor"] if first[fam]["floor"] is not None else 1.0
        aa = None
        for n in noise:
            if n["campaign"] == "replication" and n["family"] == fam and n["floor"] is not None:
                if aa is None or n["floor"] > aa["floor"]:
                    aa = n
        band = (aa["lo"], aa["hi"]) if aa is not None else None
        out.append(ForestGroup(f"replication, {fam}", rows[fam], [thr * floor, thr / floor], band))
    return out


def _log_ticks(lo: float, hi: float, sx: Callable[[float], float]) -> list[float]:
    """Ticks of a log axis over [lo, hi], 1 always among them: "nice" linear steps over a narrow
    range, 1, 2 and 5 per decade over a wide one; a tick closer than 40 px to a kept one is left out."""
    if hi / lo < 4:
        cands = nice_ticks(lo, hi, 4)
    else:
        d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        cands = [round(m * 10.0**d, 10) for d in range(d0, d1 + 1) for m in (1, 2, 5)]
    kept = [1.0]
    for v in cands:
        if lo <= v <= hi and v > 0 and all(abs(sx(v) - sx(k)) >= 40 for k in kept):
            kept.append(v)
    return sorted(kept)


def _forest_scale(groups: Sequence[ForestGroup]) -> tuple[float, float]:
    """The log axis (natural log) over every value, interval end, decision line, band end and 1,
    padded by 5 % of its range on each side."""
    vals = [1.0]
    for g in groups:
        vals += [v for _l, val, lo, hi, _v in g.rows for v in (val, lo, hi)] + list(g.lines)
        vals += list(g.band) if g.band else []
    a, b = math.log(min(vals)), math.log(max(vals))
    pad = (b - a) * 0.05 or 0.01
    return a - pad, b + pad


def _page_columns(groups: Sequence[ForestGroup], row_h: int) -> list[list[ForestGroup]]:
    """The groups set in columns for the page: a group of more rows than a column holds is cut (each
    piece under its header), and a column is filled until the next group would pass its height."""
    most = (FOREST_PAGE_ROWS_H - 22) // row_h
    pieces = [
        ForestGroup(g.header, g.rows[i : i + most], g.lines, g.band)
        for g in groups
        for i in range(0, len(g.rows), most)
    ]
    cols: list[list[ForestGroup]] = [[]]
    h = 0
    for g in pieces:
        gh = 22 + row_h * len(g.rows)
        if cols[-1] and h + gh > FOREST_PAGE_ROWS_H:
            cols.append([])
            h = 0
        cols[-1].append(g)
        h += gh
    return cols


def _forest_x(groups: Sequence[ForestGroup]) -> tuple[float, float, int]:
    """A column's plot from x0 to x1 between the labels (right-aligned before it) and the verdicts,
    and the row height; where that plot would be narrower than FOREST_MIN_PLOT each label goes on
    its own line above its whisker (x0 at the left edge, rows 32 px tall instead of 20)."""
    x1 = FOREST_W - label_width([verdict_word(r[4]) for g in groups for r in g.rows], FOREST_TEXT, 0.0)
    x0 = label_width([r[0] for g in groups for r in g.rows], FOREST_TEXT, 40.0)
    return (10.0, x1, 32) if x1 - x0 < FOREST_MIN_PLOT else (x0, x1, 20)


def _forest_canvas(title: str, columns: list[list[ForestGroup]], xlabel: str) -> Canvas:
    """The forest plot drawn in ``columns`` side by side, each FOREST_W wide on the same log scale with
    its own axis: per group a header, then per row a label, the whisker lo..hi and the point, the
    verdict in words at the right end (blue: decided; grey: undecided); behind each group's rows the
    A/A band (shaded), a line at 1 and the dashed decision lines."""
    size = FOREST_TEXT
    groups = [g for col in columns for g in col]
    x0, x1, row_h = _forest_x(groups)
    stacked = row_h > 20
    spans, ybot = [], 0.0
    for k, col in enumerate(columns):
        y = 8.0
        for g in col:
            spans.append((k * FOREST_W, y + 18, y + 18 + row_h * len(g.rows)))
            y += 22 + row_h * len(g.rows)
        ybot = max(ybot, y + 4)
    c = Canvas(FOREST_W * len(columns), ybot + 42, title)
    a, b = _forest_scale(groups)

    def sx(v: float) -> float:
        return x0 + (math.log(v) - a) / (b - a) * (x1 - x0)

    for g, (off, top, bot) in zip(groups, spans, strict=True):
        if g.band:
            c.rect(off + sx(g.band[0]), top, sx(g.band[1]) - sx(g.band[0]), bot - top, cls="grid")
    for g, (off, top, bot) in zip(groups, spans, strict=True):
        c.line(off + sx(1.0), top, off + sx(1.0), bot, cls="ref", width=1.2)
        for v in sorted(set(g.lines)):
            c.line(off + sx(v), top, off + sx(v), bot, cls="axis", dash=True)
    for g, (off, top, _bot) in zip(groups, spans, strict=True):
        c.text(off + 8, top - 5, g.header, size=size)
        for i, (label, val, lo, hi, verdict) in enumerate(g.rows):
            ym = top + row_h * i + (22 if stacked else row_h / 2)
            cls = "target" if verdict in DECIDED else "ref"
            if stacked:
                c.text(off + x0, ym - 11, label, size=size)
            else:
                c.text(off + x0 - 8, ym + 4, label, anchor="end", size=size)
            c.line(off + sx(lo), ym, off + sx(hi), ym, cls=cls, width=2.0)
            c.line(off + sx(lo), ym - 4, off + sx(lo), ym + 4, cls=cls, width=1.5)
            c.line(off + sx(hi), ym - 4, off + sx(hi), ym + 4, cls=cls, width=1.5)
            c.circle(off + sx(val), ym, 4.0, cls=cls)
            c.text(off + x1 + 8, ym + 4, verdict_word(verdict), cls=cls, size=size)
    for k in range(len(columns)):
        off = k * FOREST_W
        c.line(off + x0, ybot, off + x1, ybot)
        for t in _log_ticks(math.exp(a), math.exp(b), sx):
            c.line(off + sx(t), ybot, off + sx(t), ybot + 4)
            c.text(off + sx(t), ybot + 17, _fmt_tick(t), anchor="middle", size=size)
        c.text(off + FOREST_W / 2, ybot + 36, xlabel, anchor="middle", size=size)
    return c


class ForestCanvas(Canvas):
    """The forest plot: its SVG in one column (a phone's width), its TikZ in columns that fit the
    landscape page (``page``)."""

    def __init__(self, screen: Canvas, page: Canvas):
        super().__init__(screen.width, screen.height, screen.title)
        self.items, self.page = screen.items, page

    def to_tikz(self, width_cm: float | None = None) -> str:
        return self.page.to_tikz(width_cm)


def forest_figure(title: str, groups: Sequence[ForestGroup], xlabel: str) -> ForestCanvas:
    """The forest plot of ``groups`` (:func:`forest_ratio_groups`, :func:`forest_estimate_groups`)."""
    page = _forest_canvas(title, _page_columns(groups, _forest_x(groups)[2]), xlabel)
    return ForestCanvas(_forest_canvas(title, [list(groups)], xlabel), page)
