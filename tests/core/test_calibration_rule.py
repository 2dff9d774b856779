"""The A/A control as a calibration test (refspec.core.stats.decision_floor): under the calibration rule
the floor F is 1 while the A/A interval holds 1 and the measured max(hi, 1/lo) when it does not; under
the floor rule (a plan frozen before ``aa_rule``) it is max(hi, 1/lo) always. The decisions, the noise
rows (floor, mde, units_needed), the E2 decisions and the sizing follow the rule; the checker
(report/refspec_check) implements both rules to the bit and reads the rule from plan.json ("floor"
without the field)."""

from __future__ import annotations

import math
import random

import pytest
from refspec_check import intervals as CI
from refspec_check import sizing as CS
from refspec_check import stats as C

from refspec.campaigns import intervals as IV
from refspec.campaigns import noise as NZ
from refspec.core import stats as S

TAU = 1.02
HOLDS = (0.97, 1.03)  # an A/A interval that holds 1; max(hi, 1/lo) = 1/0.97 = 1.0309
RATIO95, RATIO90 = (1.045, 1.069), (1.048, 1.066)


def iv(lo, hi):
    return S.Interval(math.sqrt(lo * hi), lo, hi, 0.0, 0.0, 1.0, 2)


def test_a_control_that_holds_leaves_each_ratio_its_own_interval():
    F_cal, F_floor = S.decision_floor(*HOLDS, S.AA_CALIBRATION), S.decision_floor(*HOLDS, S.AA_FLOOR)
    assert F_cal == 1.0 and F_floor == 1 / 0.97
    # [1.045, 1.069] clears 1.02 but not 1.02 x 1.0309 = 1.0515
    assert S.decide_ratio(iv(*RATIO95), iv(*RATIO90), TAU, F_cal) == "exceeds"
    assert S.decide_ratio(iv(*RATIO95), iv(*RATIO90), TAU, F_floor) == "noise_too_high"
    assert S.decide_weighed(*RATIO95, TAU, F_cal) == "exceeds"
    assert S.decide_weighed(*RATIO95, TAU, F_floor) == "noise_too_high"
    # the default is the calibration rule, and a plan without the field was decided under the floor rule
    assert S.DEFAULT_AA_RULE == S.AA_CALIBRATION and S.decision_floor(*HOLDS) == 1.0
    assert S.aa_rule_of({}) == S.AA_FLOOR == S.aa_rule_of(None)
    assert S.aa_rule_of({"aa_rule": "calibration"}) == S.AA_CALIBRATION
    # the edges of "holds": lo = 1 or hi = 1 still hold it
    assert S.decision_floor(1.0, 1.04) == 1.0 and S.decision_floor(0.96, 1.0) == 1.0


@pytest.mark.parametrize("aa", [(1.01, 1.04), (0.95, 0.99)])
def test_a_biased_control_carries_the_measured_bias(aa):
    F = S.noise_floor_of(*aa)
    assert S.aa_verdict(*aa) == "biased" and TAU * F > RATIO95[0]
    for rule in S.AA_RULES:
        assert S.decision_floor(*aa, rule) == F
        assert S.decide_ratio(iv(*RATIO95), iv(*RATIO90), TAU, S.decision_floor(*aa, rule)) == "noise_too_high"
    assert S.minimum_detectable(*aa, TAU, S.AA_CALIBRATION) == S.minimum_detectable(*aa, TAU, S.AA_FLOOR)


def test_an_unknown_rule_is_refused():
    with pytest.raises(S.StatsError, match="unknown A/A rule"):
        S.decision_floor(*HOLDS, "veto")
    with pytest.raises(S.StatsError, match="unknown A/A rule"):
        S.aa_rule_of({"aa_rule": "veto"})
    with pytest.raises(S.StatsError, match="unknown A/A rule"):
        S.expected_detectable(0.05, TAU, "veto")


