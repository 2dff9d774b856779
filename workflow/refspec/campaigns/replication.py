"""Replication E2 (paper §5.3, Table S5, Supplement S3.1).

Fresh workers, short counterbalanced PQ/QB blocks in ABBA order drawn from the
seed (:func:`refspec.campaigns.scheduler.abba_schedule`), one registered
warmup per worker, ``references_per_session`` serial-reference endpoints per
task and session, sessions separated by ``gap_s`` (paper: at least one hour
between a completion and the next start). Output: the session-level log
contrasts (``contrasts``) and the bootstrap estimates (:mod:`refspec.core.stats`) with the
threshold decision (``estimates``), with the settings frozen in the plan's
``bootstrap: {seed, draws, threshold}``. The recorded acceptance, rollback and
workload counters of each PQ/QB pair are compared per task and session (the
paper's 216-pair check).
"""

from __future__ import annotations

import math

from ..core.arms import REFERENCE_ARM, is_twin, twin_of
from ..core.errors import ConfigError
from ..core.stats import aa_rule_of
from .confirmation import named_arms
from .derived import replication_tables
from .evidence import COMPARED_COUNTERS
from .noise import noise_table, noise_text, weigh_estimates
from .scheduler import abba_schedule, paired_schedule, session_ids
from .text import fmt_ratio, table_text


def panels(defn: dict) -> dict:
    return {"panel": defn["panel"]}


def arms(defn: dict, catalog: dict) -> list:
    out = named_arms(defn, catalog)
    for path in defn["paths"]:
        for lay in defn["layouts"]:
            found = [a.name for a in out if a.name != REFERENCE_ARM and a.mode == path and a.layout == lay]
            if len(found) != 1:
                raise ConfigError(
                    f"replication: need exactly one {path} arm with layout {lay} among "
                    f"{', '.join(a.name for a in out)} (found {found or 'none'})"
                )
    used = {a.name for a in out if a.name != REFERENCE_ARM and a.mode in defn["paths"] and a.layout in defn["layouts"]}
    extra = [a.name for a in out if a.name != REFERENCE_ARM and a.name not in used]
    if extra:
        raise ConfigError(f"replication: arm(s) {', '.join(extra)} are outside the paths/layouts compared")
    return out


def arm_for(ctx_arms: dict, path: str, layout: str) -> str:
    """The replication arm of a path and layout (never an A/A twin)."""
    return next(
        n
        for n, a in ctx_arms.items()
        if n != REFERENCE_ARM and not is_twin(n) and a.mode == path and a.layout == layout
    )


def schedule(ctx) -> list:
    """ABBA blocks of fresh single-arm workers, or (``design: paired``) one process per session that
    serves every arm request by request: the session contrast is then that process's within-process
    contrast, and the session interval of the estimates is the paired design's interval over processes.
    Every arm (R included: its requests are the session's serial references) runs
    ``max(repeats, references_per_session)`` times per task and session."""
    d = ctx.defn
    if d.get("design") == "paired":
        return paired_schedule(
            session_ids(d["sessions"]),
            list(ctx.arms),
            ctx.task_ids("panel"),
            caps=[d["cap"]],
            repeats=max(d["repeats"], d["references_per_session"]),
            processes=1,
            seed=d["seed"],
        )
    return abba_schedule(
        session_ids(d["sessions"]),
        ctx.task_ids("panel"),
        paths=d["paths"],
        layouts=d["layouts"],
        arm_for=lambda p, lay: arm_for(ctx.arms, p, lay),
        block_tasks=d["block_tasks"],
        cap=d["cap"],
        repeats=d["repeats"],
        references=d["references_per_session"],
        seed=d["seed"],
        twins={twin_of(n): n for n in ctx.arms if is_twin(n)},
    )


def counter_pairs(ctx) -> list[tuple]:
    x, y = ctx.defn["layouts"]
    label = {"target": "target-only", "spec": "speculative"}
    return [
        (f"{label[p]} {x.upper()}/{y.upper()}", arm_for(ctx.arms, p, x), arm_for(ctx.arms, p, y), COMPARED_COUNTERS)
        for p in ctx.defn["paths"]
    ]


