"""The report opens with its findings: one a line, verdict first, built only from the archive's tables
(numbers.json ``findings``, the findings table above the headline in report.html and report.tex), and
``./run main`` prints the same lines first. A ratio reads as a speed: at or above one the numerator is
``ratio`` times slower; below one it is ``1 / ratio`` times faster, its interval turned over."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from refspec_check.findings import fold as check_fold
from refspec_check.render.document import fold

from refspec.core import tables as T
from refspec.reporting import render as report
from support.synthetic_archive import FAMILIES, make_results, run_check, seal_archive


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    results = make_results(tmp_path_factory.mktemp("findings") / "results", draws=300)
    report.render(results, pdf=False)
    return results


def _doc(results: Path) -> tuple[list[dict], dict]:
    doc = json.loads((results / "numbers.json").read_text(encoding="utf-8"))
    return doc["findings"], {n["id"]: n for n in doc["numbers"]}


def _text(f: dict, nums: dict) -> str:
    return "".join(nums[p["num"]]["text"] if isinstance(p, dict) else p for p in f["parts"])


@pytest.mark.parametrize("r,lo,hi", [(0.736483, 0.70, 0.77), (1.36, 1.30, 1.42), (0.1 + 0.2, 0.25, 0.35)])
def test_fold_orientation(r, lo, hi):
    """Below one the numerator is 1/r times faster with the interval [1/hi, 1/lo], bit for bit; at or
    above one it is r times slower with [lo, hi] as they are; the checker's own rule agrees."""
    slower, f, f_lo, f_hi = fold(r, lo, hi)
    if r < 1:
        assert not slower and f == 1.0 / r and f_lo == 1.0 / hi and f_hi == 1.0 / lo
        assert f > 1 and f_lo < f < f_hi
    else:
        assert slower and f == r and (f_lo, f_hi) == (lo, hi)
    assert fold(r, lo, hi) == check_fold(r, lo, hi)
    assert fold(r) == (slower, f, None, None)


def test_one_is_slower_by_one():
    assert fold(1.0, 0.9, 1.1) == (True, 1.0, 0.9, 1.1)


