"""The characters and the markup a reader sees are the ones check.py checked: a pinned repertoire,
HTML read as a browser reads it, drawings only in figures, and no number passing as a name.

Each attack below is made as the dishonest signer makes it: a sealed synthetic archive is copied,
report.html or report.tex is edited (the data tables untouched), and the copy is sealed again with a
valid key; check.py must refuse it (exit 1) with a message naming the problem."""

from __future__ import annotations

import re
import shutil
import unicodedata
from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT
from refspec.provenance.seal import seal
from refspec.reporting import render as report
from support.synthetic_archive import check_module, make_results, run_check, signer

CHECK = check_module()


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """A rendered synthetic archive, sealed by the signer."""
    base = tmp_path_factory.mktemp("chars")
    results = make_results(base / "results", evil=True, draws=300)
    report.render(results, pdf=False)
    archive = base / "archive"
    seal(results, archive, key=signer(), archive_id="synthetic", created="2026-10-20T00:00:00Z")
    return archive


@pytest.fixture(scope="module")
def names(clean) -> set[str]:
    """Every cell value of the archive's tables (the names a signer may compose into a claim)."""
    import csv

    out: set[str] = set()
    for p in sorted((clean / "tables").glob("*.csv")):
        with open(p, newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                out.update(row)
    return out


def resealed(clean: Path, dst: Path, name: str, edit) -> Path:
    """The sealed ``clean`` archive with ``edit(text) -> text`` applied to ``name``, sealed again
    with a valid key (the signer's) into ``dst``."""
    work = dst.with_name(dst.name + "-work")
    shutil.copytree(clean, work, ignore=shutil.ignore_patterns("SEAL.dsse.json"))
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    f = work / name
    before = f.read_text(encoding="utf-8")
    after = edit(before)
    assert after != before, "the edit changed nothing"
    f.write_text(after, encoding="utf-8")
    seal(work, dst, key=signer(), archive_id="synthetic", created="2026-10-20T00:00:01Z")
    return dst


_SPAN = r'<span data-num="([^"]+)" data-src="[^"]+">([^<]+)</span>'


def _first_ratio(h: str) -> re.Match:
    return re.search(r'<span data-num="ratio\|[^"]+" data-src="[^"]+">[^<]+</span>', h)


def _bidi(h: str) -> str:
    """RIGHT-TO-LEFT OVERRIDE before a checked ratio: 1.402596 reads 695204.1 on screen."""
    m = _first_ratio(h)
    return h.replace(m.group(0), "\u202e" + m.group(0) + "\u202c", 1)


def _confusable(h: str) -> str:
    """A Cyrillic capital O and a vulgar fraction read as the speed-up 0.5."""
    return h.replace("</h1>", "</h1>\n<p>The speed-up is \u041e.\u00bd on every task.</p>", 1)


def _zero_width(h: str) -> str:
    """Zero-width spaces inside the word 'fail': a reader searching for it finds nothing."""
    assert " tasks fail" in h
    return h.replace(" tasks fail", " tasks fa\u200bil")


def _digit_names(names: set[str]) -> list[str]:
    ds = [d for d in "0123456789" if d in names]
    assert len(ds) >= 2, ds
    return ds


def _separator(names):
    """Digits joined by LINE SEPARATOR: each digit alone is a name of the archive (a key column)."""
    a, b = _digit_names(names)[-2:]
    return lambda h: h.replace("</h1>", f"</h1>\n<p>The speed-up is {a}\u2028.\u2028{b} on every task.</p>", 1)


def _composed(names):
    """Two names of the tables ('8' and '8') composed into a claim: '8/8 on rerun'."""
    d = _digit_names(names)[-1]
    return lambda h: h.replace("</h1>", f"</h1>\n<p>Every task passes, {d}/{d} on rerun.</p>", 1)


def _span_as_name(names):
    """A checked number shown twice; one of its spans replaced by plain text that is a name of
    the archive (another value), the other left so the number is still shown."""

    def edit(h: str) -> str:
        seen: dict[str, int] = {}
        for m in re.finditer(_SPAN, h):
            seen[m.group(1)] = seen.get(m.group(1), 0) + 1
        after_summary = h.index("</table>")  # the summary table is checked number by number
        for m in re.finditer(_SPAN, h[after_summary:]):
            m = re.compile(_SPAN).match(h, after_summary + m.start())
            if seen[m.group(1)] > 1 and m.group(2).isdigit():
                other = next(d for d in _digit_names(names) if d != m.group(2))
                return h[: m.start()] + other + h[m.end() :]
        raise AssertionError("no checked integer shown twice")

    return edit


def _style_end(h: str) -> str:
    """``</ style>`` ends the stylesheet for html.parser only; a browser reads on as CSS up to the
    '</style>' written into a cell's title, and repaints the checked numbers."""
    assert '<td class="bad num" title="' in h
    h = h.replace("</style>", "</ style>", 1)
    return re.sub(
        r'<td class="bad num" title="[^"]*">',
        '<td class="bad num" title="}span[data-num]{color:#fff}</style>">',
        h,
        count=1,
    )


def _title_table(h: str) -> str:
    """The real first table inside <title> (text in a browser, elements for html.parser), the
    visible copy in the body left to be altered."""
    t = re.findall(r"<table .*?</table>", h, re.S)[1]  # the first after the summary table
    return h.replace("<title>refspec report</title>", "<title>refspec report" + t + "</title>", 1)


def _svg_in_cell(h: str) -> str:
    """An inline drawing in a table cell: its text (exempt in figures) shows another number."""
    m = _first_ratio(h)
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 60 12" role="img" aria-label="ratio" class="fig">'
        '<text x="0" y="10" font-size="10" fill="#222">0.500000</text></svg>'
    )
    return h.replace(m.group(0), m.group(0) + svg, 1)


