"""The variance components of log request time per timed campaign, family and cap (``variance``).

Over the completed timed requests of a campaign (status ``ok`` with a time: registered warmups,
failed and disqualified requests are not timed), per family and cap, in the design that timed them
(:func:`refspec.campaigns.intervals.design_of`: paired when a process served two arms or more, else
fresh), :func:`refspec.core.stats.variance_components` splits the variance of log time, after the
arm-by-task means are removed, by the method of moments: ``between`` (the process), ``within`` (the
request) and, in the paired design, ``interaction`` (process by arm; in the fresh design it is
confounded with the process effect and null). The standard deviations are their square roots and
``share_between`` the process's share of the total. Rows that leave no degrees of freedom have no
components: ``reason`` says :data:`TOO_FEW_REQUESTS` when the within variance has none, else
:data:`TOO_FEW_PROCESSES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..core.stats import StatsError, variance_components
from .intervals import TOO_FEW_PROCESSES, design_of, timed

TOO_FEW_REQUESTS = "too_few_requests"

NO_COMPONENTS = dict(
    between=None,
    within=None,
    interaction=None,
    share_between=None,
    sd_between=None,
    sd_within=None,
    sd_interaction=None,
)


def _within_df(rows: Sequence[tuple[str, str, str, float]]) -> int:
    """Requests - (process, arm) cells - (arm, task) means + arms: the within variance's degrees of freedom."""
    cells = {(w, a) for w, a, _t, _x in rows}
    means = {(a, t) for _w, a, t, _x in rows}
    arms = {a for _w, a, _t, _x in rows}
    return len(rows) - len(cells) - len(means) + len(arms)


def variance_row(rows: Sequence[tuple[str, str, str, float]]) -> dict[str, Any]:
    """The ``variance`` columns (but the key) of the timed rows ``(worker, arm, task, t_ns)`` of one family and cap."""
    design = design_of(rows)
    out: dict[str, Any] = dict(design=design, processes=len({w for w, _a, _t, _x in rows}), requests=len(rows))
    try:
        vc = variance_components(rows, design)
    except StatsError:
        reason = TOO_FEW_REQUESTS if _within_df(rows) < 1 else TOO_FEW_PROCESSES
        return {**out, **NO_COMPONENTS, "reason": reason}
    out.update(processes=vc.n_processes, requests=vc.n_requests)
    return {
        **out,
        "between": vc.between,
        "within": vc.within,
        "interaction": vc.interaction,
        "share_between": vc.share_between,
        "sd_between": vc.sd_between,
        "sd_within": vc.sd_within,
        "sd_interaction": vc.sd_interaction,
        "reason": None,
    }


def variance_table(requests: Iterable[dict], campaign: str) -> list[dict[str, Any]]:
    """One ``variance`` row per family and cap of ``campaign`` with completed timed requests."""
    reqs = [r for r in requests if r["campaign"] == campaign and r["status"] == "ok" and r["t_ns"] is not None]
    out = []
    for fam, cap in sorted({(r["family"], int(r["cap"])) for r in reqs}):
        out.append(dict(campaign=campaign, family=fam, cap=cap, **variance_row(timed(reqs, fam, cap))))
    return out
