"""report/check.py recomputes the report's findings: each verdict, the arms it names, its words
("slower" or "faster" from the ratio's side of one, the verdict in words) and its numbers from the
tables, and that report.html and report.tex show exactly numbers.json's findings. Each edit below is
made after rendering and sealed again with the signer's own key (the data untouched, the signature
valid): check.py must refuse it, for its findings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.synthetic_archive import reseal_edited, run_check, seal_archive

SLOWER, FASTER = "\u00d7 slower than ", "\u00d7 faster than "


def _findings_table(html: str) -> tuple[int, int]:
    i = html.index('<table data-table="findings"')
    return i, html.index("</table>", i)


def _edit_row(html: str, verdict: str, nth: int, edit) -> str:
    """``edit(row) -> row`` applied to the ``nth`` row of the findings table with ``verdict``."""
    i, j = _findings_table(html)
    rows = [m for m in re.finditer(r"<tr><td[^>]*>([A-Z0-9]+)</td>.*?</tr>\n", html[i:j]) if m.group(1) == verdict]
    m = rows[nth]
    new = edit(m.group(0))
    assert new != m.group(0), "the edit changed nothing"
    return html[: i + m.start()] + new + html[i + m.end() :]


def _edit_tex_row(tex: str, verdict: str, nth: int, edit) -> str:
    lines = tex.split("\n")
    at = [k for k, line in enumerate(lines) if line.startswith(f"{verdict} & ")][nth]
    new = edit(lines[at])
    assert new != lines[at], "the edit changed nothing"
    lines[at] = new
    return "\n".join(lines)


def resealed(stage: Path, dst: Path, html=None, tex=None, numbers=None) -> Path:
    """``stage`` with report.html, report.tex and numbers.json edited, sealed again by the signer."""

    def edit(w: Path) -> None:
        for name, fn in (("report.html", html), ("report.tex", tex)):
            if fn is not None:
                p = w / name
                p.write_text(fn(p.read_text(encoding="utf-8")), encoding="utf-8")
        if numbers is not None:
            doc = json.loads((w / "numbers.json").read_text(encoding="utf-8"))
            numbers(doc)
            (w / "numbers.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    return reseal_edited(stage, dst, edit)


def _nth(doc: dict, verdict: str, nth: int, kind: str | None = None) -> dict:
    return [f for f in doc["findings"] if f["verdict"] == verdict and kind in (None, f["kind"])][nth]


def _numbers(stage: Path) -> dict:
    return json.loads((stage / "numbers.json").read_text(encoding="utf-8"))


def test_the_rendered_findings_pass(stage, tmp_path):
    doc = _numbers(stage)
    assert {"LOSSLESS", "DIVERGES", "REFUSED", "SPEED", "E1"} <= {f["verdict"] for f in doc["findings"]}
    code, out = run_check(seal_archive(stage, tmp_path / "archive"))
    assert code == 0, out


def test_a_lossless_finding_with_an_arm_added_is_refused(stage, tmp_path):
    """(a) M0 diverges from R: a LOSSLESS line that names it beside M3 and C3 is refused, although the
    arm is a name of the panel (HTML, TeX and numbers.json edited alike)."""
    add = lambda s: s.replace("M3 C3 reproduce", "M3 C3 M0 reproduce", 1)  # noqa: E731

    def numbers(doc):
        f = _nth(doc, "LOSSLESS", 0)
        assert f["arms"] == ["M3", "C3"]
        f["parts"][0] = add(f["parts"][0])
        f["arms"].append("M0")

    arch = resealed(
        stage,
        tmp_path / "archive",
        html=lambda h: _edit_row(h, "LOSSLESS", 0, add),
        tex=lambda t: _edit_tex_row(t, "LOSSLESS", 0, add),
        numbers=numbers,
    )
    code, out = run_check(arch)
    assert code == 1, out
    assert "LOSSLESS names arms ['M3', 'C3', 'M0']; the tables say C3 M3" in out, out


def _swapped_fold(doc: dict) -> tuple[str, str, str]:
    """The fold of a SPEED finding that reads "slower", its text and the text with its decimals swapped
    ("1.36" to "1.63")."""
    nums = {n["id"]: n for n in doc["numbers"]}
    for f in doc["findings"]:
        if f["kind"] in ("ratio", "answer") and SLOWER in f["parts"]:
            nid = f["parts"][f["parts"].index(SLOWER) - 1]["num"]
            t = nums[nid]["text"]
            if t[-1] != t[-2]:
                return nid, t, t[:-2] + t[-1] + t[-2]
    raise AssertionError("no fold to swap")


def test_an_edited_times_slower_number_is_refused(stage, tmp_path):
    """(b) "1.36× slower" made "1.63× slower" in the finding (HTML, TeX and numbers.json's text)."""
    nid, old, new = _swapped_fold(_numbers(stage))

    def html(h):
        i, j = _findings_table(h)
        span = f'data-num="{nid}" data-src="tables/ratios.csv">{old}<'
        assert span in h[i:j]
        return h[:i] + h[i:j].replace(span, span.replace(f">{old}<", f">{new}<")) + h[j:]

    def tex(t):
        return t.replace(f"\\rsnum{{{nid}}}{{{old}}}", f"\\rsnum{{{nid}}}{{{new}}}")

    def numbers(doc):
        next(n for n in doc["numbers"] if n["id"] == nid)["text"] = new

    code, out = run_check(resealed(stage, tmp_path / "archive", html=html, tex=tex, numbers=numbers))
    assert code == 1, out
    assert f"numbers.json: {nid}: text {new!r} does not show" in out, out
    assert "MISMATCH report.html: differs from the canonical rendering" in out, out


def test_slower_swapped_for_faster_is_refused(stage, tmp_path):
    """(c) "M3 is 1.62× slower than C3" made "faster", everywhere alike: the ratio is above one."""
    swap = lambda s: s.replace(SLOWER.rstrip(), FASTER.rstrip(), 1)  # noqa: E731
    tex_swap = lambda s: s.replace("$\\times$ slower than", "$\\times$ faster than", 1)  # noqa: E731
    speeds = [f for f in _numbers(stage)["findings"] if f["verdict"] == "ANSWER"]
    nth = next(k for k, f in enumerate(speeds) if SLOWER in f["parts"])

    def numbers(doc):
        f = _nth(doc, "ANSWER", nth)
        f["parts"][f["parts"].index(SLOWER)] = FASTER

    arch = resealed(
        stage,
        tmp_path / "archive",
        html=lambda h: _edit_row(h, "ANSWER", nth, swap),
        tex=lambda t: _edit_tex_row(t, "ANSWER", nth, tex_swap),
        numbers=numbers,
    )
    code, out = run_check(arch)
    assert code == 1, out
    assert re.search(r"findings\[\d+\]: says '[^']*faster than[^']*'; the tables say '[^']*slower than", out), out


def test_faster_in_report_tex_alone_is_refused(stage, tmp_path):
    """report.tex is rendered from the tables too: "slower" made "faster" there alone is refused."""
    tex_swap = lambda s: s.replace("$\\times$ slower than", "$\\times$ faster than", 1)  # noqa: E731
    code, out = run_check(resealed(stage, tmp_path / "archive", tex=lambda t: _edit_tex_row(t, "ANSWER", 0, tex_swap)))
    assert code == 1, out
    assert "MISMATCH report.tex: differs from the canonical rendering" in out, out
    assert "report.html: differs" not in out, out


def test_a_finding_shown_otherwise_in_report_html_is_refused(stage, tmp_path):
    """report.html is rendered from the tables: a verdict word changed there alone is refused."""
    html = lambda h: _edit_row(h, "DIVERGES", 0, lambda r: r.replace(">DIVERGES<", ">LOSSLESS<"))  # noqa: E731
    code, out = run_check(resealed(stage, tmp_path / "archive", html=html))
    assert code == 1, out
    assert re.search(r"MISMATCH report.html: differs from the canonical rendering .*line \d+: the archive has", out), (
        out
    )


@pytest.mark.parametrize(
    "verdict,kind",
    [
        ("ANSWER", "answer"),
        ("ADVICE", "advice"),
        ("DEFAULT", "default"),
        ("DIVERGES", "diverges"),
        ("REFUSED", "refused"),
    ],
)
def test_a_dropped_finding_is_refused(stage, tmp_path, verdict, kind):
    """(d) A finding dropped from numbers.json, report.html and report.tex alike (the answer, the advice or
    the default line, whose numbers the timing section still shows, a DIVERGES line, the refused arm's
    line) is refused as left out."""
    doc = _numbers(stage)
    f = _nth(doc, verdict, 0, kind)

    def html(h):
        i, j = _findings_table(h)
        rows = [m for m in re.finditer(r"<tr><td[^>]*>([A-Z0-9]+)</td>.*?</tr>\n", h[i:j]) if m.group(1) == verdict]
        m = rows[0]
        return h[: i + m.start()] + h[i + m.end() :]

    def tex(t):
        lines = t.split("\n")
        at = [k for k, line in enumerate(lines) if line.startswith(f"{verdict} & ")][0]
        return "\n".join(lines[:at] + lines[at + 1 :])

    def numbers(d):
        d["findings"].remove(f)

    code, out = run_check(resealed(stage, tmp_path / "archive", html=html, tex=tex, numbers=numbers))
    assert code == 1, out
    assert f"leaves out the {verdict} finding of {f['scope']}" in out, out


@pytest.mark.parametrize(
    "verdicts,want",
    [
        # a decided ratio against the reference is stated before an undecided one above it
        (("exceeds", "inconclusive", "faster", "exceeds"), "R/C3"),
        (("exceeds", "inconclusive", "equivalent", "faster"), "R/C3"),
        # none decided against the reference: the first with it
        (("exceeds", "inconclusive", "noise_too_high", "exceeds"), "R/M3"),
        (("exceeds", "noise_too_high", "inconclusive", "faster"), "R/M3"),
    ],
)
def test_stated_ratio_prefers_a_decided_one_against_the_reference(verdicts, want):
    """The findings state, of a campaign's headline ratios, the first with the reference on one side and
    a decided verdict, else the first with the reference, else the first; the report
    (refspec_check.render.sections.summary.stated_ratio) and report/check.py choose the same row."""
    from refspec_check.findings import _stated_ratios
    from refspec_check.render.sections.summary import stated_ratio

    pairs = [("M3", "C3"), ("R", "M3"), ("R", "C3"), ("M3", "M_qh")]
    rows = [
        dict(campaign="confirmation", family="f", path="mixed", numerator=n, denominator=d, verdict=v)
        for (n, d), v in zip(pairs, verdicts)
    ]
    got = stated_ratio(rows, "R")
    assert f"{got['numerator']}/{got['denominator']}" == want
    (i,) = _stated_ratios(rows, {}, {})
    assert rows[i] is got
    alone = [rows[0], rows[3]]  # no ratio against the reference: the first
    assert stated_ratio(alone, "R") is alone[0]
    assert [alone[i] for i in _stated_ratios(alone, {}, {})] == [alone[0]]
