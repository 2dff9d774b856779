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

from refspec.core import tables as T
from refspec.reporting import render as report
from refspec.reporting.document import fold
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


def test_speed_reads_the_ratio_from_its_side_of_one(rendered):
    """Each SPEED of a ratio says 'slower' at or above one and 'faster' below it, its fold and bounds the
    ratio's (or their inverses), its verdict in words; the repair costs and the confirmation only."""
    found, nums = _doc(rendered)
    ratios = {
        (r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"]): r
        for r in T.read_records("ratios", rendered)
    }
    speeds = [f for f in found if f["kind"] == "ratio"]
    assert speeds and {f["key"]["campaign"] for f in speeds} == {"confirmation", "implementation"}
    words = {"exceeds": "decided", "inconclusive": "inconclusive"}
    for f in speeds:
        k = f["key"]
        r = ratios[(k["campaign"], k["family"], k["cap"], k["numerator"], k["denominator"])]
        base = f"ratio|{k['campaign']}|{k['family']}|{k['cap']}|{k['numerator']}|{k['denominator']}"
        text = _text(f, nums)
        if r["ratio"] < 1:
            assert f"{k['numerator']} is {1 / r['ratio']:.2f}\u00d7 faster than {k['denominator']}" in text
            assert f"[{1 / r['hi']:.2f}, {1 / r['lo']:.2f}]" in text
            assert nums[base + "|fold"]["value"] == 1.0 / r["ratio"]
        else:
            assert f"{k['numerator']} is {r['ratio']:.2f}\u00d7 slower than {k['denominator']}" in text
            assert f"[{r['lo']:.2f}, {r['hi']:.2f}]" in text
        assert f", {words[r['verdict']]}; resolution {r['detectable']:.3f}\u00d7" in text
        if k["campaign"] != "confirmation":
            assert r["path"] != "mixed" and k["denominator"].endswith("_qb")
    # one per campaign and family, against the reference where a headline ratio has it on one side
    # (the first such row: R/C3 of the confirmation, not M3/C3 above it), else the first
    per = [(f["key"]["campaign"], f["key"]["family"]) for f in speeds]
    assert len(per) == len(set(per)) == 4  # two campaigns, two families
    assert all("R" in (f["key"]["numerator"], f["key"]["denominator"]) for f in speeds), speeds
    conf = {
        f["key"]["family"]: f["key"]["numerator"] + "/" + f["key"]["denominator"]
        for f in speeds
        if f["key"]["campaign"] == "confirmation"
    }
    assert set(conf.values()) == {"R/C3"}, conf
    more = next(f for f in found if f["kind"] == "more" and f["key"]["campaign"] == "implementation")
    qualified = [r for r in ratios.values() if r["campaign"] == "implementation" and r["qualified"]]
    shown = [f for f in speeds if f["key"]["campaign"] == "implementation"]
    assert _text(more, nums) == f"{len(qualified) - len(shown)} more qualified ratios in the timing section"
    est = [f for f in found if f["kind"] == "estimate"]
    assert len(est) == 4 and all(_text(f, nums).startswith("PQ is ") for f in est)
    e1 = next(f for f in found if f["verdict"] == "E1")
    assert _text(e1, nums) == "PQ = QB bitwise on 144/144 contexts where the device admitted QB"


def test_ratio_tables_show_each_qualified_ratio_as_a_speed(rendered):
    _found, nums = _doc(rendered)
    html = (rendered / "report.html").read_text(encoding="utf-8")
    table = html[html.index('data-table="ratios-confirmation"') :]
    table = table[: table.index("</table>")]
    assert '<th scope="col">as a speed (numerator vs denominator)</th>' in table
    for r in T.read_records("ratios", rendered):
        base = f"ratio|{r['campaign']}|{r['family']}|{r['cap']}|{r['numerator']}|{r['denominator']}"
        assert (base + "|fold" in nums) == (r["qualified"] and r["ratio"] is not None)


def test_console_prints_the_findings_first_wrapped(rendered, monkeypatch):
    """``./run main``'s summary: report.html's findings, one a line, verdict first, wrapped at the
    terminal's eighty columns with continuation lines indented past the verdict; of the qualified
    ratios one per campaign and family, the others counted per campaign (the timing section states
    each); then the archive's seal. No line is wider than the terminal."""
    from refspec.pipeline.main import headline_text

    monkeypatch.setenv("COLUMNS", "80")
    found, nums = _doc(rendered)
    ratios = [f for f in found if f["kind"] == "ratio"]
    per = [(f["key"]["campaign"], f["key"]["family"]) for f in ratios]
    assert len(per) == len(set(per)) >= 2  # one speed per campaign and family, of at least two
    counted = sum(nums[f"finding|{f['key']['campaign']}|more_ratios"]["value"] for f in found if f["kind"] == "more")
    qualified = [r for r in T.read_records("ratios", rendered) if r["qualified"] and r["ratio"] is not None]
    assert len(ratios) + counted == len(qualified)  # every qualified ratio stated or counted, none twice
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
    assert wide[1:] == [f"  {f['verdict']:<8}  {f['scope']}: {_text(f, nums)}" for f in found]


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
