"""The report's figures recomputed from the archive's tables: every mark and every text of each figure.

A figure is data drawn to scale, so a dot moved, an interval end shifted, a tick relabelled or a bar
lengthened misleads a reader as much as an altered number. This module redraws each figure the report
may hold from the result tables (which the other checks compare with their recomputation): the same
rows, the same scale (a pure function of the data: the extremes of the values, padded, and their
"nice" ticks), the same marks in the same order, written to the decimals the report writes them
(SVG: one decimal, TikZ: three). It then compares the report's figure with the redrawing mark by
mark: in report.html every ``<figure>`` element (its ``<svg>`` and its caption), in report.tex every
``tikzpicture`` with its title and caption. A figure the checker cannot redraw (an id it does not
know, or one the data does not call for) is refused, and so is a figure the data calls for that the
report lacks, and an ``<svg>`` or ``tikzpicture`` outside the figures compared here.

The drawing below follows ``report/refspec_check/render/svg.py`` (``Canvas``, ``interval_figure``,
``strip_figure``, ``bar_figure``, ``forest_figure``) and the figure calls of the report's sections (timing.py,
qualification.py) step for step; a change to one needs the same change here (the clean synthetic
archive of tests/checker/test_report_figures.py keeps the two in step)."""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict

from refspec_check.answer import word
from refspec_check.intervals import THRESHOLD
from refspec_check.problems import Checker
from refspec_check.stats import DECIDED

DASH = "\u2014"

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

PLOT_W = 500  # width of the plotting area of every figure (px)

_HTML_ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"}

_TEX_MAP = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "$": r"\$",
    "&": r"\&",
    "#": r"\#",
    "%": r"\%",
    "_": r"\_",
    "^": r"\textasciicircum{}",
    "~": r"\textasciitilde{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    '"': r"\textquotedbl{}",
    DASH: "---",
    "\u2013": "--",
    "\u00b7": r"\textperiodcentered{}",
    "\u00a7": r"\S{}",
    "\u00d7": r"$\times$",
    "\u2264": r"$\le$",
    "\u2265": r"$\ge$",
}


def html_escape(s) -> str:
    return "".join(_HTML_ESC.get(ch, ch) for ch in str(s))


def tex_escape(s) -> str:
    out = []
    for ch in str(s):
        if ch in _TEX_MAP:
            out.append(_TEX_MAP[ch])
        elif ord(ch) < 32:
            out.append(" ")
        elif ord(ch) > 126:
            out.append("?")
        else:
            out.append(ch)
    return "".join(out)


