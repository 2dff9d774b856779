"""The class of a first divergence (refspec.core.divergence) in the qualification table and in
``refspec qualify``'s lines: a near tie below the near-tie bound on the reference's margin, decisive at
and above it; the arm margin is the divergent endpoint's own request margin, never the reference's."""

from __future__ import annotations

import pytest

from refspec.campaigns.arm_qualification import format_summary
from refspec.campaigns.derived import qualification_table
from refspec.core.divergence import DECISIVE, NEAR_TIE, NEAR_TIE_MARGIN, divergence_class
from refspec.core.endpoint import Endpoint

REF = [5, 6, 7, 8, 9]
ARM = [5, 6, 7, 40, 41]  # diverges at index 3
R_MARGINS = [2.0, 2.0, 2.0, 0.0, 2.0]  # placeholder at index 3, set per test
ARM_MARGINS = {1: [1.5, 1.5, 1.5, 0.0625, 1.5], 2: [1.5, 1.5, 1.5, 0.03125, 1.5]}


def _qual(ref_margin: float, arm_repeats=(1, 2)) -> dict:
    reqs, eps = [], []
    runs = [("R", 1, REF), ("R", 2, REF)] + [("M0", rep, ARM if rep == 2 else REF) for rep in arm_repeats]
    for arm, rep, toks in runs:
        base = dict(
            campaign="confirmation", family="f", task_id="HumanEval/2", arm=arm, cap=5, session="s1", repeat=rep
        )
        reqs.append(base | dict(status="ok"))
        eps.append(
            base
            | dict(
                endpoint_sha256=Endpoint(tuple(toks), False, "cap").sha256, tokens=toks, eog=False, stop_reason="cap"
            )
        )
    margins = {("confirmation", "f", "HumanEval/2", 5): R_MARGINS[:3] + [ref_margin] + R_MARGINS[4:]}
    arm_margins = {("confirmation", "f", "HumanEval/2", 5, "M0", "s1", rep): m for rep, m in ARM_MARGINS.items()}
    arm_margins |= {
        ("confirmation", "f", "HumanEval/2", 5, "R", "s1", rep): margins[("confirmation", "f", "HumanEval/2", 5)]
        for rep in (1, 2)
    }
    rows = qualification_table(reqs, eps, margins=margins, arm_margins=arm_margins)
    return next(q for q in rows if q["arm"] == "M0")


@pytest.mark.parametrize(
    "margin,want",
    [
        (0.0, NEAR_TIE),
        (NEAR_TIE_MARGIN * 0.999, NEAR_TIE),
        (NEAR_TIE_MARGIN, DECISIVE),  # the bound itself is not below it
        (NEAR_TIE_MARGIN * 1.001, DECISIVE),
        (12.0, DECISIVE),
    ],
)
def test_class_at_below_and_above_the_bound(margin, want):
    q = _qual(margin)
    assert q["first_diff_index"] == 3 and q["ref_margin"] == margin
    assert q["divergence"] == want and divergence_class(margin) == want
    assert q["near_tie_bound"] == NEAR_TIE_MARGIN


def test_arm_margin_is_the_divergent_endpoints_own():
    q = _qual(0.25)
    # repeat 2 is the endpoint that diverges: its own margin at index 3, not R's 0.25, not repeat 1's
    assert q["arm_margin"] == ARM_MARGINS[2][3]
    assert q["arm_margin"] != q["ref_margin"]


def test_no_class_without_a_divergence_or_a_margin():
    q = _qual(0.25, arm_repeats=(1,))  # M0 matches R
    assert (q["first_diff_index"], q["ref_margin"], q["arm_margin"], q["divergence"], q["near_tie_bound"]) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert divergence_class(None) is None and divergence_class(float("nan")) is None


def _summary(divergences: list[dict]) -> dict:
    arms = [
        dict(arm=a, mode="target", layout=lay, ub=ub, mask=mask, matching=m, required=2, tasks=2, tasks_qualified=m)
        | dict(acceptance=None, median_t_ns=None, unrepaired=ub > 1 and mask == 0)
        for a, lay, ub, mask, m in (("R", "mq", 1, 0, 2), ("M0", "mq", 4, 0, 0), ("M3", "qb", 4, 3, 2))
    ]
    return dict(
        family="f",
        panel=dict(spec="humaneval:0-1", tasks=2),
        cap=24,
        repeats=1,
        draft=None,
        session="s01",
        reference=dict(arm="R", runs_per_task=2, stable_tasks=2, unstable_tasks=[]),
        arms=arms,
        divergences=divergences,
        vacuous_arms=[],
        failures=[],
        complete=True,
        exposure=dict(unrepaired=["M0"], screened=2, exposed=1, vacuous=False),
    )


def _div(task: str, ref_margin: float, arm_margin: float) -> dict:
    return dict(arm="M0", task_id=task, first_diff_index=7, ref_token=1, arm_token=2, ref_margin=ref_margin) | dict(
        arm_margin=arm_margin, divergence=divergence_class(ref_margin), n_matching=0, n_required=1, reason="differs"
    )


def _line(text: str, first: str, *more: str) -> str:
    return next(ln for ln in text.splitlines() if ln.split()[: 1 + len(more)] == [first, *more])


def test_qualify_lines_name_the_class():
    tie, dec = NEAR_TIE_MARGIN / 4, NEAR_TIE_MARGIN * 8
    text = format_summary(_summary([_div("HumanEval/0", tie, 0.0625), _div("HumanEval/1", dec, 0.75)]))
    verdict = _line(text, "M0", "target")
    assert verdict.endswith("1 decisive divergence: likely defect, not numerics; 1 near tie"), text
    assert "divergence" not in _line(text, "M3") and "near tie" not in _line(text, "M3"), text
    t0, t1 = _line(text, "M0", "HumanEval/0"), _line(text, "M0", "HumanEval/1")
    assert "arm margin 0.0625" in t0 and "near tie" in t0 and "decisive" not in t0, t0
    assert "arm margin 0.7500" in t1 and "decisive: likely defect, not numerics" in t1, t1
    only_ties = format_summary(_summary([_div("HumanEval/0", tie, 0.0625)]))
    assert _line(only_ties, "M0", "target").endswith("  1 near tie"), only_ties
    assert "likely defect" not in only_ties, only_ties
