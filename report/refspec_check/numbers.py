"""The report's numbers versus the recomputation (numbers.json: each number's value, source and text), and
report.html and report.tex against the report's strict subsets and links."""

from __future__ import annotations

import hashlib
import os
import re

from refspec_check.context import Expected
from refspec_check.contract import posix_rel
from refspec_check.problems import REL_TOL, Checker, fmt
from refspec_check.report import Report
from refspec_check.seal import _inside
from refspec_check.strict_html import STYLESHEET_SHA256

_NUM_RE = re.compile(r"^(-?)(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$")


def displayed_matches(text: str, value) -> bool:
    """Whether ``text`` is ``value`` rounded to the digits shown."""
    m = _NUM_RE.match(text)
    if not m:
        return False
    shown = float(text)
    decimals = len(m.group(3) or "")
    exp = int(m.group(4) or 0)
    if isinstance(value, int) and not isinstance(value, bool) and not m.group(3) and not m.group(4):
        return int(text) == value
    half = 0.5 * 10.0 ** (exp - decimals)
    return abs(shown - float(value)) <= half * (1 + 1e-9) + REL_TOL * max(1.0, abs(float(value)))


def check_numbers(c: Checker, E: Expected, rep: Report) -> dict:
    """numbers.json against the recomputed numbers: each id once, recomputable, its value equal (floats
    within 1e-12 relative), its source the recomputed one, its text the value rounded to the digits
    shown, its source a file of the archive; every recomputed number is listed. Returns id -> entry."""
    stated = {}
    for j, n in enumerate(rep.numbers_doc["numbers"]):
        where = f"numbers.json: numbers[{j}]"
        if not isinstance(n, dict) or not isinstance(n.get("id"), str):
            c.unread(where, "entry without an id")
            continue
        nid = n["id"]
        where = f"numbers.json: {nid}"
        if nid in stated:
            c.bad(where, "id listed twice")
        stated[nid] = n
        exp = E.items.get(nid)
        if exp is None:
            c.bad(where, "number not recomputable from the archive (no such row or qualification failed)")
            continue
        val = n.get("value")
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            c.bad(where, f"value {val!r} is not a number")
            continue
        c.same(where, val, exp[0], "value")
        if n.get("source") != exp[1]:
            c.bad(where, f"source {n.get('source')!r}, expected {exp[1]!r}")
        if isinstance(n.get("text"), str) and not displayed_matches(n["text"], exp[0]):
            c.bad(where, f"text {n['text']!r} does not show {fmt(exp[0])}")
    for nid in sorted(set(E.items) - set(stated)):
        c.bad(f"numbers.json: {nid}", f"recomputed number {fmt(E.items[nid][0])} is missing from numbers.json")
    for n in stated.values():
        s = n.get("source")
        if isinstance(s, str):
            p = os.path.normpath(os.path.join(os.path.dirname(rep.numbers_path), s))
            if not _inside(p, c.archive) or not os.path.isfile(p):
                c.bad(f"numbers.json: {n['id']}", f"source {s!r} is not a file of the archive")
    return stated


def check_markup(c: Checker, rep: Report) -> None:
    """report.html and report.tex against the report's strict subsets (``StrictHTML``, ``StrictTeX``): no
    active content, the one stylesheet, every link inside the archive and naming a file. A report.pdf
    without its report.tex is a mismatch (the PDF is read through its source). What they show is the
    rendering of the tables (``rendering.py``); these rules name the line of what breaks the format."""
    for line, msg in rep.hp.problems:
        c.bad(f"{rep.html_rel}:{line}", msg)
    css = "".join(rep.hp.styles)
    if len([1 for _t in rep.hp.styles]) and hashlib.sha256(css.encode("utf-8")).hexdigest() != STYLESHEET_SHA256:
        c.bad(rep.html_rel, "the stylesheet is not the report format's (sha256 differs from STYLESHEET_SHA256)")
    for href, line in rep.hp.hrefs:
        if href.startswith("#") and href[1:] not in rep.hp.ids:
            c.bad(f"{rep.html_rel}:{line} href={href!r}", "link to an id the report does not have")
    for attr, val, line in rep.hp.links:
        where = f"{rep.html_rel}:{line} {attr}={val!r}"
        if val.startswith("#"):
            continue
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", val) or val.startswith("//"):
            c.bad(where, "external link in a self-contained report")
            continue
        p = os.path.normpath(os.path.join(rep.dir, val.split("#", 1)[0]))
        c.files.add(p)
        if not _inside(p, c.archive):
            c.bad(where, "link leaves the archive")
        elif not os.path.isfile(p):
            c.bad(where, "linked file is missing")
    if rep.tex is None:
        if os.path.isfile(os.path.join(rep.dir, "report.pdf")):
            c.bad(posix_rel(os.path.join(rep.dir, "report.pdf"), c.archive), "report.pdf without its report.tex")
        return
    c.files.add(os.path.join(rep.dir, "report.tex"))
    for line, msg in rep.tex.problems:
        c.bad(f"{rep.tex_rel}:{line}", msg)
