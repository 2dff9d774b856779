"""The arms at a glance: the report's table of every arm recipe the archive's requests ran, with its
role, is recomputed by report/check.py (refspec_check/arms.py), which refuses an edited cell or a
missing row even where the edit stays inside the report format and report.tex says the same; the
glossary follows it; arms sort with their digit runs read as numbers."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
from refspec_check.names import arm_sort_key
from refspec_check.render.sections.arms import arm_rows

from refspec.campaigns import derived
from refspec.provenance.seal import seal
from support.synthetic_archive import run_check, signer


class _Both:
    """An edit of the stage folder: report.html, report.tex (and numbers.json) changed alike."""

    def __init__(self, html, tex, numbers=None):
        self.html, self.tex, self.numbers = html, tex, numbers

    def files(self, work: Path) -> None:
        for name, fn in (("report.html", self.html), ("report.tex", self.tex)):
            p = work / name
            before = p.read_text()
            after = fn(before)
            assert after != before, f"the edit changed nothing in {name}"
            p.write_text(after)
        if self.numbers is not None:
            p = work / "numbers.json"
            p.write_text(json.dumps(self.numbers(json.loads(p.read_text())), indent=1) + "\n")


def sealed(stage: Path, dst: Path, edit: _Both | None = None) -> Path:
    work = dst.with_name(dst.name + "-stage")
    shutil.copytree(stage, work)
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if edit is not None:
        edit.files(work)
    seal(work, dst, key=signer(), archive_id="synthetic", created="2026-10-20T00:00:00Z")
    return dst


def _html_row(html: str, arm: str) -> re.Match:
    """The arms table's <tr> of ``arm`` in report.html."""
    table = re.search(r'<table data-table="arms".*?</table>', html, flags=re.S)
    assert table, "no arms table in report.html"
    m = re.compile(rf'<tr><td class="mono">{re.escape(arm)}</td>.*?</tr>\n').search(html, table.start(), table.end())
    assert m, f"no arms row of {arm}"
    return m


def _tex_row(tex: str, arm: str) -> re.Match:
    m = re.search(rf"^{re.escape(arm.replace('_', chr(92) + '_'))} & [^\n]*\\rsnum\{{arms\|[^\n]*\n", tex, flags=re.M)
    assert m, f"no arms row of {arm} in report.tex"
    return m


def _in_row(text: str, m: re.Match, old: str, new: str) -> str:
    row = m.group(0)
    assert old in row, (old, row)
    return text[: m.start()] + row.replace(old, new, 1) + text[m.end() :]


def _edit_cell(arm: str, old_html: str, new_html: str, old_tex: str, new_tex: str) -> _Both:
    return _Both(
        lambda h: _in_row(h, _html_row(h, arm), old_html, new_html),
        lambda t: _in_row(t, _tex_row(t, arm), old_tex, new_tex),
    )


def _drop_row(arm: str) -> _Both:
    def numbers(doc: dict) -> dict:
        doc["numbers"] = [n for n in doc["numbers"] if not n["id"].startswith(f"arms|{arm}|")]
        return doc

    return _Both(
        lambda h: (lambda m: h[: m.start()] + h[m.end() :])(_html_row(h, arm)),
        lambda t: (lambda m: t[: m.start()] + t[m.end() :])(_tex_row(t, arm)),
        numbers,
    )


def _arms_html(stage: Path) -> list[list[str]]:
    """The arms table's body rows of the stage's report.html, each cell's text (numbers as shown)."""
    html = (stage / "report.html").read_text()
    table = re.search(r'<table data-table="arms".*?<tbody>(.*?)</tbody>', html, flags=re.S).group(1)
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", table):
        rows.append([re.sub(r"<[^>]+>", "", td) for td in re.findall(r"<td[^>]*>(.*?)</td>", tr)])
    return rows


def test_the_arms_table_follows_the_summary_and_holds_every_arm(stage):
    html = (stage / "report.html").read_text()
    order = re.findall(r'<section id="([^"]+)">', html)
    assert order[:3] == ["summary", "arms", "glossary"]
    rows = _arms_html(stage)
    arms = [r[0] for r in rows]
    assert sorted(arms) == sorted({r["arm"] for r in _requests(stage)})  # every arm once (one recipe each here)
    by = {r[0]: r for r in rows}
    # mode, micro-batch, layout, phase mask, proposals as the requests rows record them
    assert by["C3"][1:6] == ["speculative", "4", "qb", "3", "3"]
    assert by["R_prod"][1:6] == ["target", "512", "mq", "0", "\u2014"]
    # roles from the data: the reference, the unrepaired rule, the prediction's live arm and predictor
    assert by["R"][-1] == "the reference"
    assert by["M0"][-1] == "unrepaired control; chosen predictor"
    assert by["C0"][-1] == "unrepaired control; prediction live arm"
    assert by["R_prod"][-1] == "unrepaired control; predictor candidate"
    assert by["M_pq"][-1] == "repaired arm"
    assert by["C_m10"][-1] == "phase-mask sweep arm"
    assert arms.index("C_m2") < arms.index("C_m10") < arms.index("C_qb")
    assert "glossary" in html and "the paper this pipeline reproduces" in html.lower()


