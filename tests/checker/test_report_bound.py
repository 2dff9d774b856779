"""What a reader sees, word by word: report/check.py renders the report again from the sealed tables and
refuses any byte that differs (refspec_check.rendering), and requires the headline to be complete
(refspec_check.headline).

The dishonest signer of these tests leaves the data tables alone, edits what a reader sees (verdict
words, arm and ratio labels, row labels, headers, provenance text, the headline's rows, a number's
precision), keeps numbers.json consistent with his edit where that helps him, and seals the archive
again with a valid key. Each edit must be refused with a message naming the file and the first line that
differs, or what the headline leaves out; the clean archive passes (tests/checker/test_check.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from refspec.provenance.seal import seal
from refspec.reporting import render as report
from support.synthetic_archive import make_results, run_check, signer


def resealed(stage: Path, dst: Path, edit_html=None, edit_numbers=None, edit_tex=None) -> Path:
    """A copy of ``stage`` with report.html, numbers.json or report.tex edited, sealed with the signer's valid key."""
    work = dst.with_name(dst.name + "-stage")
    shutil.copytree(stage, work)
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if edit_html is not None:
        h = work / "report.html"
        before = h.read_text(encoding="utf-8")
        after = edit_html(before)
        assert after != before, "the edit changed nothing"
        h.write_text(after, encoding="utf-8")
    if edit_tex is not None:
        t = work / "report.tex"
        before = t.read_text(encoding="utf-8")
        t.write_text(edit_tex(before), encoding="utf-8")
        assert t.read_text(encoding="utf-8") != before, "the edit changed nothing"
    if edit_numbers is not None:
        n = work / "numbers.json"
        doc = json.loads(n.read_text(encoding="utf-8"))
        edit_numbers(doc)
        n.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    seal(work, dst, key=signer(), archive_id="bound", created="2026-10-20T00:00:00Z")
    return dst


def _table(html: str, tid: str) -> tuple[int, int]:
    i = html.index(f'<table data-table="{tid}"')
    return i, html.index("</table>", i)


def _rows(html: str, tid: str) -> list[re.Match]:
    i, j = _table(html, tid)
    return [m for m in re.finditer(r"<tr>.*?</tr>", html[i:j]) if "<td" in m.group(0)]


def _in_table(html: str, tid: str, old: str, new: str) -> str:
    i, j = _table(html, tid)
    body = html[i:j]
    assert old in body, f"{old!r} not in table {tid}"
    return html[:i] + body.replace(old, new, 1) + html[j:]


def _swap_first_cells(html: str, tid: str) -> str:
    """Swap the first cell (the row's label) of the first two rows of ``tid`` with different labels."""
    i, _j = _table(html, tid)
    rows = _rows(html, tid)
    cell = re.compile(r"^<tr>(<td[^>]*>)([^<]*)</td>")
    a = rows[0]
    b = next(r for r in rows[1:] if cell.match(r.group(0)).group(2) != cell.match(a.group(0)).group(2))
    la, lb = cell.match(a.group(0)).group(2), cell.match(b.group(0)).group(2)
    ra = cell.sub(lambda m: f"<tr>{m.group(1)}{lb}</td>", a.group(0), count=1)
    rb = cell.sub(lambda m: f"<tr>{m.group(1)}{la}</td>", b.group(0), count=1)
    s = html[i:]
    s = s[: a.start()] + ra + s[a.end() : b.start()] + rb + s[b.end() :]
    return html[:i] + s


def _swap_spans_between_rows(html: str) -> str:
    """Exchange the ratio spans of two rows of the confirmation's ratio table."""
    i, j = _table(html, "ratios-confirmation")
    spans = list(re.finditer(r'<span data-num="ratio\|[^"]*\|ratio" [^>]*>[^<]*</span>', html[i:j]))
    a, b = spans[0], spans[1]
    s = html[i:j]
    s = s[: a.start()] + b.group(0) + s[a.end() : b.start()] + a.group(0) + s[b.end() :]
    return html[:i] + s + html[j:]


