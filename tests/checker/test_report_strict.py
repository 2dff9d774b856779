"""The report is a strict, checkable format: report/check.py refuses every edit of report.html or
report.tex outside it, naming the line, and what Chromium shows a reader is what check.py checked.

This is the report's tamper matrix: each edit below is made to report.html or report.tex of a
synthetic archive, which is then sealed again with the signer's own key (the data untouched, the
signature valid): check.py must refuse it. The edits that stay inside the format (a colour class
swapped, another font size) pass, and the HTML one is shown to change no number a reader sees in
headless Chromium."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from refspec.provenance.seal import seal
from refspec.reporting import render as report
from support.browser import CHROMIUM, probe_page
from support.synthetic_archive import check_module, run_check, signer

CHECK = check_module()


def sealed(stage: Path, dst: Path, edit=None, name: str = "report.html") -> Path:
    """``stage`` with ``edit(text) -> text`` applied to ``name`` (report.html or report.tex), sealed by
    the signer into ``dst``; ``edit`` may also take the stage folder (``edit.files``)."""
    work = dst.with_name(dst.name + "-stage")
    shutil.copytree(stage, work)
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if edit is not None and hasattr(edit, "files"):
        edit.files(work)
    elif edit is not None:
        h = work / name
        before = h.read_text()
        after = edit(before)
        assert after != before, "the edit changed nothing"
        h.write_text(after)
    seal(work, dst, key=signer(), archive_id="synthetic", created="2026-10-20T00:00:00Z")
    return dst


def _first_num(html: str) -> re.Match:
    return re.search(r'<span data-num="(ratio\|[^"]+\|ratio)" data-src="([^"]+)">([^<]+)</span>', html)


def _fake_twin(html: str) -> str:
    m = _first_num(html)
    return html.replace(
        m.group(0), m.group(0)[:-7].replace("<span ", "<span hidden ", 1) + "</span><span>9.999999</span>", 1
    )


def _nested(html: str) -> str:
    m = _first_num(html)
    t = m.group(3)
    return html.replace(m.group(0), m.group(0).replace(f">{t}<", f">{t}<span>0</span><", 1), 1)


def _style(html: str, rule: str) -> str:
    return html.replace("</style>", rule + "\n</style>", 1)


# (class of edit, edit, a word the refusal must contain)
# the edits only the report rendered again from the tables refuses (their words fit the strict subsets)
RENDERED = object()
EDITS = [
    ("CSS repaints a checked number", lambda h: _style(h, "span[data-num] { color: #fff; }"), "stylesheet"),
    ("CSS hides the number cells", lambda h: _style(h, "td.num { visibility: hidden; }"), "stylesheet"),
    ("CSS writes a number", lambda h: _style(h, 'td.num::after { content: "2.5"; }'), "stylesheet"),
    ("remote stylesheet by @import", lambda h: _style(h, "@import url(https://example.org/x.css);"), "stylesheet"),
    (
        "remote stylesheet by <link>",
        lambda h: h.replace("</head>", '<link rel="stylesheet" href="https://example.org/x.css">\n</head>', 1),
        "<link>",
    ),
    ("second <style> element", lambda h: h.replace("</head>", "<style>p{}</style>\n</head>", 1), "stylesheet"),
    (
        "inline style on a number",
        lambda h: h.replace('<span data-num="', '<span style="display:none" data-num="', 1),
        "style=",
    ),
    ("nested element ends the capture", _nested, "inside a checked number"),
    ("hidden number with a fake visible twin", _fake_twin, "hidden="),
    (
        "number in plain text outside a checked cell",
        lambda h: h.replace("</h1>", "</h1>\n<p>The speed-up is 2.50x.</p>", 1),
        RENDERED,
    ),
    (
        "number in a table cell outside a checked span",
        lambda h: h.replace(_first_num(h).group(0), "1.234567", 1),
        RENDERED,
    ),
    (
        "meta refresh",
        lambda h: h.replace("</head>", '<meta http-equiv="refresh" content="0; url=https://example.org/">\n</head>', 1),
        "http-equiv",
    ),
    (
        "external xlink:href",
        lambda h: h.replace("</svg>", '<image xlink:href="https://example.org/x.png" width="9" height="9"/></svg>', 1),
        "<image>",
    ),
    (
        "url() in a figure's fill",
        lambda h: h.replace('fill="#4a7fb5"', 'fill="url(https://example.org/p)"', 1),
        "fill=",
    ),
    ("duplicate id", lambda h: h.replace("<h1>", '<h1 id="summary">', 1), "duplicate id"),
    ("script", lambda h: h.replace("</main>", "<script>document.title='x'</script></main>", 1), "<script>"),
    ("event handler", lambda h: h.replace("<body>", '<body onload="x()">', 1), "onload="),
    ("iframe", lambda h: h.replace("</main>", '<iframe src="numbers.json"></iframe></main>', 1), "<iframe>"),
    ("base href", lambda h: h.replace("</head>", '<base href="https://example.org/">\n</head>', 1), "<base>"),
    ("comment", lambda h: h.replace("</main>", "<!-- 1.5x --></main>", 1), "comment"),
    ("link to a missing id", lambda h: h.replace('href="#summary"', 'href="#nowhere"', 1), "does not have"),
    ("svg opacity on a figure", lambda h: h.replace('class="fig">', 'class="fig" opacity="0">', 1), "opacity="),
    (
        "a digit written against a checked number",
        lambda h: h.replace(_first_num(h).group(0), _first_num(h).group(0) + "0", 1),
        RENDERED,
    ),
]


def _first_tex_num(tex: str) -> re.Match:
    return re.search(r"\\rsnum\{(ratio\|[^{}]+\|ratio)\}\{([^{}]+)\}", tex)


def _before_document(line: str):
    return lambda t: t.replace("\\begin{document}", line + "\n\\begin{document}", 1)


def _after_title(line: str):
    return lambda t: t.replace("\\maketitle\n", "\\maketitle\n" + line + "\n", 1)


def _tex_sub(pattern: str, repl: str):
    def edit(t: str) -> str:
        out, n = re.subn(pattern, repl, t, count=1)
        assert n == 1, pattern
        return out

    return edit


class _PdfWithoutTex:
    """report.tex removed, a report.pdf put in its place (the PDF is read through its source)."""

    @staticmethod
    def files(work: Path) -> None:
        (work / "report.tex").unlink()
        (work / "report.pdf").write_bytes(b"%PDF-1.5\n% a PDF whose numbers nothing checks\n%%EOF\n")


# the same classes of edit made to report.tex: (class, edit, a word the refusal must contain)
TEX_EDITS = [
    (
        "a number changed outside a checked macro",
        lambda t: t.replace(_first_tex_num(t).group(0), "1.234567", 1),
        RENDERED,
    ),
    (
        "a checked number showing another value",
        lambda t: t.replace(_first_tex_num(t).group(0), _first_tex_num(t).group(0)[:-9] + "9.999999}", 1),
        RENDERED,
    ),
    ("\\input of another file", _after_title("\\input{numbers.json}"), "\\input"),
    ("\\include of another file", _after_title("\\include{other}"), "\\include"),
    ("\\write18 (shell escape)", _after_title("\\immediate\\write18{cat /etc/passwd}"), "\\immediate"),
    ("\\url to a remote page", _after_title("\\url{https://example.org/x}"), "\\url"),
    (
        "\\includegraphics of a file outside the report",
        _after_title("\\includegraphics{/tmp/x.png}"),  # abspath: the refused input names it
        "\\includegraphics",
    ),
    ("the number macro redefined in the body", _after_title("\\renewcommand{\\rsnum}[2]{9.99}"), "\\renewcommand"),
    ("the number macro redefined by \\def", _after_title("\\def\\rsnum#1#2{9.99}"), "\\def"),
    ("the number macro redefined in the preamble", _before_document("\\renewcommand{\\rsnum}[2]{9.99}"), "preamble"),
    ("a catcode change", _after_title("\\catcode`\\!=0"), "\\catcode"),
    ("a ^^ character code", _after_title("^^5cinput{numbers.json}"), "'^'"),
    ("a comment hiding a table row", _tex_sub(r"\n(R & )", r"\n% \1"), "comment"),
    ("the document ended early", _after_title("\\end{document}"), "environment"),
    ("a number painted white", _after_title("\\color{white}"), "\\color"),
    ("a number kept out of sight by \\phantom", _tex_sub(r"(\\rsnum\{ratio)", r"\\phantom{}\1"), "\\phantom"),
    ("a box of another width", _tex_sub(r"\\parbox\[t\]\{11cm\}", r"\\parbox[t]{0cm}"), "width"),
    ("a math-mode digit", _after_title("$2.5$"), "math mode"),
    (
        "a figure drawing outside its box",
        _tex_sub(r"\\fill\[rsbar\] \(([\d.]+),([\d.]+)\) rectangle", r"\\fill[rsbar] (\1,-30.000) rectangle"),
        "outside its bounding box",
    ),
    (
        "a figure line with other options",
        _tex_sub(r"\\draw\[draw=rsaxis,", r"\\draw[draw=rsaxis,opacity=0,"),
        "figure line",
    ),
    (
        "a label with a macro",
        _tex_sub(r"(\\node\[[^]]*\] at \([\d.]+,[\d.]+\) \{\\scriptsize )", r"\1\\input{x}"),
        "figure label",
    ),
    (
        "a digit written against a checked number",
        lambda t: t.replace(_first_tex_num(t).group(0), _first_tex_num(t).group(0) + "0", 1),
        RENDERED,
    ),
    ("a table row deleted", _tex_sub(r"\nR & [^\n]*\n", "\n"), RENDERED),
    ("report.pdf without its report.tex", _PdfWithoutTex(), "report.pdf without its report.tex"),
]
# edits inside the format: they change no number a reader sees (shown in Chromium below), and the report
# rendered again from the tables refuses them (refspec_check/rendering.py)
INSIDE = [
    ("a cell's colour class swapped", lambda h: h.replace('<td class="ok">', '<td class="bad">', 1)),
]
TEX_INSIDE = [
    ("a cell in another font size", lambda t: t.replace("{\\scriptsize ", "{\\footnotesize ", 1)),
]


def test_clean_archive_passes(stage, tmp_path):
    # how long the check takes is measured by bench/check_time.py, not asserted on a shared machine
    code, out = run_check(sealed(stage, tmp_path / "clean"))
    assert code == 0, out


MATRIX = [("report.html", *e) for e in EDITS] + [("report.tex", *e) for e in TEX_EDITS]


@pytest.mark.parametrize("name,what,edit,word", MATRIX, ids=[f"{m[0]}: {m[1]}" for m in MATRIX])
def test_every_edit_outside_the_format_is_refused_with_its_line(stage, tmp_path, name, what, edit, word):
    a = sealed(stage, tmp_path / "edited", edit, name)
    code, out = run_check(a)
    target = "report.pdf" if isinstance(edit, _PdfWithoutTex) else name
    lines = [line for line in out.splitlines() if line.startswith(f"MISMATCH {target}")]
    assert code == 1 and lines, (what, out[-3000:])
    if word is RENDERED:  # only the report rendered again from the tables tells (refspec_check/rendering.py)
        assert any(line.startswith(f"MISMATCH {name}: differs from the canonical rendering") for line in lines), lines
        return
    assert any(word in line for line in lines), (what, lines[:5])
    if word not in ("stylesheet", "preamble") and target == name:
        assert any(re.match(rf"MISMATCH {re.escape(name)}:\d+", line) for line in lines), (what, lines[:5])


@pytest.mark.parametrize(
    "name,what,edit",
    [("report.html", *e) for e in INSIDE] + [("report.tex", *e) for e in TEX_INSIDE],
    ids=[e[0] for e in INSIDE + TEX_INSIDE],
)
def test_an_edit_inside_the_format_is_refused_by_the_rendering(stage, tmp_path, name, what, edit):
    """The strict subsets and the bindings admit these edits; the report rendered again from the tables does not."""
    code, out = run_check(sealed(stage, tmp_path / "inside", edit, name))
    bad = [ln for ln in out.splitlines() if ln.startswith("MISMATCH")]
    assert code == 1 and len(bad) == 1, (what, out[-2000:])
    assert bad[0].startswith(f"MISMATCH {name}: differs from the canonical rendering of the sealed tables, line "), bad


def test_the_tex_preamble_is_the_formats(stage):
    """check.py pins the renderer's LaTeX preamble (with the one number macro): a change to one
    needs the other; every number of numbers.json is in report.tex in its checked form."""
    tex = (stage / "report.tex").read_text()
    pre = tex[: tex.index("\\begin{document}\n") + len("\\begin{document}\n")]
    assert hashlib.sha256(pre.encode()).hexdigest() == CHECK.TEX_PREAMBLE_SHA256
    assert "\\newcommand{\\rsnum}[2]" in pre
    ids = {CHECK.tex_id_decode(m.group(1)) for m in CHECK._TEX_NUM_RE.finditer(tex[len(pre) :])}
    doc = json.loads((stage / "numbers.json").read_text())
    assert ids == {n["id"] for n in doc["numbers"]}


@pytest.mark.skipif(
    shutil.which("pdftotext") is None or shutil.which("pdflatex") is None, reason="needs TeX and poppler"
)
def test_the_pdf_shows_the_checked_numbers(stage, tmp_path):
    """report.tex compiles, and the PDF's text holds every checked number's text where report.tex
    puts it (in order)."""
    work = tmp_path / "pdf"
    shutil.copytree(stage, work)
    pdf = report.compile_pdf(work / "report.tex")
    text = subprocess.run(["pdftotext", "-raw", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    tex = (work / "report.tex").read_text()
    body = tex[tex.index("\\begin{document}") :]
    shown = [m.group(2) for m in CHECK._TEX_NUM_RE.finditer(body)]
    pos, missing = 0, []
    for t in shown:
        i = text.find(t, pos)
        if i < 0:
            missing.append(t)
        else:
            pos = i + len(t)
    print(f"PDF: {len(shown) - len(missing)} of {len(shown)} checked numbers found in order")
    assert len(shown) > 500 and not missing, missing[:10]


def test_the_stylesheet_is_the_formats():
    """check.py pins the renderer's stylesheet: a change to one needs the other."""
    from refspec_check.render.page import STYLE

    assert hashlib.sha256(("\n" + STYLE).encode()).hexdigest() == CHECK.STYLESHEET_SHA256


