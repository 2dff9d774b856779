"""Repair comparison (paper §5.4, Table S3, Supplement S2.2).

R and the target-only (M) and speculative (C) arms with per-query attention
(pq), query-to-batch (qb) and global serialization (gs), in counterbalanced
rounds of fresh workers. Output: all pairwise qualified ratios (``ratios``;
earlier arm in the numerator: GS/QB, PQ/QB, M/C, ...) with the tasks that
regress. The recorded counters of the PQ and QB arms are compared per task and
session, and the logical counters of GS against QB.
"""

from __future__ import annotations

from ..core.arms import REFERENCE_ARM, is_twin
from ..core.stats import aa_rule_of
from .confirmation import counts_text, named_arms, ratios_text, round_sessions
from .derived import ratios_table
from .evidence import COMPARED_COUNTERS, LOGICAL_COUNTERS
from .text import fmt_ratio


def panels(defn: dict) -> dict:
    return {"implementation": defn["panel"]}


def arms(defn: dict, catalog: dict) -> list:
    return named_arms(defn, catalog)


def schedule(ctx) -> list:
    return round_sessions(ctx, "implementation")


def arm_by(ctx, mode: str, layout: str) -> str | None:
    found = [
        n
        for n, a in ctx.arms.items()
        if n != REFERENCE_ARM and not is_twin(n) and a.mode == mode and a.layout == layout
    ]
    return found[0] if len(found) == 1 else None


def counter_pairs(ctx) -> list[tuple]:
    out = []
    for mode, label in (("target", "target-only"), ("spec", "speculative")):
        pq, qb, gs, qh = (arm_by(ctx, mode, x) for x in ("pq", "qb", "gs", "qh"))
        if pq and qb:
            out.append((f"{label} PQ vs QB", pq, qb, COMPARED_COUNTERS))
        if pq and qh:
            out.append((f"{label} PQ vs QH", pq, qh, COMPARED_COUNTERS))
        if gs and qb:
            out.append((f"{label} GS vs QB (logical)", gs, qb, LOGICAL_COUNTERS))
    return out


def highlights(ctx, ratios: list[dict]) -> str:
    by = {(r["numerator"], r["denominator"]): r for r in ratios}
    lines = []
    for mode, label in (("target", "target-only"), ("spec", "speculative")):
        for x, y in (("gs", "qb"), ("pq", "qb"), ("pq", "qh"), ("qb", "qh")):
            r = by.get((arm_by(ctx, mode, x), arm_by(ctx, mode, y)))
            if r is not None:
                reg = f"{r['n_regressions']}/{r['n_tasks']} tasks regress" if r["qualified"] else r["reason"]
                lines.append(f"  {label:12s} {x.upper()}/{y.upper()} = {fmt_ratio(r['ratio'])}  ({reg})")
    m, c = arm_by(ctx, "target", "qb"), arm_by(ctx, "spec", "qb")
    r = by.get((m, c))
    if r is not None:
        reg = f"{r['n_regressions']}/{r['n_tasks']} tasks regress" if r["qualified"] else r["reason"]
        lines.append(f"  draft value  M_QB/C_QB = {fmt_ratio(r['ratio'])}  ({reg}; above 1: drafting pays)")
    return "\n".join(lines)


def analyze(ctx, base: dict) -> dict:
    ratios = ratios_table(base["requests"], base["qualification"], ctx.name, aa_rule=aa_rule_of(ctx.plan))
    d = ctx.defn
    text = "\n".join(
        [
            counts_text(
                ctx,
                base,
                f"Repair comparison: {len(ctx.task_ids('implementation'))} task(s), cap {d['cap']}, "
                f"{d['sessions']} session(s) x {d['repeats']} repeat(s); matching endpoints per arm",
            ),
            "",
            "Paper comparisons (paper: speculative GS/QB 2.144, 1.463, 2.176; PQ/QB 1.044, 1.068, 1.022):",
            highlights(ctx, ratios),
            "",
            f"All {len(ratios)} pairwise comparisons (Table S3 shape; regressions: tasks on which the denominator "
            "is slower):",
            ratios_text(ratios),
        ]
    )
    return {"tables": {"ratios": ratios}, "text": text, "counter_pairs": counter_pairs(ctx)}
