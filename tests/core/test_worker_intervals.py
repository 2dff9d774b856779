"""The worker as the unit of variance: t quantiles, worker-level and session intervals, their coverage,
the decision weighed by the A/A floor and the minimum detectable ratio (refspec.core.stats)."""

from __future__ import annotations

import math
import random

import pytest

from refspec.core import stats as S

# Student's t 0.975 quantiles (published tables, 15 digits)
T975 = {1: 12.7062047361747, 2: 4.30265272974946, 5: 2.57058183563631, 10: 2.22813885198627, 30: 2.04227245630124}


@pytest.mark.parametrize("df", sorted(T975))
def test_t_quantile_matches_the_tables(df):
    assert S.t_quantile(0.975, df) == pytest.approx(T975[df], rel=1e-12)


def test_t_quantile_of_real_df_lies_between_its_neighbours():
    assert T975[5] > S.t_quantile(0.975, 7.3) > T975[10]
    assert S.t_cdf(S.t_quantile(0.975, 7.3), 7.3) == pytest.approx(0.975, abs=1e-14)


def _arm(rng, n_blocks, task, worker_sd, noise_sd, shift=0.0):
    blocks = {}
    for b in range(n_blocks):
        w = rng.gauss(0.0, worker_sd)
        blocks[f"w{b}"] = [
            (f"t{t}", math.exp(1.0 + shift + mu + w + rng.gauss(0.0, noise_sd))) for t, mu in enumerate(task)
        ]
    return blocks


def _coverage(n_blocks, reps=400, seed=7):
    """Share of simulated A/A runs (one recipe, worker effect 5 %, request noise 1 %) whose interval
    contains 1: the worker-level interval, and the task bootstrap that treats tasks as the units."""
    rng = random.Random(seed)
    hit = hit_tasks = 0
    for r in range(reps):
        task = [rng.gauss(0.0, 0.3) for _ in range(3)]
        a, b = _arm(rng, n_blocks, task, 0.05, 0.01), _arm(rng, n_blocks, task, 0.05, 0.01)
        iv = S.process_interval(a, b, ["t0", "t1", "t2"])
        hit += iv.lo <= 1.0 <= iv.hi
        num = {t: [x for v in a.values() for tt, x in v if tt == t] for t in ("t0", "t1", "t2")}
        den = {t: [x for v in b.values() for tt, x in v if tt == t] for t in ("t0", "t1", "t2")}
        d = list(S.paired_ratio(num, den).task_log_ratios.values())
        m = S.bootstrap_indices(3, 200, r)
        means = sorted(sum(d[i] for i in row) / 3 for row in m.tolist())
        lo, hi = math.exp(S.percentile(means, 2.5)), math.exp(S.percentile(means, 97.5))
        hit_tasks += lo <= 1.0 <= hi
    return hit / reps, hit_tasks / reps


def test_worker_level_interval_covers_at_its_stated_rate_and_the_task_bootstrap_does_not():
    covered, covered_by_tasks = _coverage(6)
    assert 0.92 <= covered <= 0.98
    assert covered_by_tasks < 0.4  # the old model: all tasks of a worker move together


def test_worker_interval_by_hand():
    # two workers per arm, one task: residuals are +-0.1 (A) and +-0.2 (B)
    e = math.exp
    a = {"w1": [("t", e(1.1))], "w2": [("t", e(0.9))]}
    b = {"w1": [("t", e(1.2))], "w2": [("t", e(0.8))]}
    iv = S.process_interval(a, b, ["t"])
    va, vb = 0.02 / 2, 0.08 / 2
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va + vb * vb)
    q = S.t_quantile(0.975, df)
    assert iv.value == pytest.approx(1.0, abs=1e-15)
    assert iv.se == pytest.approx(se, rel=1e-12) and iv.df == pytest.approx(df, rel=1e-12)
    assert iv.lo == pytest.approx(math.exp(-q * se), rel=1e-12) and iv.units == 2


def test_worker_residuals_follow_the_task_means_of_incomplete_blocks():
    e = math.exp
    r = S.block_residuals({"w1": [("a", e(1.0)), ("b", e(2.0))], "w2": [("a", e(1.2))]}, ["a", "b"])
    # L(a) = 1.1, L(b) = 2.0: w1 = mean(-0.1, 0) = -0.05, w2 = +0.1
    assert r["w1"] == pytest.approx(-0.05, abs=1e-12) and r["w2"] == pytest.approx(0.1, abs=1e-12)


def test_one_worker_per_arm_has_no_interval():
    with pytest.raises(S.StatsError, match="at least 2 workers"):
        S.process_interval({"w": [("t", 1.0)]}, {"w1": [("t", 1.0)], "w2": [("t", 2.0)]}, ["t"])


def test_session_interval_by_hand():
    c = [0.30, 0.36, 0.34, 0.31, 0.38, 0.33]
    iv = S.session_interval(c)
    m = sum(c) / 6
    s = math.sqrt(sum((x - m) ** 2 for x in c) / 5)
    assert iv.df == 5 and iv.units == 6
    assert iv.hi == pytest.approx(math.exp(m + T975[5] * s / math.sqrt(6)), rel=1e-12)


@pytest.mark.parametrize(
    "lo, hi, floor, decision",
    [
        (1.296, 1.534, 1.182, "exceeds"),  # clears 1.02 by the floor: 1.02 x 1.182 = 1.206 < 1.296
        (1.10, 1.30, 1.182, "noise_too_high"),  # clears 1.02, not by the floor
        (1.10, 1.30, 1.0, "exceeds"),  # no control: the plain decision
        (0.70, 0.80, 1.182, "below"),
        (0.85, 1.01, 1.182, "noise_too_high"),
        (0.98, 1.05, 1.0, "inconclusive"),
    ],
)
def test_decision_weighs_the_floor(lo, hi, floor, decision):
    assert S.decide_weighed(lo, hi, 1.02, floor) == decision


def test_floor_verdict_and_minimum_detectable_ratio():
    assert S.noise_floor_of(0.921, 1.182) == 1.182
    assert S.noise_floor_of(0.80, 1.1) == pytest.approx(1.25)
    assert S.aa_verdict(0.852, 0.960) == "biased" and S.aa_verdict(0.9, 1.1) == "ok"
    # the floor rule: F = max(hi, 1/lo) weighs the mde; the calibration rule: F = 1 while the control holds
    floor_mde = S.minimum_detectable(0.921, 1.182, 1.02, S.AA_FLOOR)
    assert floor_mde == pytest.approx(1.02 * 1.182 * math.sqrt(1.182 / 0.921))
    assert S.minimum_detectable(0.921, 1.182, 1.02) == pytest.approx(1.02 * math.sqrt(1.182 / 0.921))
    assert S.minimum_detectable(0.852, 0.960, 1.02) == pytest.approx(1.02 / 0.852 * math.sqrt(0.960 / 0.852))
    # h = log(1.1/0.9)/2 with 4 workers; 1.05 needs h* = log(1.05/1.02)/2 (floor) or log(1.05/1.02) (calibration)
    h, hs = math.log(1.1 / 0.9) / 2, math.log(1.05 / 1.02) / 2
    assert S.units_needed(4, 0.9, 1.1, 1.05, 1.02, S.AA_FLOOR) == math.ceil(4 * (h / hs) ** 2)
    assert S.units_needed(4, 0.9, 1.1, 1.05, 1.02) == math.ceil(4 * (h / (2 * hs)) ** 2)
    assert S.units_needed(4, 0.9, 1.1, 1.01, 1.02) is None
    assert S.units_needed(4, 0.9, 1.1, 1.01, 1.02, S.AA_FLOOR) is None
