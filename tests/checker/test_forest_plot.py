"""The forest plot (fig-forest): every qualified ratio and E2 estimate with an interval, its
decision lines and A/A band, drawn to the data and redrawn by check.py.

The drawing is read back from report.html and held against the CSVs themselves (a row per interval,
the verdict words, each row on the side of its group's decision lines that its verdict says, the A/A
band inside them, text that stays legible on a phone, a page-sized TikZ picture); then each edit a
dishonest signer could make to a mark (a point moved, a whisker shortened, a row removed, a verdict
word changed, a decision line moved), re-sealed with the signer's own key, is refused by check.py
with a MISMATCH line that names the figure."""

from __future__ import annotations

import csv
import html as H
import math
import re
from pathlib import Path

import pytest
from refspec_check.answer import VERDICT_WORDS

from refspec.reporting import render as report
from support.synthetic_archive import make_results, reseal_edited, run_check

FID = "fig-forest"
TAU = 1.02
PHONE_FIGURE_PX = 412 - 2 * 0.6 * 16  # a 412 px phone: main's padding is .6rem on each side
DECIDED = {VERDICT_WORDS[v] for v in ("exceeds", "faster", "equivalent", "below")}  # the words drawn


@pytest.fixture(scope="module")
def aa_results(tmp_path_factory) -> Path:
    """Honest arms with A/A controls (a noise table: bands and floors above one), three sessions."""
    results = make_results(tmp_path_factory.mktemp("aa") / "results", draws=300, aa=True, n_sessions=3)
    report.render(results, pdf=False)
    return results


