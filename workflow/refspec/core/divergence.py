"""The class of a first divergence: a near tie that rounding can cross, or a decisive one.

At the first divergence of an arm from the reference the two paths share every earlier token, so
the target saw the same input and its two logit vectors differ only by the rounding of the two
computations (micro-batch geometry, layout, reduction order). The reference orders two tokens
``a > b`` with top-2 margin ``m_r``; the arm orders ``b > a`` with its own margin ``m_a``. Then
``(l_a - l_b)`` moved by ``m_r + m_a``, so at least one of the two logits moved by
``(m_r + m_a) / 2``. A divergence is a **near tie** when ``m_r`` is below :data:`NEAR_TIE_MARGIN`
(logit units), the size of move rounding of this kind is seen to make, and **decisive** otherwise:
a decisive divergence needs a logit to move by more than rounding does, and is flagged as a likely
defect (an addressing, masking or gating error), not numerics. Without a recorded reference margin
(the reference ended there, or no margins were kept) a divergence has no class.

anc/arms.md states the bound and the margins it was chosen from; ``report/check.py`` holds the same
constant (``refspec_check/divergence.py``), checks that a sealed qualification row was classified
with it, and recomputes the class from the row's ``ref_margin``.
"""

from __future__ import annotations

import math

# the classes' names and how the report and ``refspec qualify`` write them: one owner, the checker's
# refspec_check.divergence (the renderer it carries writes them too)
from refspec_check.divergence import DECISIVE, DIVERGENCE_TEXT, NEAR_TIE  # noqa: F401

# the near-tie bound on the reference's top-2 logit margin at a first divergence, in logit units
NEAR_TIE_MARGIN = 0.5


def divergence_class(ref_margin: float | None, bound: float = NEAR_TIE_MARGIN) -> str | None:
    """``near tie`` when the reference's margin is below ``bound``, ``decisive`` at or above it, None
    without a (finite) margin."""
    if ref_margin is None or not math.isfinite(float(ref_margin)):
        return None
    return NEAR_TIE if float(ref_margin) < bound else DECISIVE


def margin_at(margins, index: int | None) -> float | None:
    """The margin at ``index`` of one request's per-token margins (None when absent, past the end or not finite)."""
    if margins is None or index is None or index >= len(margins) or margins[index] is None:
        return None
    v = float(margins[index])
    return v if math.isfinite(v) else None
