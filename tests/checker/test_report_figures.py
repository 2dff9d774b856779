"""check.py redraws every figure of the report from the archive's tables and compares it mark by mark.

The dishonest signer leaves the tables alone and redraws a figure: a dot moved, an interval end
shifted, a tick relabelled, a bar lengthened; he re-seals with his own valid key. Each edit below
stays inside the report's strict format (every coordinate a decimal, every colour the palette's),
so only the redrawing from the data can refuse it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from refspec.provenance.seal import seal
from refspec.reporting import render as report
from support.synthetic_archive import make_results, run_check, signer

FIGURES = ("fig-first-divergence", "fig-forest", "fig-cost", "fig-diagnostics", "fig-replication", "fig-acceptance")


def sealed(stage: Path, dst: Path, edit=None, name: str = "report.html") -> Path:
    """``stage`` with ``edit(text) -> text`` applied to ``name``, sealed by the signer into ``dst``."""
    work = dst.with_name(dst.name + "-stage")
    shutil.copytree(stage, work)
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if edit is not None:
        h = work / name
        before = h.read_text()
        after = edit(before)
        assert after != before, "the edit changed nothing"
        h.write_text(after)
    seal(work, dst, key=signer(), archive_id="synthetic", created="2026-10-20T00:00:00Z")
    return dst


def _figure(html: str, fid: str) -> tuple[int, int]:
    i = html.index(f'<figure id="{fid}">')
    return i, html.index("</figure>", i)


def _shift(html: str, fid: str, pattern: str, by: float, nth: int = 0) -> str:
    """Add ``by`` to the number captured by ``pattern`` (its ``nth`` match) inside figure ``fid``."""
    i, j = _figure(html, fid)
    m = list(re.finditer(pattern, html[i:j]))[nth]
    a, b = i + m.start(1), i + m.end(1)
    return html[:a] + f"{float(html[a:b]) + by:.1f}" + html[b:]


def redrawn_dot(h: str) -> str:
    return _shift(h, "fig-replication", r'<circle cx="([\d.]+)"', 25.0)


def moved_interval_end(h: str) -> str:
    """The interval's upper end moved: the interval line ends further right, and its whisker with it."""
    i, j = _figure(h, "fig-replication")
    fig = h[i:j]
    tick = re.search(
        r'<line x1="([\d.]+)" (y1="[\d.]+") x2="\1" (y2="[\d.]+" stroke="#[0-9a-f]+" stroke-width="1.5"/>)', fig
    )
    tick = list(re.finditer(tick.re.pattern, fig))[1]  # the first interval's upper whisker
    hi = tick.group(1)
    moved = f"{float(hi) + 30:.1f}"
    fig = fig[: tick.start()] + f'<line x1="{moved}" {tick.group(2)} x2="{moved}" {tick.group(3)}' + fig[tick.end() :]
    bar = re.search(rf'x2="{re.escape(hi)}"(?= y2="[\d.]+" stroke="#[0-9a-f]+" stroke-width="2.0")', fig)
    fig = fig[: bar.start()] + f'x2="{moved}"' + fig[bar.end() :]
    return h[:i] + fig + h[j:]


def changed_tick_label(h: str) -> str:
    i, j = _figure(h, "fig-cost")
    fig = h[i:j]
    m = re.search(r'(<text [^>]*text-anchor="middle" font-size="10" fill="#222">)([\d.]+)(</text>)', fig)
    new = fig[: m.start(2)] + f"{float(m.group(2)) + 0.5:g}" + fig[m.end(2) :]
    return h[:i] + new + h[j:]


def longer_bar(h: str) -> str:
    return _shift(h, "fig-acceptance", r'<rect x="[\d.]+" y="[\d.]+" width="([\d.]+)"', 80.0)


def taller_bar(h: str) -> str:
    return _shift(h, "fig-acceptance", r'<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)"', 6.0)


def moved_strip_dot(h: str) -> str:
    return _shift(h, "fig-first-divergence", r'<circle cx="([\d.]+)"', -40.0)