class Canvas:
    """The drawing list of one figure (pixels, y down), written as SVG marks and as TikZ lines."""

    def __init__(self, width: float, height: float, title: str):
        self.width, self.height, self.title = width, height, title
        self.items: list[tuple] = []  # (kind, args, cls, extra)

    def line(self, x1, y1, x2, y2, cls="axis", dash=False, width=1.0):
        self.items.append(("line", (x1, y1, x2, y2), cls, {"dash": dash, "width": width}))

    def rect(self, x, y, w, h, cls="bar"):
        self.items.append(("rect", (x, y, max(w, 0.0), max(h, 0.0)), cls, {}))

    def circle(self, x, y, r, cls="target"):
        self.items.append(("circle", (x, y, r), cls, {}))

    def text(self, x, y, s, anchor="start", cls="axis", size=11):
        self.items.append(("text", (x, y, str(s)), cls, {"anchor": anchor, "size": size}))

    def svg_marks(self) -> list[str]:
        """The SVG, one mark (element with its text) per entry, as the report writes it."""
        t = html_escape(self.title)
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width:.0f} {self.height:.0f}" '
            f'role="img" aria-label="{t}" class="fig">',
            f"<title>{t}</title>",
        ]
        for kind, args, cls, extra in self.items:
            col = COLORS.get(cls, "#333333")
            if kind == "line":
                x1, y1, x2, y2 = args
                dash = ' stroke-dasharray="4 3"' if extra["dash"] else ""
                out.append(
                    f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{col}" '
                    f'stroke-width="{extra["width"]:.1f}"{dash}/>'
                )
            elif kind == "rect":
                x, y, w, h = args
                out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{col}"/>')
            elif kind == "circle":
                x, y, r = args
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{col}"/>')
            else:
                x, y, s = args
                fill = col if cls in ("thr", "fail", "target", "spec", "mixed", "diag") else "#222"
                out.append(
                    f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{extra["anchor"]}" font-size="{extra["size"]}" '
                    f'fill="{fill}">{html_escape(s)}</text>'
                )
        out.append("</svg>")
        return out

    def tikz_lines(self) -> list[str]:
        """The TikZ picture, one line per entry, as the report writes it."""
        width_cm = min(25.0, self.width * 0.0235)
        k = width_cm / self.width

        def X(v):
            return f"{v * k:.3f}"

        def Y(v):
            return f"{(self.height - v) * k:.3f}"

        out = [r"\begin{tikzpicture}[font=\sffamily]", rf"\useasboundingbox (0,0) rectangle ({X(self.width)},{Y(0)});"]
        for kind, args, cls, extra in self.items:
            col = "rs" + cls
            if kind == "line":
                x1, y1, x2, y2 = args
                st = f"draw={col},line width={0.4 * extra['width']:.2f}pt" + (",dashed" if extra["dash"] else "")
                out.append(rf"\draw[{st}] ({X(x1)},{Y(y1)}) -- ({X(x2)},{Y(y2)});")
            elif kind == "rect":
                x, y, w, h = args
                out.append(rf"\fill[{col}] ({X(x)},{Y(y + h)}) rectangle ({X(x + w)},{Y(y)});")
            elif kind == "circle":
                x, y, r = args
                out.append(rf"\fill[{col}] ({X(x)},{Y(y)}) circle ({r * k:.3f});")
            else:
                x, y, s = args
                anchor = {"start": "base west", "middle": "base", "end": "base east"}[extra["anchor"]]
                size = r"\scriptsize" if extra["size"] <= 10 else r"\footnotesize"
                scale = f",scale={min(1.0, width_cm / (self.width * 0.0235)):.3f}"
                out.append(
                    rf"\node[anchor={anchor},inner sep=0pt{scale}] at ({X(x)},{Y(y)}) {{{size} {tex_escape(s)}}};"
                )
        out.append(r"\end{tikzpicture}")
        return out


def label_width(labels, size: float = 11, minimum: float = 60.0) -> float:
    longest = max((len(str(s)) for s in labels), default=0)
    return max(minimum, math.ceil(longest * size * 0.62) + 16)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    v, out = math.ceil(lo / step) * step, []
    while v <= hi + 1e-12 * step:
        out.append(round(v, 10))
        v += step
    return out


def fmt_tick(v: float) -> str:
    s = f"{v:.4f}".rstrip("0").rstrip(".")
    return s if s not in ("-0", "") else "0"


def interval_figure(title: str, rows: list[dict], ref_lines) -> Canvas:
    vals = [v for r in rows for v in (r.get("value"), r.get("lo"), r.get("hi")) if v is not None]
    vals += [v for v, _c, _l in ref_lines]
    lo, hi = (min(vals), max(vals)) if vals else (0.9, 1.1)
    pad = (hi - lo) * 0.08 or 0.02
    lo, hi = lo - pad, hi + pad
    ticks = nice_ticks(lo, hi, 6)
    tick_text = {fmt_tick(t) for t in ticks}
    labelled = [(v, cls, lab) for v, cls, lab in ref_lines if not (lab == fmt_tick(v) and lab in tick_text)]
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
        c.text(sx(t), ybot + 16, fmt_tick(t), anchor="middle", size=10)
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
        cl = r.get("cls", "target")
        if r.get("lo") is not None and r.get("hi") is not None:
            c.line(sx(r["lo"]), y, sx(r["hi"]), y, cls=cl, width=2.0)
            c.line(sx(r["lo"]), y - 5, sx(r["lo"]), y + 5, cls=cl, width=1.5)
            c.line(sx(r["hi"]), y - 5, sx(r["hi"]), y + 5, cls=cl, width=1.5)
        else:
            c.line(sx(1.0) if lo <= 1.0 <= hi else x0, y, sx(r["value"]), y, cls=cl, width=2.0)
        c.circle(sx(r["value"]), y, 4.5, cls=cl)
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
        c.text(sx(t), ybot + 16, fmt_tick(t), anchor="middle", size=10)
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
        c.text(sx(t), ybot + 16, fmt_tick(t), anchor="middle", size=10)
    for i, (lab, v, txt) in enumerate(rows):
        y = top + row_h * i
        c.text(x0 - 8, y + row_h / 2 + 4, lab, anchor="end", size=11)
        c.rect(x0, y + 4, sx(v) - x0, row_h - 8, cls="bar")
        c.text(sx(v) + 4, y + row_h / 2 + 4, txt, size=10)
    c.line(x0, ybot, x1, ybot)
    c.text(x0 + (x1 - x0) / 2, height - 6, xlabel, anchor="middle", size=10)
    return c


