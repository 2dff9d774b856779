"""The paired design (refspec.core.stats): process contrasts and their interval, its coverage and width
against the fresh design, the variance components, the equivalence test and the ratio decision, the
detectable ratio and the sizing of a paired design by its cost."""

from __future__ import annotations

import functools
import math
import random

import numpy as np
import pytest

from refspec.core import stats as S

TASKS = [f"t{i}" for i in range(6)]


def simulate(seed, design, processes, repeats, between, interaction, within, ratio=1.05, tasks=TASKS):
    """Rows (process, arm, task, time) of arms A (``ratio`` slower) and B: log time = task mean + process
    effect (sd ``between``) + process-by-arm effect (sd ``interaction``) + request noise (sd ``within``).
    Paired: every process serves both arms; fresh: every process serves one arm (its own draw of both)."""
    rng = np.random.default_rng(seed)
    mu = np.linspace(0.5, 2.0, len(tasks))
    shift = {"A": math.log(ratio), "B": 0.0}
    rows = []
    for p in range(processes):
        b = rng.normal(0.0, between)
        for arm in ("A", "B"):
            if design == "fresh":
                b = rng.normal(0.0, between)
            g = rng.normal(0.0, interaction)
            e = rng.normal(0.0, within, size=(len(tasks), repeats))
            proc = f"p{p:03d}" if design == "paired" else f"{arm}{p:03d}"
            for i, t in enumerate(tasks):
                for r in range(repeats):
                    rows.append((proc, arm, t, math.exp(mu[i] + shift[arm] + b + g + e[i, r])))
    return rows


def blocks_of(rows, arm):
    out = {}
    for p, a, t, x in rows:
        if a == arm:
            out.setdefault(p, []).append((t, x))
    return out


# --------------------------------------------------------------------------- contrasts and interval


def test_process_contrast_by_hand():
    e = math.exp
    rows = [
        ("p1", "A", "a", e(1.0)),
        ("p1", "A", "a", e(1.2)),  # L_A(a) = 1.1
        ("p1", "B", "a", e(1.0)),
        ("p1", "A", "b", e(2.0)),
        ("p1", "B", "b", e(1.7)),
        ("p1", "B", "c", e(5.0)),  # c: not timed for A in p1
        ("p0", "A", "a", e(1.0)),  # p0 times A only: no contrast
        ("p2", "B", "a", e(1.0)),
        ("p2", "A", "a", e(0.9)),
        ("p2", "X", "a", e(9.0)),  # another arm
    ]
    c = S.process_contrasts(rows, "A", "B")
    assert list(c) == ["p1", "p2"]
    assert c["p1"] == pytest.approx((0.1 + 0.3) / 2, abs=1e-15) and c["p2"] == pytest.approx(-0.1, abs=1e-15)
    assert S.process_contrasts(rows, "A", "B", tasks=["b"]) == {"p1": pytest.approx(0.3, abs=1e-15)}
    with pytest.raises(S.StatsError):
        S.process_contrasts(rows, "A", "A")


def test_paired_interval_is_the_session_interval_over_processes():
    c = {"p2": 0.05, "p0": 0.03, "p1": 0.07, "p3": 0.04}
    iv = S.paired_interval(c)
    assert iv == S.session_interval([0.03, 0.07, 0.05, 0.04]) == S.unit_interval([0.03, 0.07, 0.05, 0.04])
    assert iv.units == 4 and iv.df == 3.0
    iv90 = S.paired_interval(c, level=0.90)
    assert iv.lo < iv90.lo < iv90.hi < iv.hi
    assert math.log(iv90.hi) - iv90.log_value == pytest.approx(S.t_quantile(0.95, 3) * iv90.se, rel=1e-12)
    with pytest.raises(S.StatsError, match="at least 2 processes"):
        S.paired_interval({"p": 0.1})
    with pytest.raises(S.StatsError, match="at least 2 sessions"):
        S.session_interval([0.1])


