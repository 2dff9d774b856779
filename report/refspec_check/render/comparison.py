"""The comparison report: report.html, report.tex and numbers.json of a comparison archive (``refspec compare``).

A function of the comparison archive's records alone: its tables (``tables/comparisons.csv``,
``tables/differences.csv``, read as their CSV copies typed by their specs), plan.json (the noise floor),
manifest.json (the registered plans' digests), the digests of its records and the compared archives as its
seal names them. ``refspec compare`` writes it (:func:`refspec.compare.archive.write_results`) and
``report/check.py`` renders it again and compares the bytes (``refspec_check/rendering.py``). Every number
is a checked number (``cmp|ITEM|COLUMN``) that the checker recomputes from the records the archive carries
(``anc/compare.md``). Standard library only, like the rest of the checker's package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from refspec_check.digests import sha256_file
from refspec_check.table_specs import compare_spec, read_csv_records

from .document import DASH, Cell, Num, Numbers, Section, Table, read_json
from .page import html_page, tex_colors, tex_page
from .svg import COLORS

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


def _provenance(root: Path, compares: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The comparison's records' digests, the compared archives as its seal names them (``compares``:
    label -> seal_sha256, keyid, archive_id) and their registered plans' digests (its manifest.json)."""
    prov = {
        "manifest_sha256": sha256_file(root / "manifest.json"),
        "plan_sha256": sha256_file(root / "plan.json"),
        "ledger_sha256": sha256_file(root / "ledger.jsonl"),
    }
    for lab in ("a", "b"):
        for k in ("seal_sha256", "keyid", "archive_id"):
            prov[f"{lab}_{k}"] = compares[lab][k]
    registered = (read_json(root / "manifest.json") or {}).get("registered_plan_sha256") or {}
    for lab in ("a", "b"):
        prov[f"{lab}_registered_plan_sha256"] = registered.get(lab)
    return prov


def _overview(prov: dict[str, Any], diffs: list[dict[str, Any]], noise: dict[str, Any]) -> Section:
    mono = lambda s: Cell([s], cls="mono")  # noqa: E731
    archives = Table(
        "archives",
        "The compared archives",
        [],
        ["", "A", "B"],
        [
            [Cell(["seal sha256"]), mono(prov["a_seal_sha256"]), mono(prov["b_seal_sha256"])],
            [Cell(["signing key"]), mono(prov["a_keyid"]), mono(prov["b_keyid"])],
            [Cell(["archive id"]), mono(prov["a_archive_id"]), mono(prov["b_archive_id"])],
            [
                Cell(["registered plan sha256"]),
                mono(prov["a_registered_plan_sha256"]),
                mono(prov["b_registered_plan_sha256"]),
            ],
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
    plan_same = prov["a_registered_plan_sha256"] == prov["b_registered_plan_sha256"]
    notes.append(
        "The registered plans are the same."
        if plan_same
        else "The registered plans differ: the timings of the campaigns concerned are not comparable (see the differences)."
    )
    notes.append(
        "The pinned inputs are the same."
        if not any(d["finding"] == "pinned" for d in diffs)
        else "The pinned inputs differ: no timing is comparable (see the differences)."
    )
    if noise.get("given") is not None:
        notes.append(GIVEN_FLOOR_NOTE)
    elif not noise.get("recorded"):
        notes.append(
            "No A/A control was recorded in either archive: the noise floor is unknown, and the band within which "
            "a ratio of two timings counts as reproduced is the practical threshold alone."
        )
    return Section("comparison", "Comparison of two sealed archives", intro="", items=[archives, records], notes=notes)


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


def _differences(diffs: list[dict[str, Any]]) -> Section:
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


def build(
    rows: list[dict[str, Any]],
    diffs: list[dict[str, Any]],
    noise: dict[str, Any],
    prov: dict[str, Any],
) -> tuple[list[Section], Numbers]:
    """The comparison report's sections and its number registry."""
    N = Numbers()
    overview = _overview(prov, diffs, noise)
    pres = _preservation_table(N, rows)
    tim = _timings_table(N, rows)
    verdict_sec = Section(
        "findings",
        "Findings",
        intro="Preservation: every finding compared row by row. Timings: every qualified ratio and E2 estimate.",
        items=[pres, tim],
    )
    diff_sec = _differences(diffs)
    same = all(r["verdict"] == "same" for r in rows if r["section"] == "preservation")
    verdict_sec.notes.append(
        "Every preservation finding is the same." if same else "At least one preservation finding differs."
    )
    return [overview, verdict_sec, diff_sec], N


def comparison_files(root: Path, compares: dict[str, dict[str, Any]], fmt: str) -> dict[str, bytes]:
    """The bytes of report.html, report.tex and numbers.json (of format ``fmt``) of the comparison
    archive's records in ``root``, the compared archives being ``compares`` (its seal's ``predicate.compares``)."""
    rows = read_csv_records(compare_spec("comparisons"), root)
    diffs = read_csv_records(compare_spec("differences"), root)
    plan = read_json(root / "plan.json") or {}
    noise = plan.get("noise_floor") if isinstance(plan.get("noise_floor"), dict) else {}
    prov = _provenance(root, compares)
    sections, N = build(rows, diffs, noise, prov)
    html = html_page(sections, TITLE, lambda fig: "")
    tex = tex_page(sections, TITLE, tex_colors(COLORS), lambda fig: "")
    doc = {"format": fmt, "provenance": prov, "numbers": N.as_json()}
    return {
        "report.html": html.encode(),
        "report.tex": tex.encode(),
        "numbers.json": json.dumps(doc, indent=1, ensure_ascii=False).encode() + b"\n",
    }
