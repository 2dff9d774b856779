"""The report's numbers versus the recomputation: numbers.json, the numbers report.html and report.tex show
(to the digits displayed), and their links and sources."""

from __future__ import annotations

import functools
import hashlib
import os
import re

from refspec_check.bound import check_bound_text, check_precision, tex_visible
from refspec_check.context import Expected
from refspec_check.contract import posix_rel
from refspec_check.problems import REL_TOL, Checker, fmt
from refspec_check.report import Report
from refspec_check.seal import _inside
from refspec_check.strict_html import STYLESHEET_SHA256
from refspec_check.visible import bound_texts, check_visible_digits, digit_problems, visible_names

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


def compare_shown(c: Checker, E: Expected, where: str, nid: str, text: str):
    """One number as a report shows it (HTML or TeX) against its recomputed value; returns the
    recomputed (value, source) or None when the id is not recomputable (a problem)."""
    exp = E.items.get(nid)
    if exp is None:
        c.bad(where, f"shows {text!r} but the number is not recomputable from the archive")
        return None
    c.compared += 1
    if displayed_matches(text, exp[0]):
        c.matched += 1
        check_precision(c, where, nid, text, exp[0])
    else:
        c.bad(where, f"shows {text!r}, recomputed {fmt(exp[0])}")
    return exp


def check_html(c: Checker, E: Expected, rep: Report, stated: dict) -> None:
    """report.html against the recomputed numbers: each displayed number (``data-num``) is the
    recomputed value rounded to the digits shown, with the recomputed ``data-src``; every number of
    numbers.json is shown; no active content; every link stays inside the archive and names a file."""
    shown = set()
    for nid, text, dsrc, line in rep.hp.nums:
        where = f"{rep.html_rel}:{line} data-num={nid!r}"
        shown.add(nid)
        exp = compare_shown(c, E, where, nid, text)
        if exp is None:
            continue
        if dsrc != exp[1]:
            c.bad(where, f"data-src {dsrc!r}, expected {exp[1]!r}")
    for nid in sorted(set(stated) - shown):
        c.bad(f"{rep.html_rel}", f"number {nid} of numbers.json is not shown")
    for line, msg in rep.hp.problems:
        c.bad(f"{rep.html_rel}:{line}", msg)
    css = "".join(rep.hp.styles)
    if len([1 for _t in rep.hp.styles]) and hashlib.sha256(css.encode("utf-8")).hexdigest() != STYLESHEET_SHA256:
        c.bad(rep.html_rel, "the stylesheet is not the report format's (sha256 differs from STYLESHEET_SHA256)")
    for href, line in rep.hp.hrefs:
        if href.startswith("#") and href[1:] not in rep.hp.ids:
            c.bad(f"{rep.html_rel}:{line} href={href!r}", "link to an id the report does not have")
    check_visible_digits(c, rep)
    check_bound_text(c, rep)
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


def check_tex(c: Checker, E: Expected, rep: Report, stated: dict) -> None:
    """report.tex, when the archive holds it, against the report's LaTeX subset (``StrictTeX``)
    and the recomputed numbers: every checked number ``\\rsnum{ID}{TEXT}`` shows its recomputed
    value rounded to the digits shown, every number of numbers.json is shown, and digits in
    visible text outside checked numbers follow the HTML rule (``check_visible_digits``). A
    report.pdf without its report.tex is a mismatch (the PDF is read through its source)."""
    tp = rep.tex
    if tp is None:
        if os.path.isfile(os.path.join(rep.dir, "report.pdf")):
            c.bad(posix_rel(os.path.join(rep.dir, "report.pdf"), c.archive), "report.pdf without its report.tex")
        return
    c.files.add(os.path.join(rep.dir, "report.tex"))
    shown = set()
    for nid, text, line in tp.nums:
        where = f"{rep.tex_rel}:{line} rsnum={nid!r}"
        shown.add(nid)
        compare_shown(c, E, where, nid, text)
    for nid in sorted(set(stated) - shown):
        c.bad(rep.tex_rel, f"number {nid} of numbers.json is not shown")
    for line, msg in tp.problems:
        c.bad(f"{rep.tex_rel}:{line}", msg)
    names = visible_names(c, rep)
    names |= {tex_visible(n) for n in names}
    bound = functools.cache(lambda: {tex_visible(b) for b in bound_texts(c, rep)})
    for text, line in tp.text:
        for word in digit_problems(text, names, bound):
            c.bad(f"{rep.tex_rel}:{line}", f"digits {word!r} in visible text outside a checked number")
