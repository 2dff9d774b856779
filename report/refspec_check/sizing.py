"""A paired campaign's size recomputed (``sizing``), as ``refspec.campaigns.sizing`` defines it
(anc/campaigns.md, "Sizing").

For every campaign of plan.json whose frozen definition has ``sizing``: the cost model of the paired
design (Kalibera and Jones) run again from the definition's prior: its variance components, and
its costs unless the campaign's pilot measured them (``sizing.pilot``: then the pilot's
``process_s`` and ``request_s``, and the budget less the pilot's ``seconds``). With ``T`` the panel's tasks and
``A`` the plan's arms, one pass over the panel has within variance ``W / T`` and costs ``T`` requests
per arm; for ``P = 2 .. max_processes`` processes and ``n = 1 .. max_repeats`` passes,
``h = t(0.975, P - 1) * sqrt((2 I + 2 W / (T n)) / P)``, detectable ``tau * exp(h)`` under the A/A
rule "calibration" the campaign's plan froze (``aa_rule``: F = 1 while the control holds) or
``tau * exp(2 h)`` under "floor" (a plan without the field; refspec_check.stats.expected_detectable,
to the bit with refspec.core.stats) and cost ``P * (process_s + A * n * T * request_s)``: the cheapest plan that reaches the target within
the budget, else the best the budget reaches (reachable false). The chosen processes and repeats
must be the definition's ``processes`` (replication: ``sessions``) and ``repeats``, and the
``sizing`` row must state them with the expected detectable ratio and cost, the sentence, and the
largest detectable ratio the run achieved (the qualified ratios' ``detectable``, or for replication
``tau * F * exp(log(hi/lo)/2)`` of each estimate with its floor)."""

from __future__ import annotations

import math

from refspec_check.context import Context
from refspec_check.stats import AA_RULES, LEGACY_AA_RULE, MIN_UNITS, detectable_ratio, expected_detectable, t_quantile

CONFIDENCE = 0.95


def plan_paired(
    inter: float,
    within: float,
    process_s: float,
    request_s: float,
    arms: int,
    target: float,
    thr: float,
    budget_s: float,
    max_processes: int,
    max_requests: int,
    rule: str = LEGACY_AA_RULE,
) -> tuple:
    """(processes, passes, half width, detectable, seconds, reachable, reason); detectable under the A/A ``rule``."""
    plans = []
    for P in range(MIN_UNITS, max_processes + 1):
        q = t_quantile(0.5 + CONFIDENCE / 2.0, float(P - 1))
        for n in range(1, max_requests + 1):
            h = q * math.sqrt((2.0 * inter + 2.0 * within / n) / P)
            plans.append((P, n, h, expected_detectable(h, thr, rule), P * (process_s + arms * n * request_s)))

    def said(x):
        return f"{x[0]} processes x {x[1]} requests per arm, {x[4]:.0f} s"

    reaching = [x for x in plans if x[3] <= target]
    cheapest = min(reaching, key=lambda x: (x[4], x[3], x[0], x[1])) if reaching else None
    if cheapest is not None and cheapest[4] <= budget_s:
        return cheapest + (
            True,
            f"{said(cheapest)}: a detectable ratio of {cheapest[3]:.4f} <= {target} within {budget_s:.0f} s",
        )
    if cheapest is None:
        costs = f"the target {target} is not reached within {max_processes} processes x {max_requests} requests per arm"
    else:
        costs = f"the target {target} would cost {cheapest[4]:.0f} s ({said(cheapest)})"
    fits = [x for x in plans if x[4] <= budget_s]
    if not fits:
        small = min(plans, key=lambda x: (x[4], x[0], x[1]))
        return small + (False, f"the budget of {budget_s:.0f} s buys no design (the smallest: {said(small)}); {costs}")
    best = min(fits, key=lambda x: (x[3], x[4], x[0], x[1]))
    return best + (
        False,
        f"the budget of {budget_s:.0f} s reaches a detectable ratio of {best[3]:.4f} at best ({said(best)}); {costs}",
    )


def _costs(sizing: dict) -> tuple:
    """(process_s, request_s, budget_s for the plan): the pilot's costs and the budget less the
    pilot's seconds where the pilot measured them, else the prior's costs and the whole budget."""
    pilot = sizing.get("pilot") or {}
    budget = float(sizing["budget_s"])
    if "request_s" in pilot:
        return float(pilot["process_s"]), float(pilot["request_s"]), max(0.0, budget - float(pilot["seconds"]))
    return float(sizing["prior"]["process_s"]), float(sizing["prior"]["request_s"]), budget