# the forest plot (svg.py forest_figure): one column of FOREST_W on screen, columns that fit the page in TikZ
FOREST_W = 384
FOREST_TEXT = 11
FOREST_MIN_PLOT = 160
FOREST_PAGE_ROWS_H = 600


def forest_ratio_groups(ratios: list, noise: list, tau: float) -> list[tuple]:
    """(header, rows, lines, band) per campaign, family and cap of the qualified ratios with an interval
    (table order): rows (label, ratio, lo, hi, verdict), decision lines tau F and 1/(tau F) with F the
    floor of the control the verdict weighs (the first arm by name with a twin; 1 without a floor),
    band the control's interval."""
    keys: list[tuple] = []
    rows: dict = defaultdict(list)
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
        out.append((header, rows[(camp, fam, cap)], [tau * floor, 1.0 / (tau * floor)], band))
    return out


def forest_estimate_groups(estimates: list, noise: list) -> list[tuple]:
    """(header, rows, lines, band) per family of the E2 estimates with an interval (table order):
    decision lines threshold x F and threshold / F (F the estimates' floor), band the interval of
    the family's replication control with the largest floor (the first on a tie)."""
    fams: list[str] = []
    rows: dict = defaultdict(list)
    first: dict = {}
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
        out.append((f"replication, {fam}", rows[fam], [thr * floor, thr / floor], band))
    return out


def _log_ticks(lo: float, hi: float, sx) -> list[float]:
    """1, then "nice" linear steps (a narrow range) or 1, 2, 5 per decade, each at least 40 px from the kept."""
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


def _forest_x(groups: list[tuple]) -> tuple[float, float, int]:
    x1 = FOREST_W - label_width([word(r[4]) for g in groups for r in g[1]], FOREST_TEXT, 0.0)
    x0 = label_width([r[0] for g in groups for r in g[1]], FOREST_TEXT, 40.0)
    return (10.0, x1, 32) if x1 - x0 < FOREST_MIN_PLOT else (x0, x1, 20)


def _page_columns(groups: list[tuple], row_h: int) -> list[list[tuple]]:
    most = (FOREST_PAGE_ROWS_H - 22) // row_h
    pieces = [
        (h, rows[i : i + most], lines, band) for h, rows, lines, band in groups for i in range(0, len(rows), most)
    ]
    cols: list[list[tuple]] = [[]]
    used = 0
    for g in pieces:
        gh = 22 + row_h * len(g[1])
        if cols[-1] and used + gh > FOREST_PAGE_ROWS_H:
            cols.append([])
            used = 0
        cols[-1].append(g)
        used += gh
    return cols


