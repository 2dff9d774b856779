"""The comparison report: report.html, report.tex and numbers.json of a comparison archive.

Rendered from the comparison's tables (``tables/comparisons.csv``, ``tables/differences.csv``)
with the project's report document, page and format (``anc/report.md``): every number is
a checked number (``cmp|ITEM|COLUMN``) that ``report/check.py`` recomputes from the records
the archive carries (``anc/compare.md``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..core.fsutil import atomic_write_bytes, atomic_write_text
from ..core.hashing import sha256_file
from ..reporting.document import DASH, Cell, Num, Numbers, Section, Table
from ..reporting.render import render_documents
from .model import SAME, ArchiveComparison
from .output import COMPARE_FORMAT, comparison_rows, difference_rows

SRC = "tables/comparisons.csv"
DIFF_SRC = "tables/differences.csv"
TITLE = "refspec report"  # the report format pins the preamble, title included
#: the note of a comparison whose noise floor was given by hand (``--noise-floor``); report/check.py pins it
GIVEN_FLOOR_NOTE = (
    "The noise floor was given by hand (refspec compare --noise-floor), not taken from the archives' A/A "
    "controls: the band is the practical threshold widened by that floor."
)
VERDICT_CLASS = {"same": "ok", "reproduced": "ok", "differs": "bad", "not comparable": "unqualified"}


def _num(N: Numbers, item: str, col: str, value: Any, fmt: str, row: dict) -> Num | str:
    if value is None:
        return DASH
    return N.add(("cmp", item, col), value, fmt, SRC, "comparisons", {"item": item}, col)


def _interval(N: Numbers, r: dict, v: str, lo: str, hi: str) -> list[Any]:
    parts: list[Any] = [_num(N, r["item"], v, r[v], ".6f", r)]
    if r[v] is not None and r[lo] is not None and r[hi] is not None:
        parts += [" [", _num(N, r["item"], lo, r[lo], ".6f", r), ", ", _num(N, r["item"], hi, r[hi], ".6f", r), "]"]
    return parts


def _provenance(c: ArchiveComparison, root: Path) -> dict[str, Any]:
    prov = {
        "manifest_sha256": sha256_file(root / "manifest.json"),
        "plan_sha256": sha256_file(root / "plan.json"),
        "ledger_sha256": sha256_file(root / "ledger.jsonl"),
        "a_seal_sha256": c.a.seal_sha256,
        "a_keyid": c.a.keyid,
        "a_archive_id": c.a.archive_id,
        "b_seal_sha256": c.b.seal_sha256,
        "b_keyid": c.b.keyid,
        "b_archive_id": c.b.archive_id,
        "a_registered_plan_sha256": c.inputs.plan_a,
        "b_registered_plan_sha256": c.inputs.plan_b,
    }
    return prov


def _overview(c: ArchiveComparison, prov: dict[str, Any]) -> Section:
    mono = lambda s: Cell([s], cls="mono")  # noqa: E731
    archives = Table(
        "archives",
        "The compared archives",
        [],
        ["", "A", "B"],
        [
            [Cell(["seal sha256"]), mono(c.a.seal_sha256), mono(c.b.seal_sha256)],
            [Cell(["signing key"]), mono(c.a.keyid), mono(c.b.keyid)],
            [Cell(["archive id"]), mono(c.a.archive_id), mono(c.b.archive_id)],
            [Cell(["registered plan sha256"]), mono(c.inputs.plan_a), mono(c.inputs.plan_b)],
        ],
        caption="Each archive was verified against its own pinned key before it was compared.",
    )
    records = Table(
        "records",
        "This comparison's records",
        [],
        ["record", "sha256"],
        [[Cell([k]), mono(prov[f"{k.split('.')[0]}_sha256"])] for k in ("manifest.json", "plan.json", "ledger.jsonl")],
    )
    notes = []
    plan_same = c.inputs.plan_a == c.inputs.plan_b
    notes.append(
        "The registered plans are the same."
        if plan_same
        else "The registered plans differ: the timings of the campaigns concerned are not comparable (see the differences)."
    )
    notes.append(
        "The pinned inputs are the same."
        if not c.inputs.pinned_differences
        else "The pinned inputs differ: no timing is comparable (see the differences)."
    )
    if c.noise_given is not None:
        notes.append(GIVEN_FLOOR_NOTE)
    elif not c.noise.recorded:
        notes.append(
            "No A/A control was recorded in either archive: the noise floor is unknown, and the band within which "
            "a ratio of two timings counts as reproduced is the practical threshold alone."
        )
    return Section(
        "comparison", "ArchiveComparison of two sealed archives", intro="", items=[archives, records], notes=notes
    )


def _preservation_table(N: Numbers, rows: list[dict[str, Any]]) -> Table:
    pres_rows = []
    for r in rows:
        if r["section"] != "preservation":
            continue
        pres_rows.append(
            [
                Cell([r["title"]]),
                Cell([r["table"]], cls="mono"),
                Cell([_num(N, r["item"], "rows_a", r["rows_a"], "d", r)]),
                Cell([_num(N, r["item"], "rows_b", r["rows_b"], "d", r)]),
                Cell([_num(N, r["item"], "rows_differing", r["rows_differing"], "d", r)]),
                Cell([r["verdict"]], cls=VERDICT_CLASS[r["verdict"]]),
                Cell([r["reason"] or ""], cls="reason"),
            ]
        )
    return Table(
        "preservation",
        "Preservation findings",
        [SRC],
        ["finding", "table", "rows A", "rows B", "rows differing", "verdict", "note"],
        pres_rows,
        numeric=[False, False, True, True, True, False, False],
    )


def _timings_table(N: Numbers, rows: list[dict[str, Any]]) -> Table:
    tim_rows = []
    for r in rows:
        if r["section"] != "timing":
            continue
        scope = r["family"] + ("" if r["cap"] is None else " cap ")
        tim_rows.append(
            [
                Cell([r["title"]]),
                Cell([r["campaign"]]),
                Cell([scope] + ([str(r["cap"])] if r["cap"] is not None else [])),
                Cell([r["comparison"]], cls="mono"),
                Cell([r["path"]]),
                Cell(_interval(N, r, "a_value", "a_lo", "a_hi")),
                Cell(_interval(N, r, "b_value", "b_lo", "b_hi")),
                Cell(_interval(N, r, "ratio", "lo", "hi")),
                Cell([_num(N, r["item"], "band", r["band"], ".6f", r)]),
                Cell([r["verdict"]], cls=VERDICT_CLASS[r["verdict"]]),
                Cell([r["reason"] or ""], cls="reason"),
            ]
        )
    return Table(
        "timings",
        "Timings: qualified ratios and E2 estimates",
        [SRC],
        ["what", "campaign", "family", "NUM/DEN", "path", "A", "B", "B/A", "band", "verdict", "reason"],
        tim_rows,
        caption="B/A is B's value over A's with the 95% percentile bootstrap interval over sessions (each "
        "archive's own) and tasks (shared); reproduced: the interval contains one or lies within the band.",
    )


def _differences(c: ArchiveComparison) -> Section:
    diffs = difference_rows(c)
    diff_tab = Table(
        "differences",
        "Differences",
        [DIFF_SRC],
        ["finding", "key", "column", "A", "B", "detail"],
        [
            [
                Cell([d["finding"]]),
                Cell([d["key"]], cls="mono"),
                Cell([d["column"]], cls="mono"),
                Cell([d["a"] if d["a"] is not None else DASH], cls="mono"),
                Cell([d["b"] if d["b"] is not None else DASH], cls="mono"),
                Cell([d["detail"] or ""], cls="reason"),
            ]
            for d in diffs
        ],
    )
    return Section(
        "differences",
        "Differences",
        items=[diff_tab] if diffs else [],
        notes=[] if diffs else ["The two archives show no difference in any compared finding or input."],
    )


def build(c: ArchiveComparison, root: Path) -> tuple[list[Section], Numbers, dict[str, Any]]:
    """The comparison report's sections, its number registry and its provenance record."""
    N = Numbers()
    rows = comparison_rows(c)
    prov = _provenance(c, root)
    overview = _overview(c, prov)
    pres = _preservation_table(N, rows)
    tim = _timings_table(N, rows)
    verdict_sec = Section(
        "findings",
        "Findings",
        intro="Preservation: every finding compared row by row. Timings: every qualified ratio and E2 estimate.",
        items=[pres, tim],
    )
    diff_sec = _differences(c)
    same = all(f.verdict == SAME for f in c.findings)
    verdict_sec.notes.append(
        "Every preservation finding is the same." if same else "At least one preservation finding differs."
    )
    return [overview, verdict_sec, diff_sec], N, prov


def render_comparison(c: ArchiveComparison, root: Path) -> dict[str, Path]:
    sections, N, prov = build(c, root)
    html, tex = render_documents(sections, prov, TITLE)
    paths = {"html": root / "report.html", "tex": root / "report.tex", "numbers": root / "numbers.json"}
    atomic_write_text(paths["html"], html, mode=0o644)
    atomic_write_text(paths["tex"], tex, mode=0o644)
    doc = {"format": COMPARE_FORMAT, "provenance": prov, "numbers": N.as_json()}
    atomic_write_bytes(paths["numbers"], json.dumps(doc, indent=1, ensure_ascii=False).encode() + b"\n", mode=0o644)
    return paths