def changed_count(h: str) -> str:
    i, j = _figure(h, "fig-first-divergence")
    fig = h[i:j]
    m = re.search(r"\(n=(\d+)\)</text>", fig)
    new = fig[: m.start(1)] + str(int(m.group(1)) + 1) + fig[m.end(1) :]
    return h[:i] + new + h[j:]


def unknown_figure(h: str) -> str:
    return h.replace('<figure id="fig-diagnostics">', '<figure id="fig-speedup">', 1)


def dropped_figure(h: str) -> str:
    i, j = _figure(h, "fig-diagnostics")
    return h[:i] + h[j + len("</figure>\n") :]


def tex_moved_dot(t: str) -> str:
    m = re.search(r"\\fill\[rsfail\] \(([\d.]+),", t)
    return t[: m.start(1)] + f"{float(m.group(1)) + 1.0:.3f}" + t[m.end(1) :]


def tex_changed_tick(t: str) -> str:
    m = re.search(r"\{\\scriptsize (\d+)\};", t)
    return t[: m.start(1)] + str(int(m.group(1)) + 5) + t[m.end(1) :]


# (what, file, edit, words the refusal names)
EDITS = [
    ("a redrawn dot (circle cx moved)", "report.html", redrawn_dot, ("fig-replication", "<circle")),
    ("a moved interval end", "report.html", moved_interval_end, ("fig-replication", "<line")),
    ("a changed tick label", "report.html", changed_tick_label, ("fig-cost", "<text")),
    ("a bar lengthened (rect width)", "report.html", longer_bar, ("fig-acceptance", "<rect")),
    ("a bar height changed", "report.html", taller_bar, ("fig-acceptance", "<rect")),
    ("a first-divergence dot moved", "report.html", moved_strip_dot, ("fig-first-divergence", "<circle")),
    ("a dot count changed", "report.html", changed_count, ("fig-first-divergence", "(n=")),
    ("a figure the data does not call for", "report.html", unknown_figure, ("fig-speedup", "cannot be recomputed")),
    ("a figure dropped", "report.html", dropped_figure, ("fig-diagnostics", "missing")),
    ("a TikZ dot moved", "report.tex", tex_moved_dot, ("fig-first-divergence", "\\fill[rsfail]")),
    ("a TikZ tick relabelled", "report.tex", tex_changed_tick, ("figure", "\\scriptsize")),
]


def test_the_synthetic_report_draws_every_figure(stage):
    html = (stage / "report.html").read_text()
    assert re.findall(r'<figure id="([^"]+)">', html) == list(FIGURES)
    assert (stage / "report.tex").read_text().count("\\begin{tikzpicture}") == len(FIGURES)


def test_a_clean_archive_has_no_figure_mismatch(stage, tmp_path):
    code, out = run_check(sealed(stage, tmp_path / "clean"))
    assert code == 0, out[-3000:]


@pytest.mark.parametrize("what,name,edit,words", EDITS, ids=[e[0] for e in EDITS])
def test_a_redrawn_figure_is_refused(stage, tmp_path, what, name, edit, words):
    code, out = run_check(sealed(stage, tmp_path / "edited", edit, name))
    lines = [ln for ln in out.splitlines() if ln.startswith(f"MISMATCH {name}") and "figure" in ln]
    assert code == 1 and lines, (what, out[-3000:])
    assert any(all(w in ln for w in words) for ln in lines), (what, lines[:5])
    print(what, "->", lines[0])


@pytest.mark.parametrize("kw", [dict(evil=False, aa=True, n_sessions=3)], ids=["A/A control, three sessions"])
def test_other_data_draws_figures_check_py_accepts(tmp_path, kw):
    """Another archive's data (honest arms, an A/A control, three sessions) draws other figures;
    check.py redraws the same ones."""
    results = make_results(tmp_path / "results", draws=300, **kw)
    report.render(results, pdf=False)
    html = (results / "report.html").read_text()
    assert '<figure id="fig-replication">' in html
    code, out = run_check(sealed(results, tmp_path / "sealed"))
    assert code == 0, out[-3000:]