def expected_row(plan: dict) -> dict | None:
    """The sizing columns a frozen campaign plan implies (None when its definition has no sizing)."""
    defn = plan.get("definition") or {}
    sizing = defn.get("sizing")
    if not sizing:
        return None
    prior = sizing["prior"]
    process_s, request_s, budget_s = _costs(sizing)
    thr = float((defn.get("bootstrap") or {}).get("threshold", 1.02))
    tasks = max((len(p.get("tasks") or []) for p in (plan.get("panels") or {}).values()), default=0)
    per = max(1, tasks)
    arms = len(plan.get("arms") or {})
    target = float(sizing.get("target", 1.03))
    rule = plan.get("aa_rule", LEGACY_AA_RULE)  # the A/A rule the plan froze ("floor" before the field)
    P, n, _h, det, secs, ok, why = plan_paired(
        float(prior["interaction"]),
        float(prior["within"]) / per,
        process_s,
        request_s * per,
        arms,
        target,
        thr,
        budget_s,
        int(sizing.get("max_processes", 32)),
        int(sizing.get("max_repeats", 16)),
        rule if rule in AA_RULES else LEGACY_AA_RULE,
    )
    return dict(
        campaign=defn.get("campaign"),
        family=plan.get("family"),
        target=target,
        budget_s=float(sizing["budget_s"]),
        processes=P,
        repeats=n,
        expected_detectable=det,
        expected_seconds=secs,
        reachable=ok,
        reason=why.replace("requests per arm", "passes over the panel"),
        _threshold=thr,
        _units_key="sessions" if defn.get("campaign") == "replication" else "processes",
        _defn=defn,
    )


def achieved(ctx: Context, campaign: str, family: str, thr: float) -> tuple:
    t = ctx.tables
    if campaign == "replication":
        vals = [
            detectable_ratio(math.log(e["hi"] / e["lo"]) / 2.0, thr, float(e["floor"] or 1.0))
            for e in (t["estimates"].rows if "estimates" in t else [])
            if e["family"] == family and e["lo"] is not None and e["hi"] is not None
        ]
    else:
        vals = [
            r["detectable"]
            for r in (t["ratios"].rows if "ratios" in t else [])
            if r["campaign"] == campaign and r["family"] == family and r["detectable"] is not None
        ]
    return (max(vals) if vals else None), len(vals)


SHOWN = ("target", "budget_s", "processes", "repeats", "expected_detectable", "expected_seconds", "achieved_detectable")


def check_sizing(ctx: Context, plan: dict | None) -> None:
    c, E = ctx.c, ctx.E
    want = {}
    for p in ((plan or {}).get("campaigns") or {}).values():
        row = expected_row(p) if isinstance(p, dict) else None
        if row is not None:
            want[(row["campaign"], row["family"])] = row
    stated = ctx.tables.get("sizing")
    seen = set()
    for i, row in enumerate(stated.rows if stated is not None else []):
        key = (row["campaign"], row["family"])
        seen.add(key)
        w = want.get(key)
        if w is None:
            c.bad(stated.where(i), "a sizing row for a campaign whose frozen definition has no sizing")
            continue
        defn = w["_defn"]
        c.same(stated.where(i, "processes"), defn.get(w["_units_key"]), w["processes"], "the definition's size:")
        c.same(stated.where(i, "repeats"), defn.get("repeats"), w["repeats"], "the definition's size:")
        value, n = achieved(ctx, key[0], key[1], w["_threshold"])
        got = {k: v for k, v in w.items() if not k.startswith("_")}
        got.update(achieved_detectable=value, achieved_intervals=n)
        base = ("sizing", key[0], key[1])
        for col, v in got.items():
            c.recomputed += 1
            c.same(stated.where(i, col), row[col], v)
            if col in SHOWN and v is not None:
                E.add(base + (col,), v, ctx.src("sizing"))
    for key in sorted(set(want) - seen):
        c.bad(
            "sizing.csv",
            f"missing: the frozen plan of {key[0]} ({key[1]}) was sized, but the archive has no sizing row",
        )
