"""The interval columns of every qualified ratio recomputed (``ratios``: design, units, lo, hi,
verdict, detectable), as ``refspec.campaigns.intervals`` defines them (anc/tables.md).

The design is read from the requests rows: paired when a process (``worker``) timed requests of two
arms or more within the campaign, family and cap, else fresh. Paired: the one-sample t interval over
the processes' within-process contrasts; fresh: the worker-level (Welch) interval. The verdict reads
the 95 % and 90 % intervals at the threshold weighed by the floor F of the campaign's A/A control (its
first twin's interval in the same design; 1 without one) under the rule the campaign's plan froze
(``aa_rule``, read by :func:`aa_rule_of`; ``"floor"`` when the plan has no such field, as every plan
before it; refspec_check.stats.decision_floor: under "calibration" F = 1 while the twin's interval
holds 1, max(hi, 1/lo) when it does not; under "floor" max(hi, 1/lo)), the detectable ratio is
tau * F * exp(log(hi/lo)/2); with fewer than two units there is no interval and the verdict is
too_few_processes. Both rules agree with refspec.core.stats to the bit."""

from __future__ import annotations

import math

from refspec_check.contract import TWIN_SUFFIX
from refspec_check.stats import (
    AA_RULES,
    LEGACY_AA_RULE,
    decide_ratio,
    decision_floor,
    detectable_ratio,
    paired_interval,
    process_contrasts,
    process_interval,
)

THRESHOLD = 1.02
TOO_FEW = "too_few_processes"


def timed(requests: list, camp: str, fam: str, cap: int) -> list:
    """(worker, arm, task, t_ns) of the completed timed requests of one campaign, family and cap."""
    return [
        (r["worker"], r["arm"], r["task_id"], float(r["t_ns"]))
        for r in requests
        if r["campaign"] == camp
        and r["family"] == fam
        and r["cap"] == cap
        and r["status"] == "ok"
        and r["t_ns"] is not None
    ]


def design_of(rows: list) -> str:
    arms: dict = {}
    for w, a, _t, _x in rows:
        arms.setdefault(w, set()).add(a)
    return "paired" if any(len(v) > 1 for v in arms.values()) else "fresh"


def interval(rows: list, num: str, den: str, tasks: list, design: str, level: float):
    """(value, lo, hi, df, units) or None (fewer than two units)."""
    if design == "paired":
        return paired_interval(process_contrasts(rows, num, den, tasks), level)
    blocks: dict = {num: {}, den: {}}
    for w, a, t, x in rows:
        if a in blocks:
            blocks[a].setdefault(w, []).append((t, x))
    return process_interval(blocks[num], blocks[den], tasks, level)


def aa_rule_of(plan, campaign: str, family: str) -> str:
    """The A/A rule of a campaign and family as plan.json froze it: the ``aa_rule`` of the campaign's own
    plan (``campaigns[KEY]``, KEY ``<name>`` or ``<family>/<name>``; its ``campaign`` and ``family``
    fields where present), else the plan's top-level ``aa_rule``; ``"floor"`` (LEGACY_AA_RULE) where
    neither records one, as for every plan frozen before the field. An unknown rule is read as stated
    and refused by decision_floor."""
    if not isinstance(plan, dict):
        return LEGACY_AA_RULE
    camps = plan.get("campaigns") if isinstance(plan.get("campaigns"), dict) else {}
    for key, p in camps.items():
        if not isinstance(p, dict):
            continue
        name = p.get("campaign") if isinstance(p.get("campaign"), str) else str(key).rsplit("/", 1)[-1]
        fam = p.get("family") if isinstance(p.get("family"), str) else None
        if fam is None and "/" in str(key):
            fam = str(key).split("/", 1)[0]
        if name == campaign and fam in (family, None):
            return p.get("aa_rule", LEGACY_AA_RULE)
    return plan.get("aa_rule", LEGACY_AA_RULE)


class AARules:
    """(campaign, family) -> the A/A rule of plan.json (:func:`aa_rule_of`), each read once; an unknown
    rule is a finding on plan.json, and the campaign is then checked under "floor"."""

    def __init__(self, c, plan):
        self.c, self.plan, self.seen = c, plan, {}

    def __call__(self, campaign: str, family: str) -> str:
        key = (campaign, family)
        if key not in self.seen:
            rule = aa_rule_of(self.plan, campaign, family)
            if not (isinstance(rule, str) and rule in AA_RULES):
                self.c.bad("plan.json", f"{campaign} ({family}): aa_rule {rule!r} is none of {', '.join(AA_RULES)}")
                rule = LEGACY_AA_RULE
            self.seen[key] = rule
        return self.seen[key]


def aa_floor(rows: list, tasks: list, design: str, rule: str = LEGACY_AA_RULE) -> float:
    names = {r[1] for r in rows}
    for arm in sorted(a for a in names if not a.endswith(TWIN_SUFFIX)):
        twin = arm + TWIN_SUFFIX
        if twin in names:
            iv = interval(rows, twin, arm, tasks, design, 0.95)
            return 1.0 if iv is None else decision_floor(iv[1], iv[2], rule)
    return 1.0


def units_of(rows: list, num: str, den: str, design: str) -> int:
    procs = {a: {w for w, aa, _t, _x in rows if aa == a} for a in (num, den)}
    return len(procs[num] & procs[den]) if design == "paired" else min(len(procs[num]), len(procs[den]))


def ratio_columns(rows: list, num: str, den: str, tasks: list, design: str, floor: float) -> dict:
    iv, iv90 = interval(rows, num, den, tasks, design, 0.95), interval(rows, num, den, tasks, design, 0.90)
    if iv is None or iv90 is None:
        units = units_of(rows, num, den, design)
        return dict(design=design, units=units, lo=None, hi=None, verdict=TOO_FEW, detectable=None)
    _v, lo, hi, _df, units = iv
    return dict(
        design=design,
        units=units,
        lo=lo,
        hi=hi,
        verdict=decide_ratio(lo, hi, iv90[1], iv90[2], THRESHOLD, floor),
        detectable=detectable_ratio(math.log(hi / lo) / 2.0, THRESHOLD, floor),
    )