def test_the_detectable_ratio_is_tau_exp_h_while_the_control_holds():
    rng = random.Random(4)
    for _ in range(500):
        lo, hi = rng.uniform(0.85, 1.0), rng.uniform(1.0, 1.2)
        h = rng.uniform(0.0, 0.2)
        assert S.detectable_ratio(h, TAU, S.decision_floor(lo, hi)) == TAU * math.exp(h)
        assert S.expected_detectable(h, TAU) == TAU * math.exp(h)
        assert S.expected_detectable(h, TAU, S.AA_FLOOR) == TAU * math.exp(2.0 * h)
        # mde: tau * sqrt(hi / lo) under the calibration rule, tau * F * sqrt(hi / lo) under the floor rule
        assert S.minimum_detectable(lo, hi, TAU) == TAU * math.sqrt(hi / lo)
        assert S.minimum_detectable(lo, hi, TAU, S.AA_FLOOR) == TAU * S.noise_floor_of(lo, hi) * math.sqrt(hi / lo)


def _projected(units, lo, hi, to_units):
    """The A/A half width at ``to_units`` units: h falls as 1 / sqrt(units)."""
    return math.log(hi / lo) / 2.0 * math.sqrt(units / to_units)


@pytest.mark.parametrize("rule", S.AA_RULES)
def test_units_needed_is_the_fewest_units_whose_projected_mde_reaches_the_target(rule):
    rng = random.Random(8)
    seen = 0
    for _ in range(400):
        units = rng.randint(2, 12)
        lo, hi = sorted((math.exp(rng.gauss(0.0, 0.05)), math.exp(rng.gauss(0.0, 0.05))))
        target = rng.choice([1.03, 1.05, 1.08])
        need = S.units_needed(units, lo, hi, target, TAU, rule)
        F = S.decision_floor(lo, hi, rule)

        def mde(u):  # the calibration rule holds F; a centred control under the floor rule has F = exp(h)
            h = _projected(units, lo, hi, u)
            return TAU * F * math.exp(h) if rule == S.AA_CALIBRATION else TAU * math.exp(2.0 * h)

        if need is None:
            assert target <= (TAU * F if rule == S.AA_CALIBRATION else TAU)
            continue
        seen += 1
        assert need >= units and mde(need) <= target * (1 + 1e-12)
        if need > units:
            assert mde(need - 1) > target
    assert seen > 100


def test_units_needed_under_the_floor_rule_is_the_formula_as_it_stood():
    h, hs = math.log(1.1 / 0.9) / 2, math.log(1.05 / 1.02) / 2
    assert S.units_needed(4, 0.9, 1.1, 1.05, 1.02, S.AA_FLOOR) == math.ceil(4 * (h / hs) ** 2)
    # the calibration rule: h* = log(1.05/1.02), four times the floor rule's (h*)^2, a quarter of the units
    assert S.units_needed(4, 0.9, 1.1, 1.05, 1.02) == math.ceil(4 * (h / (2 * hs)) ** 2)
    assert S.units_needed(4, 1.01, 1.04, 1.05, 1.02) is None  # 1.02 x 1.04 > 1.05: no number of units


def _paired_rows(rng, shift, processes=6):
    rows = []
    for p in range(processes):
        b = rng.gauss(0.0, 0.02)
        for arm, mu in (("X", 0.0), ("X_aa", shift), ("Y", 0.05)):
            g = rng.gauss(0.0, 0.01)
            rows += [(f"p{p}", arm, f"t{t}", math.exp(1.0 + mu + b + g + rng.gauss(0.0, 0.03))) for t in range(3)]
    return rows


def test_the_campaign_floor_and_the_ratio_columns_follow_the_rule():
    rng = random.Random(2)
    for shift, holds in ((0.0, True), (0.08, False)):
        rows = _paired_rows(rng, shift)
        aa = IV.design_interval(rows, "X_aa", "X", ["t0", "t1", "t2"], S.PAIRED, 0.95)
        assert (aa.lo <= 1 <= aa.hi) is holds
        F_cal = IV.aa_floor(rows, ["t0", "t1", "t2"], S.PAIRED, S.AA_CALIBRATION)
        F_floor = IV.aa_floor(rows, ["t0", "t1", "t2"], S.PAIRED, S.AA_FLOOR)
        assert F_floor == S.noise_floor_of(aa.lo, aa.hi) and F_cal == (1.0 if holds else F_floor)
        col = IV.ratio_columns(rows, "Y", "X", ["t0", "t1", "t2"], S.PAIRED, F_cal)
        r = IV.design_interval(rows, "Y", "X", ["t0", "t1", "t2"], S.PAIRED, 0.95)
        assert col["detectable"] == S.detectable_ratio(r.half_width, TAU, F_cal)
        # the checker's campaign floor, under the same rule, to the bit
        for rule in S.AA_RULES:
            assert CI.aa_floor(rows, ["t0", "t1", "t2"], "paired", rule) == IV.aa_floor(
                rows, ["t0", "t1", "t2"], S.PAIRED, rule
            )


