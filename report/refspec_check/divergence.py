"""The class of a first divergence, recomputed (refspec.core.divergence implements the same rule).

A first divergence is a ``near tie`` when the reference's top-2 logit margin there (``ref_margin``) is
below the near-tie bound, ``decisive`` otherwise (a likely defect, not numerics); without a reference
margin it has no class. Each classified qualification row carries the bound it was decided with
(``near_tie_bound``), which must be this checker's :data:`NEAR_TIE_MARGIN`, the product's constant."""

from __future__ import annotations

import math

NEAR_TIE_MARGIN = 0.5
NEAR_TIE = "near tie"
DECISIVE = "decisive"
# how the report and ``refspec qualify`` write each class (refspec.core.divergence imports the names from here)
DIVERGENCE_TEXT = {NEAR_TIE: "near tie", DECISIVE: "decisive: likely defect, not numerics"}


def divergence_class(ref_margin, bound: float = NEAR_TIE_MARGIN):
    if ref_margin is None or not math.isfinite(float(ref_margin)):
        return None
    return NEAR_TIE if float(ref_margin) < bound else DECISIVE


def check_row(c, where, q: dict) -> None:
    """One stated qualification row: its bound is the product's, its class the one its ``ref_margin`` and
    that bound give, and an arm margin only beside a first divergence. ``where(col)`` names a cell."""
    fd, margin, bound, cls = (
        q.get("first_diff_index"),
        q.get("ref_margin"),
        q.get("near_tie_bound"),
        q.get("divergence"),
    )
    c.identities += 1
    for col in ("ref_margin", "arm_margin"):
        if fd is None and q.get(col) is not None:
            c.bad(where(col), "a margin without a first divergence")
    want = divergence_class(margin) if fd is not None else None
    c.recomputed += 1
    c.same(where("near_tie_bound"), bound, NEAR_TIE_MARGIN if want is not None else None, "near-tie bound:")
    if want is None:
        c.same(where("divergence"), cls, None, "a divergence class without a first divergence and a reference margin:")
    elif cls != want:
        c.bad(
            where("divergence"),
            f"says {cls!r}, but the reference margin {margin!r} is "
            f"{'below' if want == NEAR_TIE else 'not below'} the near-tie bound {NEAR_TIE_MARGIN!r}: {want!r}",
        )
