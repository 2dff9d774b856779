"""Reading the rendered report: numbers.json, report.html (StrictHTML) and report.tex (StrictTeX)."""

from __future__ import annotations

import os

from refspec_check import jsonio
from refspec_check.contract import posix_rel
from refspec_check.html5 import prescan
from refspec_check.problems import Checker, Unreadable
from refspec_check.strict_html import StrictHTML
from refspec_check.strict_tex import StrictTeX


def find_report(archive: str) -> tuple[str, str]:
    for d in (archive, os.path.join(archive, "report")):
        h, n = os.path.join(d, "report.html"), os.path.join(d, "numbers.json")
        if os.path.isfile(h) and os.path.isfile(n):
            return h, n
    raise Unreadable(f"{archive}: no report.html with numbers.json (looked in the archive and in report/)")


class Report:
    """The rendered report of an archive: numbers.json, report.html (parsed) and the folder holding them."""

    def __init__(
        self, archive: str, html_path: str, numbers_path: str, numbers_doc: dict, html_text: str, hp: StrictHTML
    ):
        self.html_path, self.numbers_path = html_path, numbers_path
        self.numbers_doc, self.html_text, self.hp = numbers_doc, html_text, hp
        self.dir = os.path.dirname(html_path)
        self.html_rel = posix_rel(html_path, archive)
        self.tex: StrictTeX | None = None  # report.tex beside report.html, parsed, when present
        self.tex_rel = posix_rel(os.path.join(self.dir, "report.tex"), archive)

    def shows(self, text: str) -> bool:
        """Whether a visible text of report.html (as the reader sees it, entities decoded) holds ``text``."""
        return any(text in t for t, _line, _ctx in self.hp.text)


def read_report(c: Checker) -> Report | None:
    """numbers.json and report.html of the archive, or None (recorded as unreadable) when either cannot be read."""
    try:
        html_path, numbers_path = find_report(c.archive)
    except Unreadable as e:
        c.unread("archive", str(e))
        return None
    try:
        with open(numbers_path, encoding="utf-8") as f:
            numbers_doc = jsonio.load(f)
        if not isinstance(numbers_doc, dict) or not isinstance(numbers_doc.get("numbers"), list):
            raise ValueError("no 'numbers' list")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
        c.unread(posix_rel(numbers_path, c.archive), f"not a numbers document ({e})")
        return None
    try:
        with open(html_path, encoding="utf-8") as f:
            html_text = f.read()
        hp = StrictHTML()
        hp.feed(html_text)
        hp.close()
        # what a browser reads differently from html.parser, and characters outside the repertoire
        hp.problems = list(dict.fromkeys(prescan(html_text) + hp.problems))
    except (OSError, UnicodeDecodeError) as e:
        c.unread(posix_rel(html_path, c.archive), f"cannot read ({e})")
        return None
    rep = Report(c.archive, html_path, numbers_path, numbers_doc, html_text, hp)
    tex_path = os.path.join(rep.dir, "report.tex")
    if os.path.isfile(tex_path):
        try:
            with open(tex_path, encoding="utf-8") as f:
                rep.tex = StrictTeX(f.read())
        except (OSError, UnicodeDecodeError) as e:
            c.unread(rep.tex_rel, f"cannot read ({e})")
            return None
    return rep
