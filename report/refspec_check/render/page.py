"""report.html and report.tex of a document's sections, written with the standard library only.

This is the report's one format: the pipeline writes it (:mod:`.render`, :mod:`.comparison`)
and ``report/check.py`` runs the same code on the sealed tables and compares the bytes
(``refspec_check/rendering.py``). Nothing here may import outside the standard library and this package.

HTML: every value is written as :func:`html_text` gives it (characters outside the report's
repertoire replaced), then escaped (``& < > " '``); a figure's SVG is written as it is. TeX: every
value goes through :func:`.tex.tex_finalize` (escaped unless it is :class:`.tex.TexRaw`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .document import Figure, Link, Num, Section, Table
from .tex import TexRaw, tex_cell, tex_finalize

# the non-ASCII characters the report writes (report/refspec_check/repertoire.py pins the same set:
# check.py refuses every other character a reader sees)
HTML_CHARS = frozenset("\u00a7\u00b7\u00d7\u2013\u2014\u2026\u2264\u2265")


class Markup(str):
    """HTML that is written as it is (a figure's SVG)."""


def html_text(v: Any) -> Any:
    """A value written into report.html: a string's characters outside printable ASCII, the line
    break and ``HTML_CHARS`` (a control, a bidi control, a letter outside ASCII in a name or a
    reason) shown as '?' (a control as a space), as tex_escape does for report.tex; markup as it is."""
    if not isinstance(v, str) or isinstance(v, Markup):
        return v
    if all(32 <= ord(ch) <= 126 or ch == "\n" or ch in HTML_CHARS for ch in v):
        return v
    return "".join(
        ch if 32 <= ord(ch) <= 126 or ch == "\n" or ch in HTML_CHARS else " " if ord(ch) < 32 else "?" for ch in v
    )


def escape(s: str) -> str:
    """HTML text or attribute value: ``& < > " '`` as character references."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;").replace("'", "&#39;")


def _h(v: Any) -> str:
    """One value as report.html writes it."""
    v = html_text(v)
    return v if isinstance(v, Markup) else escape(str(v))


def _numeric(t: Table, i: int) -> bool:
    return bool(t.numeric) and i < len(t.numeric) and bool(t.numeric[i])


STYLE = """\
:root { --fg:#1b1b1b; --muted:#5a5a5a; --bg:#ffffff; --line:#d6d6d6; --head:#f3f4f6; --ok:#1e6b34; --bad:#a61b1b; --accent:#2c6db0; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; background: var(--bg); color: var(--fg); font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 74rem; margin: 0 auto; padding: 1rem 1.25rem 3rem; }
h1 { font-size: 1.6rem; margin: .6rem 0 .2rem; }
h2 { font-size: 1.25rem; margin: 2.2rem 0 .4rem; padding-bottom: .2rem; border-bottom: 2px solid var(--accent); }
h3 { font-size: 1.02rem; margin: 1.2rem 0 .3rem; }
p { margin: .3rem 0 .6rem; max-width: 60rem; }
nav { font-size: .9rem; margin: .4rem 0 1rem; }
nav a { margin-right: .8rem; white-space: nowrap; }
a { color: var(--accent); }
.lead { color: var(--muted); }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: .3rem 0 .4rem; border: 1px solid var(--line); border-radius: 4px; }
/* tables fit a 1280 px window: headers wrap, long cells wrap anywhere, numbers stay on one line */
table { border-collapse: collapse; width: 100%; font-size: .84rem; }
th, td { padding: .26rem .42rem; border-bottom: 1px solid var(--line); text-align: left; vertical-align: baseline; }
th { background: var(--head); font-weight: 600; white-space: normal; position: sticky; top: 0; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
th.num { text-align: right; }
tr:last-child td { border-bottom: none; }
td { overflow-wrap: break-word; }
td:first-child { white-space: nowrap; }
.mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: .85em; overflow-wrap: anywhere; }
.small { font-size: .8em; }
.reason { color: var(--muted); font-size: .82em; min-width: 9rem; overflow-wrap: anywhere; }
.diag { color: #7a4e9c; font-style: italic; }
.descriptive { color: var(--muted); }
.too_few_sessions { color: var(--muted); font-weight: 600; font-style: italic; }
td.refused { font-weight: 600; white-space: normal; text-align: left; min-width: 14rem; overflow-wrap: anywhere; }
table[data-table="summary"] td:nth-child(-n+2) { white-space: nowrap; }
details > summary { cursor: pointer; list-style-position: outside; }
details > summary h2 { display: inline-block; margin: 1.2rem 0 .2rem; border-bottom: none; font-size: 1.1rem; }
details[open] > summary h2 { border-bottom: 2px solid var(--accent); }
.ok { color: var(--ok); }
.bad, .missing { color: var(--bad); }
.exceeds { color: var(--ok); font-weight: 600; }
.below { color: var(--bad); font-weight: 600; }
.inconclusive { color: var(--muted); font-weight: 600; }
.unqualified { color: var(--bad); }
.src { font-size: .8rem; color: var(--muted); margin: 0 0 .2rem; }
.note { background: #fff6e0; border-left: 4px solid #d9a400; padding: .35rem .7rem; margin: .4rem 0; font-size: .9rem; overflow-wrap: anywhere; }
figure { margin: 1rem 0; }
figure svg.fig { width: 100%; height: auto; max-width: 56rem; display: block; }
figcaption { font-size: .85rem; color: var(--muted); }
footer { margin-top: 3rem; font-size: .8rem; color: var(--muted); }
@media (max-width: 640px) {
  body { font-size: 14px; }
  main { padding: .6rem .6rem 2rem; }
  h1 { font-size: 1.3rem; }
  /* the contents on one line that scrolls sideways, so the findings reach the first screen */
  nav { display: flex; overflow-x: auto; white-space: nowrap; margin: .3rem 0 .6rem; padding-bottom: .2rem; }
  .lead { font-size: .85rem; }
  table { font-size: .8rem; }
  th, td { padding: .22rem .35rem; }
  td.num { white-space: normal; }
  /* the findings and the headline stack: each finding above its result, nothing off-screen */
  table[data-table="findings"], table[data-table="summary"],
  table[data-table="findings"] tbody, table[data-table="summary"] tbody,
  table[data-table="findings"] tr, table[data-table="summary"] tr { display: block; }
  table[data-table="findings"] thead, table[data-table="summary"] thead { display: none; }
  table[data-table="findings"] tr, table[data-table="summary"] tr { border-bottom: 1px solid var(--line); padding: .2rem 0; }
  table[data-table="findings"] td:nth-child(n), table[data-table="summary"] td:nth-child(n) { display: block; white-space: normal; border-bottom: none; padding: .05rem .35rem; }
  /* the ratio, estimate and A/A tables stack too, each cell under its column's name: no result off-screen */
  table.stack, table.stack tbody, table.stack tr, table.stack td { display: block; }
  table.stack thead { display: none; }
  table.stack tr { border-bottom: 1px solid var(--line); padding: .2rem 0; }
  table.stack td { white-space: normal; text-align: left; border-bottom: none; padding: .05rem .35rem; }
  table.stack td::before { content: attr(data-label) ": "; color: var(--muted); font-weight: 600; }
}
@media print { .scroll { overflow: visible; border: none; } th { position: static; } }
"""

LEAD = (
    "Reference-preserving speculative decoding: qualification against the greedy reference, qualified latency "
    "ratios, replication estimates, numerical replay and audit. Every number links the CSV it was computed "
    "from; <code>report/check.py</code> recomputes them with the Python standard library."
)
FOOTER = "numbers.json lists every number above with its table, row, column and source CSV."
# figures of an open section the contents link first (the forest plot: every timed ratio at a glance)
NAV_FIGURES = {"fig-forest": "Forest plot"}


def _sources_html(sources: list[str]) -> str:
    return ", ".join(f'<a href="{_h(s)}" data-src="{_h(s)}">{_h(s)}</a>' for s in sources)


def _table_html(t: Table) -> str:
    out = [f'\n<h3 id="table-{_h(t.id)}">{_h(t.title)}</h3>\n']
    if t.sources:
        out.append(f'<p class="src">source: {_sources_html(t.sources)}</p>')
    out.append('\n<div class="scroll">\n')
    out.append(f'<table data-table="{_h(t.id)}"' + (' class="stack"' if t.stack else ""))
    if t.sources:
        out.append(f' data-src="{_h(t.sources[0])}"')
    out.append(">\n<thead><tr>")
    for i, h in enumerate(t.header):
        out.append('<th scope="col"' + (' class="num"' if _numeric(t, i) else "") + f">{_h(h)}</th>")
    out.append("</tr></thead>\n<tbody>\n")
    for row in t.rows:
        out.append("<tr>")
        for i, c in enumerate(row):
            cl = (str(c.cls) + (" num" if _numeric(t, i) else "")).strip()
            label = f' data-label="{_h(t.header[i])}"' if t.stack and i < len(t.header) else ""
            out.append(
                "<td"
                + (f' class="{_h(cl)}"' if cl else "")
                + (f' title="{_h(c.title)}"' if c.title else "")
                + label
                + ">"
            )
            for p in c.parts:
                if isinstance(p, Num):
                    out.append(f'<span data-num="{_h(p.id)}" data-src="{_h(p.source)}">{_h(p.text)}</span>')
                elif isinstance(p, Link):
                    out.append(f'<a href="#{_h(p.target)}">{_h(p.text)}</a>')
                else:
                    out.append(_h(p))
            out.append("</td>")
        out.append("</tr>\n")
    out.append("\n</tbody>\n</table>\n</div>\n")
    if t.caption:
        out.append(f'<p class="caption">{_h(t.caption)}</p>')
    out.append("\n")
    return "".join(out)


def _figure_html(f: Figure, svg: Callable[[Figure], Any]) -> str:
    return (
        f'\n<figure id="{_h(f.id)}">\n{_h(svg(f))}\n'
        f"<figcaption>{_h(f.caption)} Source: {_sources_html(f.sources)}.</figcaption>\n</figure>\n"
    )


def html_page(sections: list[Section], title: str, svg: Callable[[Figure], Any]) -> str:
    """report.html of ``sections``; ``svg`` draws a figure (its result is written as it is when it is :class:`Markup`)."""
    out = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        f"<title>{_h(title)}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n",
        f'<h1>{_h(title)}</h1>\n<p class="lead">{LEAD}</p>\n<nav>',
    ]
    figures = [it for s in sections if s.open for it in s.items if isinstance(it, Figure)]
    out.extend(f'<a href="#{_h(f.id)}">{_h(NAV_FIGURES[f.id])}</a> ' for f in figures if f.id in NAV_FIGURES)
    out.extend(f'<a href="#{_h(s.id)}">{_h(s.title)}</a> ' for s in sections)
    out.append("</nav>\n")
    for s in sections:
        out.append(f'\n<section id="{_h(s.id)}">\n')
        # a folded section: its title is the one line shown, the rest one click away
        out.append(f"<h2>{_h(s.title)}</h2>\n" if s.open else f"<details>\n<summary><h2>{_h(s.title)}</h2></summary>\n")
        if s.intro:
            out.append(f"<p>{_h(s.intro)}</p>")
        out.append("\n")
        out.extend(f'<p class="note">{_h(n)}</p>\n' for n in s.notes)
        out.append("\n")
        for it in s.items:
            out.append("\n")
            out.append(_table_html(it) if isinstance(it, Table) else _figure_html(it, svg))
            out.append("\n")
        out.append("\n</section>\n" if s.open else "\n</details>\n</section>\n")
    out.append(f"\n<footer>{FOOTER}</footer>\n</main>\n</body>\n</html>\n")
    return "".join(out)


# --------------------------------------------------------------------------- TeX

TEX_PREAMBLE = r"""% Generated by refspec report from the result tables; see numbers.json for every number's source.
\documentclass[10pt,a4paper]{article}
\usepackage[margin=18mm,landscape]{geometry}
\usepackage{booktabs}
\usepackage{longtable}
\usepackage{tikz}
\usepackage{array}
\usepackage{url}
\setlength{\LTpre}{4pt}
\setlength{\LTpost}{4pt}
\setlength{\tabcolsep}{4pt}
\setlength{\parindent}{0pt}
\setlength{\parskip}{4pt}
% a checked number: \rsnum{ID}{TEXT} shows TEXT; ID is its id in numbers.json (report/check.py)
\newcommand{\rsnum}[2]{\mbox{#2}}
"""


def _t(v: Any) -> str:
    """One value as report.tex writes it."""
    return str(tex_finalize(v))


def _sources_tex(sources: list[str]) -> str:
    return ", ".join("\\texttt{" + _t(s) + "}" for s in sources)


def _table_tex(t: Table) -> str:
    out = ["\\subsection*{" + _t(t.title) + "}\n"]
    if t.sources:
        out.append("{\\footnotesize source: " + _sources_tex(t.sources) + "}\n")
    colspec = "".join("r" if _numeric(t, i) else "l" for i in range(len(t.header)))
    out.append("{\\footnotesize\n\\begin{longtable}{" + colspec + "}\n\\toprule\n")
    out.append(" & ".join(_t(h) for h in t.header) + " \\\\\n\\midrule\n\\endhead\n")
    for row in t.rows:
        out.append(" & ".join(_t(tex_cell(c)) for c in row) + " \\\\\n")
    out.append("\\bottomrule\n\\end{longtable}\n}\n")
    if t.caption:
        out.append("{\\footnotesize " + _t(t.caption) + "}\n\n")
    return "".join(out)


def _figure_tex(f: Figure, tikz: Callable[[Figure], Any]) -> str:
    return (
        "\\subsection*{" + _t(f.title) + "}\n\\begin{center}\n" + _t(tikz(f)) + "\n\\end{center}\n"
        "{\\footnotesize " + _t(f.caption) + " Source: " + _sources_tex(f.sources) + ".}\n\n"
    )


def tex_page(sections: list[Section], title: str, colors: str, tikz: Callable[[Figure], Any]) -> str:
    """report.tex of ``sections``; ``colors`` is the preamble's colour definitions, ``tikz`` draws a figure
    (its result is written as it is when it is :class:`.tex.TexRaw`)."""
    out = [TEX_PREAMBLE, colors, "\n\\title{" + _t(title) + "}\n\\date{}\n\\begin{document}\n\\maketitle\n"]
    for s in sections:
        out.append("\\section{" + _t(s.title) + "}\n")
        if s.intro:
            out.append(_t(s.intro) + "\n\n")
        out.extend("\\fbox{\\parbox{0.95\\linewidth}{\\small Note: " + _t(n) + "}}\n\n" for n in s.notes)
        for it in s.items:
            out.append(_table_tex(it) if isinstance(it, Table) else _figure_tex(it, tikz))
    out.append("\\end{document}\n")
    return "".join(out)


def tex_colors(colors: dict[str, str]) -> TexRaw:
    """The preamble's ``\\definecolor`` of each figure colour."""
    return TexRaw("\n".join(rf"\definecolor{{rs{k}}}{{HTML}}{{{v[1:].upper()}}}" for k, v in colors.items()))
