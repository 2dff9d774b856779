"""Vacuity as a verdict: a qualification or a state study that had nothing to find (the rule the report
states; the pipeline's ``refspec.core.vacuity`` re-exports it for the claims table and ``refspec qualify``).

A qualification means something only where an unrepaired arm leaves the reference; a partition
study only where its arms differ. Where neither happened on any input a stage ran, the report, the
claims table, the headline and ``refspec qualify`` say ``vacuous: no exposed input in N screened``
(``N`` the inputs run), never that the repair preserved the reference or that the arms form one
state. The checker recomputes the verdicts on its own (:mod:`refspec_check.vacuity`, whose words and
unrepaired-arm rule this module uses); change one only together with the other and with anc/arms.md.

*Unrepaired arm* (anc/arms.md): an arm with phase mask 0 (no target phase runs a repaired layout)
and a target micro-batch capacity above 1 (``ub > 1``), read from its ``requests`` rows. That is
M0, C0, R_prod, the stock servers S_stock and S_stock_spec, and their A/A twins; never the
reference R (micro-batch 1) and never an arm with a repair (mask 3, mask 15).

*Exposed task* of a panel (campaign, family): a task on which some unrepaired arm's qualification
row has a first divergence from the reference (``first_diff_index`` not null). A panel that ran an
unrepaired arm and has no exposed task is vacuous; a panel that ran none has no such verdict (its
controls are another campaign's). The phase-mask sweep and the prediction have their own tables and
no verdict here.

*Exposed input* of the partition study: a task on which some arm's repeat-1 row has a nonzero
endpoint, KV or initial-logits class (it differs from A). No exposed input: the partition stage's
and the crosses stage's claims are ``vacuous``.

*Exposed input* of the crosses: a crossed task on which the pair's natural endpoints differ (its
rows are ``distinguishable``), so that a cross can show the donor's endpoint rather than the
recipient's. A crosses stage whose pair continues identically on every input it crossed (the states
differ, but not within the cap) is ``vacuous`` too, with N the inputs crossed.
"""

from __future__ import annotations

from collections.abc import Iterable

from refspec_check.names import is_twin

# the verdict's words (VACUOUS_TEXT, then the number screened, then VACUOUS_TAIL), the campaigns with their
# own tables (the phase-mask sweep, the prediction: no panel verdict) and the unrepaired arm: the checker's
from refspec_check.vacuity import OWN_TABLES, VACUOUS_TAIL, VACUOUS_TEXT, is_unrepaired

VACUOUS = "vacuous"


def vacuous_text(n: int) -> str:
    """The verdict as plain text (CLI lines and stored claims; the report shows ``n`` as a number)."""
    return f"{VACUOUS_TEXT}{n}{VACUOUS_TAIL}"


def unrepaired_arms(requests: Iterable[dict]) -> dict[tuple[str, str], set[str]]:
    """(campaign, family) -> the unrepaired arms that have ``requests`` rows there."""
    out: dict[tuple[str, str], set[str]] = {}
    for r in requests:
        if r["campaign"] in OWN_TABLES:
            continue
        if is_unrepaired(r.get("ub"), r.get("mask")):
            out.setdefault((r["campaign"], r["family"]), set()).add(r["arm"])
    return out


def panel_exposure(qualification: Iterable[dict], requests: Iterable[dict]) -> dict[tuple[str, str], dict]:
    """(campaign, family) -> {unrepaired, screened, exposed, vacuous} for each panel that ran an
    unrepaired arm: screened = its tasks with qualification rows, exposed = those where an unrepaired
    arm diverges from the reference."""
    unrep = unrepaired_arms(requests)
    tasks: dict[tuple[str, str], set[str]] = {}
    exposed: dict[tuple[str, str], set[str]] = {}
    for q in qualification:
        k = (q["campaign"], q["family"])
        if k not in unrep:
            continue
        tasks.setdefault(k, set()).add(q["task_id"])
        if q["arm"] in unrep[k] and q["first_diff_index"] is not None:
            exposed.setdefault(k, set()).add(q["task_id"])
    return {
        k: dict(
            unrepaired=sorted(unrep[k]),
            screened=len(tasks[k]),
            exposed=len(exposed.get(k, ())),
            vacuous=not exposed.get(k),
        )
        for k in sorted(tasks)
    }


def partition_exposure(partition: Iterable[dict]) -> dict:
    """{screened, exposed, vacuous} of a partition table: inputs with repeat-1 rows, and those on which
    some arm's endpoint, KV or initial-logits class is nonzero."""
    screened: set[str] = set()
    exposed: set[str] = set()
    for r in partition:
        if r["repeat"] != 1:
            continue
        screened.add(r["task_id"])
        if r["endpoint_class"] or r["kv_class"] or r["logits_class"]:
            exposed.add(r["task_id"])
    return dict(screened=len(screened), exposed=len(exposed), vacuous=bool(screened) and not exposed)


def crosses_exposure(crosses: Iterable[dict]) -> dict:
    """{screened, exposed, vacuous} of a crosses table: the inputs crossed (one family's), and those
    on which some row is ``distinguishable`` (the pair's natural endpoints differ there)."""
    screened: set[str] = set()
    exposed: set[str] = set()
    for r in crosses:
        screened.add(r["task_id"])
        if r["distinguishable"]:
            exposed.add(r["task_id"])
    return dict(screened=len(screened), exposed=len(exposed), vacuous=bool(screened) and not exposed)


def exposed_repairs(qualification: Iterable[dict], requests: Iterable[dict]) -> dict[tuple, tuple[int, int]]:
    """(campaign, family, arm) -> (k, n) for every repaired arm (phase mask above 0, not an A/A twin)
    of a panel that ran an unrepaired arm: n = the panel's exposed tasks (an unrepaired arm diverges
    from the reference there), k = those of them on which the repaired arm qualifies ("M3 reproduces
    R on k of n tasks where an unrepaired arm diverges"). A panel without an exposed task has no
    entry (its verdict is vacuity, above)."""
    reqs = list(requests)
    unrep = unrepaired_arms(reqs)
    repaired: dict[tuple[str, str], set[str]] = {}
    for r in reqs:
        if r["campaign"] in OWN_TABLES or r.get("mask") is None or int(r["mask"]) == 0:
            continue
        if is_twin(str(r["arm"])):  # the A/A twin repeats its arm (anc/campaigns.md)
            continue
        repaired.setdefault((r["campaign"], r["family"]), set()).add(r["arm"])
    qual: dict[tuple, bool] = {}
    exposed: dict[tuple, set] = {}
    for q in qualification:
        k = (q["campaign"], q["family"])
        qual[(*k, q["arm"], q["task_id"], q["cap"])] = bool(q["qualified"])
        if q["arm"] in unrep.get(k, ()) and q["first_diff_index"] is not None:
            exposed.setdefault(k, set()).add((q["task_id"], q["cap"]))
    out = {}
    for (camp, fam), tasks in exposed.items():
        for arm in repaired.get((camp, fam), ()):
            k = sum(1 for t, cap in tasks if qual.get((camp, fam, arm, t, cap)))
            out[(camp, fam, arm)] = (k, len(tasks))
    return dict(sorted(out.items()))