def _forest_canvas(title: str, columns: list[list[tuple]], xlabel: str) -> Canvas:
    size = FOREST_TEXT
    groups = [g for col in columns for g in col]
    x0, x1, row_h = _forest_x(groups)
    stacked = row_h > 20
    spans, ybot = [], 0.0
    for k, col in enumerate(columns):
        y = 8.0
        for g in col:
            spans.append((k * FOREST_W, y + 18, y + 18 + row_h * len(g[1])))
            y += 22 + row_h * len(g[1])
        ybot = max(ybot, y + 4)
    c = Canvas(FOREST_W * len(columns), ybot + 42, title)
    vals = [1.0]
    for _h, rows, lines, band in groups:
        vals += [v for _l, val, lo, hi, _v in rows for v in (val, lo, hi)] + list(lines)
        vals += list(band) if band else []
    a, b = math.log(min(vals)), math.log(max(vals))
    pad = (b - a) * 0.05 or 0.01
    a, b = a - pad, b + pad

    def sx(v):
        return x0 + (math.log(v) - a) / (b - a) * (x1 - x0)

    for (_h, _rows, _lines, band), (off, top, bot) in zip(groups, spans, strict=True):
        if band:
            c.rect(off + sx(band[0]), top, sx(band[1]) - sx(band[0]), bot - top, cls="grid")
    for (_h, _rows, lines, _band), (off, top, bot) in zip(groups, spans, strict=True):
        c.line(off + sx(1.0), top, off + sx(1.0), bot, cls="ref", width=1.2)
        for v in sorted(set(lines)):
            c.line(off + sx(v), top, off + sx(v), bot, cls="axis", dash=True)
    for (header, rows, _lines, _band), (off, top, _bot) in zip(groups, spans, strict=True):
        c.text(off + 8, top - 5, header, size=size)
        for i, (label, val, lo, hi, verdict) in enumerate(rows):
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
            c.text(off + x1 + 8, ym + 4, word(verdict), cls=cls, size=size)
    for k in range(len(columns)):
        off = k * FOREST_W
        c.line(off + x0, ybot, off + x1, ybot)
        for t in _log_ticks(math.exp(a), math.exp(b), sx):
            c.line(off + sx(t), ybot, off + sx(t), ybot + 4)
            c.text(off + sx(t), ybot + 17, fmt_tick(t), anchor="middle", size=size)
        c.text(off + FOREST_W / 2, ybot + 36, xlabel, anchor="middle", size=size)
    return c


class SplitCanvas(Canvas):
    """A figure whose SVG is one drawing (the screen's) and whose TikZ another (the page's)."""

    def __init__(self, screen: Canvas, page: Canvas):
        super().__init__(screen.width, screen.height, screen.title)
        self.items, self.page = screen.items, page

    def tikz_lines(self) -> list[str]:
        return self.page.tikz_lines()


def forest_figure(title: str, groups: list[tuple], xlabel: str) -> SplitCanvas:
    page = _forest_canvas(title, _page_columns(groups, _forest_x(groups)[2]), xlabel)
    return SplitCanvas(_forest_canvas(title, [list(groups)], xlabel), page)


class Fig:
    """One figure the data calls for: id, title, source tables (as the report names them), drawing, caption."""

    def __init__(self, fid: str, title: str, sources: list[str], canvas: Canvas, caption: str):
        self.id, self.title, self.sources, self.canvas, self.caption = fid, title, sources, canvas, caption

    def html(self) -> list[str]:
        """The ``<figure>`` element, one mark per entry (its SVG marks, then its caption)."""
        links = ", ".join(
            f'<a href="{html_escape(s)}" data-src="{html_escape(s)}">{html_escape(s)}</a>' for s in self.sources
        )
        return (
            [f'<figure id="{self.id}">\n']
            + self.canvas.svg_marks()
            + [f"\n<figcaption>{html_escape(self.caption)} Source: {links}.</figcaption>\n</figure>"]
        )

    def tex(self) -> list[str]:
        """The figure in report.tex, one line per entry: title, picture, caption."""
        srcs = ", ".join(rf"\texttt{{{tex_escape(s)}}}" for s in self.sources)
        return (
            [rf"\subsection*{{{tex_escape(self.title)}}}", r"\begin{center}"]
            + self.canvas.tikz_lines()
            + [r"\end{center}", rf"{{\footnotesize {tex_escape(self.caption)} Source: {srcs}.}}"]
        )


def _rows(tables: dict, name: str) -> list[dict]:
    t = tables.get(name)
    return t.rows if t is not None else []


