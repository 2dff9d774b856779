"""The prospective prediction section: predicted vs live next to reference vs live, per family and
per reserved task."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..document import DASH, Archive, Cell, Numbers, Section, ShownTable, Table, table_section


def prediction_totals(rows: list[dict]) -> dict[str, Any]:
    """Companion-study counts over the reserved tasks of one family."""
    div = [r for r in rows if r["reference_divergent"]]
    return dict(
        tasks=len(rows),
        live_runs=sum(r["live_runs"] for r in rows),
        stable_tasks=sum(1 for r in rows if r["live_stable"]),
        predicted_matches=sum(r["predicted_matches"] for r in rows),
        reference_matches=sum(r["reference_matches"] for r in rows),
        divergent_tasks=len(div),
        divergent_runs=sum(r["live_runs"] for r in div),
        divergent_predicted=sum(r["predicted_matches"] for r in div),
    )


@table_section(
    "prediction",
    "Prospective prediction",
    "Companion-study design: a draft-free fast predictor (never the reference R) is selected on exposed "
    "discovery tasks; its complete generated IDs for the reserved tasks are frozen in the plan record "
    "before any live speculation touches them; then the live speculative path runs on the reserved tasks "
    "together with the reference. Definitions: a capped sequence is one live run of a reserved task; "
    "predicted vs live counts live runs whose complete endpoint (all token IDs, EOG flag, stop reason) "
    "equals the frozen prediction; reference vs live counts live runs equal to the same-set reference "
    "(the first R endpoint of the live session); a task is repeat-stable when all its live runs share one "
    "endpoint, and reference-divergent when some live run differs from the reference. The companion study "
    "reports every live run predicted against fewer for the reference, including every run of its "
    "reference-divergent prompts. A prediction neither restores qualification nor identifies a numerical cause.",
    table="prediction",
    absent="prospective prediction not run",
)
def section_prediction(sec: Section, a: Archive, N: Numbers) -> None:
    src = a.src("prediction")
    sec.items.append(_summary_table(a, N, src))
    sec.items.append(_task_table(a, N, src))


def _summary_table(a: Archive, N: Numbers, src: str) -> Table:
    """Predicted vs live next to reference vs live, per family."""
    by_fam: dict[str, list[dict]] = defaultdict(list)
    for r in a.rows("prediction"):
        by_fam[r["family"]].append(r)
    tid = "prediction-summary"
    nums = ShownTable(N, a, "prediction", tid)
    rows = []
    for fam in sorted(by_fam):
        rs = by_fam[fam]
        tot = prediction_totals(rs)
        key = dict(family=fam)
        v = {k: nums.add(("predsum", fam, k), val, "d", row=key, column=k) for k, val in tot.items()}
        live = sorted({r["live_arm"] for r in rs})
        pred = sorted({r["predictor"] for r in rs})
        rows.append(
            [
                Cell([fam]),
                Cell([" ".join(live)], cls="mono"),
                Cell([" ".join(pred)], cls="mono"),
                Cell([v["live_runs"]]),
                Cell(
                    [v["predicted_matches"], "/", v["live_runs"]],
                    cls="ok" if tot["predicted_matches"] == tot["live_runs"] else "bad",
                ),
                Cell(
                    [v["reference_matches"], "/", v["live_runs"]],
                    cls="ok" if tot["reference_matches"] == tot["live_runs"] else "bad",
                ),
                Cell([v["stable_tasks"], "/", v["tasks"]]),
                Cell(
                    [
                        v["divergent_tasks"],
                        " tasks; predicted ",
                        v["divergent_predicted"],
                        "/",
                        v["divergent_runs"],
                        " of their runs",
                    ]
                ),
            ]
        )
    return Table(
        tid,
        "Predicted vs live next to reference vs live",
        [src],
        [
            "family",
            "live arm",
            "predictor",
            "capped sequences",
            "predicted vs live",
            "reference vs live",
            "repeat-stable tasks",
            "reference-divergent",
        ],
        rows,
        numeric=[False, False, False, True, True, True, True, False],
    )


def _task_table(a: Archive, N: Numbers, src: str) -> Table:
    """Predicted vs live and reference vs live per reserved task."""
    tid = "prediction"
    nums = ShownTable(N, a, "prediction", tid)
    rows = []
    for r in sorted(a.rows("prediction"), key=lambda r: (r["family"], r["task_id"])):
        key = dict(family=r["family"], task_id=r["task_id"])
        base = ("pred", r["family"], r["task_id"])
        n = nums.add(base + ("live_runs",), r["live_runs"], "d", row=key, column="live_runs")
        pm = nums.add(base + ("predicted_matches",), r["predicted_matches"], "d", row=key, column="predicted_matches")
        rm = nums.add(base + ("reference_matches",), r["reference_matches"], "d", row=key, column="reference_matches")
        stable = DASH if r["live_stable"] is None else ("yes" if r["live_stable"] else "no")
        rows.append(
            [
                Cell([r["family"]]),
                Cell([r["task_id"]], cls="mono"),
                Cell([n]),
                Cell([stable]),
                Cell([pm, "/", n], cls="ok" if r["predicted_matches"] == r["live_runs"] else "bad"),
                Cell([rm, "/", n], cls="ok" if r["reference_matches"] == r["live_runs"] else "bad"),
                Cell(["yes" if r["reference_divergent"] else "no"], cls="bad" if r["reference_divergent"] else ""),
            ]
        )
    return Table(
        tid,
        "Per reserved task",
        [src],
        [
            "family",
            "task",
            "live runs",
            "repeat-stable",
            "predicted vs live",
            "reference vs live",
            "reference-divergent",
        ],
        rows,
        numeric=[False, False, True, False, True, True, False],
    )
