"""The archive's names and their orders, one definition for the checker, the renderer it carries
(:mod:`refspec_check.render`) and the pipeline (``refspec.core.arms``, ``refspec.core.layouts``,
``refspec.core.campaign_names`` and ``refspec.campaigns.derived`` import them from here): the reference
arm, the A/A twin's name, the campaigns and the order the report shows them in, the layouts' order and
the arm order of every table."""

from __future__ import annotations

import re

REFERENCE_ARM = "R"  # the reference arm: every other arm's endpoints are checked against it
# The A/A control (anc/campaigns.md): the twin of arm X is X_aa, the same recipe under its own name.
# Names ending in _aa are reserved for twins.
TWIN_SUFFIX = "_aa"

CAMPAIGNS = ("phase_mask", "confirmation", "implementation", "replication", "width", "prediction", "servers")
# the report's section order (the servers campaign has its own section)
REPORT_ORDER = ("confirmation", "implementation", "replication", "width", "phase_mask", "prediction")

# the order in which arms of each layout appear in tables and reports
LAYOUT_ORDER = ("mq", "gs", "pq", "qb", "qh")


def is_twin(arm: str) -> bool:
    """Whether ``arm`` names an A/A twin (``X_aa``)."""
    return arm.endswith(TWIN_SUFFIX) and len(arm) > len(TWIN_SUFFIX)


def natural_key(s: str) -> tuple:
    """Sort key that orders digit runs numerically (C_m2 before C_m10)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s))


def arm_sort_key(arm: str, mode: str | None = None, layout: str | None = None) -> tuple:
    """Canonical arm order: R, other references (R_*), target-only, speculative; layouts in
    :data:`LAYOUT_ORDER`; then the name with its digit runs compared as numbers.

    Pairwise ratios put the earlier arm in the numerator (e.g. GS/QB, PQ/QB, M/C).
    """
    ref = 0 if arm == REFERENCE_ARM else 1 if arm.startswith(REFERENCE_ARM + "_") else 2
    m = {"target": 0, "spec": 1}.get(mode or "", 2)
    lay = LAYOUT_ORDER.index(layout) if layout in LAYOUT_ORDER else len(LAYOUT_ORDER)
    return (ref, m, lay, natural_key(arm))