def _replication(shift: float) -> tuple[list[dict], list[dict]]:
    """A replication requests table (C_pq, C_qb, C_qb_aa; two tasks, six sessions) and its qualification."""
    reqs, qual = [], []
    rng = random.Random(5)
    fac = {"C_pq": 1.05, "C_qb": 1.0, "C_qb_aa": math.exp(shift)}
    for si in range(6):
        for bi, arm in enumerate(fac):
            for t, base in (("HumanEval/0", 2.0e9), ("HumanEval/1", 3.0e9)):
                wobble = math.exp(rng.gauss(0.0, 0.01))
                reqs.append(
                    dict(
                        campaign="replication", family="fam", session=f"s{si}", cap=24, arm=arm, mode="spec",
                        layout="pq" if arm == "C_pq" else "qb", task_id=t, status="ok",
                        t_ns=int(base * fac[arm] * wobble), cpu_ns=None, block=bi, worker=f"s{si}-w{bi}",
                    )
                )  # fmt: skip
    for arm in fac:
        for t in ("HumanEval/0", "HumanEval/1"):
            qual.append(dict(campaign="replication", family="fam", task_id=t, arm=arm, cap=24, qualified=True))
    return reqs, qual


@pytest.mark.parametrize("shift", [0.0, 0.03])
def test_the_noise_row_follows_the_rule(shift):
    reqs, qual = _replication(shift)
    (cal,) = NZ.noise_table(reqs, qual, "replication", aa_rule=S.AA_CALIBRATION)
    (old,) = NZ.noise_table(reqs, qual, "replication", aa_rule=S.AA_FLOOR)
    lo, hi, units = cal["lo"], cal["hi"], cal["units"]
    assert (cal["verdict"] == "ok") is (shift == 0.0)
    assert old["floor"] == S.noise_floor_of(lo, hi)
    assert old["mde"] == TAU * old["floor"] * math.sqrt(hi / lo)
    assert old["units_needed"] == S.units_needed(units, lo, hi, S.TARGET_EFFECT, TAU, S.AA_FLOOR)
    if shift == 0.0:
        assert cal["floor"] == 1.0 and cal["mde"] == TAU * math.sqrt(hi / lo)
    else:
        assert cal["floor"] == old["floor"] and cal["mde"] == old["mde"]
    assert cal["units_needed"] == S.units_needed(units, lo, hi, S.TARGET_EFFECT, TAU, S.AA_CALIBRATION)
    # the E2 decision weighs the row's floor
    est = [dict(family="fam", lo=1.0205, hi=1.06, threshold=TAU, reason=None)]
    (weighed,) = NZ.weigh_estimates(est, [cal])
    assert weighed["floor"] == cal["floor"]
    assert weighed["decision"] == S.decide_weighed(1.0205, 1.06, TAU, cal["floor"])
    if shift == 0.0:
        assert weighed["decision"] == "exceeds" and NZ.weigh_estimates(est, [old])[0]["decision"] == "noise_too_high"


# --------------------------------------------------------------------------- the checker, to the bit


@pytest.mark.parametrize("rule", S.AA_RULES)
def test_the_checker_agrees_to_the_bit_on_random_inputs(rule):
    rng = random.Random(17)
    holds = 0
    for _ in range(3000):
        lo, hi = sorted((math.exp(rng.gauss(0.0, 0.04)), math.exp(rng.gauss(0.0, 0.04))))
        tau, units = rng.choice([1.01, 1.02, 1.05]), rng.randint(2, 16)
        target, h = rng.choice([1.03, 1.05, 1.1]), abs(rng.gauss(0.0, 0.05))
        holds += lo <= 1.0 <= hi
        assert C.decision_floor(lo, hi, rule) == S.decision_floor(lo, hi, rule)
        assert C.minimum_detectable(lo, hi, tau, rule) == S.minimum_detectable(lo, hi, tau, rule)
        assert C.units_needed(units, lo, hi, target, tau, rule) == S.units_needed(units, lo, hi, target, tau, rule)
        assert C.expected_detectable(h, tau, rule) == S.expected_detectable(h, tau, rule)
        F = S.decision_floor(lo, hi, rule)
        assert C.detectable_ratio(h, tau, F) == S.detectable_ratio(h, tau, F)
    assert 500 < holds < 2500  # both branches of the calibration rule were taken


