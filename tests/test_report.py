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

from conftest_report import EVIL, make_results
from refspec import report
from refspec import tables as T
from refspec.cli import main as cli_main
from refspec.paths import REPO_ROOT

ARTIFACTS = REPO_ROOT / "tests" / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")


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
    # every table names its CSV and links it
    for tag, a in sp.tags:
        if tag == "table" and a.get("data-table") != "provenance":
            assert a.get("data-src", "").endswith((".csv", "ledger.jsonl")), a
    sections = {"qual|", "ratio|", "est|", "contrast|", "session|", "replay|", "audit|", "mask|", "accept|",
                "status|", "ledger|", "qfail|"}
    assert all(any(k.startswith(s) for k in nums) for s in sections)


def test_paper_table_shapes(rendered):
    nums = numbers(rendered)
    # Table 3: matching / required per arm and family
    assert nums["qual|confirmation|smollm2-135m|M3|matching"]["value"] == nums["qual|confirmation|smollm2-135m|M3|required"]["value"] == 24
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
        table = html[html.index('data-table="ratios-' + r['campaign'] + '"'):]
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
        dict(n, source=os.path.relpath(rendered / n["source"], out)) for n in json.loads((rendered / "numbers.json").read_text())["numbers"]
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
    assert ids and all(k.split("|")[0] in ("accept", "status", "reason") for k in ids)
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


@pytest.mark.skipif(not CHROMIUM.exists(), reason="headless browser test needs /usr/bin/chromium "
                    "(Debian package 'chromium'); not installed here")
def test_browser_renders_without_console_errors(rendered, tmp_path):
    art = _artifacts()
    url = (rendered / "report.html").resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
             "--enable-logging=stderr", "--v=0"]
    logs = []
    for name, size in (("report-desktop.png", "1280,3000"), ("report-phone.png", "390,2400")):
        shot = art / name
        if shot.exists():
            shot.unlink()
        r = subprocess.run([str(CHROMIUM), *flags, f"--user-data-dir={tmp_path / ('ud-' + name)}",
                            f"--window-size={size}", f"--screenshot={shot}", url],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        logs.append(r.stdout)
        assert r.returncode == 0, r.stdout[-2000:]
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    r = subprocess.run([str(CHROMIUM), *flags, f"--user-data-dir={tmp_path / 'ud-dom'}", "--dump-dom", url],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    logs.append(r.stderr)
    dom = r.stdout
    assert 'id="replication"' in dom and "<svg" in dom and 'data-num="est|' in dom
    console = [l for log in logs for l in log.splitlines()
               if "CONSOLE" in l or "Uncaught" in l or "Refused to" in l or "Failed to load resource" in l]
    assert not console, console
    (art / "browser.log").write_text("\n".join(logs))


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="LaTeX test needs pdflatex (Debian texlive-latex-base, "
                    "texlive-latex-recommended, texlive-pictures); not installed here")
def test_latex_compiles(rendered):
    pdf = report.compile_pdf(rendered / "report.tex")
    assert pdf is not None and pdf.read_bytes()[:5] == b"%PDF-"
    shutil.copy(pdf, _artifacts() / "report.pdf")
