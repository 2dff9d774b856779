"""Every qualified ratio's interval, verdict and detectable ratio, in the design that timed it.

A timed campaign's ``requests`` rows say which process (``worker``) served each request. When
every process served one arm, the campaign ran the *fresh* design and a ratio's interval is the
worker-level (Welch) interval over the two arms' processes (:func:`refspec.core.stats.process_interval`);
when a process served several arms, it ran the *paired* design and the interval is the one-sample
t interval over the processes' within-process contrasts (:func:`refspec.core.stats.paired_interval`).
The design is read from the rows (:func:`design_of`), never assumed, so the checker recomputes it.

Each qualified ratio of a campaign, family and cap gets (:func:`ratio_columns`): the design, the
units (processes per arm, the smaller side, or processes timing both arms), the 95 % interval, the
verdict of :func:`refspec.core.stats.decide_ratio` on the 95 % and 90 % intervals weighed by the
floor ``F`` of the campaign's A/A control (:func:`aa_floor`: the twin's interval in the same design,
under the rule the campaign's plan froze, ``aa_rule``, :func:`refspec.core.stats.decision_floor`:
1 while the control holds 1 under the calibration rule, ``max(hi, 1/lo)`` when it does not or under
the floor rule; 1 without a control) at the threshold :data:`refspec.core.stats.DEFAULT_THRESHOLD`,
and the detectable ratio ``tau * F * exp(h)`` of the ratio's own half width ``h``. With fewer than
two units there is no interval: the verdict is ``too_few_processes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..core.arms import is_twin, twin_name
from ..core.stats import (
    DEFAULT_AA_RULE,
    DEFAULT_THRESHOLD,
    FRESH,
    PAIRED,
    Interval,
    StatsError,
    decide_ratio,
    decision_floor,
    detectable_ratio,
    paired_interval,
    process_contrasts,
    process_interval,
)

TOO_FEW_PROCESSES = "too_few_processes"
LEVEL_EQUIVALENCE = 0.90  # the two one-sided tests at 5 % each


def timed(reqs: Iterable[dict], family: str, cap: int) -> list[tuple[str, str, str, float]]:
    """``(worker, arm, task, t_ns)`` of the completed timed requests of one family and cap."""
    return [
        (r["worker"], r["arm"], r["task_id"], float(r["t_ns"]))
        for r in reqs
        if r["family"] == family and int(r["cap"]) == cap and r["status"] == "ok" and r["t_ns"] is not None
    ]


def design_of(rows: Sequence[tuple[str, str, str, float]]) -> str:
    """``paired`` when a process timed requests of two arms or more, else ``fresh``."""
    arms: dict[str, set] = {}
    for w, a, _t, _x in rows:
        arms.setdefault(w, set()).add(a)
    return PAIRED if any(len(v) > 1 for v in arms.values()) else FRESH


def design_interval(
    rows: Sequence[tuple[str, str, str, float]], num: str, den: str, tasks: Sequence[str], design: str, level: float
) -> Interval:
    """The interval of ``num``/``den`` on ``tasks`` in ``design`` (see the module docstring)."""
    if design == PAIRED:
        return paired_interval(process_contrasts(rows, num, den, tasks), level)

    def blocks(arm: str) -> dict[str, list[tuple[str, float]]]:
        out: dict[str, list[tuple[str, float]]] = {}
        for w, a, t, x in rows:
            if a == arm:
                out.setdefault(w, []).append((t, x))
        return out

    return process_interval(blocks(num), blocks(den), tasks, level)


def aa_floor(
    rows: Sequence[tuple[str, str, str, float]], tasks: Sequence[str], design: str, rule: str = DEFAULT_AA_RULE
) -> float:
    """The floor ``F`` of the campaign's A/A control (the first arm, by name, whose twin has timed
    rows), in ``design``, under ``rule`` (:func:`~refspec.core.stats.decision_floor`); 1 without a
    control or without its interval."""
    names = {a for _w, a, _t, _x in rows}
    for arm in sorted(a for a in names if not is_twin(a)):
        twin = twin_name(arm)
        if twin in names:
            try:
                iv = design_interval(rows, twin, arm, tasks, design, 0.95)
            except StatsError:
                return 1.0
            return decision_floor(iv.lo, iv.hi, rule)
    return 1.0


def ratio_columns(
    rows: Sequence[tuple[str, str, str, float]],
    num: str,
    den: str,
    tasks: Sequence[str],
    design: str,
    floor: float = 1.0,
    threshold: float = DEFAULT_THRESHOLD,
) -> dict[str, Any]:
    """The ``ratios`` columns of one qualified ratio: design, units, lo, hi, verdict, detectable."""
    try:
        iv = design_interval(rows, num, den, tasks, design, 0.95)
        iv90 = design_interval(rows, num, den, tasks, design, LEVEL_EQUIVALENCE)
    except StatsError:
        return dict(
            design=design,
            units=_units(rows, num, den, design),
            lo=None,
            hi=None,
            verdict=TOO_FEW_PROCESSES,
            detectable=None,
        )
    return dict(
        design=design,
        units=iv.units,
        lo=iv.lo,
        hi=iv.hi,
        verdict=decide_ratio(iv, iv90, threshold, floor),
        detectable=detectable_ratio(iv.half_width, threshold, floor),
    )


def _units(rows, num: str, den: str, design: str) -> int:
    """Processes timing both arms (paired) or the smaller arm's processes (fresh)."""
    procs = {a: {w for w, aa, _t, _x in rows if aa == a} for a in (num, den)}
    return len(procs[num] & procs[den]) if design == PAIRED else min(len(procs[num]), len(procs[den]))


UNQUALIFIED = dict(design=None, units=None, lo=None, hi=None, verdict=None, detectable=None)
