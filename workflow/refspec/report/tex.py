"""TeX text for the report: escaping of every string written into ``report.tex``
(:func:`tex_escape`), :class:`TexRaw` for LaTeX that must pass unescaped, and the
LaTeX of one table cell."""

from __future__ import annotations

from typing import Any

from .model import DASH, Cell, Num

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
    "\u00d7": r"$\times$",
    "\u2264": r"$\le$",
    "\u2265": r"$\ge$",
}


def tex_escape(s: Any) -> str:
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


class TexRaw(str):
    """LaTeX that the TeX template must not escape."""


def _tex_finalize(v: Any) -> str:
    if isinstance(v, TexRaw):
        return v
    if v is None:
        return ""
    return tex_escape(v)


def _tex_cell(cell: Cell) -> TexRaw:
    out = []
    for p in cell.parts:
        out.append(tex_escape(p.text) if isinstance(p, Num) else tex_escape(p))
    s = "".join(out)
    if cell.cls and "reason" in cell.cls:
        s = r"\parbox[t]{4.2cm}{\raggedright\scriptsize " + s + "}"
        return TexRaw(s)
    if cell.cls and "small" in cell.cls:
        s = r"{\scriptsize " + s + "}"
    # longtable's l/r columns never wrap: a long cell (the provenance's device list) would run
    # off the page and push the columns after it out of the PDF
    if sum(len(p.text if isinstance(p, Num) else str(p)) for p in cell.parts) > 90:
        s = r"\parbox[t]{11cm}{\raggedright " + s + "}"
    return TexRaw(s)