def _requests(stage: Path) -> list[dict]:
    import csv

    with open(stage / "tables" / "requests.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_clean_archive_passes(stage, tmp_path):
    code, out = run_check(sealed(stage, tmp_path / "clean"))
    assert code == 0, out[-3000:]
    assert "arms table" not in out


EDITS = [
    (
        "a layout cell",
        _edit_cell("M_pq", '<td class="mono">pq</td>', '<td class="mono">qb</td>', " & pq & ", " & qb & "),
    ),
    (
        "a role word",
        _edit_cell("M_pq", ">repaired arm<", ">unrepaired control<", "repaired arm}", "unrepaired control}"),
    ),
    ("a mode word", _edit_cell("C_pq", "<td>speculative</td>", "<td>target</td>", " & speculative & ", " & target & ")),
]


@pytest.mark.parametrize("what,edit", EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_cell_is_refused(stage, tmp_path, what, edit):
    code, out = run_check(sealed(stage, tmp_path / "edited", edit))
    lines = [x for x in out.splitlines() if x.startswith("MISMATCH report.html:") and "arms table row" in x]
    assert code == 1 and lines, (what, out[-3000:])
    assert "is not the archive's; recomputed" in lines[0], lines


def test_a_missing_arm_is_refused(stage, tmp_path):
    code, out = run_check(sealed(stage, tmp_path / "dropped", _drop_row("M_pq")))
    lines = [x for x in out.splitlines() if "arms table lacks the row 'M_pq |" in x]
    assert code == 1 and lines, out[-3000:]


def test_a_reordered_table_is_refused(stage, tmp_path):
    def swap_html(h: str) -> str:
        a, b = _html_row(h, "M_pq"), _html_row(h, "M_gs")
        assert b.end() == a.start()
        return h[: b.start()] + a.group(0) + b.group(0) + h[a.end() :]

    def swap_tex(t: str) -> str:
        a, b = _tex_row(t, "M_pq"), _tex_row(t, "M_gs")
        assert b.end() == a.start()
        return t[: b.start()] + a.group(0) + b.group(0) + t[a.end() :]

    code, out = run_check(sealed(stage, tmp_path / "swapped", _Both(swap_html, swap_tex)))
    assert code == 1 and "arms table rows are not in the arm order" in out, out[-3000:]


SHIPPED = [  # the shipped arms in the report's order (arm_sort_key), before digit runs were numbers too
    ("R", "target", "mq"),
    ("R_prod", "target", "mq"),
    ("M0", "target", "mq"),
    ("M_gs", "target", "gs"),
    ("M_pq", "target", "pq"),
    ("M3", "target", "qb"),
    ("M_qb", "target", "qb"),
    ("M_qb_aa", "target", "qb"),
    ("M_qh", "target", "qh"),
    ("C0", "spec", "mq"),
    ("C_gs", "spec", "gs"),
    ("C_pq", "spec", "pq"),
    ("C3", "spec", "qb"),
    ("C_qb", "spec", "qb"),
    ("C_qh", "spec", "qh"),
]


def test_arms_sort_naturally_and_the_pipeline_sorts_alike():
    masks = [(f"C_m{m}", "spec", "qb") for m in range(16)]
    geoms = [("C_k1u2", "spec", "qb"), ("C_k5u6", "spec", "qb"), ("C_k7u4", "spec", "qb"), ("C_k10u12", "spec", "qb")]
    every = SHIPPED + masks + geoms
    rng = random.Random(3)
    for _ in range(5):
        shuffled = every[:]
        rng.shuffle(shuffled)
        mine = sorted(shuffled, key=lambda a: arm_sort_key(*a))
        assert [a for a in mine if a in SHIPPED] == SHIPPED  # M_qb's place among the shipped arms unchanged
        names = [a[0] for a in mine]
        assert [n for n in names if n.startswith("C_m")] == [f"C_m{m}" for m in range(16)]  # C_m2 before C_m10
        assert names.index("C_k7u4") < names.index("C_k10u12")
        assert sorted(shuffled, key=lambda a: derived.arm_sort_key(*a)) == mine  # the pipeline's order is the report's


def _req(campaign: str, arm: str, mode: str, layout: str, ub: int, mask: int, k: int = 3) -> dict:
    return dict(campaign=campaign, family="f", arm=arm, mode=mode, layout=layout, ub=ub, mask=mask, k=k, draft=None)


def test_roles_come_from_the_data():
    reqs = [
        _req("servers", "S_ref", "target", "mq", 1, 0),
        _req("servers", "R", "target", "mq", 1, 0),
        _req("servers", "S_stock", "target", "mq", 4, 0),
        _req("confirmation", "R", "target", "mq", 1, 0),
        _req("confirmation", "M3", "target", "qb", 4, 3),
        _req("confirmation", "M3_aa", "target", "qb", 4, 3),
        _req("confirmation", "M_mq3", "target", "mq", 4, 3),
        _req("prediction", "C0", "spec", "mq", 4, 0),
        _req("prediction", "M0", "target", "mq", 4, 0),
        _req("width", "C_k5u6", "spec", "qb", 6, 3, k=5),
    ]
    plan = {
        "campaigns": {
            "servers": {"campaign": "servers", "definition": {"reference": "S_ref"}},
            "prediction": {"campaign": "prediction", "definition": {"live_arm": "C0", "candidates": ["M0"]}},
        }
    }
    roles = {x["arm"]: "; ".join(x["roles"]) for x in arm_rows(reqs, plan, [])}
    assert roles == {
        "S_ref": "the reference",
        "R": "the reference; compared arm",  # the reference of confirmation, beside S_ref in the servers
        "S_stock": "unrepaired control",
        "M3": "repaired arm",
        "M3_aa": "A/A twin",
        "M_mq3": "compared arm",  # mask three on the native layout: no repair, yet not unrepaired
        "C0": "prediction live arm",
        "M0": "predictor candidate",
        "C_k5u6": "width sweep arm",
    }
    rows = {x["arm"]: x for x in arm_rows(reqs, plan, [])}
    assert (rows["C_k5u6"]["k"], rows["C_k5u6"]["ub"], rows["M3"]["k"]) == (5, 6, None)


ENGINE_PLAN = {  # arm records as a campaign plan carries them (refspec's worker arms have no kind)
    "campaigns": {
        "qualify": {
            "campaign": "confirmation",
            "arms": {
                "O_ref": {"kind": "openvino", "openvino": {"pipeline": "stateful"}},
                "O_cb": {"kind": "openvino", "openvino": {"pipeline": "continuous_batching"}},
                "S_stock": {"kind": "server", "server": {}},
                "R": {"mode": "target", "layout": "mq"},
            },
        }
    }
}


def test_an_arm_of_another_engine_is_named_and_the_checker_names_it_alike():
    from refspec_check.arms import HEADER, engines, header
    from refspec_check.render.sections.arms import ARMS_HEADER, arm_engines, plan_records

    want = {
        "O_ref": "OpenVINO GenAI, stateful",
        "O_cb": "OpenVINO GenAI, continuous batching",
        "S_stock": "llama-server",
        "R": "llama.cpp",
    }
    assert arm_engines(plan_records(ENGINE_PLAN)) == want == engines(ENGINE_PLAN)
    reqs = [_req("confirmation", a, "target", "mq", 4 if a != "O_ref" else 1, 0) for a in ("O_ref", "O_cb", "R")]
    assert {x["arm"]: x["engine"] for x in arm_rows(reqs, ENGINE_PLAN, [])} == {
        k: want[k] for k in ("O_ref", "O_cb", "R")
    }
    # the column only where some arm that ran is not refspec's worker
    assert header(ENGINE_PLAN, {"R"}) == HEADER == tuple(ARMS_HEADER)
    assert header(ENGINE_PLAN, {"R", "O_cb"}) == ("arm", "engine", *HEADER[1:])


def _as_server(stage: Path, dst: Path, arm: str) -> Path:
    """The stage with ``arm``'s plan record a llama-server arm, its report rendered again."""
    from refspec.reporting.render import render

    shutil.copytree(stage, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    plan = json.loads((dst / "plan.json").read_text())
    plan["campaigns"]["prediction"]["arms"] = {arm: {"kind": "server", "server": {}}}
    (dst / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
    render(dst, pdf=False)
    return dst


def test_an_arm_of_another_engine_shows_an_engine_column_that_the_checker_recomputes(stage, tmp_path):
    served = _as_server(stage, tmp_path / "served", "M0")
    rows = {r[0]: r for r in _arms_html(served)}
    assert rows["M0"][1] == "llama-server" and rows["R"][1] == "llama.cpp" and rows["C3"][1] == "llama.cpp"
    assert [r[1:] for r in _arms_html(stage)] == [r[2:] for r in _arms_html(served)]  # the rest as before
    code, out = run_check(sealed(served, tmp_path / "clean"))
    assert code == 0, out[-3000:]
    # the engine claimed for another arm, in both report files alike: refused by the arms check itself
    swap = _edit_cell("C3", "<td>llama.cpp</td>", "<td>llama-server</td>", "C3 & llama.cpp & ", "C3 & llama-server & ")
    code, out = run_check(sealed(served, tmp_path / "edited", swap))
    lines = [x for x in out.splitlines() if x.startswith("MISMATCH report.html:") and "arms table row" in x]
    assert code == 1 and lines and "recomputed 'C3 | llama.cpp |" in lines[0], out[-3000:]
