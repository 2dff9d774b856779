"""The checker's paired-design statistics (report/refspec_check/stats.py) against refspec.core.stats on
random inputs: equal to the bit, except the process contrasts (1e-12: the package's mean of logs is
numpy's pairwise sum, the checker's math.fsum, as for every paired ratio)."""

from __future__ import annotations

import math
import random

import pytest
from refspec_check import stats as C

from refspec.core import stats as S


def random_rows(rng, design):
    arms = ["A", "B", "C"][: rng.randint(2, 3)]
    tasks = [f"t{i}" for i in range(rng.randint(1, 5))]
    rows = []
    for p in range(rng.randint(2, 7)):
        served = arms if design == "paired" else [arms[p % len(arms)]]
        for a in served:
            for t in tasks:
                for _ in range(rng.randint(0 if design == "paired" else 1, 3)):
                    rows.append((f"p{p}", a, t, math.exp(rng.gauss(1.0, 0.3))))
    rng.shuffle(rows)
    return rows


@pytest.mark.parametrize("seed", range(60))
def test_checker_mirrors_the_paired_design(seed):
    rng = random.Random(seed)
    rows = random_rows(rng, "paired")
    cs, cc = S.process_contrasts(rows, "B", "A"), C.process_contrasts(rows, "B", "A")
    assert list(cs) == list(cc) and all(cc[p] == pytest.approx(cs[p], abs=1e-12) for p in cs)
    assert C.process_contrasts(rows, "A", "B", ["t0"]).keys() == S.process_contrasts(rows, "A", "B", ["t0"]).keys()
    for level in (0.95, 0.90):
        if len(cs) >= 2:
            iv = S.paired_interval(cs, level)
            assert C.paired_interval(cs, level) == (iv.value, iv.lo, iv.hi, iv.df, iv.units)
        else:
            assert C.paired_interval(cs, level) is None
    for design, rs in (("paired", rows), ("fresh", random_rows(rng, "fresh"))):
        try:
            v = S.variance_components(rs, design)
        except S.StatsError:
            assert C.variance_components(rs, design) is None
            continue
        got = C.variance_components(rs, design)
        want = dict(
            design=v.design,
            between=v.between,
            within=v.within,
            interaction=v.interaction,
            n_processes=v.n_processes,
            n_requests=v.n_requests,
            share_between=v.share_between,
        )
        assert got == want


def test_checker_mirrors_the_decision_and_the_detectable_ratio():
    rng = random.Random(11)
    verdicts = set()
    for _ in range(3000):
        tau, floor = rng.choice([1.02, 1.05]), rng.choice([1.0, 1.01, 1.03, 1.07])
        mid, h95 = math.exp(rng.gauss(0.0, 0.04)), abs(rng.gauss(0.0, 0.03))
        h90 = h95 * rng.uniform(0.7, 0.9)
        lo95, hi95, lo90, hi90 = mid * math.exp(-h95), mid * math.exp(h95), mid * math.exp(-h90), mid * math.exp(h90)
        pkg = S.decide_ratio(
            S.Interval(mid, lo95, hi95, 0, 0, 1, 2), S.Interval(mid, lo90, hi90, 0, 0, 1, 2), tau, floor
        )
        assert C.decide_ratio(lo95, hi95, lo90, hi90, tau, floor) == pkg
        assert C.equivalent(lo90, hi90, tau) == S.equivalent(lo90, hi90, tau)
        assert C.detectable_ratio(h95, tau, floor) == S.detectable_ratio(h95, tau, floor)
        verdicts.add(pkg)
    assert verdicts == {"exceeds", "faster", "equivalent", "noise_too_high", "inconclusive"}


def test_checker_mirrors_the_sizing_plan_to_the_bit():
    from refspec_check import sizing as CS

    rng = random.Random(5)
    reachable = set()
    for _ in range(150):
        inter, within = rng.choice([0.0, 1e-5, 4e-5, 3e-4]), rng.uniform(1e-5, 2e-2)
        costs = dict(process_s=rng.uniform(0.5, 8.0), request_s=rng.uniform(0.1, 3.0), arms=rng.randint(2, 7))
        target, budget = rng.choice([1.03, 1.05, 1.1, 1.2]), rng.choice([30.0, 240.0, 2000.0])
        caps = dict(max_processes=rng.randint(2, 24), max_requests=rng.randint(1, 8))
        comps = S.VarianceComponents("paired", 0.0, within, inter, 0, 0)
        rule = rng.choice(S.AA_RULES)  # the A/A rule of the plan: calibration (the default) or floor
        p = S.plan_paired(comps, target=target, threshold=1.02, budget_s=budget, **costs, **caps, aa_rule=rule)
        got = CS.plan_paired(
            inter,
            within,
            costs["process_s"],
            costs["request_s"],
            costs["arms"],
            target,
            1.02,
            budget,
            caps["max_processes"],
            caps["max_requests"],
            rule,
        )
        want = (
            p.processes,
            p.requests_per_arm,
            p.expected_half_width,
            p.expected_detectable,
            p.expected_seconds,
            p.reachable,
            p.reason,
        )
        assert got == want  # floats compared to the bit
        reachable.add(p.reachable)
    assert reachable == {True, False}