def test_paired_interval_covers_at_its_rate_and_is_far_narrower_than_the_fresh_design():
    """A process effect of sd 0.2 that moves all requests of a process, small request noise: the
    paired interval covers the true ratio 1.05 in about 95 % of 400 runs; the fresh design, with the
    same components and as many processes per arm, carries the process effect twice."""
    truth = math.log(1.05)
    hit, widths_paired, widths_fresh = 0, [], []
    for seed in range(400):
        rows = simulate(seed, "paired", 5, 2, 0.2, 0.02, 0.05)
        iv = S.paired_interval(S.process_contrasts(rows, "A", "B"))
        hit += iv.lo <= 1.05 <= iv.hi
        assert iv.units == 5 and abs(iv.log_value - truth) < 0.1
        widths_paired.append(iv.half_width)
        if seed < 40:
            fresh = simulate(seed, "fresh", 5, 2, 0.2, 0.02, 0.05)
            widths_fresh.append(S.process_interval(blocks_of(fresh, "A"), blocks_of(fresh, "B"), TASKS).half_width)
    assert 0.92 <= hit / 400 <= 0.98
    assert float(np.median(widths_paired)) < float(np.median(widths_fresh)) / 4


# --------------------------------------------------------------------------- variance components


def _mean_components(design, reps, **kw):
    got = [S.variance_components(simulate(1000 + s, design, **kw), design) for s in range(reps)]
    mean = lambda f: math.fsum(f(v) for v in got) / reps
    return got, mean


def test_variance_components_recover_the_paired_design():
    # a process effect small enough that its correction (MS_I / 2 = 0.00095) matters
    got, mean = _mean_components("paired", 150, processes=20, repeats=2, between=0.05, interaction=0.04, within=0.06)
    assert got[0].n_processes == 20 and got[0].n_requests == 20 * 2 * 6 * 2 and got[0].design == "paired"
    # within: on 2 x (120 - 20 - 6 + 1) df; the uncorrected N - C would be 5 % low
    assert mean(lambda v: v.within) == pytest.approx(0.06**2, rel=0.02)
    # interaction: 0.0016 besides the within part 0.0036 / 12 that its moment carries
    assert mean(lambda v: v.interaction) == pytest.approx(0.04**2, rel=0.08)
    assert mean(lambda v: v.between) == pytest.approx(0.05**2, rel=0.12)
    assert mean(lambda v: v.share_between) == pytest.approx(0.0025 / (0.0025 + 0.0016 + 0.0036), rel=0.15)
    v = got[0]
    assert v.sd_between == math.sqrt(v.between) and v.sd_interaction == math.sqrt(v.interaction)
    assert v.sd_within == math.sqrt(v.within)


def test_variance_components_recover_the_fresh_design():
    got, mean = _mean_components("fresh", 100, processes=15, repeats=1, between=0.03, interaction=0.04, within=0.1)
    assert got[0].interaction is None and got[0].sd_interaction is None and got[0].n_processes == 30
    assert mean(lambda v: v.within) == pytest.approx(0.1**2, rel=0.03)
    # the interaction is confounded with the process effect: between = 0.0009 + 0.0016, after the
    # within part 0.01 / 6 of the process means is taken out
    assert mean(lambda v: v.between) == pytest.approx(0.03**2 + 0.04**2, rel=0.12)


def test_variance_components_of_unbalanced_cells_stay_close():
    rows = simulate(5, "paired", 300, 2, 0.1, 0.04, 0.06)
    rows = [r for i, r in enumerate(rows) if i % 7 != 3]  # drop every seventh request
    v = S.variance_components(rows, "paired")
    assert v.within == pytest.approx(0.06**2, rel=0.05)
    assert v.interaction == pytest.approx(0.04**2, rel=0.25)
    assert v.between == pytest.approx(0.1**2, rel=0.25)


def test_negative_components_clip_to_zero():
    # no process effect and no interaction: the moments scatter around 0 and clip
    got = [S.variance_components(simulate(s, "paired", 6, 1, 0.0, 0.0, 0.05), "paired") for s in range(40)]
    assert any(v.between == 0.0 for v in got) and any(v.interaction == 0.0 for v in got)
    assert all(v.between >= 0.0 and v.interaction >= 0.0 for v in got)
    fresh = [S.variance_components(simulate(s, "fresh", 6, 1, 0.0, 0.0, 0.05), "fresh") for s in range(40)]
    assert any(v.between == 0.0 for v in fresh) and all(v.between >= 0.0 for v in fresh)


