"""The visible words of a comparison report (refspec.reporting.comparison): each row of its preservation and
timings tables, in report.html and report.tex, shows the recomputed labels and verdict of its item, every
recomputed row is shown exactly once, and the summary notes are the recomputed ones."""

from __future__ import annotations

import html
import os
import re

from refspec_check.problems import Checker
from refspec_check.report import Report

#: refspec.reporting.comparison.VERDICT_CLASS: the class (colour) of a verdict cell
VERDICT_CLASS = {"same": "ok", "reproduced": "ok", "differs": "bad", "not comparable": "unqualified"}
ALL_SAME = "Every preservation finding is the same."
#: refspec.reporting.comparison._overview: the notes on the registered plans and the pinned inputs (same, differ)
PLAN_NOTES = ("The registered plans are the same.", "The registered plans differ:")
PINNED_NOTES = ("The pinned inputs are the same.", "The pinned inputs differ:")
SOME_DIFFER = "At least one preservation finding differs."
_ITEM = re.compile(r"cmp\|(.+)\|[a-z_]+$")
_TR = re.compile(r"<tr\b[^>]*>(.*?)</tr>", re.S)
_TD = re.compile(r"<td\b([^>]*)>(.*?)</td>", re.S)
_TAG = re.compile(r"<[^>]*>")
_CLASS = re.compile(r'\bclass="([^"]*)"')
_DATA_NUM = re.compile(r'data-num="([^"]*)"')
_RSNUM = re.compile(r"\\rsnum\{([^{}]*)\}")


def _expected_cells(w: dict) -> dict:
    """column index -> the visible text of the recomputed row (labels and verdict); the reason is a pattern."""
    if w["section"] == "preservation":
        return {0: w["title"], 1: w["table"], 5: w["verdict"]}
    scope = w["family"] + ("" if w["cap"] is None else f" cap {w['cap']}")
    return {0: w["title"], 1: w["campaign"], 2: scope, 3: w["comparison"], 4: w["path"], 9: w["verdict"]}


def _reason_col(w: dict) -> int:
    return 6 if w["section"] == "preservation" else 10


def _item_of(ids: list) -> str | None:
    items = {m.group(1) for m in (_ITEM.match(i) for i in ids) if m}
    return items.pop() if len(items) == 1 else None


def _html_rows(text: str) -> list:
    """(item, [(class, visible text)]) of every table row that shows a comparison number."""
    out = []
    for m in _TR.finditer(text):
        body = m.group(1)
        item = _item_of(_DATA_NUM.findall(body))
        if item is None:
            continue
        cells = []
        for attrs, inner in _TD.findall(body):
            cm = _CLASS.search(attrs)
            cells.append((cm.group(1) if cm else "", " ".join(html.unescape(_TAG.sub("", inner)).split())))
        out.append((item, cells))
    return out


def _tex_text(cell: str) -> str:
    """A TeX cell's visible text: \\rsnum/\\rslabel shown text, the reason's \\parbox, TeX escapes undone."""
    s = re.sub(r"\\parbox\[t\]\{[^{}]*\}\{\\raggedright\\scriptsize ?(.*)\}$", r"\1", cell.strip())
    s = re.sub(r"\\rs(?:num|label)\{[^{}]*\}\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\textbackslash{}", "\\")
    s = re.sub(r"\\([_&%#${}])", r"\1", s)
    return " ".join(s.split())


def _tex_rows(text: str) -> list:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.endswith("\\\\") or " & " not in line:
            continue
        item = _item_of(_RSNUM.findall(line))
        if item is None:
            continue
        cells = [_tex_text(x) for x in line[:-2].split(" & ")]
        out.append((item, [("", x) for x in cells]))
    return out


def _check_rows(c: Checker, where: str, rows: list, want: list, with_class: bool) -> None:
    wanted = {w["item"]: w for w in want}
    seen: dict = {}
    for n, (item, cells) in enumerate(rows):
        at = f"{where} [row of {item}]"
        w = wanted.get(item)
        if w is None:
            c.bad(at, "a row the carried inputs do not give")
            continue
        if item in seen:
            c.bad(at, "shown again")
            continue
        seen[item] = n
        for col, text in _expected_cells(w).items():
            got = cells[col][1] if col < len(cells) else None
            if got != text:
                c.bad(at, f"column {col + 1} reads {got!r}, the carried inputs give {text!r}")
        if with_class:
            vc = 5 if w["section"] == "preservation" else 9
            cls = cells[vc][0] if vc < len(cells) else None
            if cls != VERDICT_CLASS.get(w["verdict"]):
                c.bad(at, f"the verdict is shown as {cls!r}, not as {VERDICT_CLASS.get(w['verdict'])!r}")
        rc = _reason_col(w)
        reason = cells[rc][1] if rc < len(cells) else None
        if reason is None or not re.fullmatch(w["reason_re"], reason):
            c.bad(at, f"the reason reads {reason!r}, not the one the carried inputs give")
    for w in want:
        if w["item"] not in seen:
            c.bad(where, f"row {w['item']!r} (verdict {w['verdict']!r}) is not shown")
    order = [w["item"] for w in want if w["item"] in seen]
    if order != sorted(order, key=lambda it: seen[it]):
        c.bad(where, "the rows are not shown in the comparison's order")


def _check_summary(c: Checker, where: str, text: str, want: list) -> None:
    same = all(w["verdict"] == "same" for w in want if w["section"] == "preservation")
    right, wrong = (ALL_SAME, SOME_DIFFER) if same else (SOME_DIFFER, ALL_SAME)
    flat = " ".join(text.split())
    if right not in flat:
        c.bad(where, f"does not say {right!r}, what the carried inputs give")
    if wrong in flat:
        c.bad(where, f"says {wrong!r}; the carried inputs give {right!r}")


def _check_notes(c: Checker, where: str, text: str, plans_same: bool, pinned_same: bool) -> None:
    """The overview's notes on the registered plans and the pinned inputs say what the carried records give."""
    flat = " ".join(text.split())
    for (same_note, differ_note), same in ((PLAN_NOTES, plans_same), (PINNED_NOTES, pinned_same)):
        right, wrong = (same_note, differ_note) if same else (differ_note, same_note)
        if right not in flat or wrong in flat:
            c.bad(where, f"does not say {right!r}, what the carried plans and manifests give")


def check_report_words(c: Checker, rep: Report, want: list, plans_same: bool = True, pinned_same: bool = True) -> None:
    """report.html and report.tex of a comparison archive: every row shows its recomputed labels and verdict,
    the summary and the notes on the plans and pinned inputs are the recomputed ones."""
    if rep is None:
        return
    text = rep.html_text or ""
    _check_rows(c, rep.html_rel, _html_rows(text), want, with_class=True)
    _check_summary(c, rep.html_rel, html.unescape(_TAG.sub(" ", text)), want)
    _check_notes(c, rep.html_rel, html.unescape(_TAG.sub(" ", text)), plans_same, pinned_same)
    tex_path = os.path.join(rep.dir, "report.tex")
    if os.path.isfile(tex_path):
        try:
            with open(tex_path, encoding="utf-8") as f:
                tex = f.read()
        except (OSError, UnicodeDecodeError) as e:
            c.unread(rep.tex_rel, f"not readable ({e})")
            return
        _check_rows(c, rep.tex_rel, _tex_rows(tex), want, with_class=False)
        _check_summary(c, rep.tex_rel, tex, want)
        _check_notes(c, rep.tex_rel, tex, plans_same, pinned_same)