def test_findings_open_the_report_in_html_and_tex(rendered):
    found, nums = _doc(rendered)
    html = (rendered / "report.html").read_text(encoding="utf-8")
    summary = html[html.index('<section id="summary">') :]
    summary = summary[: summary.index("</section>")]
    assert summary.index('data-table="findings"') < summary.index('data-table="summary"')
    table = summary[summary.index('data-table="findings"') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr><td[^>]*>([A-Z0-9]+)</td>", table)
    assert rows == [f["verdict"] for f in found]
    assert {"LOSSLESS", "DIVERGES", "REFUSED", "SPEED", "E1"} <= set(rows)
    ids = [p["num"] for f in found for p in f["parts"] if isinstance(p, dict)]
    assert re.findall(r'data-num="([^"]+)"', table) == ids and all(i in nums for i in ids)
    tex = (rendered / "report.tex").read_text(encoding="utf-8")
    lines = [line for line in tex.splitlines() if line.startswith(tuple(f"{v} & " for v in set(rows)))]
    assert [line.split(" & ")[0] for line in lines] == rows
    assert "$\\times$ slower than" in tex


def test_arm_findings_name_exactly_the_arms_the_tables_qualify(rendered):
    """LOSSLESS: the arms qualified on every task (the reference aside); DIVERGES: the others that ran,
    each with its failed tasks; REFUSED: the arm admission refused, said as refused."""
    found, nums = _doc(rendered)
    qual = T.read_records("qualification", rendered)
    for camp in ("confirmation", "implementation", "replication"):
        for fam in FAMILIES:
            rows = [q for q in qual if q["campaign"] == camp and q["family"] == fam]
            tasks = {(q["task_id"], q["cap"]) for q in rows}
            ok = defaultdict(set)
            for q in rows:
                if q["qualified"]:
                    ok[q["arm"]].add((q["task_id"], q["cap"]))
            refused = {f["key"]["arm"] for f in found if f["kind"] == "refused" and f["scope"] == f"{camp} {fam}"}
            arms = {q["arm"] for q in rows} - refused
            by = {f["verdict"]: f for f in found if f["scope"] == f"{camp} {fam}" and f["verdict"] != "REFUSED"}
            assert set(by["LOSSLESS"]["arms"]) == {a for a in arms if len(ok[a]) == len(tasks)} - {"R"}
            assert set(by.get("DIVERGES", {}).get("arms", [])) == {a for a in arms if len(ok[a]) < len(tasks)}
            n = len(tasks)
            assert _text(by["LOSSLESS"], nums).split(" reproduce R on ")[1].startswith(f"{n}/{n} tasks")
            for a in by.get("DIVERGES", {}).get("arms", []):
                assert nums[f"finding|{camp}|{fam}|{a}|tasks_failed"]["value"] == n - len(ok[a])
    refused = [f for f in found if f["verdict"] == "REFUSED"]
    assert [_text(f, nums) for f in refused] == ["C_qb8 refused at admission: no request of it ran"]
    assert not any("C_qb8" in f.get("arms", []) for f in found)
    div = next(f for f in found if f["verdict"] == "DIVERGES" and f["scope"] == f"confirmation {FAMILIES[1]}")
    assert _text(div, nums).startswith("R_prod M0 C0 do not reproduce R on 3/6, 2/6, 2/6 tasks, first divergence")


def _ratios(results: Path) -> dict[tuple, dict]:
    return {
        (r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"]): r
        for r in T.read_records("ratios", results)
    }


def _speed_text(r: dict) -> str:
    """A ratio in words as the report must write it (its fold away from one, else as it is)."""
    num, den = r["numerator"], r["denominator"]
    if r["lo"] <= 1 <= r["hi"]:
        return f"no detectable difference between {num} and {den} ({num}/{den} {r['ratio']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}])"
    if r["ratio"] < 1:
        return f"{num} is {1 / r['ratio']:.2f}\u00d7 faster than {den} [{1 / r['hi']:.2f}, {1 / r['lo']:.2f}]"
    return f"{num} is {r['ratio']:.2f}\u00d7 slower than {den} [{r['lo']:.2f}, {r['hi']:.2f}]"


def test_the_answer_opens_the_findings(rendered):
    """The first findings answer the user's question: speculation with the repair (C3, not M3, which has
    no draft) against the reference R, and the same path without a draft (M3) against C3; llama.cpp's
    default (R_prod) with its preservation; one line of advice derived from the M3/C3 verdict."""
    found, nums = _doc(rendered)
    ratios = _ratios(rendered)
    assert [f["verdict"] for f in found[:3]] == ["ANSWER", "DEFAULT", "ADVICE"]
    for fam in FAMILIES:
        ans = next(
            f
            for f in found
            if f["kind"] == "answer" and f["key"]["campaign"] == "confirmation" and f["key"]["family"] == fam
        )
        text = _text(ans, nums)
        r_c3, m3_c3 = ratios[("confirmation", fam, 64, "R", "C3")], ratios[("confirmation", fam, 64, "M3", "C3")]
        assert text.startswith("speculative decoding with the repair (C3) against the reference: " + _speed_text(r_c3))
        assert "without a draft: " + _speed_text(m3_c3) in text
        assert "R/M3" not in text and "R is " not in text.split("\u00b7")[1]
        advice = _text(
            next(
                f
                for f in found
                if f["kind"] == "advice" and f["key"]["family"] == fam and f["key"]["campaign"] == "confirmation"
            ),
            nums,
        )
        if m3_c3["verdict"] == "exceeds":  # M3 slower than C3: the draft pays
            assert advice.startswith("turn the draft on with the repair: C3 keeps R's output")
        elif m3_c3["verdict"] == "faster":
            assert advice.startswith("leave the draft off: M3 keeps R's output")
        else:
            assert advice.startswith("leave the draft off: it makes no decided difference")
    default = {f["key"]["family"]: _text(f, nums) for f in found if f["kind"] == "default"}
    assert default[FAMILIES[1]].startswith("llama.cpp's default micro-batch (R_prod) changes the output on 3/6 tasks")
    assert "R_prod is " in default[FAMILIES[1]] and "(unqualified timing, no interval)" in default[FAMILIES[1]]
    assert default[FAMILIES[0]].startswith("llama.cpp's default micro-batch (R_prod) reproduces R on 6/6 tasks")
    assert "changes the output" in _text(
        next(f for f in found if f["kind"] == "advice" and f["key"]["family"] == FAMILIES[1]), nums
    )


def test_advice_follows_the_verdict(tmp_path):
    """The advice is derived from the verdict of M3/C3: rewritten to 'faster' (M3 faster than C3), the
    rendering says to leave the draft off; the checker's own derivation agrees with the renderer's."""
    from refspec_check.answer import _advice

    lossless = {"C3": True, "M3": True, "R_prod": False}
    row = dict(numerator="M3", denominator="C3")
    said = {
        v: _advice("R", "C3", "M3", "R_prod", lossless, dict(row, verdict=v))
        for v in ("exceeds", "faster", "inconclusive")
    }
    assert said["exceeds"].startswith("turn the draft on")
    assert said["faster"].startswith("leave the draft off: M3 keeps R's output and is faster than C3")
    assert said["inconclusive"].startswith(
        "leave the draft off: it makes no decided difference (M3 vs C3: undecided: interval too wide)"
    )
    assert all(t.endswith("; llama.cpp's default micro-batch (R_prod) changes the output") for t in said.values())


def test_speeds_read_in_words_never_codes(rendered):
    """Every ratio in the findings, the headline and the tables reads in words: an interval holding one
    is 'no detectable difference' (never '1.00x slower'), a verdict is a word ('slower', 'undecided:
    noise too high'), never a code ('noise_too_high', 'exceeds') or 'decided'."""
    found, nums = _doc(rendered)
    doc = json.loads((rendered / "numbers.json").read_text(encoding="utf-8"))
    texts = [_text(f, nums) for f in found] + [_text(h, nums) for h in doc["headline"]]
    for r in _ratios(rendered).values():
        if r["qualified"] and r["lo"] is not None and r["campaign"] == "confirmation":
            assert any(_speed_text(r) in t for t in texts), r
    html = (rendered / "report.html").read_text(encoding="utf-8")
    visible = re.sub(r"<[^>]+>", "", html[html.index("<main>") :])
    for code in ("noise_too_high", "too_few_processes", "too_few_sessions", "inconclusive", "exceeds", ", decided"):
        assert code not in visible, code
    assert not re.search(r"1\.00\u00d7 (slower|faster)", visible)
    for r in _ratios(rendered).values():
        base = f"ratio|{r['campaign']}|{r['family']}|{r['cap']}|{r['numerator']}|{r['denominator']}"
        if not (r["qualified"] and r["ratio"] is not None):
            assert base + "|fold" not in nums and base + "|plain" not in nums
        elif r["lo"] is not None and r["lo"] <= 1 <= r["hi"]:
            assert base + "|plain_lo" in nums and base + "|fold" not in nums
        else:
            assert (base + "|fold" in nums) == (r["lo"] is not None)


@pytest.mark.parametrize("shift", [0.0, 0.05])
def test_the_aa_control_is_stated_once_per_campaign(tmp_path, shift):
    """The A/A control is one table per campaign above its ratios (a row per family), green only where
    its interval holds one (a twin shifted by 5 % fails, in red, and says what that means); no ratio or
    estimate row repeats it."""
    rendered = make_results(tmp_path / "results", draws=300, aa=True, aa_shift=shift)
    report.render(rendered, pdf=False)
    html = (rendered / "report.html").read_text(encoding="utf-8")
    noise = T.read_records("noise", rendered)
    assert any(r["verdict"] == ("ok" if not shift else "biased") for r in noise)
    if shift:
        assert "every verdict of this campaign is decided against the threshold widened by" in html
    for camp in sorted({r["campaign"] for r in noise}):
        assert html.count(f'data-table="aa-{camp}"') == 1
        t = html[html.index(f'data-table="aa-{camp}"') :]
        t = t[: t.index("</table>")]
        rows = [r for r in noise if r["campaign"] == camp]
        assert t.count("<tr>") == len(rows) + 1
        assert t.count('class="ok"') == sum(r["verdict"] == "ok" for r in rows)
        assert t.count('class="bad"') == sum(r["verdict"] != "ok" for r in rows)
    for tid in ("ratios-confirmation", "ratios-implementation", "estimates"):
        t = html[html.index(f'data-table="{tid}"') :]
        t = t[: t.index("</table>")]
        assert "A/A" not in t and "noise|" not in t


def test_console_prints_the_findings_first_wrapped(rendered, monkeypatch):
    """``./run main``'s summary: report.html's findings, one a line, verdict first, wrapped at the
    terminal's eighty columns with continuation lines indented past the verdict; of the qualified
    ratios one per campaign and family, the others counted per campaign (the timing section states
    each); then the archive's seal. No line is wider than the terminal."""
    from refspec.pipeline.main import headline_text

    monkeypatch.setenv("COLUMNS", "80")
    found, nums = _doc(rendered)
    ratios = [f for f in found if f["kind"] == "ratio"]
    answers = [f for f in found if f["kind"] == "answer"]
    per = [(f["key"]["campaign"], f["key"]["family"]) for f in ratios + answers]
    assert len(per) == len(set(per)) >= 2  # one answer or speed per campaign and family, of at least two
    counted = sum(nums[f"finding|{f['key']['campaign']}|more_ratios"]["value"] for f in found if f["kind"] == "more")
    qualified = [r for r in T.read_records("ratios", rendered) if r["qualified"] and r["ratio"] is not None]
    in_answers = 2 * len(answers)  # each answer states the candidate against R and against no draft
    assert len(ratios) + in_answers + counted == len(qualified)  # every qualified ratio stated or counted, none twice
    lines = headline_text(rendered / "numbers.json").splitlines()
    assert lines[0].startswith("findings") and all(len(line) <= 80 for line in lines)
    body = lines[1:]
    starts = [i for i, line in enumerate(body) if not line.startswith("    ")]
    assert len(starts) == len(found)
    assert any(len(line) > 70 for line in body) and len(body) > len(starts)  # some findings wrap
    for f, i, j in zip(found, starts, starts[1:] + [len(body)]):
        assert body[i].startswith("  " + f["verdict"] + " ")
        assert all(line.startswith(" " * 12) for line in body[i + 1 : j])
        joined = " ".join(line.strip() for line in body[i:j])
        assert " ".join(joined.split()).endswith(" ".join(_text(f, nums).split()))
    wide = headline_text(rendered / "numbers.json", width=400).splitlines()
    assert all(len(line) <= 100 for line in wide)  # never wider than 100 columns, whatever the terminal
    assert (
        " ".join(wide[1:]).split()
        == " ".join(f"  {f['verdict']:<8}  {f['scope']}: {_text(f, nums)}" for f in found).split()
    )


def test_vacuous_panel_says_vacuous_never_lossless(tmp_path):
    """A panel whose unrepaired arms never diverge reads VACUOUS with the screened count, in place of
    LOSSLESS; report/check.py recomputes the same findings and accepts the sealed report."""
    quiet = FAMILIES[1]
    results = make_results(tmp_path / "results", draws=300, unexposed=quiet)
    report.render(results, pdf=False)
    found, nums = _doc(results)
    panel = [f for f in found if f["scope"] == f"confirmation {quiet}"]
    assert [f["verdict"] for f in panel] == ["VACUOUS"]
    n = nums[f"vacuity|confirmation|{quiet}|screened"]["value"]
    assert _text(panel[0], nums) == f"vacuous: no exposed input in {n} screened (no unrepaired arm diverged from R)"
    loud = [f["verdict"] for f in found if f["scope"] == f"confirmation {FAMILIES[0]}"]
    assert loud == ["LOSSLESS", "DIVERGES"]
    code, out = run_check(seal_archive(results, tmp_path / "archive"))
    assert code == 0, out


def test_each_finding_links_what_it_rests_on(rendered):
    """Every finding's last cell links the table (or section) it rests on, and a timed finding also the
    forest plot; every link names an element of the page (a folded one opens on the click)."""
    html = (rendered / "report.html").read_text(encoding="utf-8")
    found, _nums = _doc(rendered)
    table = html[html.index('data-table="findings"') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", table[table.index("<tbody>") :])
    assert len(rows) == len(found)
    ids = set(re.findall(r' id="([^"]+)"', html))
    for f, row in zip(found, rows, strict=True):
        links = re.findall(r'<a href="#([^"]+)">', row.rsplit("<td", 1)[1])
        assert links and all(t in ids for t in links), (f["kind"], links)
        if f["kind"] in ("answer", "ratio", "estimate"):
            assert "fig-forest" in links
        if f["kind"] in ("answer", "ratio", "more"):
            assert links[0] == f"table-ratios-{f['key']['campaign']}"