def reference_check(ctx, base: dict) -> str:
    """Serial-reference endpoints per task and session, and whether they agree."""
    need = ctx.defn["references_per_session"]
    eps: dict[tuple, set] = {}
    n: dict[tuple, int] = {}
    for e in base["endpoints"]:
        if e["arm"] == REFERENCE_ARM:
            k = (e["session"], e["task_id"])
            n[k] = n.get(k, 0) + 1
            eps.setdefault(k, set()).add(e["endpoint_sha256"])
    cells = [(s.id, t) for s in ctx.sessions for t in ctx.task_ids("panel")]
    full = sum(1 for c in cells if n.get(c, 0) >= need)
    stable = sum(1 for c in cells if len(eps.get(c, ())) == 1)
    return (
        f"serial references: {full}/{len(cells)} task/session cells have {need} reference endpoint(s); "
        f"{stable}/{len(cells)} cells agree"
    )


def analyze(ctx, base: dict) -> dict:
    boot, rule = ctx.plan.get("bootstrap") or ctx.defn["bootstrap"], aa_rule_of(ctx.plan)
    x, y = ctx.defn["layouts"]
    contrasts, estimates = replication_tables(
        base["requests"],
        base["qualification"],
        campaign="replication",
        comparisons=[(x, y)],
        paths=ctx.defn["paths"],
        threshold=float(boot["threshold"]),
    )
    noise = noise_table(base["requests"], base["qualification"], "replication", float(boot["threshold"]), rule)
    estimates = weigh_estimates(estimates, noise)
    rows = []
    arm_label = {"target": "M", "spec": "C"}
    for e in estimates:
        num, den = (f"{arm_label[e['path']]}_{v}" for v in e["comparison"].split("/"))
        interval = f"[{e['lo']:.6f}, {e['hi']:.6f}]" if e["lo"] is not None else "-"
        rows.append(
            [
                e["path"],
                f"{num}/{den}",
                fmt_ratio(e["estimate"]),
                interval,
                e["decision"],
                e["n_sessions"],
                f"{e['n_regressions']}/{e['n_tasks']}" if e["n_regressions"] is not None else "-",
                e["regressed_tasks"] or e["reason"] or "",
            ]
        )
    crow = []
    for c in contrasts:
        crow.append(
            [c["path"], c["comparison"], c["session"], f"{math.exp(c['c_s']):.6f}", f"{c['c_s']:+.6f}", c["n_tasks"]]
        )

    def _gap(s: dict) -> str:
        return "first" if s["gap_before_s"] is None else f"gap {s['gap_before_s']:.1f} s"

    gap_text = ", ".join(f"{s['session']} {s['started_utc']} ({_gap(s)})" for s in base["sessions"])
    workers = sum(s["n_workers"] for s in base["sessions"])
    warm = sum(1 for r in base["requests"] if r["status"] == "excluded_warmup")
    timed = sum(1 for r in base["requests"] if r["status"] == "ok" and r["arm"] != REFERENCE_ARM)
    refs = sum(1 for r in base["requests"] if r["status"] == "ok" and r["arm"] == REFERENCE_ARM)
    text = "\n".join(
        [
            f"Replication E2 (Table S5 shape): {len(ctx.task_ids('panel'))} task(s), {len(ctx.sessions)} session(s), "
            f"blocks of {ctx.defn['block_tasks']} task(s), cap {ctx.defn['cap']}; 95 % t intervals over sessions, "
            f"threshold {boot['threshold']} weighed by the A/A floor",
            f"{timed} {x.upper()}/{y.upper()} requests and {refs} serial references in {workers} fresh workers "
            f"({warm} registered warmups)",
            reference_check(ctx, base),
            "sessions: " + gap_text,
            table_text(
                [
                    "path",
                    "comparison",
                    "estimate",
                    "95% interval",
                    "decision",
                    "sessions",
                    "regressions",
                    "regressed tasks / reason",
                ],
                rows,
            ),
            "(paper, speculative C_PQ/C_QB: 1.031614 [1.025393, 1.037926], 1.065803 [1.063387, 1.068399], "
            "1.029114 [1.020126, 1.039149])",
            noise_text(noise),
            "",
            "session contrasts exp(c_s):",
            table_text(["path", "comparison", "session", "exp(c_s)", "c_s", "tasks"], crow),
        ]
    )
    return {
        "tables": {"contrasts": contrasts, "estimates": estimates, "noise": noise},
        "text": text,
        "counter_pairs": counter_pairs(ctx),
    }
