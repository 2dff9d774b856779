"""Sizing a paired campaign to the ratio it must resolve, before it starts.

A paired definition may carry ``sizing: {target, budget_s, prior: {between, within, interaction,
process_s, request_s}}``: the detectable ratio it must reach (default 1.03), the seconds it may
spend, and the variance components of log request time and the costs (a process's start with its
warm-ups, one request) measured on an earlier run of the same campaign on this kind of machine
(the ``variance`` table and the median request time of a sealed run). Before it is sized, the
campaign's pilot (:mod:`refspec.campaigns.pilot`) measures the two costs on this machine; where it
did, they replace the prior's and its seconds come out of the budget. From them the
cost model of :func:`refspec.core.stats.plan_paired` chooses the number of processes and the
passes over the panel per process (``repeats``), its expected detectable ratio ``tau * exp(h)``
under the calibration rule the plan freezes (``aa_rule``: ``F = 1`` while the A/A control holds;
``tau * exp(2 h)`` under the floor rule): one pass times every arm once on every task, so
a pass's contrast averages ``T`` requests per arm and its variance is ``within / T`` at a cost of
``T`` requests per arm.

:func:`resolve_size` runs once, when the campaign is prepared: the definition's ``processes`` and
``repeats`` become the plan's (replication, one process per session: its ``sessions``), and the definition gains ``sizing.plan`` (processes, repeats,
expected half width, expected detectable ratio, expected seconds, reachable, reason), so the
frozen plan records the choice and the expected detectable ratio, and a resumed campaign
recomputes the same. When the budget cannot reach the target, ``reachable`` is false and the
reason says what the budget reaches and what the target would cost; the campaign prints it before
its first session.
"""

from __future__ import annotations

import copy
import math

from ..core.errors import ConfigError
from ..core.stats import (
    DEFAULT_AA_RULE,
    DEFAULT_THRESHOLD,
    PAIRED,
    StatsError,
    VarianceComponents,
    detectable_ratio,
    plan_paired,
)
from .pilot import costs

DEFAULT_TARGET = 1.03


def resolve_size(defn: dict, n_arms: int, n_tasks: int, aa_rule: str = DEFAULT_AA_RULE) -> dict:
    """``defn`` with ``processes`` and ``repeats`` chosen by its ``sizing`` (unchanged without one), the
    expected detectable ratio under ``aa_rule``, the rule the plan freezes."""
    sizing = defn.get("sizing")
    if not sizing:
        return defn
    if defn.get("design") != "paired":
        raise ConfigError(f"{defn['campaign']}: sizing applies to the paired design (design: paired)")
    prior = sizing["prior"]
    process_s, request_s, budget_s = costs(sizing)
    per_pass = max(1, n_tasks)
    comps = VarianceComponents(
        PAIRED,
        between=float(prior["between"]),
        within=float(prior["within"]) / per_pass,
        interaction=float(prior["interaction"]),
        n_processes=0,
        n_requests=0,
    )
    threshold = float((defn.get("bootstrap") or {}).get("threshold", DEFAULT_THRESHOLD))
    target = float(sizing.get("target", DEFAULT_TARGET))
    try:
        p = plan_paired(
            comps,
            process_s=process_s,
            request_s=request_s * per_pass,
            arms=n_arms,
            target=target,
            threshold=threshold,
            budget_s=budget_s,
            max_processes=int(sizing.get("max_processes", 32)),
            max_requests=int(sizing.get("max_repeats", 16)),
            aa_rule=aa_rule,
        )
    except StatsError as e:
        raise ConfigError(f"{defn['campaign']}: sizing: {e}") from e
    out = copy.deepcopy(defn)
    # replication runs one process per session: its processes are its sessions
    out["sessions" if defn["campaign"] == "replication" else "processes"] = p.processes
    out["repeats"] = p.requests_per_arm
    out["sizing"]["plan"] = {
        "processes": p.processes,
        "repeats": p.requests_per_arm,
        "expected_half_width": p.expected_half_width,
        "expected_detectable": p.expected_detectable,
        "expected_seconds": p.expected_seconds,
        "reachable": p.reachable,
        "reason": p.reason.replace("requests per arm", "passes over the panel"),
        "target": target,
        "arms": n_arms,
        "tasks": n_tasks,
    }
    return out


def size_text(defn: dict) -> str | None:
    """One line on the chosen size, for the console before the first session (None without sizing)."""
    plan = (defn.get("sizing") or {}).get("plan")
    if not plan:
        return None
    head = "sizing" if plan["reachable"] else "sizing: the budget does not reach the target"
    return (
        f"{head}: {plan['processes']} process(es) x {plan['repeats']} pass(es) over {plan['tasks']} task(s) "
        f"of {plan['arms']} arms; expected detectable ratio {plan['expected_detectable']:.4f} "
        f"(target {plan['target']}), about {plan['expected_seconds']:.0f} s; {plan['reason']}"
    )


def achieved(campaign: str, tables: dict, threshold: float = DEFAULT_THRESHOLD) -> tuple[float | None, int]:
    """(the largest detectable ratio among the run's intervals, how many intervals): the qualified
    ratios' ``detectable`` column, or for replication ``tau * F * exp(log(hi/lo)/2)`` of each estimate
    with its floor ``F``."""
    if campaign == "replication":
        vals = [
            detectable_ratio(math.log(e["hi"] / e["lo"]) / 2.0, threshold, float(e.get("floor") or 1.0))
            for e in tables.get("estimates") or []
            if e.get("lo") is not None and e.get("hi") is not None
        ]
    else:
        vals = [r["detectable"] for r in tables.get("ratios") or [] if r.get("detectable") is not None]
    return (max(vals) if vals else None), len(vals)


def sizing_table(defn: dict, family: str, tables: dict) -> list[dict]:
    """The ``sizing`` row of a sized campaign: the plan chosen before it ran beside what it achieved."""
    plan = (defn.get("sizing") or {}).get("plan")
    if not plan:
        return []
    threshold = float((defn.get("bootstrap") or {}).get("threshold", DEFAULT_THRESHOLD))
    value, n = achieved(defn["campaign"], tables, threshold)
    return [
        dict(
            campaign=defn["campaign"],
            family=family,
            target=float(plan["target"]),
            budget_s=float(defn["sizing"]["budget_s"]),
            processes=int(plan["processes"]),
            repeats=int(plan["repeats"]),
            expected_detectable=float(plan["expected_detectable"]),
            expected_seconds=float(plan["expected_seconds"]),
            reachable=bool(plan["reachable"]),
            reason=plan["reason"],
            achieved_detectable=value,
            achieved_intervals=n,
        )
    ]