def test_variance_components_refuse_what_the_design_does_not_cover():
    paired = simulate(1, "paired", 4, 1, 0.1, 0.01, 0.05)
    with pytest.raises(S.StatsError, match="more than one arm"):
        S.variance_components(paired, "fresh")
    with pytest.raises(S.StatsError, match="unknown design"):
        S.variance_components(paired, "crossed")
    with pytest.raises(S.StatsError, match="positive"):
        S.variance_components(paired + [("p9", "A", "t0", 0.0)], "paired")


# --------------------------------------------------------------------------- equivalence and decision


def iv(lo, hi):
    return S.Interval(math.sqrt(lo * hi), lo, hi, math.log(lo * hi) / 2, 0.0, 5.0, 6)


def test_equivalence_is_the_90_interval_inside_the_band():
    assert S.equivalent(0.99, 1.01, 1.02) and S.equivalent(1 / 1.02, 1.02, 1.02)
    assert not S.equivalent(0.97, 1.01, 1.02) and not S.equivalent(0.99, 1.021, 1.02)


@pytest.mark.parametrize(
    "i95, i90, floor, verdict",
    [
        ((1.04, 1.08), (1.045, 1.075), 1.01, "exceeds"),  # lo95 > 1.02 x 1.01
        ((0.92, 0.96), (0.925, 0.955), 1.01, "faster"),  # hi95 < 1 / (1.02 x 1.01) = 0.9707
        ((0.99, 1.015), (0.993, 1.008), 1.01, "equivalent"),  # 90 % inside [1.01/1.02, 1.02/1.01]
        ((0.99, 1.015), (0.993, 1.008), 1.03, "inconclusive"),  # tau / F <= 1: never equivalent
        ((0.99, 1.015), (0.985, 1.012), 1.01, "inconclusive"),  # inside [1/tau, tau], not by the floor
        ((0.999, 1.001), (1.0, 1.0), 1.02, "inconclusive"),  # tau / F = 1: an empty band
        ((1.025, 1.05), (1.027, 1.045), 1.01, "noise_too_high"),  # clears 1.02, not 1.0302
        ((0.975, 0.979), (0.976, 0.978), 1.01, "noise_too_high"),  # clears 1/1.02, not 0.9707
        ((0.975, 0.979), (0.976, 0.978), 1.0, "faster"),  # no control: the plain decision
        ((0.98, 1.06), (0.99, 1.05), 1.01, "inconclusive"),
    ],
)
def test_decide_ratio(i95, i90, floor, verdict):
    assert S.decide_ratio(iv(*i95), iv(*i90), 1.02, floor) == verdict


def test_detectable_ratio_and_minimum_detectable():
    assert S.detectable_ratio(0.03, 1.02, 1.01) == 1.02 * 1.01 * math.exp(0.03)
    assert S.detectable_ratio(0.0) == S.DEFAULT_THRESHOLD
    rng = random.Random(3)
    for _ in range(500):
        lo, hi = rng.uniform(0.8, 1.0), rng.uniform(1.0, 1.25)
        # the formula as it stood (the floor rule), bit for bit
        assert S.minimum_detectable(lo, hi, 1.02, S.AA_FLOOR) == 1.02 * S.noise_floor_of(lo, hi) * math.sqrt(hi / lo)
        h = math.log(hi / lo) / 2
        assert S.minimum_detectable(lo, hi, 1.02, S.AA_FLOOR) == pytest.approx(
            S.detectable_ratio(h, 1.02, S.noise_floor_of(lo, hi)), rel=1e-14
        )
        # the calibration rule: the control holds 1 here, so F = 1
        assert S.minimum_detectable(lo, hi, 1.02) == 1.02 * math.sqrt(hi / lo)
        assert S.minimum_detectable(lo, hi, 1.02) == pytest.approx(S.detectable_ratio(h, 1.02), rel=1e-14)