def fig_first_divergence(tables: dict, src) -> Fig | None:
    """qualification.py: one dot per failing task at its first-divergence index, per family, arm and campaign."""
    if "qualification" not in tables:
        return None
    fails = [q for q in _rows(tables, "qualification") if not q["qualified"]]
    groups: dict[str, list[int]] = defaultdict(list)
    for q in fails:
        if q["first_diff_index"] is not None:
            groups[f"{q['family']} {q['arm']} ({q['campaign']})"].append(int(q["first_diff_index"]))
    if not fails or not groups:
        return None
    title = "First-divergence index of failing arms"
    canvas = strip_figure(
        title, sorted(groups.items()), "zero-based index of the first token differing from the reference"
    )
    caption = "One dot per failing task; index of the first differing endpoint token."
    return Fig("fig-first-divergence", title, [src("qualification")], canvas, caption)


def fig_cost(tables: dict, src) -> Fig | None:
    """timing.py section_ratios: GS/QB and PQ/QB of the implementation campaign, per family and path."""
    if "ratios" not in tables:
        return None
    layout: dict[tuple, str] = {}
    for r in _rows(tables, "requests"):
        layout.setdefault((r["campaign"], r["family"], r["arm"]), r["layout"])
    impl = [r for r in _rows(tables, "ratios") if r["campaign"] == "implementation" and r["path"] in ("target", "spec")]
    pts = []
    for r in sorted(impl, key=lambda r: (r["family"], r["path"], r["numerator"])):
        lay_n = layout.get(("implementation", r["family"], r["numerator"]))
        lay_d = layout.get(("implementation", r["family"], r["denominator"]))
        if lay_d != "qb" or lay_n not in ("gs", "pq"):
            continue
        pts.append(
            dict(
                label=f"{r['family']} {r['path']} {lay_n.upper()}/QB",
                value=r["ratio"] if r["qualified"] else None,
                cls=r["path"],
                note=f"{DASH} not qualified",
            )
        )
    if not pts:
        return None
    title = "Repair cost per family: GS and PQ relative to QB"
    caption = (
        "Implementation-campaign ratios; above one the alternative is slower than QB. "
        "Blue: target-only arms; orange: speculative arms."
    )
    return Fig("fig-cost", title, [src("ratios")], interval_figure(title, pts, [(1.0, "ref", "1")]), caption)


def fig_diagnostics(tables: dict, src) -> Fig | None:
    """timing.py section_diagnostics: every diagnostic ratio that has a value."""
    pts = [
        dict(label=f"{r['family']} {r['numerator']}/{r['denominator']} ({r['campaign']})", value=r["ratio"], cls="diag")
        for r in _rows(tables, "diagnostics")
        if r["ratio"] is not None
    ]
    if not pts:
        return None
    title = "Diagnostic (unqualified) timing ratios"
    caption = (
        "Diagnostic, not qualified: at least one arm of each pair differs from the reference "
        "on some task. Above one the numerator is slower."
    )
    return Fig(
        "fig-diagnostics", title, [src("diagnostics")], interval_figure(title, pts, [(1.0, "ref", "1")]), caption
    )


def fig_replication(tables: dict, src) -> Fig | None:
    """timing.py _estimate_items: each estimate with its session interval, the threshold dashed."""
    rows = _rows(tables, "estimates")
    if "estimates" not in tables or not rows:
        return None
    pts = []
    for r in rows:
        label = f"{r['family']} {r['path']} {r['comparison']}"
        if r["estimate"] is None:
            pts.append(dict(label=label, value=None, note=f"{DASH} not qualified"))
        else:
            few = r["lo"] is None
            pts.append(
                dict(
                    label=label + (" (too few sessions)" if few else ""),
                    value=r["estimate"],
                    lo=r["lo"],
                    hi=r["hi"],
                    cls=r["path"],
                )
            )
    thr = rows[0]["threshold"]
    title = "Replication ratios with 95% session intervals"
    canvas = interval_figure(title, pts, [(1.0, "ref", "1"), (thr, "thr", f"threshold {thr:g}")])
    caption = (
        "Point: exp(mean c_s); whiskers: the t interval over sessions. Blue: target-only; "
        "orange: speculative. Dashed: practical threshold."
    )
    return Fig("fig-replication", title, [src("estimates")], canvas, caption)


