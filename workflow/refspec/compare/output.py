"""A comparison as text, as JSON, and as the rows of the comparison archive's tables
(``tables/comparisons`` and ``tables/differences``, specs in ``report/refspec_check/schemas/compare``);
:mod:`.archive` writes and seals that archive.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from refspec_check.table_specs import compare_spec

from ..core import tables as T
from .model import DIFFERS, NOT_COMPARABLE, REPRODUCED, SAME, ArchiveComparison, TimingComparison

COMPARE_FORMAT = "refspec-comparison/1"
COMPARE_CAMPAIGN = "compare"


# --------------------------------------------------------------------------- text


def _f(v: float | None, d: int = 4) -> str:
    return "-" if v is None else f"{v:.{d}f}"


def _iv(v: float | None, lo: float | None, hi: float | None) -> str:
    if v is None:
        return "-"
    return _f(v) + (f" [{_f(lo)}, {_f(hi)}]" if lo is not None and hi is not None else "")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w[i]) for i, c in enumerate(cells)).rstrip()  # noqa: E731
    return [line(header), line(["-" * x for x in w])] + [line(r) for r in rows]


def text_lines(c: ArchiveComparison, max_differences: int = 20) -> list[str]:
    out = [
        f"A: {c.a.shown}  seal {c.a.seal_sha256}  key {c.a.keyid}",
        f"B: {c.b.shown}  seal {c.b.seal_sha256}  key {c.b.keyid}",
    ]
    inp = c.inputs
    plan = "same" if inp.plan_a == inp.plan_b else f"differs in {', '.join(sorted(inp.plan_differences))}"
    out.append(f"registered plan: {plan}  (A {inp.plan_a[:16]}, B {inp.plan_b[:16]})")
    out.append(
        "pinned inputs: "
        + ("same" if not inp.pinned_differences else f"{len(inp.pinned_differences)} differ")
        + f"; unpinned differences (host, built files, code): {len(inp.other_differences)}"
    )
    for line in inp.pinned_differences[:max_differences]:
        out.append(f"  pinned: {line}")
    if c.noise.recorded:
        out.append(f"noise floor (A/A): A {_f(c.noise.a)}, B {_f(c.noise.b)}; band [{1 / c.band:.4f}, {c.band:.4f}]")
    for n in c.notes:
        out.append(f"note: {n}")
    out += ["", "PRESERVATION"]
    out += _table(
        ["finding", "table", "rows A", "rows B", "differing", "verdict"],
        [[f.title, f.table, str(f.rows_a), str(f.rows_b), str(f.rows_differing), f.verdict] for f in c.findings],
    )
    shown = 0
    for f in c.findings:
        for d in f.differences:
            if shown >= max_differences:
                break
            out.append(
                f"  {f.finding} [{d.key}] {d.column}: A {d.a if d.a is not None else '(absent)'}, "
                f"B {d.b if d.b is not None else '(absent)'}" + (f"  ({d.detail})" if d.detail else "")
            )
            shown += 1
    total = sum(len(f.differences) for f in c.findings)
    if total > shown:
        out.append(f"  ... {total - shown} more differing cells (--json or the comparison archive lists all)")
    out += ["", "TIMINGS (B/A: ratio of B's value to A's, 95% bootstrap interval over sessions and tasks)"]
    out += _table(
        ["kind", "campaign", "family", "comparison", "path", "A", "B", "B/A", "verdict", "reason"],
        [
            [
                t.kind,
                t.campaign,
                t.family + (f" cap {t.cap}" if t.cap is not None else ""),
                t.comparison,
                t.path,
                _iv(t.a_value, t.a_lo, t.a_hi),
                _iv(t.b_value, t.b_lo, t.b_hi),
                _iv(t.ratio, t.lo, t.hi),
                t.verdict,
                t.reason,
            ]
            for t in c.timings
        ],
    )
    counts = {v: sum(1 for t in c.timings if t.verdict == v) for v in (REPRODUCED, DIFFERS, NOT_COMPARABLE)}
    same = sum(1 for f in c.findings if f.verdict == SAME)
    out += [
        "",
        f"preservation: {same} of {len(c.findings)} findings same; timings: "
        + ", ".join(f"{n} {v}" for v, n in counts.items()),
    ]
    return out


def json_text(c: ArchiveComparison) -> str:
    return json.dumps(c.as_json(), indent=1, sort_keys=False) + "\n"


# --------------------------------------------------------------------------- tables


def write_rows(rows: list[dict[str, Any]], name: str, out_dir: Path) -> dict[str, Path]:
    """``<name>.parquet`` and its CSV copy (the one CSV encoding of :mod:`refspec.core.tables`);
    a column a row does not name is null (a preservation row has no timing columns)."""
    sp = compare_spec(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    return T.write_table([{c: r.get(c) for c in sp.names} for r in rows], sp, out_dir)


def comparison_rows(c: ArchiveComparison) -> list[dict[str, Any]]:
    rows = []
    for f in c.findings:
        rows.append(
            dict(
                section="preservation",
                item=f.finding,
                title=f.title,
                table=f.table,
                rows_a=f.rows_a,
                rows_b=f.rows_b,
                rows_differing=f.rows_differing,
                verdict=f.verdict,
                reason=f.note or None,
            )
        )
    for t in c.timings:
        rows.append(_timing_row(t))
    return rows


def _timing_row(t: TimingComparison) -> dict[str, Any]:
    return dict(
        section="timing",
        item=t.id,
        title=("qualified ratio" if t.kind == "ratio" else "E2 estimate"),
        table="ratios" if t.kind == "ratio" else "estimates",
        kind=t.kind,
        campaign=t.campaign,
        family=t.family,
        cap=t.cap,
        path=t.path,
        comparison=t.comparison,
        numerator=t.numerator,
        denominator=t.denominator,
        a_value=t.a_value,
        a_lo=t.a_lo,
        a_hi=t.a_hi,
        b_value=t.b_value,
        b_lo=t.b_lo,
        b_hi=t.b_hi,
        ratio=t.ratio,
        lo=t.lo,
        hi=t.hi,
        n_tasks=t.n_tasks,
        n_sessions_a=t.n_sessions_a,
        n_sessions_b=t.n_sessions_b,
        draws=t.draws,
        seed=t.seed,
        band=t.band,
        verdict=t.verdict,
        reason=t.reason or None,
    )


def difference_rows(c: ArchiveComparison) -> list[dict[str, Any]]:
    rows = [
        dict(finding=d.finding, key=d.key, column=d.column, a=d.a, b=d.b, detail=d.detail or None)
        for f in c.findings
        for d in f.differences
    ]
    inp = c.inputs
    for scope, lines in sorted(inp.plan_differences.items()):
        rows += [
            dict(finding="plan", key=scope, column=str(i), a=None, b=None, detail=line) for i, line in enumerate(lines)
        ]
    for kind, lines in (("pinned", inp.pinned_differences), ("unpinned", inp.other_differences)):
        rows += [
            dict(finding=kind, key="manifest", column=str(i), a=None, b=None, detail=line)
            for i, line in enumerate(lines)
        ]
    return rows