@pytest.mark.parametrize("rule", S.AA_RULES)
def test_the_checker_sizes_the_plan_to_the_bit_under_either_rule(rule):
    rng = random.Random(23)
    for _ in range(40):
        inter, within = rng.choice([0.0, 4e-5, 3e-4]), rng.uniform(1e-4, 2e-2)
        arms, process_s, request_s = rng.randint(2, 7), rng.uniform(0.5, 8.0), rng.uniform(0.1, 3.0)
        target, budget = rng.choice([1.03, 1.05, 1.1]), rng.choice([60.0, 300.0, 3000.0])
        comps = S.VarianceComponents("paired", 0.0, within, inter, 0, 0)
        p = S.plan_paired(
            comps, process_s=process_s, request_s=request_s, arms=arms, target=target, threshold=TAU,
            budget_s=budget, max_processes=16, max_requests=8, aa_rule=rule,
        )  # fmt: skip
        got = CS.plan_paired(inter, within, process_s, request_s, arms, target, TAU, budget, 16, 8, rule)
        want = (p.processes, p.requests_per_arm, p.expected_half_width, p.expected_detectable, p.expected_seconds)
        assert got[:5] == want and got[5:] == (p.reachable, p.reason)


def test_the_checker_reads_the_rule_from_the_plan():
    # an archive from before the field: every campaign was decided under the floor rule
    old = {"campaigns": {"fam/implementation": {"campaign": "implementation", "family": "fam"}}, "bootstrap": {}}
    assert CI.aa_rule_of(old, "implementation", "fam") == C.LEGACY_AA_RULE == "floor"
    assert S.aa_rule_of(old["campaigns"]["fam/implementation"]) == S.LEGACY_AA_RULE == "floor"
    assert CI.aa_rule_of(None, "replication", "fam") == "floor" and CI.aa_rule_of({}, "replication", "fam") == "floor"
    new = {
        "campaigns": {
            "fam/implementation": {"campaign": "implementation", "family": "fam", "aa_rule": "calibration"},
            "other/implementation": {"campaign": "implementation", "family": "other"},
            "replication": {"aa_rule": "calibration"},  # a run of one family: the key is the name
        }
    }
    assert CI.aa_rule_of(new, "implementation", "fam") == "calibration"
    assert CI.aa_rule_of(new, "implementation", "other") == "floor"
    assert CI.aa_rule_of(new, "replication", "fam") == "calibration"
    assert CI.aa_rule_of(new, "confirmation", "fam") == "floor"  # no plan of its own
    # the sizing of a plan without the field is the floor rule's, of one with it the calibration rule's
    prior = {"between": 0.0, "within": 0.01, "interaction": 4e-5, "process_s": 3.0, "request_s": 1.0}
    defn = {"campaign": "implementation", "sizing": {"target": 1.05, "budget_s": 300, "prior": prior}}
    base = {"definition": defn, "family": "fam", "arms": {"A": {}, "B": {}}, "panels": {"p": {"tasks": ["t0"]}}}
    legacy, calib = CS.expected_row(base), CS.expected_row({**base, "aa_rule": "calibration"})
    comps = S.VarianceComponents("paired", 0.0, 0.01, 4e-5, 0, 0)
    for row, rule in ((legacy, S.AA_FLOOR), (calib, S.AA_CALIBRATION)):
        p = S.plan_paired(
            comps, process_s=3.0, request_s=1.0, arms=2, target=1.05, threshold=1.02, budget_s=300,
            max_processes=32, max_requests=16, aa_rule=rule,
        )  # fmt: skip
        assert (row["processes"], row["repeats"], row["expected_detectable"]) == (
            p.processes,
            p.requests_per_arm,
            p.expected_detectable,
        )
    assert calib["expected_detectable"] < legacy["expected_detectable"]
