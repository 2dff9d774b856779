"""The interval columns of every qualified ratio recomputed (``ratios``: design, units, lo, hi,
verdict, detectable), as ``refspec.campaigns.intervals`` defines them (anc/tables.md).

The design is read from the requests rows: paired when a process (``worker``) timed requests of two
arms or more within the campaign, family and cap, else fresh. Paired: the one-sample t interval over
the processes' within-process contrasts; fresh: the worker-level (Welch) interval. The verdict reads
the 95 % and 90 % intervals at the threshold weighed by the campaign's A/A floor (its first twin's
interval in the same design; 1 without one), the detectable ratio is tau * F * exp(log(hi/lo)/2);
with fewer than two units there is no interval and the verdict is too_few_processes."""

from __future__ import annotations

import math

from refspec_check.contract import TWIN_SUFFIX
from refspec_check.stats import (
    decide_ratio,
    detectable_ratio,
    floor_of,
    paired_interval,
    process_contrasts,
    worker_interval,
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
    return worker_interval(blocks[num], blocks[den], tasks, level)


def aa_floor(rows: list, tasks: list, design: str) -> float:
    names = {r[1] for r in rows}
    for arm in sorted(a for a in names if not a.endswith(TWIN_SUFFIX)):
        twin = arm + TWIN_SUFFIX
        if twin in names:
            iv = interval(rows, twin, arm, tasks, design, 0.95)
            return 1.0 if iv is None else floor_of(iv[1], iv[2])
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