# --------------------------------------------------------------------------- what Chromium shows

_PROBE = """<script>window.addEventListener('load', function () {
  // the folded sections opened, as a reader's click does: every number is one click away
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  function shown(el) {
    for (var e = el; e && e.nodeType === 1; e = e.parentElement) {
      var s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility !== 'visible' || parseFloat(s.opacity) === 0) return false;
    }
    var r = el.getClientRects();
    return r.length > 0 && Array.prototype.some.call(r, function (x) { return x.width > 0 && x.height > 0; });
  }
  var out = [], w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (w.nextNode()) {
    var n = w.currentNode, p = n.parentElement;
    if (!n.textContent.trim() || p.closest('script') || !shown(p)) continue;
    var num = p.closest('[data-num]');
    var s = getComputedStyle(p);
    out.push({text: n.textContent, num: num ? num.getAttribute('data-num') : null,
              svg: !!p.closest('svg'), color: s.color, fill: s.fill});
  }
  var pre = document.createElement('pre'); pre.id = 'visible-text'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre); });</script></body>"""


def visible_text(html_path: Path, tmp: Path) -> list[dict]:
    """The text nodes Chromium renders visibly (display, visibility, opacity and layout box), in order."""
    return json.loads(probe_page(html_path, _PROBE, "visible-text", tmp, 1280))


