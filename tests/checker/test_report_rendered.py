"""The report is re-derived, not bound (refspec_check.rendering): check.py renders report.html, report.tex
and numbers.json again from the sealed tables with the report's one renderer, which it carries
(refspec_check.render, standard library only) and refuses any byte that differs.

The dishonest signer of these tests edits what a reader sees with text the report format holds (its own
titles, headers, rows, classes and numbers, moved or exchanged), then seals the archive again with a valid
key. Each edit is refused with the file and the first line that differs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT
from support.synthetic_archive import reseal_edited, run_check

RENDERED = "differs from the canonical rendering of the sealed tables"


def _edit(path: Path, fn) -> None:
    path.write_text(fn(path.read_text(encoding="utf-8")), encoding="utf-8")


def _swap(text: str, a: str, b: str) -> str:
    assert a in text and b in text and a != b, (a, b)
    return text.replace(a, "\x00").replace(b, a).replace("\x00", b)


def tex_section_titles_exchanged(work: Path) -> None:
    def fn(t: str) -> str:
        titles = re.findall(r"^\\section\{[^}\n]*\}$", t, re.M)
        return _swap(t, titles[1], titles[2])

    _edit(work / "report.tex", fn)


def html_headers_exchanged(work: Path) -> None:
    def fn(h: str) -> str:
        head = re.search(r"<thead><tr>(<th[^>]*>[^<]*</th>){3,}</tr></thead>", h).group(0)
        cells = re.findall(r"<th[^>]*>[^<]*</th>", head)
        return h.replace(head, head.replace(cells[1], "\x00").replace(cells[2], cells[1]).replace("\x00", cells[2]), 1)

    _edit(work / "report.html", fn)


def html_rows_reordered(work: Path) -> None:
    def fn(h: str) -> str:
        body = next(m for m in re.finditer(r"<tbody>\n(.*?)\n</tbody>", h, re.S) if m.group(1).count("<tr>") >= 3)
        rows = body.group(1).split("\n")
        return h.replace(body.group(1), "\n".join([rows[1], rows[0], *rows[2:]]), 1)

    _edit(work / "report.html", fn)


def html_rows_hidden_by_style(work: Path) -> None:
    # every row of the qualification table made tiny: nothing of it is removed or changed
    def fn(h: str) -> str:
        i = h.index('<table data-table="qualification-confirmation"')
        j = h.index("</table>", i)
        table = h[i:j].replace('<td class="', '<td class="small reason ').replace("<td>", '<td class="small reason">')
        assert table != h[i:j]
        return h[:i] + table + h[j:]

    _edit(work / "report.html", fn)


def html_paragraph_of_format_text(work: Path) -> None:
    # a sentence made of the report format's own words, added before the first table
    def fn(h: str) -> str:
        i = h.index("<table ")
        return h[:i] + "<p>no failed qualification</p>\n" + h[i:]

    _edit(work / "report.html", fn)


def numbers_reordered(work: Path) -> None:
    p = work / "numbers.json"
    doc = json.loads(p.read_text(encoding="utf-8"))
    doc["numbers"] = doc["numbers"][::-1]
    p.write_bytes(json.dumps(doc, indent=1, ensure_ascii=False).encode() + b"\n")


CASES = [
    ("tex_section_titles_exchanged", tex_section_titles_exchanged, "report.tex"),
    ("html_headers_exchanged", html_headers_exchanged, "report.html"),
    ("html_rows_reordered", html_rows_reordered, "report.html"),
    ("html_rows_hidden_by_style", html_rows_hidden_by_style, "report.html"),
    ("html_paragraph_of_format_text", html_paragraph_of_format_text, "report.html"),
    ("numbers_reordered", numbers_reordered, "numbers.json"),
]


@pytest.mark.parametrize("what,edit,name", CASES, ids=[c[0] for c in CASES])
def test_an_edit_of_what_a_reader_sees_is_refused(stage, tmp_path, what, edit, name):
    arch = reseal_edited(stage, tmp_path / "archive", edit)
    code, out = run_check(arch)
    assert code == 1, out
    line = [ln for ln in out.splitlines() if ln.startswith(f"MISMATCH {name}: {RENDERED}")]
    assert line, out
    assert re.search(r"line \d+: the archive has .*, the tables give ", line[0]), line[0]
    print("\n" + line[0][:400])


def test_the_clean_archive_is_its_own_rendering(stage, tmp_path):
    arch = reseal_edited(stage, tmp_path / "archive", lambda work: None)
    code, out = run_check(arch)
    assert code == 0, out
    assert RENDERED not in out


def test_a_changed_table_value_shows_in_the_rendering(stage, tmp_path):
    """A sealed table edited without the report: the rendering of the tables differs from the report."""

    def edit(work: Path) -> None:
        # the table and its CSV copy both changed, as the pipeline writes them (the seal compares the two)
        from refspec.core import tables as T

        df = T.read_table("qualification", work / "tables")
        i = df.index[df["reason"].notna()][0]
        df.loc[i, "reason"] = "erratum: " + str(df.loc[i, "reason"])
        T.write_table(df, "qualification", work / "tables")

    arch = reseal_edited(stage, tmp_path / "archive", edit)
    code, out = run_check(arch)
    assert code == 1, out
    assert any(ln.startswith("MISMATCH ") and RENDERED in ln for ln in out.splitlines()), out


def test_the_rendering_imports_only_the_standard_library():
    """The checker with its renderer under ``python3 -I -S``: what an auditor runs, with nothing else to import."""
    code = (
        "import sys, sysconfig; sys.path.insert(0, sys.argv[1]);"
        "import refspec_check.rendering, refspec_check.render.render, refspec_check.render.comparison;"
        "std = sysconfig.get_paths()['stdlib'];"
        "bad = [m for m, v in sys.modules.items() if getattr(v, '__file__', None) and m != '__main__'"
        " and not v.__file__.startswith(std) and not v.__file__.startswith(sys.argv[1])];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(REPO_ROOT / "report")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout


def test_the_first_difference_names_the_line_and_both_texts():
    from refspec_check.rendering import first_difference

    assert first_difference(b"a\nb c d\n", b"a\nb X d\n") == "line 2: the archive has 'b c d', the tables give 'b X d'"
    assert first_difference(b"a\nb", b"a\nb\nc") == "the archive has 2 lines, the tables give 3 (from line 3 on)"


REASONS = [
    ("ratios", "the reason of an unqualified ratio"),
    ("diagnostics", "the reason of a diagnostic timing"),
    ("qualification", "the reason an arm does not qualify on a task"),
]


@pytest.mark.parametrize("table,what", REASONS, ids=[r[0] for r in REASONS])
def test_a_derived_reason_is_recomputed(stage, tmp_path, table, what):
    """A text the rendering shows from a derived table is the checker's recomputation: changed in the table
    and rendered again (report and tables agree), it is refused at its cell."""

    def edit(work: Path) -> None:
        from refspec.core import tables as T
        from refspec.reporting import render as report

        rows = T.read_records(table, work / "tables")
        row = next(r for r in rows if r["reason"])
        row["reason"] = "erratum: " + row["reason"]
        T.write_table(rows, table, work / "tables")
        report.render(work, pdf=False)

    code, out = run_check(reseal_edited(stage, tmp_path / "archive", edit))
    assert code == 1, out
    assert re.search(rf"MISMATCH tables/{table}\.csv:\d+ \[[^]]*\] column reason: reason 'erratum: ", out), (what, out)
    assert RENDERED not in out, out  # the report is the rendering of these (wrong) tables
