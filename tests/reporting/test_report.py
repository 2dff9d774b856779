"""Report rendering: content, sources, escaping, missing inputs, browser and LaTeX."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from refspec_check.render import document, render

from refspec.cli import main as cli_main
from refspec.core import tables as T
from refspec.core.hashing import sha256_file
from refspec.core.paths import REPO_ROOT
from refspec.reporting import render as report
from support.browser import CHROMIUM, probe_page
from support.synthetic_archive import EVIL, make_results

ARTIFACTS = REPO_ROOT / "tests" / "artifacts"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("report")
    results = make_results(base / "results", evil=True, draws=2000)
    report.render(results, pdf=False)
    return results


def numbers(results: Path) -> dict:
    return {n["id"]: n for n in json.loads((results / "numbers.json").read_text())["numbers"]}


class Spans(HTMLParser):
    def __init__(self):
        super().__init__()
        self.nums, self.tags, self._cur, self._buf = {}, [], None, []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        a = dict(attrs)
        if "data-num" in a:
            self._cur, self._buf = a["data-num"], []

    def handle_endtag(self, tag):
        if self._cur is not None:
            self.nums.setdefault(self._cur, []).append("".join(self._buf))
            self._cur = None

    def handle_data(self, data):
        if self._cur is not None:
            self._buf.append(data)


def test_every_number_is_shown_with_its_source(rendered):
    nums = numbers(rendered)
    sp = Spans()
    sp.feed((rendered / "report.html").read_text())
    assert set(sp.nums) == set(nums)
    for nid, n in nums.items():
        assert (rendered / n["source"]).is_file(), n
        assert n["source"].endswith(".csv") or n["source"] == "ledger.jsonl"
        assert all(t == n["text"] for t in sp.nums[nid]), nid
        assert n["text"] == format(n["value"], n["fmt"])
    # every table names its CSV and links it (the provenance's records and the glossary's fixed text have none)
    for tag, a in sp.tags:
        if tag == "table" and a.get("data-table") not in ("provenance", "glossary"):
            assert a.get("data-src", "").endswith((".csv", "ledger.jsonl")), a
    sections = {
        "qual|",
        "ratio|",
        "est|",
        "contrast|",
        "session|",
        "replay|",
        "audit|",
        "mask|",
        "accept|",
        "status|",
        "ledger|",
        "qfail|",
    }
    assert all(any(k.startswith(s) for k in nums) for s in sections)


def test_paper_table_shapes(rendered):
    nums = numbers(rendered)
    # Table 3: matching / required per arm and family
    assert (
        nums["qual|confirmation|smollm2-135m|M3|matching"]["value"]
        == nums["qual|confirmation|smollm2-135m|M3|required"]["value"]
        == 24
    )
    assert nums["qual|confirmation|smollm2-135m|M0|matching"]["value"] == 16
    assert nums["qual|confirmation|smollm2-135m|M0|tasks_failed"]["value"] == 2
    # Table S5: estimate with interval
    est = {k: v["value"] for k, v in nums.items() if k.startswith("est|smollm2-135m|spec|PQ/QB|")}
    assert est["est|smollm2-135m|spec|PQ/QB|lo"] <= est["est|smollm2-135m|spec|PQ/QB|hi"]
    assert est["est|smollm2-135m|spec|PQ/QB|n_sessions"] == 6
    # Table S7: PQ = QB everywhere, MQ = PQ only in the q = 1 controls
    assert nums["replay|llama31-8b|kq|pq_eq_qb"]["value"] == nums["replay|llama31-8b|kq|contexts"]["value"] == 24
    assert nums["replay|llama31-8b|kq|mq_eq_pq"]["value"] == 6


def test_failed_qualification_is_a_dash_with_reason(rendered):
    nums = numbers(rendered)
    ratios = T.read_records("ratios", rendered)
    bad = [r for r in ratios if not r["qualified"]]
    assert bad
    html = (rendered / "report.html").read_text()
    for r in bad:
        nid = f"ratio|{r['campaign']}|{r['family']}|{r['cap']}|{r['numerator']}|{r['denominator']}|ratio"
        assert nid not in nums, "an unqualified comparison got a ratio"
        table = html[html.index('data-table="ratios-' + r["campaign"] + '"') :]
        table = table[: table.index("</table>")]
        label = f">{r['numerator']}/{r['denominator']}<"
        rows = [tr for tr in table.split("<tr>") if label in tr and f">{r['family']}<" in tr]
        assert len(rows) == 1
        assert "\u2014" in rows[0] and "not qualified on" in rows[0]


def test_untrusted_text_is_escaped(rendered):
    html = (rendered / "report.html").read_text()
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(" in html
    from markupsafe import escape

    assert str(escape(EVIL)) in html  # the whole text, escaped once, in the failure reasons
    assert "{{ 7*7 }}" in html and "{% if %}" in html  # shown literally, never evaluated
    tex = (rendered / "report.tex").read_text()
    assert r"\textless{}script\textgreater{}" in tex
    assert r"\{\{ 7*7 \}\}" in tex and r"\textbackslash{}textbf\{x\}" in tex and r"\$\_\textasciicircum{}\#\%" in tex


def test_self_contained_and_deterministic(rendered, tmp_path):
    html = (rendered / "report.html").read_text()
    assert not re.search(r"<(link|img|iframe|object|embed)\b", html)
    assert "url(" not in html and "@import" not in html
    urls = set(re.findall(r"""(?:href|src)=["']([a-z]+:[^"']*)""", html))
    assert not urls, urls
    out = tmp_path / "again"
    report.render(rendered, out, pdf=False)
    # the same inputs give the same bytes (links are relative to the output folder)
    again = (out / "numbers.json").read_text()
    assert json.loads(again)["numbers"] == [
        dict(n, source=os.path.relpath(rendered / n["source"], out))
        for n in json.loads((rendered / "numbers.json").read_text())["numbers"]
    ]
    report.render(rendered, pdf=False)
    assert (rendered / "report.html").read_text() == html


def test_missing_inputs_are_marked_not_run(tmp_path):
    src = make_results(tmp_path / "full", draws=200)
    only = tmp_path / "only"
    (only / "tables").mkdir(parents=True)
    for ext in ("parquet", "csv"):
        shutil.copy(src / "tables" / f"requests.{ext}", only / "tables")
    report.render(only, pdf=False)
    html = (only / "report.html").read_text()
    for name in ("estimates.csv", "replay.csv", "audit.csv", "phase_masks.csv", "qualification.csv", "ratios.csv"):
        assert f"{name} not present" in html
    assert "manifest not present" in html and "ledger.jsonl not present" in html
    ids = numbers(only)
    assert ids and all(k.split("|")[0] in ("accept", "status", "reason", "arms") for k in ids)
    # nothing at all is a usage error, not an empty report
    with pytest.raises(Exception, match="no result table"):
        report.render(tmp_path / "empty_dir_does_not_exist", pdf=False)


def test_cli_report(rendered, tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli_main(["report", str(rendered), "--out", str(out), "--no-pdf"]) == 0
    assert (out / "report.html").is_file() and (out / "numbers.json").is_file() and (out / "report.tex").is_file()
    assert cli_main(["report", str(tmp_path / "missing"), "--no-pdf"]) == 2


def _artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    gi = ARTIFACTS / ".gitignore"
    if not gi.exists():
        gi.write_text("*\n")
    return ARTIFACTS


@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless browser test needs /usr/bin/chromium (Debian package 'chromium'); not installed here",
)
def test_browser_renders_without_console_errors(rendered, tmp_path):
    art = _artifacts()
    url = (rendered / "report.html").resolve().as_uri()
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ]
    logs = []
    for name, size in (("report-desktop.png", "1280,3000"), ("report-phone.png", "390,2400")):
        shot = art / name
        if shot.exists():
            shot.unlink()
        r = subprocess.run(
            [
                str(CHROMIUM),
                *flags,
                f"--user-data-dir={tmp_path / ('ud-' + name)}",
                f"--window-size={size}",
                f"--screenshot={shot}",
                url,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        logs.append(r.stdout)
        assert r.returncode == 0, r.stdout[-2000:]
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    r = subprocess.run(
        [str(CHROMIUM), *flags, f"--user-data-dir={tmp_path / 'ud-dom'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    logs.append(r.stderr)
    dom = r.stdout
    assert 'id="replication"' in dom and "<svg" in dom and 'data-num="est|' in dom
    console = [
        l
        for log in logs
        for l in log.splitlines()
        if "CONSOLE" in l or "Uncaught" in l or "Refused to" in l or "Failed to load resource" in l
    ]
    assert not console, console
    (art / "browser.log").write_text("\n".join(logs))


def _words(s: str) -> str:
    """Letters and digits only: what survives TeX's typesetting and pdftotext unchanged."""
    import unicodedata

    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", s)).lower()


def _ppm(path: Path) -> tuple[int, int, bytes]:
    """Width, height and RGB bytes of a binary PPM (P6, maxval 255) as pdftoppm writes it."""
    data = path.read_bytes()
    fields, pos = [], 0
    while len(fields) < 4:
        m = re.compile(rb"\s*(#[^\n]*\n\s*)*(\S+)").match(data, pos)
        fields.append(m.group(2))
        pos = m.end()
    assert fields[0] == b"P6" and fields[3] == b"255", fields
    w, h = int(fields[1]), int(fields[2])
    return w, h, data[pos + 1 : pos + 1 + 3 * w * h]


# The test set-up (./run test, as root with apt) installs these Debian packages; elsewhere this skips.
@pytest.mark.skipif(
    shutil.which("pdflatex") is None or shutil.which("pdftoppm") is None or shutil.which("pdftotext") is None,
    reason="LaTeX test needs pdflatex (Debian texlive-latex-base, texlive-latex-recommended, "
    "texlive-pictures) and poppler-utils (pdftoppm, pdftotext); not installed here",
)
def test_latex_report_shows_every_table_and_figure(rendered, tmp_path):
    out = tmp_path / "out"
    paths = report.render(rendered, out, pdf=True)  # what the report stage runs
    pdf = paths.get("pdf")
    assert pdf is not None and pdf.read_bytes()[:5] == b"%PDF-"
    shutil.copy(pdf, _artifacts() / "report.pdf")
    text = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], stdout=subprocess.PIPE, check=True, timeout=120
    ).stdout.decode("utf-8", "replace")
    pages = [_words(t) for t in text.split("\f")]
    lines = [{_words(line) for line in t.splitlines()} for t in text.split("\f")]  # a title is a line of its own
    subprocess.run(["pdftoppm", "-r", "36", str(pdf), str(tmp_path / "page")], check=True, timeout=120)
    images = sorted(tmp_path.glob("page-*.ppm"))
    assert len(images) >= 2 and len(images) <= len(pages)
    ink, colour = [], []
    for img in images:
        w, h, rgb = _ppm(img)
        dark = coloured = 0
        for r, g, b in zip(rgb[0::3], rgb[1::3], rgb[2::3]):
            hi, lo = max(r, g, b), min(r, g, b)
            dark += hi < 128
            coloured += hi - lo > 60  # the figures' coloured marks
        ink.append(dark / (w * h))
        colour.append(coloured)
    blank = [i + 1 for i, f in enumerate(ink) if not 0.001 < f < 0.5]
    assert not blank, f"blank (or black) pages: {blank} of {len(images)}"
    sections, _, _ = render.build(document.load_archive(rendered, out))
    items = [it for s in sections for it in s.items]
    assert sum(isinstance(it, document.Figure) for it in items) >= 2
    for it in items:
        title = _words(it.title)
        at = next((i for i, page in enumerate(lines) if title in page), None)
        assert at is not None, f"{it.title!r} is not in report.pdf"
        near = pages[at] + "".join(pages[at + 1 : at + 2])  # a table or drawing may start on the next page
        if isinstance(it, document.Table):
            missing = [h for h in it.header if _words(h) not in near]
            assert not missing, f"table {it.title!r}: header {missing} not in report.pdf"
        else:
            labels = [_words(x.args[2]) for x in it.canvas.items if x.kind == "text"]
            labels = [x for x in labels if x]
            assert labels and any(x in near for x in labels), f"figure {it.title!r}: no label in report.pdf"
            assert any(colour[at : at + 2]), f"figure {it.title!r}: nothing drawn on page {at + 1}"


# --------------------------------------------------------------------------- headline, diagnostics, prediction


def test_report_opens_with_the_headline(rendered):
    doc = json.loads((rendered / "numbers.json").read_text())
    nums = {n["id"]: n for n in doc["numbers"]}
    html = (rendered / "report.html").read_text()
    first = re.search(r'<section id="([^"]+)"', html).group(1)
    assert first == "summary"
    head = doc["headline"]
    findings = {h["finding"] for h in head}
    assert {
        "preservation: matching / required",
        "first divergence",
        "qualified ratios",
        "E2 estimate",
        "E1: PQ = QB bitwise (contexts)",
        "prediction vs reference",
        "data seal (sha256 of SEAL.dsse.json)",
        "signing key fingerprint",
    } <= findings
    ids = [p["num"] for h in head for p in h["parts"] if isinstance(p, dict)]
    assert ids and all(i in nums for i in ids)
    # the summary table shows exactly the headline's numbers, in order
    table = html[html.index('<table data-table="summary"') :]
    table = table[: table.index("</table>")]
    assert re.findall(r'data-num="([^"]+)"', table) == ids
    # 6 sessions: real decisions, never "too few sessions"
    est = [h for h in head if h["finding"] == "E2 estimate"]
    assert len(est) == 4 and all(h["decision"] in ("exceeds", "inconclusive", "below") for h in est)
    assert "too few sessions" not in table
    # a refused arm is named as refused, its first divergence is not invented
    assert any(
        "C_qb8" in "".join(p for p in h["parts"] if isinstance(p, str)) and "refused" in str(h["parts"])
        for h in head
        if h["finding"].startswith("preservation")
    )
    assert not any(h["scope"].endswith(" C_qb8") for h in head if h["finding"] == "first divergence")


def test_the_console_leaves_the_wide_headline_table_to_the_report(rendered, tmp_path):
    """The headline table's rows are 130-370 characters: the console prints the findings and the
    archive's seal, each wrapped to the terminal, and leaves the table to report.html."""
    from refspec.pipeline.main import headline_text

    doc = json.loads((rendered / "numbers.json").read_text())
    seal = tmp_path / "SEAL.dsse.json"
    seal.write_text("{}")
    for width in (80, 120):
        lines = headline_text(rendered / "numbers.json", seal, width=width).splitlines()
        assert all(len(line) <= width for line in lines), width
        assert not any(line.startswith("headline") for line in lines)
        tail = " ".join(line.strip() for line in lines[-3:])
        assert f"archive seal (sha256 of SEAL.dsse.json): {sha256_file(seal)}" in tail
    assert doc["headline"]  # the table is there, in the report


def test_one_session_says_too_few_sessions_and_three_get_a_t_interval(tmp_path):
    results = make_results(tmp_path / "one", n_sessions=1, draws=300)
    est = T.read_records("estimates", results)
    assert est and all(
        r["decision"] == "too_few_sessions"
        and r["n_sessions"] == 1
        and r["lo"] is None
        and r["estimate"] is not None
        and "at least 2" in r["reason"]
        for r in est
    )
    report.render(results, pdf=False)
    doc = json.loads((results / "numbers.json").read_text())
    heads = [h for h in doc["headline"] if h["finding"] == "E2 estimate"]
    assert len(heads) == 4 and all(h["decision"] == "too_few_sessions" for h in heads)
    assert all("too few sessions" in "".join(p for p in h["parts"] if isinstance(p, str)) for h in heads)
    html = (results / "report.html").read_text()
    table = html[html.index('data-table="estimates"') :]
    table = table[: table.index("</table>")]
    assert table.count(">undecided: too few sessions<") == 4
    assert not re.search(r">(exceeds|inconclusive|below)<", table)
    # three sessions: a t interval with two degrees of freedom, and a decision
    three = T.read_records("estimates", make_results(tmp_path / "three", n_sessions=3, draws=300))
    assert all(r["lo"] is not None and r["df"] == 2.0 and r["decision"] != "too_few_sessions" for r in three)


def test_diagnostic_timings_have_their_own_labelled_table(rendered):
    nums = numbers(rendered)
    diag = T.read_records("diagnostics", rendered)
    pairs = {(r["family"], r["numerator"], r["denominator"]) for r in diag}
    # M0 and C0 fail on two tasks per family; R_prod fails on llama31-8b only
    assert pairs == {(f, "M3", "M0") for f in ("smollm2-135m", "llama31-8b")} | {
        (f, "C3", "C0") for f in ("smollm2-135m", "llama31-8b")
    } | {("llama31-8b", "R_prod", "M3")}
    html = (rendered / "report.html").read_text()
    table = html[html.index('data-table="diagnostics"') :]
    table = table[: table.index("</table>")]
    for r in diag:
        assert r["label"] == (
            "diagnostic: numerator not qualified"
            if r["numerator"] == "R_prod"
            else "diagnostic: denominator not qualified"
        )
        row = [
            tr
            for tr in table.split("<tr>")
            if f">{r['numerator']}/{r['denominator']}<" in tr and f">{r['family']}<" in tr
        ]
        assert len(row) == 1 and r["label"] in row[0]
        base = f"diag|confirmation|{r['family']}|{r['cap']}|{r['numerator']}|{r['denominator']}"
        assert nums[base + "|ratio"]["value"] == pytest.approx(r["ratio"])
        assert nums[base + "|median_numerator_ms"]["value"] == pytest.approx(r["median_numerator_ns"] / 1e6)
        # never mixed with the qualified ratios
        for a, b in ((r["numerator"], r["denominator"]), (r["denominator"], r["numerator"])):
            assert f"ratio|confirmation|{r['family']}|{r['cap']}|{a}|{b}|ratio" not in nums
    assert 'id="fig-diagnostics"' in html
    ratios_html = html[html.index('<section id="ratios">') : html.index('<section id="diagnostics">')]
    assert "diagnostic:" not in ratios_html


def test_prediction_shows_predicted_next_to_reference(rendered):
    nums = numbers(rendered)
    assert nums["predsum|smollm2-135m|predicted_matches"]["value"] == 12
    assert nums["predsum|smollm2-135m|reference_matches"]["value"] == 6
    assert nums["predsum|smollm2-135m|live_runs"]["value"] == 12
    assert nums["predsum|smollm2-135m|divergent_tasks"]["value"] == 2
    html = (rendered / "report.html").read_text()
    sec = html[html.index('<section id="prediction">') :]
    sec = sec[: sec.index("</section>")]
    for words in (
        "capped sequence",
        "repeat-stable",
        "reference-divergent",
        "frozen",
        "predicted vs live",
        "reference vs live",
    ):
        assert words in sec
    assert "seeds/" not in html and ".txt" not in sec


def test_prediction_refuses_the_reference_as_a_candidate():
    from refspec.campaigns import prediction
    from refspec.campaigns.definitions import load_definition
    from refspec.core.arms import load_arms
    from refspec.core.errors import ConfigError

    catalog = load_arms()
    defn, _ = load_definition("prediction")
    assert "R" not in defn["candidates"]
    names = [a.name for a in prediction.arms(defn, catalog)]
    assert names[0] == "R" and set(defn["candidates"]) <= set(names)
    for bad in ("R", "M_gs"):  # the reference, or its recipe under another name
        with pytest.raises(ConfigError, match="reference recipe"):
            prediction.arms(dict(defn, candidates=["M0", bad]), catalog)


def test_refused_arm_shows_the_refusal(rendered):
    html = (rendered / "report.html").read_text()
    table = html[html.index('data-table="qualification-implementation"') :]
    table = table[: table.index("</table>")]
    row = [tr for tr in table.split("<tr>") if ">C_qb8<" in tr]
    assert len(row) == 1
    assert (
        "refused: worker w-refused (arm C_qb8) exited with status 3 before it was ready: admission: occupied "
        "queries 8 &gt; 4" in row[0]
    )


def test_figure_labels_fit_their_margin(rendered):
    """Right-aligned labels end at the axis; their estimated width must fit left of it (DejaVu Sans, 0.62 em)."""
    from refspec_check.render.svg import Canvas

    html = (rendered / "report.html").read_text()
    svgs = re.findall(r"<svg .*?</svg>", html, re.S)
    assert len(svgs) >= 4
    longest = 0
    for svg in svgs:
        for x, size, text in re.findall(
            r'<text x="([0-9.]+)" y="[0-9.]+" text-anchor="end" font-size="(\d+)"[^>]*>'
            r"([^<]*)</text>",
            svg,
        ):
            label = __import__("html").unescape(text)
            longest = max(longest, len(label))
            assert float(x) - len(label) * int(size) * 0.6 >= 0, (label, x)
    assert longest > 30  # e.g. "smollm2-135m C_m0 (phase_mask) (n=6)": wider than the old fixed margin allowed
    assert isinstance(Canvas(10, 10, "t").to_tikz(), str)


def _measure(rendered: Path, tmp_path: Path, script: str, width: int) -> list[str]:
    """The lines ``script`` writes into ``<pre id="measure">`` once report.html has loaded ``width`` px wide."""
    return probe_page(rendered / "report.html", script, "measure", tmp_path, width, hide_scrollbars=True).splitlines()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser test needs /usr/bin/chromium")
def test_page_fits_1280_pixels(rendered, tmp_path):
    """At 1280 px no table scrolls sideways and no figure text leaves its figure (measured in Chromium)."""
    js = """<script>window.addEventListener('load', function () { var out = [];
      document.querySelectorAll('.scroll').forEach(function (d) { var t = d.querySelector('table');
        out.push('table ' + (t ? t.getAttribute('data-table') : '?') + ' ' + d.scrollWidth + ' ' + d.clientWidth); });
      document.querySelectorAll('svg.fig').forEach(function (s) { var vb = s.viewBox.baseVal;
        s.querySelectorAll('text').forEach(function (t) { var b = t.getBBox();
          out.push('text ' + Math.floor(b.x) + ' ' + Math.ceil(b.x + b.width) + ' ' + vb.width + ' ' + t.textContent); }); });
      var p = document.createElement('pre'); p.id = 'measure'; p.textContent = out.join('\\n');
      document.body.appendChild(p); });</script></body>"""
    lines = _measure(rendered, tmp_path, js, 1280)
    tables = [l.split(" ") for l in lines if l.startswith("table ")]
    texts = [l.split(" ", 4) for l in lines if l.startswith("text ")]
    assert len(tables) > 15 and len(texts) > 50
    wide = [t[1] for t in tables if int(t[2]) > int(t[3])]
    assert not wide, f"tables wider than the page at 1280 px: {wide}"
    cut = [t[4] for t in texts if int(t[1]) < 0 or int(t[2]) > float(t[3]) + 1]
    assert not cut, f"figure text cut at the edge: {cut}"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser test needs /usr/bin/chromium")
def test_on_a_phone_each_finding_stacks_above_its_result(rendered, tmp_path):
    """At 412 px the findings and the headline fit the screen: no sideways scroll, and in every row
    the result (the last cell) starts below the finding's name (the first cell), not beside it."""
    js = """<script>window.addEventListener('load', function () { var out = [];
      ['findings', 'summary'].forEach(function (id) { var t = document.querySelector('table[data-table="' + id + '"]');
        if (!t) { out.push('missing ' + id); return; } var d = t.closest('.scroll');
        out.push('scroll ' + id + ' ' + d.scrollWidth + ' ' + d.clientWidth);
        t.querySelectorAll('tbody tr').forEach(function (tr) { var c = tr.querySelectorAll('td');
          var a = c[0].getBoundingClientRect(), b = c[c.length - 1].getBoundingClientRect();
          out.push('row ' + id + ' ' + Math.round(a.bottom) + ' ' + Math.round(b.top) + ' ' + Math.round(b.right)); }); });
      out.push('viewport ' + document.documentElement.clientWidth);
      var p = document.createElement('pre'); p.id = 'measure'; p.textContent = out.join('\\n');
      document.body.appendChild(p); });</script></body>"""
    lines = _measure(rendered, tmp_path, js, 412)
    # headless Chromium may keep a window wider than asked: measure against the page it laid out
    viewport = int(next(l for l in lines if l.startswith("viewport ")).split(" ")[1])
    assert viewport <= 640, f"the page was laid out {viewport} px wide, not as a phone"
    assert not [l for l in lines if l.startswith("missing ")], lines
    scrolls = [l.split(" ") for l in lines if l.startswith("scroll ")]
    assert [s[1] for s in scrolls if int(s[2]) > int(s[3])] == [], scrolls
    rows = [l.split(" ") for l in lines if l.startswith("row ")]
    assert {r[1] for r in rows} == {"findings", "summary"}, lines
    beside = [r for r in rows if int(r[3]) < int(r[2]) - 1 or int(r[4]) > viewport]
    assert not beside, f"rows whose result sits beside the finding or off-screen at {viewport} px: {beside}"


# --------------------------------------------------------------------------- read, not scrolled

OPEN_CHARS, OPEN_ROWS = 25_000, 150  # what report.html may show before a click


def open_part(html: str) -> str:
    """report.html's body as it opens: every folded section reduced to its title (<summary>)."""
    body = html[html.index("<main>") :]
    return re.sub(
        r"<details>.*?</details>",
        lambda m: (re.search(r"<summary>.*?</summary>", m.group(0), re.S) or [""])[0],
        body,
        flags=re.S,
    )


def visible_chars(part: str) -> int:
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<svg.*?</svg>", " ", part, flags=re.S))
    return len(" ".join(__import__("html").unescape(text).split()))


def test_the_report_opens_on_its_findings_and_speeds(rendered):
    """Open without a click: the findings, the headline, the forest plot and the speeds of each campaign
    (at most 25,000 visible characters and 150 table rows); every other section folded under its
    title, its numbers one click away; the devices paragraph written once; the forest plot first in
    the contents."""
    html = (rendered / "report.html").read_text(encoding="utf-8")
    part = open_part(html)
    rows = len(re.findall(r"<tr><td", part))
    assert visible_chars(part) <= OPEN_CHARS and rows <= OPEN_ROWS, (visible_chars(part), rows)
    assert visible_chars(part) < visible_chars(html[html.index("<main>") :]) / 2  # most of it is folded
    for sid in ("summary", "ratios"):
        assert f'<section id="{sid}">\n<h2>' in html
    assert 'data-table="findings"' in part and 'id="fig-forest"' in part
    folded = re.findall(r'<section id="([^"]+)">\n<details>\n<summary><h2>', html)
    assert {"diagnostics", "replication", "noise", "provenance", "ledger"} <= set(folded), folded
    nav = html[html.index("<nav>") : html.index("</nav>")]
    assert nav.startswith('<nav><a href="#fig-forest">Forest plot</a>')
    ran_on = json.loads((rendered / "numbers.json").read_text(encoding="utf-8"))["provenance"].get("devices")
    assert ran_on and html.count(__import__("html").escape(ran_on, quote=True).replace("&#x27;", "&#39;")) == 1


def test_ratio_tables_stack_with_their_column_names(rendered):
    """On a phone the ratio, estimate and A/A tables stack like the findings: each cell carries its
    column's name (data-label), which the stylesheet shows before it below 640 px."""
    html = (rendered / "report.html").read_text(encoding="utf-8")
    for tid in ("ratios-confirmation", "ratios-implementation", "estimates"):
        t = html[html.index(f'data-table="{tid}"') - 7 :]
        t = t[: t.index("</table>")]
        assert t.startswith('<table data-table="') and ' class="stack"' in t[:80], t[:120]
        cells = re.findall(r"<td[^>]*>", t)
        assert cells and all("data-label=" in c for c in cells)
        assert ('data-label="decision"' if tid == "estimates" else 'data-label="verdict"') in t


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser test needs /usr/bin/chromium")
def test_on_a_phone_no_result_column_is_off_screen(rendered, tmp_path):
    """At 412 px (the ratios section open, as it opens) no stacked table scrolls sideways and no cell of
    a ratio, estimate or A/A table ends beyond the screen."""
    js = """<script>window.addEventListener('load', function () { var out = [];
      document.querySelectorAll('details').forEach(function (d) { d.open = true; });
      document.querySelectorAll('table.stack').forEach(function (t) { var d = t.closest('.scroll');
        out.push('scroll ' + t.getAttribute('data-table') + ' ' + d.scrollWidth + ' ' + d.clientWidth);
        t.querySelectorAll('td').forEach(function (c) {
          out.push('cell ' + t.getAttribute('data-table') + ' ' + Math.round(c.getBoundingClientRect().right)); }); });
      out.push('viewport ' + document.documentElement.clientWidth);
      var p = document.createElement('pre'); p.id = 'measure'; p.textContent = out.join('\\n');
      document.body.appendChild(p); });</script></body>"""
    lines = _measure(rendered, tmp_path, js, 412)
    viewport = int(next(l for l in lines if l.startswith("viewport ")).split(" ")[1])
    assert viewport <= 640, f"the page was laid out {viewport} px wide, not as a phone"
    scrolls = [l.split(" ") for l in lines if l.startswith("scroll ")]
    assert {s[1] for s in scrolls} >= {"ratios-confirmation", "ratios-implementation", "estimates"}, scrolls
    assert [s[1] for s in scrolls if int(s[2]) > int(s[3])] == [], scrolls
    off = [l for l in lines if l.startswith("cell ") and int(l.split(" ")[2]) > viewport]
    assert not off, off[:5]
