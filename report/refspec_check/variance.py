"""The variance components of log request time recomputed (``variance``), as
``refspec.campaigns.variance`` defines them (anc/tables.md).

Per campaign, family and cap of requests.csv with completed timed requests (status ok with a time):
the design read from the rows (refspec_check.intervals: paired when a process timed two arms or more,
else fresh), the processes and requests, and the method-of-moments components of log time after the
arm-by-task means are removed (refspec_check.stats.variance_components): between, within, the
process-by-arm interaction (paired only; null in the fresh design), share_between and the square roots.
Rows without degrees of freedom have no components and a reason: too_few_requests when the within
variance has none (requests - process-arm cells - arm-task means + arms < 1), else too_few_processes.
Every timed campaign, family and cap has its row, and no row is without timed requests."""

from __future__ import annotations

import math

from refspec_check import intervals as IV
from refspec_check.context import Context
from refspec_check.stats import variance_components

TOO_FEW_PROCESSES = "too_few_processes"
TOO_FEW_REQUESTS = "too_few_requests"
COMPONENTS = ("between", "within", "interaction", "share_between", "sd_between", "sd_within", "sd_interaction")


def variance_row(rows: list) -> dict:
    """The variance columns (but the key) of the timed rows (worker, arm, task, t_ns) of one family and cap."""
    design = IV.design_of(rows)
    out = dict(design=design, processes=len({r[0] for r in rows}), requests=len(rows))
    vc = variance_components(rows, design)
    if vc is None:
        df_w = len(rows) - len({r[:2] for r in rows}) - len({r[1:3] for r in rows}) + len({r[1] for r in rows})
        out.update(dict.fromkeys(COMPONENTS))
        out["reason"] = TOO_FEW_REQUESTS if df_w < 1 else TOO_FEW_PROCESSES
        return out
    inter = vc["interaction"]
    out.update(
        between=vc["between"],
        within=vc["within"],
        interaction=inter,
        share_between=vc["share_between"],
        sd_between=math.sqrt(vc["between"]),
        sd_within=math.sqrt(vc["within"]),
        sd_interaction=None if inter is None else math.sqrt(inter),
        reason=None,
    )
    return out


def check_variance(ctx: Context) -> None:
    """Every row of variance.csv against its recomputation from requests.csv; the numbers the report
    shows (cap, processes, requests; with components sd_between, sd_within, share_between and, paired,
    sd_interaction) registered under ``variance|campaign|family|cap|column``."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    reqs = tables["requests"].rows if "requests" in tables else []
    timed = {(r["campaign"], r["family"], r["cap"]) for r in reqs if r["status"] == "ok" and r["t_ns"] is not None}
    if "variance" not in tables:
        for k in sorted(timed):
            c.bad("variance.csv", f"missing: requests.csv has timed requests of {k[0]}, {k[1]}, cap {k[2]}")
        return
    tv = tables["variance"]
    s_v = src("variance")
    seen = set()
    for i, row in enumerate(tv.rows):
        k = (row["campaign"], row["family"], row["cap"])
        if k in seen:
            c.bad(tv.where(i), f"cap {k[2]}: a second row of this campaign, family and cap")
            continue
        seen.add(k)
        if k not in timed:
            c.bad(tv.where(i), f"cap {k[2]}: no completed timed requests of this campaign, family and cap")
            continue
        got = variance_row(IV.timed(reqs, *k))
        for col, v in got.items():
            c.recomputed += 1
            c.same(tv.where(i, col), row[col], v, f"cap {k[2]}:")
        base = ("variance",) + k
        E.add(base + ("cap",), k[2], s_v)
        for col in ("processes", "requests", "sd_between", "sd_within", "sd_interaction", "share_between"):
            if got[col] is not None:
                E.add(base + (col,), got[col], s_v)
    for k in sorted(timed - seen):
        c.bad(tv.rel, f"missing: no row for the timed requests of {k[0]}, {k[1]}, cap {k[2]} of requests.csv")