# --------------------------------------------------------------------------- sizing


def comps(interaction, within, between=0.04):
    return S.VarianceComponents("paired", between, within, interaction, 8, 1000)


COST = dict(process_s=30.0, request_s=0.5, arms=3, target=1.03, threshold=1.02)


@functools.cache
def t975(df):
    return S.t_quantile(0.975, df)


def by_hand(c, P, n, arms=3, process_s=30.0, request_s=0.5, tau=1.02, rule=S.AA_CALIBRATION):
    """(h, detectable, seconds): detectable tau * exp(h) under the calibration rule (F = 1 while the
    control holds), tau * exp(2 h) under the floor rule (F of about exp(h))."""
    h = t975(P - 1) * math.sqrt((2 * c.interaction + 2 * c.within / n) / P)
    return h, tau * math.exp((2 if rule == S.AA_FLOOR else 1) * h), P * (process_s + arms * n * request_s)


@pytest.mark.parametrize("rule", S.AA_RULES)
def test_plan_is_the_cheapest_design_that_reaches_the_target(rule):
    c = comps(2e-5, 0.0025)
    plan = S.plan_paired(c, budget_s=1e6, **COST, aa_rule=rule)
    h, det, sec = by_hand(c, plan.processes, plan.requests_per_arm, rule=rule)
    assert plan.reachable and plan.expected_detectable <= 1.03
    assert plan.expected_half_width == pytest.approx(h, rel=1e-14)
    assert plan.expected_detectable == pytest.approx(det, rel=1e-14) and plan.expected_seconds == sec
    for P in range(2, 65):
        for n in range(1, 65):
            _, d, s = by_hand(c, P, n, rule=rule)
            assert d > 1.03 or s >= sec, (P, n)
    # the default is the calibration rule, and it needs a cheaper design than the floor rule
    if rule == S.AA_FLOOR:
        assert S.plan_paired(c, budget_s=1e6, **COST).expected_seconds < sec


def test_plan_takes_processes_for_interaction_and_requests_for_within():
    # interaction sd 0.3 % and request sd 5 %; then four times either
    base = S.plan_paired(comps(1e-5, 0.0025), budget_s=1e6, **COST)
    more_inter = S.plan_paired(comps(4e-5, 0.0025), budget_s=1e6, **COST)
    more_within = S.plan_paired(comps(1e-5, 0.005), budget_s=1e6, **COST)
    assert base.reachable and more_inter.reachable and more_within.reachable
    assert more_inter.processes > base.processes
    assert more_within.requests_per_arm > base.requests_per_arm
    assert more_inter.requests_per_arm < base.requests_per_arm  # processes now buy more than requests


def test_plan_respects_the_budget_and_reports_unreachable_targets():
    c = comps(2e-5, 0.0025)
    full = S.plan_paired(c, budget_s=1e6, **COST)
    tight = S.plan_paired(c, budget_s=full.expected_seconds / 2, **COST)
    assert not tight.reachable and tight.expected_seconds <= full.expected_seconds / 2
    assert tight.expected_detectable > 1.03
    assert f"would cost {full.expected_seconds:.0f} s" in tight.reason and "at best" in tight.reason
    # within the budget no design detects less
    for P in range(2, 65):
        for n in range(1, 65):
            _, d, s = by_hand(c, P, n)
            assert s > full.expected_seconds / 2 or d >= tight.expected_detectable
    never = S.plan_paired(c, budget_s=1e6, **{**COST, "target": 1.01})
    assert not never.reachable and "not reached within 64 processes x 64 requests" in never.reason
    broke = S.plan_paired(c, budget_s=10.0, **COST)
    assert (
        not broke.reachable and (broke.processes, broke.requests_per_arm) == (2, 1) and "buys no design" in broke.reason
    )


def test_plan_of_fresh_components_takes_the_process_effect_for_the_interaction():
    fresh = S.VarianceComponents("fresh", 4e-5, 0.0025, None, 8, 1000)
    assert S.plan_paired(fresh, budget_s=1e6, **COST) == S.plan_paired(comps(4e-5, 0.0025), budget_s=1e6, **COST)