def compare_with_numbers(archive: Path, nodes: list[dict]) -> tuple[int, list[str]]:
    """(numbers compared, problems): every visible checked number shows numbers.json's text for its
    id, and every number of numbers.json is visible."""
    doc = json.loads((archive / "numbers.json").read_text())
    text = {n["id"]: n["text"] for n in doc["numbers"]}
    problems, seen, compared = [], set(), 0
    for n in nodes:
        if n["num"] is not None:
            compared += 1
            seen.add(n["num"])
            if n["text"].strip() != text.get(n["num"]):
                problems.append(f"{n['num']}: shows {n['text']!r}, numbers.json {text.get(n['num'])!r}")
            if n["color"] in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)"):
                problems.append(f"{n['num']}: drawn in {n['color']}")
    problems += [f"{nid}: not visible" for nid in sorted(set(text) - seen)]
    return compared, problems


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser test needs /usr/bin/chromium")
def test_chromium_shows_the_checked_numbers(stage, tmp_path):
    a = sealed(stage, tmp_path / "clean")
    assert run_check(a)[0] == 0
    nodes = visible_text(a / "report.html", tmp_path)
    compared, problems = compare_with_numbers(a, nodes)
    n_numbers = len(json.loads((a / "numbers.json").read_text())["numbers"])
    print(f"Chromium: {compared} visible checked numbers ({n_numbers} ids), {len(problems)} differences")
    assert compared >= n_numbers > 500 and not problems, problems[:10]
    # the edits the format admits change no number a reader sees (the rendering refuses them all the same)
    for i, (name, edit) in enumerate(INSIDE):
        b = sealed(stage, tmp_path / f"inside{i}", edit)
        nb = visible_text(b / "report.html", tmp_path)
        assert [(n["text"], n["num"]) for n in nb] == [(n["text"], n["num"]) for n in nodes], name
