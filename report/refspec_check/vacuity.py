"""Vacuity as a verdict, recomputed (refspec_check.render.vacuity states the same rule for the report and
the pipeline, with this module's words and unrepaired-arm rule).

Unrepaired arm: phase mask 0 and micro-batch capacity ub > 1 (requests.csv). A panel (campaign,
family; not the phase-mask sweep nor the prediction) that ran an unrepaired arm is vacuous when no
unrepaired arm's qualification has a first divergence on any of its tasks; it then says
"vacuous: no exposed input in N screened", N its tasks. The partition study is vacuous when no arm's
repeat-1 row has a nonzero endpoint, KV or initial-logits class on any input; the partition and
crosses claims are then "vacuous". The crosses are vacuous too where no row is distinguishable (the
pair's natural endpoints agree on every input crossed; check_crosses recomputes the column), N the
inputs crossed."""

from __future__ import annotations

VACUOUS_TEXT = "vacuous: no exposed input in "  # followed by the number screened, then VACUOUS_TAIL
VACUOUS_TAIL = " screened"
# campaigns with their own tables (the phase-mask sweep, the prediction): no panel verdict
OWN_TABLES = ("phase_mask", "prediction")
# words a vacuous verdict must never stand beside
NOT_WITH_VACUITY = ("preserved", "one state")


def is_unrepaired(ub, mask) -> bool:
    """An arm without the repair: phase mask 0 and a micro-batch capacity above 1."""
    return ub is not None and mask is not None and int(mask) == 0 and int(ub) > 1


def panel_exposure(qual: dict, requests: list) -> dict:
    """(campaign, family) -> {screened, exposed, vacuous}; ``qual`` as recompute_qualification gives it."""
    unrep: dict = {}
    for r in requests:
        if r["campaign"] not in OWN_TABLES and is_unrepaired(r.get("ub"), r.get("mask")):
            unrep.setdefault((r["campaign"], r["family"]), set()).add(r["arm"])
    tasks: dict = {}
    exposed: dict = {}
    for (camp, fam, task, _cap, arm), q in qual.items():
        k = (camp, fam)
        if k not in unrep:
            continue
        tasks.setdefault(k, set()).add(task)
        if arm in unrep[k] and q.get("first_diff_index") is not None:
            exposed.setdefault(k, set()).add(task)
    return {k: dict(screened=len(tasks[k]), exposed=len(exposed.get(k, ())), vacuous=not exposed.get(k)) for k in tasks}


def partition_vacuous(nat: dict) -> tuple[int, bool]:
    """(inputs screened, vacuous) of the partition study from its repeat-1 rows ((task, arm) -> (i, row))."""
    screened = {t for t, _a in nat}
    exposed = {t for (t, _a), (_i, r) in nat.items() if r["endpoint_class"] or r["kv_class"] or r["logits_class"]}
    return len(screened), bool(screened) and not exposed


def crosses_vacuous(rows: list) -> tuple[int, bool]:
    """(inputs crossed, vacuous) of crosses.csv: vacuous when no row is distinguishable."""
    screened = {r["task_id"] for r in rows}
    exposed = {r["task_id"] for r in rows if r["distinguishable"]}
    return len(screened), bool(screened) and not exposed