def _zero_decimals(html: str) -> str:
    """Show a ratio and its interval without decimals (the value still rounds to what is shown)."""
    m = re.search(r'(<span data-num="est\|[^"]*\|estimate" [^>]*>)([0-9.]+)(</span>)', html)
    return html.replace(m.group(0), m.group(1) + str(round(float(m.group(2)))) + m.group(3), 1)


def _drop_headline(pred):
    """Remove the headline rows (HTML summary table and numbers.json headline) for which ``pred(row)``."""

    def html_edit(html: str) -> str:
        i, j = _table(html, "summary")
        body = html[i:j]
        for m in reversed(_rows(html, "summary")):
            cells = re.findall(r"<td[^>]*>(.*?)</td>", m.group(0))
            if pred(re.sub(r"<[^>]+>", "", cells[0]), re.sub(r"<[^>]+>", "", cells[1])):
                body = body[: m.start()] + body[m.end() :]
        return html[:i] + body + html[j:]

    def numbers_edit(doc: dict) -> None:
        doc["headline"] = [h for h in doc["headline"] if not pred(h["finding"], h["scope"])]

    return html_edit, numbers_edit


def _drop_failing_arm(html: str) -> str:
    """Drop the failing arm R_prod from the first preservation row of the headline (HTML only: the
    headline of numbers.json is edited alike by _drop_failing_arm_numbers)."""
    i, j = _table(html, "summary")
    row = _rows(html, "summary")[0]
    new = re.sub(r" · R_prod <span.*?(?= · )", "", row.group(0), count=1)
    assert new != row.group(0)
    body = html[i:j]
    return html[:i] + body[: row.start()] + new + body[row.end() :] + html[j:]


def _drop_failing_arm_numbers(doc: dict) -> None:
    h = doc["headline"][0]
    parts, out, skip = h["parts"], [], False
    for p in parts:
        if p == "R_prod":
            skip = True
            out.pop()  # the separator before it
            continue
        if skip and p == " \u00b7 ":
            skip = False
        if not skip:
            out.append(p)
    h["parts"] = out


DROP_DIVERGENCE = _drop_headline(lambda finding, scope: finding == "first divergence")

# (class of edit, html edit, numbers.json edit, a phrase the refusal must contain)
RENDERED_HTML = "MISMATCH report.html: differs from the canonical rendering of the sealed tables, line "
RENDERED_TEX = "MISMATCH report.tex: differs from the canonical rendering of the sealed tables, line "
EDITS = [
    (
        "a verdict changed: undecided reads slower",
        lambda h: _in_table(
            h,
            "estimates",
            '<td class="inconclusive" data-label="decision">undecided: interval too wide</td>',
            '<td class="inconclusive" data-label="decision">slower</td>',
        ),
        None,
        RENDERED_HTML,
    ),
    (
        "a verdict changed: tasks fail reads tasks pass",
        lambda h: _in_table(h, "qualification-confirmation", " tasks fail)", " tasks pass)"),
        None,
        RENDERED_HTML,
    ),
    (
        "arm labels swapped between two rows",
        lambda h: _swap_first_cells(h, "qualification-confirmation"),
        None,
        RENDERED_HTML,
    ),
    (
        "a ratio label inverted",
        lambda h: _in_table(
            h,
            "ratios-confirmation",
            '<td class="mono" data-label="comparison">M3/C3</td>',
            '<td class="mono" data-label="comparison">C3/M3</td>',
        ),
        None,
        RENDERED_HTML,
    ),
    (
        "row labels of a table swapped",
        lambda h: _swap_first_cells(h, "estimates"),
        None,
        RENDERED_HTML,
    ),
    ("two checked spans moved between rows", _swap_spans_between_rows, None, RENDERED_HTML),
    (
        "a column header rewritten",
        lambda h: _in_table(
            h, "ratios-confirmation", '<th scope="col">comparison</th>', '<th scope="col">slower arm / faster arm</th>'
        ),
        None,
        RENDERED_HTML,
    ),
    (
        "provenance text claims another device",
        lambda h: _in_table(
            h, "provenance", '<td class="mono">GPU: none</td>', '<td class="mono">GPU: NVIDIA H200</td>'
        ),
        None,
        RENDERED_HTML,
    ),
    (
        "the failing arm dropped from the headline",
        _drop_failing_arm,
        _drop_failing_arm_numbers,
        "the headline leaves out",
    ),
    ("the first-divergence rows dropped from the headline", *DROP_DIVERGENCE, "first divergence of"),
    ("a number shown with zero decimals", _zero_decimals, None, RENDERED_HTML),
]


