"""Digits in the report's visible text: each must be a checked number, a label, or a name the archive holds."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable

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


def ledger_reasons(archive: str) -> list[str]:
    """Every ``reason`` the archive's ledgers hold (ledger.jsonl, campaigns/*/ledger.jsonl)."""
    out: list[str] = []
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
                    out.append(why)
    return out


def ledger_reason_words(archive: str) -> set[str]:
    """The words of every ``reason`` the archive's ledgers hold (ledger.jsonl, campaigns/*/ledger.jsonl):
    a refused arm's row quotes its ledger's reason (worker ids, model files, shapes)."""
    words: set[str] = set()
    for why in ledger_reasons(archive):
        words.add(why)
        words.update(why.split())
        words.update(x.strip(_WORD_STRIP) for x in why.split())
    return words


# the paper's table numbers ("Table 3"): the one place a label's digits stand as a word of their own
TABLE_REF_RE = re.compile(r"\bTables? \d+\b")


def visible_words(text: str) -> list[str]:
    """The words of visible text (split on white space), a table reference ``Table N`` taken out."""
    return TABLE_REF_RE.sub(" ", text).split()


# a word that reads as a number: digits and the separators of numbers only ("8", "8/8", "1,5",
# "=24", "3.0", "12:30"); such a word is never a name (a number a reader sees is a checked number)
NUMERIC_RE = re.compile(r"[0-9/,=.:+%-]*[0-9][0-9/,=.:+%-]*")

# a digest or identifier prefix made of decimal digits only is long; a number a reader weighs is not
DIGEST_MIN = 12


def is_numeric(word: str) -> bool:
    return bool(NUMERIC_RE.fullmatch(word))


def _name_ok(w: str, names: set[str]) -> bool:
    """Whether ``w`` (holding a digit) is a label, or a name of the archive that is not a number."""
    if LABEL_RE.fullmatch(w):
        return True
    if w not in names:
        return False
    return not is_numeric(w) or (w.isdigit() and len(w) >= DIGEST_MIN)


def visible_digits_problem(word: str, names: set[str]) -> bool:
    """Whether a word of visible text holding a digit is outside the report format's allowlist: it
    must be a label, a name of the archive holding a letter (or a long digest), or made of such
    parts joined by '/', ',' or '='; a part that is a number alone ("8" of "8/8") is refused
    even where a table holds an 8 (see ``bound_spans`` for the numbers a quoted text holds)."""
    w = word.strip(_WORD_STRIP)
    if not any(ch.isdigit() for ch in w):
        return False
    if _name_ok(w, names):
        return False
    parts = re.split(r"[/,=]", w)
    return not all(_name_ok(p, names) or not any(ch.isdigit() for ch in p) for p in parts)


def _norm(text: str) -> str:
    return " ".join(text.split())


def bound_texts(c: Checker, rep: Report) -> set[str]:
    """The texts of the archive the report quotes whole, in which a number stands as text: the
    sentences of its string cells, ledger reasons and provenance values (a reason "not qualified on
    1/4 tasks", a host "Debian GNU/Linux 12"), each as one whole; the token lists of the state
    study ("5075/464/5075/464", "5075/464") and the attention shape of a family ("h=9/3 d=64
    n_kv=256"), each as its row writes it. A number inside one of these, where the report shows the
    whole of it, is the archive's; the same number anywhere else is not."""
    out: set[str] = set()

    def sentence(v: str) -> None:
        v = _norm(v)
        if any(ch.isalpha() for ch in v) and any(is_numeric(w.strip(_WORD_STRIP)) for w in v.split()):
            out.add(v)

    for t in c.tables.values():
        cols = COLUMNS.get(t.name) or COMPARE_COLUMNS[t.name]
        for r in t.rows:
            for k, kind in cols.items():
                v = r.get(k)
                if kind == S and isinstance(v, str):
                    sentence(v)
            if isinstance(r.get("argmax"), list) and r["argmax"]:
                out.add("/".join(str(x) for x in r["argmax"]))
            if r.get("token_a") is not None and r.get("token_b") is not None:
                out.add(f"{r['token_a']}/{r['token_b']}")
            if r.get("cap") is not None and not isinstance(r.get("cap"), bool):
                out.add(f"cap {r['cap']}")
            shape = [r.get(k) for k in ("n_head", "n_head_kv", "head_dim", "n_kv")]
            if all(isinstance(x, int) for x in shape):
                out.add("h={}/{} d={} n_kv={}".format(*shape))
    for why in ledger_reasons(c.archive):
        sentence(why)
        if why.startswith("worker start failed: "):  # a refused arm's row quotes what follows
            sentence(why[len("worker start failed: ") :])
    prov = rep.numbers_doc.get("provenance") if isinstance(rep.numbers_doc.get("provenance"), dict) else {}
    for v in prov.values():
        if isinstance(v, str):
            sentence(v)
    return out


_CUT, _CUT_MIN = ("\u2026", "?"), 40


def bound_spans(text: str, bound: set[str]) -> list[tuple[int, int]]:
    """The spans of the (white-space-normalized) ``text`` that are a whole text of ``bound``,
    standing between white space or the ends of ``text``, or ending in a cut (" \u2026")."""
    spans = []
    for b in bound:
        i = text.find(b)
        while i >= 0:
            e = i + len(b)
            if (i == 0 or text[i - 1] == " " or text[i - 1] in _WORD_STRIP) and (
                e == len(text) or text[e] == " " or text[e] in _WORD_STRIP
            ):
                spans.append((i, e))
            i = text.find(b, i + 1)
    # a long text cut by the renderer: its first characters, then " \u2026" (" ?" in report.tex)
    for q, ch in enumerate(text):
        if ch not in _CUT or text[q - 1 : q] != " ":
            continue
        for b in bound:
            k = text.rfind(b[:_CUT_MIN], 0, q)
            if len(b) > _CUT_MIN and k >= 0 and b.startswith(text[k : q - 1]):
                spans.append((k, q + 1))
    return spans


def digit_problems(text: str, names: set[str], bound: Callable[[], set[str]]) -> list[str]:
    """The words of visible ``text`` whose digits are outside the format: ``visible_digits_problem``,
    unless the word lies inside a whole quoted text of ``bound()`` (``bound_texts``, computed only
    where a word needs it)."""
    t = _norm(TABLE_REF_RE.sub(lambda m: " " * len(m.group(0)), text))
    bad = []
    spans = None
    for m in re.finditer(r"\S+", t):
        if not visible_digits_problem(m.group(0), names):
            continue
        if spans is None:
            spans = bound_spans(t, bound())
        if not any(s <= m.start() and m.end() <= e for s, e in spans):
            bad.append(m.group(0))
    return bad


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
    bound = functools.cache(lambda: bound_texts(c, rep))
    for text, line, ctx in rep.hp.text:
        if ctx == "svg":
            continue
        for word in digit_problems(text, names, bound):
            c.bad(f"{rep.html_rel}:{line}", f"digits {word!r} in visible text ({ctx}) outside a checked number")