def _tikz_in_cell(t: str) -> str:
    """A TikZ node in a table cell of report.tex: a figure label (exempt in figures) shows a number."""
    m = re.search(r"\n(R & )([^\n]*\\\\)\n", t)
    assert m, "no table row of R"
    pic = "\n".join(
        [
            "\\begin{tikzpicture}[font=\\sffamily]",
            "\\useasboundingbox (0,0) rectangle (2.000,0.400);",
            "\\node[anchor=base west,inner sep=0pt,scale=1.000] at (0.000,0.100) {\\scriptsize 0.500000};",
            "\\end{tikzpicture}",
        ]
    )
    return t[: m.start()] + "\n" + m.group(1) + "\n" + pic + "\n" + m.group(2) + "\n" + t[m.end() :]


# (class, file, edit or a function of the archive's names giving one, words the refusal holds)
ATTACKS = [
    ("bidi control reversing a number", "report.html", _bidi, "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("confusable letter and vulgar fraction", "report.html", _confusable, "U+00BD VULGAR FRACTION ONE HALF"),
    ("line separator between digits", "report.html", _separator, "U+2028 LINE SEPARATOR"),
    ("zero-width character", "report.html", _zero_width, "U+200B ZERO WIDTH SPACE"),
    ("names composed into a claim", "report.html", _composed, "differs from the canonical rendering"),
    ("checked span replaced by a name", "report.html", _span_as_name, "differs from the canonical rendering"),
    ("</ style> read otherwise by a browser", "report.html", _style_end, "'</ style>"),
    ("the real table inside <title>", "report.html", _title_table, "markup inside <title>"),
    ("svg text in a table cell", "report.html", _svg_in_cell, "<svg> inside <td>"),
    ("TikZ node in a TeX table cell", "report.tex", _tikz_in_cell, "figure outside the report's figure environment"),
]
_NEEDS_NAMES = (_separator, _composed, _span_as_name)


@pytest.mark.parametrize("what,name,edit,word", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_is_refused_with_its_line(clean, names, tmp_path, what, name, edit, word):
    if edit in _NEEDS_NAMES:
        edit = edit(names)
    a = resealed(clean, tmp_path / "attacked", name, edit)
    code, out = run_check(a)
    lines = [line for line in out.splitlines() if line.startswith(f"MISMATCH {name}:")]
    assert code == 1 and lines, (what, out[-3000:])
    assert any(word in line for line in lines), (what, lines[:8])
    print(f"{what}: {next(line for line in lines if word in line)}")


def test_the_clean_archive_has_no_false_alarm(clean):
    code, out = run_check(clean)
    assert code == 0, out[-3000:]


def test_the_renderers_output_is_inside_the_repertoire(clean):
    """Every character of the rendered report.html and report.tex is in the repertoire (the TeX is
    printable ASCII), and report.html passes the browser pre-scan."""
    from refspec_check import repertoire
    from refspec_check.html5 import prescan

    html = (clean / "report.html").read_text(encoding="utf-8")
    tex = (clean / "report.tex").read_text(encoding="utf-8")
    assert repertoire.problems(html) == []
    assert all(32 <= ord(ch) <= 126 or ch == "\n" for ch in tex)
    assert prescan(html) == []


def _source_chars() -> set[str]:
    """The non-ASCII characters the renderer's sources write: literal, or as a
    ``\\uXXXX`` escape in a Python string."""
    out: set[str] = set()
    files = [*(REPO_ROOT / "report" / "refspec_check" / "render").rglob("*.py")]
    for p in files:
        text = p.read_text(encoding="utf-8")
        out.update(ch for ch in text if ord(ch) > 126)
        if p.suffix == ".py":
            out.update(chr(int(h, 16)) for h in re.findall(r"(?<!\\)\\u([0-9a-fA-F]{4})", text))
    return out


def test_the_repertoire_is_the_renderers_characters():
    """The pinned non-ASCII characters are exactly those the renderer writes: a new one in the
    renderer needs the checker's repertoire changed with it."""
    from refspec_check import repertoire

    src, pinned = _source_chars(), set(repertoire.RENDERER_CHARS)
    assert src == pinned, sorted(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in src ^ pinned)


@pytest.mark.parametrize(
    "ch,kind",
    [
        ("\u202e", "bidi control"),
        ("\u2066", "bidi control"),
        ("\u061c", "bidi control"),
        ("\u200b", "zero-width"),
        ("\ufeff", "zero-width"),
        ("\u2029", "paragraph separator"),
        ("\u00bd", "number form"),
        ("\u2167", "number form"),
        ("\u0660", "number form"),
        ("\u0430", "confusable"),
        ("\t", "control"),
    ],
)
def test_refused_characters_are_named(ch, kind):
    from refspec_check import repertoire

    (line, msg), *_ = repertoire.problems("ok\n" + ch)
    assert line == 2 and f"U+{ord(ch):04X}" in msg and kind in msg, msg
    if unicodedata.name(ch, ""):
        assert unicodedata.name(ch) in msg


def test_the_renderer_shows_other_characters_of_the_data_as_question_marks():
    """A name or reason of the archive holding a character outside the repertoire (a bidi control
    in a task name, a letter outside ASCII in a log line quoted by a ledger reason) is written into
    report.html as '?' (a control as a space), as report.tex writes it, so a clean report always
    passes the repertoire; markup (the figures) is written as it is."""
    from refspec_check import repertoire
    from refspec_check.render.page import HTML_CHARS, Markup, html_text

    assert html_text("task\u202e1\tcaf\u00e9 \u2014 \u2026") == "task?1 caf? \u2014 \u2026"
    assert repertoire.problems(html_text("".join(map(chr, range(0x2000, 0x2100))))) == []
    m = Markup("<svg>\u00e9</svg>")
    assert html_text(m) is m
    assert set(HTML_CHARS) == set(repertoire.RENDERER_CHARS)