@pytest.mark.parametrize("what,edit_html,edit_numbers,phrase", EDITS, ids=[e[0] for e in EDITS])
def test_reader_facing_edit_refused(stage, tmp_path, what, edit_html, edit_numbers, phrase):
    arch = resealed(stage, tmp_path / "archive", edit_html, edit_numbers)
    code, out = run_check(arch)
    assert code == 1, f"{what}: check.py accepted it\n{out}"
    assert phrase in out, f"{what}: refused, but not for what the reader sees\n{out}"


TEX_EDITS = [
    (
        "a verdict changed in report.tex",
        lambda t: t.replace("& undecided: interval too wide &", "& slower &", 1),
        RENDERED_TEX,
    ),
    (
        "a ratio label inverted in report.tex",
        lambda t: t.replace("& M3/C3 &", "& C3/M3 &", 1),
        RENDERED_TEX,
    ),
    (
        "a table row dropped from report.tex",
        lambda t: "\n".join(x for x in t.split("\n") if not (x.startswith("llama31-8b & mixed & M3/C3 &"))),
        RENDERED_TEX,
    ),
]


@pytest.mark.parametrize("what,edit_tex,phrase", TEX_EDITS, ids=[e[0] for e in TEX_EDITS])
def test_tex_edit_refused(stage, tmp_path, what, edit_tex, phrase):
    """A word or a row changed in report.tex alone is refused: the TeX is rendered again from the tables."""
    arch = resealed(stage, tmp_path / "archive", edit_tex=edit_tex)
    code, out = run_check(arch)
    assert code == 1, f"{what}: check.py accepted it\n{out}"
    assert phrase in out, f"{what}: refused, but not for its rows\n{out}"


def _drop_aa_from_e2(doc: dict) -> None:
    for h in doc["headline"]:
        p = h["parts"]
        at = [k for k in range(len(p) - 1) if p[k] == " \u00b7 " and str(p[k + 1]).startswith("A/A ")]
        if "decision" in h and at:
            h["parts"] = p[: at[0]]
            return
    raise AssertionError("no E2 row with an A/A control")


def test_an_e2_row_without_its_aa_control_is_refused(tmp_path_factory):
    """Each E2 row of the headline carries its family's A/A control: dropped from one row (the other
    rows still show it, HTML, TeX and numbers.json edited alike), it is refused."""
    base = tmp_path_factory.mktemp("bound-aa")
    results = make_results(base / "results", draws=300, aa=True)
    report.render(results, pdf=False)

    def html(h: str) -> str:
        i, j = _table(h, "summary")
        body = h[i:j]
        new = re.sub(r" · A/A [^ ]+/[^ ]+ <span.*?(?=</td>)", "", body, count=1)
        assert new != body
        return h[:i] + new + h[j:]

    def tex(t: str) -> str:
        lines = t.split("\n")
        k = next(n for n, x in enumerate(lines) if x.startswith("E2 estimate") and " A/A " in x)
        lines[k] = re.sub(r" \\textperiodcentered\{\} A/A .*?(?= \\\\)", "", lines[k], count=1)
        return "\n".join(lines)

    arch = resealed(results, base / "archive", html, _drop_aa_from_e2, tex)
    code, out = run_check(arch)
    assert code == 1 and "leaves out its A/A control" in out, out