def fig_acceptance(tables: dict, src) -> Fig | None:
    """timing.py section_acceptance (campaigns/derived.py acceptance): accepted / proposed per family and draft."""
    if "requests" not in tables:
        return None
    acc: dict[tuple[str, str], list[int]] = {}
    for r in _rows(tables, "requests"):
        if r["status"] != "ok" or r["mode"] != "spec" or r["draft"] is None or r["proposals"] is None:
            continue
        a = acc.setdefault((r["family"], r["draft"]), [0, 0])
        a[0] += int(r["proposals"])
        a[1] += int(r["accepted"] or 0)
    bars = [(f"{fam} {draft}", k / p, f"{k / p:.4f}") for (fam, draft), (p, k) in sorted(acc.items()) if p]
    if not bars:
        return None
    title = "Acceptance per draft"
    canvas = bar_figure(title, bars, "accepted / proposed draft tokens")
    caption = "Fraction of proposed draft tokens accepted by the target."
    return Fig("fig-acceptance", title, [src("requests")], canvas, caption)


def fig_forest(tables: dict, src) -> Fig | None:
    """timing.py _forest: every qualified ratio and E2 estimate with an interval, the decision lines
    and the A/A bands (in the ratios section, or the replication section without ratios)."""
    noise = _rows(tables, "noise")
    ratio_groups = forest_ratio_groups(_rows(tables, "ratios"), noise, THRESHOLD)
    estimate_groups = forest_estimate_groups(_rows(tables, "estimates"), noise)
    groups = ratio_groups + estimate_groups
    if not groups:
        return None
    sources = [src("ratios")] if ratio_groups else []
    sources += [src("estimates")] if estimate_groups else []
    sources += [src("noise")] if any(g[3] for g in groups) else []
    title = "Every timed ratio with its interval, A/A band and decision lines"
    canvas = forest_figure(title, groups, "ratio, log scale; above one the numerator is slower")
    caption = (
        "Every qualified ratio and every E2 estimate with an interval, grouped by campaign and family: "
        "the point, its interval as a whisker and its verdict in words. Solid grey line: one. Dashed: the "
        "decision lines, tau x F and one over tau x F for a ratio, threshold x F and threshold / F for an "
        "estimate (F the A/A floor of the campaign and family, one without a control). Shaded: the interval "
        "of the A/A twin over its arm. Blue: decided; grey: undecided."
    )
    return Fig("fig-forest", title, sources, canvas, caption)


FIGURES = (fig_first_divergence, fig_cost, fig_forest, fig_diagnostics, fig_replication, fig_acceptance)

# a report's <figure> element and its SVG: the checker reads the text between the tags as the marks
_FIGURE_RE = re.compile(r'<figure id="([^"]*)">')
_MARK_RE = re.compile(r"<[^<>]*>[^<]*")


def expected_figures(tables: dict, src) -> dict[str, Fig]:
    """Every figure the archive's tables call for, by id."""
    out = {}
    for make in FIGURES:
        f = make(tables, src)
        if f is not None:
            out[f.id] = f
    return out


def _marks(text: str) -> list[str]:
    """Split a figure's text into marks: each tag with the text that follows it up to the next tag."""
    out, pos = [], 0
    for m in _MARK_RE.finditer(text):
        if m.start() != pos:
            out.append(text[pos : m.start()])
        out.append(m.group(0))
        pos = m.end()
    if pos != len(text):
        out.append(text[pos:])
    return out


def _split_expected(parts: list[str]) -> list[str]:
    return _marks("".join(parts))


