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
import textwrap
from pathlib import Path

from ..core.config import preset_settings
from ..core.errors import ConfigError
from ..core.panels import parse_range
from ..core.paths import REPO_ROOT
from ..core.stats import (
    DEFAULT_AA_RULE,
    DEFAULT_THRESHOLD,
    PAIRED,
    StatsError,
    VarianceComponents,
    detectable_ratio,
    plan_paired,
)
from .definitions import load_definition
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


# --------------------------------------------------------------------------- the user's goal


def with_goal(defn: dict, target: float | None = None, budget_s: float | None = None) -> dict:
    """``defn`` with its sizing's ``target`` and ``budget_s`` replaced where given (the user's
    ``--target`` / ``--budget``); a definition without ``sizing`` (the fresh design, a preset that
    turns it off) is returned unchanged: nothing sizes it."""
    if not defn.get("sizing") or (target is None and budget_s is None):
        return defn
    if target is not None and not float(target) > 1.0:
        raise ConfigError(f"{defn['campaign']}: a target detectable ratio must be above 1 ({target})")
    if budget_s is not None and not float(budget_s) > 0.0:
        raise ConfigError(f"{defn['campaign']}: a budget must be a positive number of seconds ({budget_s})")
    out = copy.deepcopy(defn)
    if target is not None:
        out["sizing"]["target"] = float(target)
    if budget_s is not None:
        out["sizing"]["budget_s"] = float(budget_s)
    return out


def budget_shares(budget_s: float, budgets: dict[str, float]) -> dict[str, float]:
    """A run's ``budget`` (seconds of the sized campaigns of one family, in all) dealt out in
    proportion to the campaigns' own ``budget_s``: ``share_c = budget * b_c / sum_c b_c``."""
    total = math.fsum(budgets.values())
    if not total > 0:
        return {}
    return {name: float(budget_s) * b / total for name, b in budgets.items()}


def _definitions(cfg) -> dict[str, dict]:
    """The run's campaign definitions under its preset, by campaign name."""
    folder = Path(str(cfg.campaigns.definitions))
    folder = folder if folder.is_absolute() else REPO_ROOT / folder
    preset = str(cfg.campaigns.preset)
    return {c: load_definition(c, preset, folder / f"{c}.yaml")[0] for c in cfg.campaigns.run}


def run_goals(cfg, definitions: dict[str, dict] | None = None) -> dict[str, tuple[float | None, float | None]]:
    """Per sized campaign of the run: the ``(target, budget_s)`` the run's ``target`` and ``budget``
    give it (:func:`budget_shares`); empty when the run sets neither (the definitions' own).
    ``definitions``: the run's, where the caller has read them already."""
    if cfg.target is None and cfg.budget is None:
        return {}
    definitions = definitions if definitions is not None else _definitions(cfg)
    sized = {c: float(d["sizing"]["budget_s"]) for c, d in definitions.items() if d.get("sizing")}
    shares = budget_shares(float(cfg.budget), sized) if cfg.budget is not None else {}
    return {c: (None if cfg.target is None else float(cfg.target), shares.get(c)) for c in sized}


def goal_args(cfg, campaign: str) -> str:
    """``--target X --budget S`` for ``refspec campaign`` from the run's goal ('' where it sets none)."""
    target, budget = run_goals(cfg).get(campaign, (None, None))
    return (f" --target {target!r}" if target is not None else "") + (
        f" --budget {budget:.3f}" if budget is not None else ""
    )


def _panel_size(defn: dict, cfg) -> int | None:
    panel = defn.get("panel") or {}
    if panel.get("source") == "humaneval":
        return len(parse_range(str(panel["tasks"])))
    if panel.get("source") == "screen":
        screen = preset_settings(cfg, "screen")
        return int(screen.want) + int(screen.controls)
    return None


def goal_text(cfg, width: int = 100) -> str:
    """What each sized campaign of the run will cost, said before the run starts: the size the cost
    model chooses for its target within its budget from the prior's costs (each campaign's pilot
    measures them again before it is sized), and what the target would cost where the budget falls
    short. Empty when no campaign of the run is sized."""
    definitions = _definitions(cfg)
    goals = run_goals(cfg, definitions)
    lines = []
    for c, defn in definitions.items():
        n_tasks = _panel_size(defn, cfg)
        if not defn.get("sizing") or not n_tasks:
            continue
        defn = with_goal(defn, *goals.get(c, (None, None)))
        n_arms = len(defn["arms"]) + (1 if defn.get("aa_arm") else 0)
        text = f"{c}: {size_text(resolve_size(defn, n_arms, n_tasks))}"
        lines.append(textwrap.fill(text, width, initial_indent="  ", subsequent_indent="    "))
    if not lines:
        return ""
    head = "what the timed campaigns will cost (per family; from the priors: each pilot measures again)"
    return "\n".join([head, *lines]) + "\n"
