"""Output confirmation (paper §5.1, Table 3, Supplement S2.1).

The reference R, the unconstrained batched target-only path M0, the repaired
M3 and C3 and the ordinary recipe R_prod on a frozen panel, with repeats in
rounds of fresh workers (counterbalanced arm order). Output: matching complete
endpoints per arm (``qualification``; Table 3 sums them per arm) and the
qualified ratios of every arm pair (``ratios``; failed qualification is a dash
with the reason) and, in their own table, the diagnostic (unqualified) timings
of the registered pairs M3/M0, C3/C0 and R_prod/M3 (``diagnostics``).
"""

from __future__ import annotations

from ..core.arms import reference_of
from ..core.errors import ConfigError
from ..core.stats import aa_rule_of
from .derived import diagnostics_table, qualification_counts, ratios_table
from .scheduler import paired_schedule, round_schedule, session_ids
from .text import fmt_ratio, table_text


def panels(defn: dict) -> dict:
    return {"confirm": defn["panel"]}


def named_arms(defn: dict, catalog: dict) -> list:
    names = list(defn["arms"])
    missing = [n for n in names if n not in catalog]
    if missing:
        raise ConfigError(f"{defn['campaign']}: unknown arm(s) {', '.join(missing)}")
    ref = reference_of(defn)
    if ref not in catalog:
        raise ConfigError(f"{defn['campaign']}: unknown reference arm {ref}")
    if ref not in names:
        names.insert(0, ref)
    names.remove(ref)
    return [catalog[ref]] + [catalog[n] for n in names]


def arms(defn: dict, catalog: dict) -> list:
    return named_arms(defn, catalog)


def round_sessions(ctx, role: str) -> list:
    """The campaign's sessions: rounds of fresh single-arm workers, or (``design: paired``) processes
    that serve every arm request by request (:func:`refspec.campaigns.scheduler.paired_schedule`)."""
    d = ctx.defn
    if d.get("design") == "paired":
        return paired_schedule(
            session_ids(d["sessions"]),
            list(ctx.arms),
            ctx.task_ids(role),
            caps=[d["cap"]],
            repeats=d["repeats"],
            processes=d["processes"],
            seed=d["seed"],
        )
    ref = reference_of(d)
    others = [n for n in ctx.arms if n != ref]
    return round_schedule(
        session_ids(d["sessions"]),
        others,
        ctx.task_ids(role),
        caps=[d["cap"]],
        repeats=d["repeats"],
        block_by=d["block_by"],
        seed=d["seed"],
        reference=ref,
    )


def schedule(ctx) -> list:
    return round_sessions(ctx, "confirm")


def counts_text(ctx, base: dict, title: str) -> str:
    order = list(ctx.arms)
    counts = sorted(
        qualification_counts(base["qualification"]),
        key=lambda c: order.index(c["arm"]) if c["arm"] in order else len(order),
    )
    by_arm_fail: dict[str, list[str]] = {}
    for q in base["qualification"]:
        if not q["qualified"]:
            by_arm_fail.setdefault(q["arm"], []).append(
                f"{q['task_id']}" + (f"@{q['first_diff_index']}" if q["first_diff_index"] is not None else "")
            )
    rows = []
    for c in counts:
        fails = by_arm_fail.get(c["arm"], [])
        rows.append(
            [
                c["arm"],
                ctx.arms[c["arm"]].mode,
                ctx.arms[c["arm"]].layout,
                f"UB{ctx.arms[c['arm']].ub}",
                f"{c['matching']}/{c['required']}",
                f"{c['tasks_qualified']}/{c['tasks']}",
                " ".join(fails[:8]) + (" ..." if len(fails) > 8 else ""),
            ]
        )
    return (
        title
        + "\n"
        + table_text(["arm", "mode", "layout", "U", "matching", "tasks ok", "failing tasks@first diff"], rows)
    )


def ratios_text(rows: list[dict]) -> str:
    body = []
    for r in rows:
        body.append(
            [
                f"{r['numerator']}/{r['denominator']}",
                r["path"],
                fmt_ratio(r["ratio"]),
                f"{r['n_regressions']}/{r['n_tasks']}" if r["qualified"] else "-",
                (r["regressed_tasks"] or "") if r["qualified"] else (r["reason"] or ""),
            ]
        )
    return table_text(["comparison", "path", "ratio", "regressions", "regressed tasks / reason"], body)


def diagnostics_text(rows: list[dict]) -> str:
    body = [
        [
            f"{r['numerator']}/{r['denominator']}",
            r["label"],
            fmt_ratio(r["ratio"]),
            "-" if r["median_numerator_ns"] is None else f"{r['median_numerator_ns'] / 1e6:.1f}",
            "-" if r["median_denominator_ns"] is None else f"{r['median_denominator_ns'] / 1e6:.1f}",
        ]
        for r in rows
    ]
    return table_text(["comparison", "label", "ratio", "median num (ms)", "median den (ms)"], body)


def analyze(ctx, base: dict) -> dict:
    ratios = ratios_table(base["requests"], base["qualification"], ctx.name, aa_rule=aa_rule_of(ctx.plan))
    diag = diagnostics_table(base["requests"], base["qualification"], ctx.name)
    d = ctx.defn
    text = "\n".join(
        [
            counts_text(
                ctx,
                base,
                f"Output confirmation (Table 3 shape): {len(ctx.task_ids('confirm'))} task(s), "
                f"cap {d['cap']}, {d['sessions']} session(s) x {d['repeats']} repeat(s); "
                "matching complete endpoints per arm",
            ),
            "",
            "Qualified ratios (numerator time / denominator time; Table S2 shape):",
            ratios_text(ratios),
            "",
            "Diagnostic timings (not qualified; never mixed with the qualified ratios):",
            diagnostics_text(diag) if diag else "none: every registered pair qualified or was not run",
        ]
    )
    return {"tables": {"ratios": ratios, "diagnostics": diag}, "text": text}