def _compare(c: Checker, where: str, fid: str, shown: list[str], want: list[str], limit: int = 4, at=None) -> bool:
    """Mark by mark; each differing mark is a problem (the first ``limit``, then a count)."""
    diffs = [i for i in range(max(len(shown), len(want))) if i >= len(shown) or i >= len(want) or shown[i] != want[i]]
    c.compared += max(len(shown), len(want))  # one comparison per mark (the summary line counts them)
    c.matched += max(len(shown), len(want)) - len(diffs)
    for i in diffs[:limit]:
        got = shown[i].strip() if i < len(shown) else "nothing"
        exp = want[i].strip() if i < len(want) else "nothing"
        c.bad(at(i) if at else where, f"figure {fid} mark {i + 1}: {got[:160]!r} where its data draws {exp[:160]!r}")
    if len(diffs) > limit:
        c.bad(where, f"figure {fid}: {len(diffs) - limit} more marks differ from the drawing of its data")
    if len(shown) != len(want):
        c.bad(where, f"figure {fid} has {len(shown)} marks where its data draws {len(want)}")
    return not diffs


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def check_figures_html(c: Checker, rep, figs: dict[str, Fig]) -> list[str]:
    """Each <figure> of report.html against the drawing of its data; the ids in the report's order."""
    html, rel = rep.html_text, rep.html_rel
    order: list[str] = []
    covered: list[tuple[int, int]] = []
    for m in _FIGURE_RE.finditer(html):
        fid, line = m.group(1), _line_of(html, m.start())
        end = html.find("</figure>", m.end())
        end = len(html) if end < 0 else end + len("</figure>")
        covered.append((m.start(), end))
        where = f"{rel}:{line}"
        f = figs.get(fid)
        if f is None:
            c.bad(
                where, f"figure {fid!r} cannot be recomputed from the archive's tables (no such figure for this data)"
            )
            continue
        if fid in order:
            c.bad(where, f"figure {fid} shown twice")
            continue
        order.append(fid)
        _compare(c, where, fid, _marks(html[m.start() : end]), _split_expected(f.html()))
    for fid in figs:
        if fid not in order:
            c.bad(rel, f"figure {fid} is missing: the archive's tables call for it ({figs[fid].title})")
    for m in re.finditer(r"<svg\b|<figure\b", html):
        if not any(a <= m.start() < b for a, b in covered):
            c.bad(f"{rel}:{_line_of(html, m.start())}", "a drawing outside the figures recomputed from the data")
    return order


def check_figures_tex(c: Checker, rep, figs: dict[str, Fig], order: list[str]) -> None:
    """Each tikzpicture of report.tex (with its title and caption) against the drawing of its data, in the
    order of report.html's figures."""
    if rep.tex is None:
        return
    rel = rep.tex_rel
    try:
        with open(os.path.join(rep.dir, "report.tex"), encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        c.bad(rel, f"cannot read its figures ({e})")
        return
    starts = [i for i, ln in enumerate(lines) if ln.startswith(r"\begin{tikzpicture}")]
    for i, ln in enumerate(lines):
        if "tikzpicture" in ln and not ln.startswith((r"\begin{tikzpicture}", r"\end{tikzpicture}")):
            c.bad(f"{rel}:{i + 1}", "a TikZ picture outside the figures recomputed from the data")
    want_ids = order + [fid for fid in figs if fid not in order]
    for k, i in enumerate(starts):
        where = f"{rel}:{i + 1}"
        if k >= len(want_ids):
            c.bad(where, "a TikZ picture that no figure of the archive's data calls for (cannot be recomputed)")
            continue
        f = figs[want_ids[k]]
        want = f.tex()
        first = i - 2  # \subsection*{title}, \begin{center}, then the picture
        shown = lines[max(first, 0) : max(first, 0) + len(want)]
        _compare(c, where, f.id, shown, want, at=lambda n, top=max(first, 0): f"{rel}:{top + n + 1}")
    if len(starts) < len(want_ids):
        for fid in want_ids[len(starts) :]:
            c.bad(rel, f"figure {fid} is missing: the archive's tables call for it ({figs[fid].title})")


def check_figures(c: Checker, tables: dict, src, rep) -> None:
    """Every figure of report.html and report.tex redrawn from the archive's tables and compared mark by mark."""
    figs = expected_figures(tables, src)
    order = check_figures_html(c, rep, figs)
    check_figures_tex(c, rep, figs, order)