def _csv(results: Path, name: str) -> list[dict]:
    with open(results / "tables" / f"{name}.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _figure(text: str) -> tuple[int, int]:
    i = text.index(f'<figure id="{FID}">')
    return i, text.index("</figure>", i)


def _svg(results: Path) -> str:
    h = (results / "report.html").read_text()
    i, j = _figure(h)
    return h[i:j]


def _expected_rows(results: Path) -> list[tuple[str, str, str]]:
    """(group header, row label, verdict word) of every row the CSVs call for, in table order."""
    out = []
    for r in _csv(results, "ratios"):
        if r["qualified"] == "true" and r["lo"] != "":
            out.append((f"{r['campaign']}, {r['family']}", f"{r['numerator']}/{r['denominator']}", r["verdict"]))
    for r in _csv(results, "estimates"):
        if r["estimate"] != "" and r["lo"] != "":
            out.append((f"replication, {r['family']}", f"{r['comparison']} {r['path']}", r["decision"]))
    return [(g, lab, VERDICT_WORDS[v]) for g, lab, v in out]


_ROW = re.compile(
    r'<text x="[\d.]+" y="[\d.]+" text-anchor="(?:end|start)" font-size="\d+" fill="#222">([^<]*)</text>'
    r'<line x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="\3" stroke="(#[0-9a-f]+)" stroke-width="2.0"/>'
    r"(?:<line [^>]*/>){2}"
    r'<circle cx="([\d.]+)" cy="\3" r="4.0" fill="\5"/>'
    r'<text x="[\d.]+" y="[\d.]+" text-anchor="start" font-size="\d+" fill="[^"]+">([^<]*)</text>'
)
_HEADER = re.compile(r'<text x="8.0" y="[\d.]+" text-anchor="start" font-size="\d+" fill="#222">([^<]*)</text>')
_DASHED = re.compile(r'<line x1="([\d.]+)" y1="([\d.]+)" x2="\1" y2="([\d.]+)" [^>]*stroke-dasharray="4 3"/>')
_BAND = re.compile(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" fill="#d9d9d9"/>')


def _drawn(svg: str) -> list[dict]:
    """The groups as drawn: header, rows (label, lo x, hi x, point x, colour, word) and the spans."""
    groups: list[dict] = []
    heads = list(_HEADER.finditer(svg))
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(svg)
        rows = [
            dict(label=H.unescape(r[1]), lo=float(r[2]), y=float(r[3]), hi=float(r[4]), colour=r[5], x=float(r[6]))
            | dict(word=r[7])
            for r in _ROW.finditer(svg, m.end(), end)
        ]
        groups.append(dict(header=H.unescape(m.group(1)), rows=rows))
    return groups


def _lines_of(svg: str, rows: list[dict]) -> list[float]:
    """x of the dashed decision lines spanning the rows' y."""
    ys = [r["y"] for r in rows]
    return sorted({float(m[1]) for m in _DASHED.finditer(svg) if float(m[2]) < min(ys) and float(m[3]) > max(ys)})


@pytest.mark.parametrize("which", ["stage", "aa"])
def test_one_row_per_interval_with_its_verdict(stage, aa_results, which):
    """Every qualified ratio and E2 estimate with an interval is a row, in its campaign's group, with
    its verdict in words, blue when decided and grey when not; none other is."""
    results = stage if which == "stage" else aa_results
    groups = _drawn(_svg(results))
    drawn = [(g["header"], r["label"], r["word"]) for g in groups for r in g["rows"]]
    want = _expected_rows(results)
    assert drawn == want
    assert len(want) > 20 and {w for _g, _l, w in want} >= {"slower", "undecided: interval too wide"}
    for g in groups:
        for r in g["rows"]:
            assert r["colour"] == ("#2c6db0" if r["word"] in DECIDED else "#7f7f7f"), r


def test_rows_stand_where_their_verdicts_say(aa_results):
    """Read back on the drawing's own axis: an exceeding row's whisker starts right of the upper
    decision line, a faster (below) one ends left of the lower (upper) line, an undecided one reaches
    the upper line; the A/A band of a ratio's control lies between the lines (an estimate's below the
    upper); and the lines stand apart by
    the floor: 2 log(tau F) for a ratio, 2 log F for an estimate, in one px per log unit for all groups."""
    svg = _svg(aa_results)
    noise = {(n["campaign"], n["family"]): n for n in _csv(aa_results, "noise")}
    est_floor = {e["family"]: float(e["floor"]) for e in _csv(aa_results, "estimates") if e["floor"]}
    px_per_log = []
    for g in _drawn(svg):
        lines = _lines_of(svg, g["rows"])  # one line where an estimate's two coincide (F = 1)
        assert len(lines) in (1, 2), lines
        lower, upper = lines[0], lines[-1]
        for r in g["rows"]:
            if r["word"] == "slower":
                assert r["lo"] > upper, (g["header"], r)
            elif r["word"] in ("faster", VERDICT_WORDS["below"]):
                assert r["hi"] < (lower if r["word"] == "faster" else upper), (g["header"], r)
            else:
                assert r["lo"] <= upper, (g["header"], r)
        bands = [
            (float(m[1]), float(m[1]) + float(m[3]))
            for m in _BAND.finditer(svg)
            if float(m[2]) < g["rows"][0]["y"] < float(m[2]) + float(m[4])
        ]
        camp, fam = g["header"].split(", ")
        assert len(bands) == (1 if (camp, fam) in noise else 0), g["header"]
        floor = (
            est_floor[fam]
            if camp == "replication"
            else float(noise[(camp, fam)]["floor"])
            if (camp, fam) in noise
            else 1.0
        )
        if bands and floor > 1.0:
            # a failed control widens the lines by F >= the band's ends: the band lies inside
            # [1/(tau F), tau F]; an estimate's lines centre on tau (the calibration rule: F = 1 while
            # the control holds, and the band may then reach past tau)
            assert bands[0][0] < bands[0][1] <= upper, (g["header"], bands, upper)
            assert camp == "replication" or lower <= bands[0][0], (g["header"], bands, lower)
        log_width = 2 * math.log(floor) if camp == "replication" else 2 * math.log(TAU * floor)
        if log_width > 0:  # an estimate's two lines coincide at tau when F = 1
            px_per_log.append((upper - lower) / log_width)
    assert len(px_per_log) >= 4
    assert max(px_per_log) / min(px_per_log) < 1.03, px_per_log


def test_text_stays_legible_on_a_phone_and_the_picture_fits_the_page(aa_results):
    """Every text is at least 11 px where a 412 px phone shows the figure (the viewBox scaled to the
    figure's width), and report.tex's picture fits the landscape page (at most 25 cm by 15.5 cm)."""
    svg = _svg(aa_results)
    width = float(re.search(r'viewBox="0 0 (\d+) \d+"', svg)[1])
    sizes = [int(s) for s in re.findall(r'<text [^>]*font-size="(\d+)"', svg)]
    assert sizes and min(sizes) * PHONE_FIGURE_PX / width >= 11.0, (min(sizes), width)
    tex = (aa_results / "report.tex").read_text()
    pic = tex[tex.index("\\subsection*{Every timed ratio") :]
    w, h = map(float, re.search(r"\\useasboundingbox \(0,0\) rectangle \(([\d.]+),([\d.]+)\);", pic).groups())
    assert w <= 25.0 and h <= 15.5, (w, h)


def test_the_archive_with_controls_passes(aa_results, tmp_path):
    code, out = run_check(reseal_edited(aa_results, tmp_path / "clean", lambda work: None))
    assert code == 0, out[-3000:]


# ---- edits of the drawing, each inside the strict format, each refused


def _in_figure(edit):
    """``edit(figure text) -> figure text`` applied to fig-forest of report.html."""

    def whole(h: str) -> str:
        i, j = _figure(h)
        return h[:i] + edit(h[i:j]) + h[j:]

    return whole


def _edited(name: str, edit):
    """The folder edit: ``edit(text) -> text`` applied to ``name``, which it must change."""

    def files(work: Path) -> None:
        before = (work / name).read_text()
        after = edit(before)
        assert after != before, "the edit changed nothing"
        (work / name).write_text(after)

    return files


def _moved_point(fig: str) -> str:
    m = re.search(r'<circle cx="([\d.]+)"', fig)
    return fig[: m.start(1)] + f"{float(m[1]) + 25:.1f}" + fig[m.end(1) :]


def _shortened_whisker(fig: str) -> str:
    """The longest whisker's upper end (its line and its cap) moved halfway to its lower end."""
    m = max(_ROW.finditer(fig), key=lambda r: float(r[4]) - float(r[2]))
    lo, hi = float(m[2]), float(m[4])
    row = (
        m.group(0)
        .replace(f'x2="{m[4]}"', f'x2="{(lo + hi) / 2:.1f}"')
        .replace(f'x1="{m[4]}"', f'x1="{(lo + hi) / 2:.1f}"')
    )
    return fig[: m.start()] + row + fig[m.end() :]


def _removed_row(fig: str) -> str:
    m = list(_ROW.finditer(fig))[-1]
    return fig[: m.start()] + fig[m.end() :]


def _changed_verdict(fig: str) -> str:
    return fig.replace(">undecided: interval too wide</text>", ">slower</text>", 1)


def _moved_decision_line(fig: str) -> str:
    m = _DASHED.search(fig)
    x = f"{float(m[1]) + 15:.1f}"
    return fig[: m.start()] + m.group(0).replace(f'"{m[1]}"', f'"{x}"') + fig[m.end() :]


def _tex_forest(edit):
    """``edit(picture) -> picture`` applied to the forest's tikzpicture in report.tex."""

    def whole(t: str) -> str:
        i = t.index("\\begin{tikzpicture}", t.index("\\subsection*{Every timed ratio"))
        j = t.index("\\end{tikzpicture}", i)
        return t[:i] + edit(t[i:j]) + t[j:]

    return whole


def _tex_verdict(pic: str) -> str:
    return pic.replace("{\\footnotesize undecided: interval too wide}", "{\\footnotesize faster}", 1)


def _tex_point(pic: str) -> str:
    m = re.search(r"\\fill\[rstarget\] \(([\d.]+),", pic)
    return pic[: m.start(1)] + f"{float(m[1]) + 0.5:.3f}" + pic[m.end(1) :]


# (what, file, edit, the mark the refusal names)
EDITS = [
    ("a point moved", "report.html", _in_figure(_moved_point), "<circle"),
    ("a whisker shortened", "report.html", _in_figure(_shortened_whisker), "<line"),
    ("a row removed", "report.html", _in_figure(_removed_row), "marks where its data draws"),
    ("a verdict word changed", "report.html", _in_figure(_changed_verdict), "slower"),
    ("a decision line moved", "report.html", _in_figure(_moved_decision_line), "stroke-dasharray"),
    ("a TikZ verdict word changed", "report.tex", _tex_forest(_tex_verdict), "faster"),
    ("a TikZ point moved", "report.tex", _tex_forest(_tex_point), "\\fill[rstarget]"),
]


@pytest.mark.parametrize("what,name,edit,word", EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_mark_is_refused(stage, tmp_path, what, name, edit, word):
    code, out = run_check(reseal_edited(stage, tmp_path / "edited", _edited(name, edit)))
    lines = [ln for ln in out.splitlines() if ln.startswith(f"MISMATCH {name}") and FID in ln]
    assert code == 1 and lines, (what, out[-3000:])
    assert any(word in ln for ln in lines), (what, lines[:5])
