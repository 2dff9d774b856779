"""TeX text for the report: escaping of every string written into ``report.tex``
(:func:`tex_escape`), :class:`TexRaw` for LaTeX that must pass unescaped, the checked form
of a number (:func:`tex_num`: ``\\rsnum{ID}{TEXT}``, the id written by :func:`tex_id`) and the
LaTeX of one table cell. ``report/check.py`` parses report.tex against this subset
(anc/report.md)."""

from __future__ import annotations

from typing import Any

from .document import DASH, Cell, Link, Num

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


# characters of a number id written as they are inside ``\\rsnum{...}``; any other character is
# written ``!HEX;`` (its code point in hex), so the argument holds no TeX special character
_ID_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 ._:/+=,|@-")


def tex_id(nid: str) -> str:
    """A number id as the first argument of ``\\rsnum`` (never typeset; check.py decodes it)."""
    return "".join(ch if ch in _ID_PLAIN else f"!{ord(ch):x};" for ch in nid)


def tex_num(n: Num) -> str:
    """A number in its checked form: ``\\rsnum{ID}{TEXT}`` (the preamble defines it to typeset TEXT)."""
    return "\\rsnum{" + tex_id(n.id) + "}{" + tex_escape(n.text) + "}"


class TexRaw(str):
    """LaTeX that the TeX template must not escape."""


def tex_finalize(v: Any) -> str:
    if isinstance(v, TexRaw):
        return v
    if v is None:
        return ""
    return tex_escape(v)


def tex_cell(cell: Cell) -> TexRaw:
    out = []
    for p in cell.parts:
        out.append(tex_num(p) if isinstance(p, Num) else tex_escape(p.text if isinstance(p, Link) else p))
    s = "".join(out)
    if cell.cls and "reason" in cell.cls:
        s = r"\parbox[t]{4.2cm}{\raggedright\scriptsize " + s + "}"
        return TexRaw(s)
    if cell.cls and "wrap" in cell.cls:  # a short phrase in a wide table: wraps in a narrow column
        s = r"\parbox[t]{2.4cm}{\raggedright\scriptsize " + s + "}"
        return TexRaw(s)
    if cell.cls and "small" in cell.cls:
        s = r"{\scriptsize " + s + "}"
    # longtable's l/r columns never wrap: a long cell (the provenance's device list) would run
    # off the page and push the columns after it out of the PDF
    if sum(len(p.text if isinstance(p, (Num, Link)) else str(p)) for p in cell.parts) > 90:
        s = r"\parbox[t]{11cm}{\raggedright " + s + "}"
    return TexRaw(s)
