"""Digits in the report's visible text: each must be a checked number, a label, or a name the archive holds."""

from __future__ import annotations

import json
import os
import re

from refspec_check.contract import COLUMNS, COMPARE_COLUMNS, DIAGNOSTIC_PAIRS, S
from refspec_check.problems import Checker
from refspec_check.report import Report
from refspec_check.strict_html import _WORD_STRIP, KEY_COLUMNS, LABEL_RE


def archive_names(c: Checker) -> set[str]:
    """Every string cell of the tables read (and its '/'- and space-separated parts): the names
    (tasks, arms, families, sessions, drafts, digests, times, reasons) a report may show as text."""
    names: set[str] = set()
    for t in c.tables.values():
        cols = [
            k for k, kind in (COLUMNS.get(t.name) or COMPARE_COLUMNS[t.name]).items() if kind == S or k in KEY_COLUMNS
        ]
        for r in t.rows:
            for k in cols:
                v = r.get(k)
                if isinstance(v, str):
                    names.add(v)
                    names.update(v.split())
                    names.update(x.strip(_WORD_STRIP) for x in v.split())
                elif isinstance(v, int) and not isinstance(v, bool):
                    names.add(str(v))
                elif isinstance(v, list):
                    names.update(str(x) for x in v)
    names.update(arm for pair in DIAGNOSTIC_PAIRS for arm in pair)  # the registered pairs the text names
    names.update(ledger_reason_words(c.archive))
    return names


def ledger_reason_words(archive: str) -> set[str]:
    """The words of every ``reason`` the archive's ledgers hold (ledger.jsonl, campaigns/*/ledger.jsonl):
    a refused arm's row quotes its ledger's reason (worker ids, model files, shapes)."""
    words: set[str] = set()
    for root, _dirs, files in os.walk(archive):
        if "ledger.jsonl" not in files:
            continue
        with open(os.path.join(root, "ledger.jsonl"), "rb") as f:
            for raw in f:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                why = rec.get("reason") if isinstance(rec, dict) else None
                if isinstance(why, str):
                    words.add(why)
                    words.update(why.split())
                    words.update(x.strip(_WORD_STRIP) for x in why.split())
    return words


# the paper's table numbers ("Table 3"): the one place a label's digits stand as a word of their own
TABLE_REF_RE = re.compile(r"\bTables? \d+\b")


def visible_words(text: str) -> list[str]:
    """The words of visible text (split on white space), a table reference ``Table N`` taken out."""
    return TABLE_REF_RE.sub(" ", text).split()


def visible_digits_problem(word: str, names: set[str]) -> bool:
    """Whether a word of visible text holding a digit is outside the report format's allowlist."""
    w = word.strip(_WORD_STRIP)
    if not any(ch.isdigit() for ch in w):
        return False
    if w in names or LABEL_RE.fullmatch(w):
        return False
    parts = re.split(r"[/,=]", w)
    return not all(p in names or LABEL_RE.fullmatch(p) or not any(ch.isdigit() for ch in p) for p in parts)


def visible_names(c: Checker, rep: Report) -> set[str]:
    """The names a report may show with digits in them: ``archive_names`` and the provenance
    values of numbers.json (digests, key id, host) with their words."""
    names = archive_names(c)
    prov = rep.numbers_doc.get("provenance") if isinstance(rep.numbers_doc.get("provenance"), dict) else {}
    for v in prov.values():
        if isinstance(v, str):
            names.add(v)
            names.update(x.strip(_WORD_STRIP) for x in v.split())
    return names


def check_visible_digits(c: Checker, rep: Report) -> None:
    """Every digit a reader sees outside a checked number (data-num) must be part of a word the
    archive names (a string cell or a key column of its tables, a provenance digest, key id or
    host that ``check_provenance`` and ``check_data_seal`` check) or a label of ``LABEL_RE``;
    numbers themselves are only ever shown as checked numbers (a checked number reads as ``#``
    in the text around it, so a digit written against it is refused). The text of the figures
    (axis ticks, counts and labels drawn in SVG) is the exception: see anc/report.md."""
    names = visible_names(c, rep)
    for text, line, ctx in rep.hp.text:
        if ctx == "svg":
            continue
        for word in visible_words(text):
            if visible_digits_problem(word, names):
                c.bad(f"{rep.html_rel}:{line}", f"digits {word!r} in visible text ({ctx}) outside a checked number")
