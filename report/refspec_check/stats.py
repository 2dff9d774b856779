"""The statistics, as ``workflow/refspec/core/stats.py``'s docstring defines them (anc/report.md: both agree
to 1e-12): means of logs, paired ratios, percentiles, the worker-level (Welch) and session (t) intervals
with Student's t quantile, the A/A floor and verdict, the weighed decision and the minimum detectable
ratio; of the paired design, the process contrasts and their interval, the variance components, the
equivalence test, the ratio decision and the detectable ratio.

The floor F that weighs the decisions follows the A/A rule a campaign's plan froze (``aa_rule``;
``"floor"`` for a plan without the field, refspec_check.intervals.aa_rule_of), as
``refspec.core.stats.decision_floor`` defines it, to the bit:

    rule "calibration":  F = 1 while the A/A interval holds 1 (lo <= 1 <= hi), else max(hi, 1/lo)
    rule "floor":        F = max(hi, 1/lo)
    mde = tau * F * sqrt(hi/lo)
    units_needed = max(units, ceil(units * (h / h*)^2)),  h = log(hi/lo)/2,
        h* = log(m / (tau * F))   (calibration; none when m <= tau * F)
        h* = log(m / tau) / 2     (floor; none when m <= tau)
    expected detectable of a sizing plan = tau * exp(h) (calibration) or tau * exp(2 h) (floor)"""

from __future__ import annotations

import math

TARGET_EFFECT = 1.05  # the minimum detectable ratio a design should reach (units_needed)
AA_CALIBRATION = "calibration"  # F = 1 while the A/A interval holds 1, max(hi, 1/lo) when it does not
AA_FLOOR = "floor"  # F = max(hi, 1/lo) always
AA_RULES = (AA_CALIBRATION, AA_FLOOR)
DEFAULT_AA_RULE = AA_CALIBRATION  # the rule a campaign freezes into its plan
LEGACY_AA_RULE = AA_FLOOR  # the rule of a plan without aa_rule


def mean(xs) -> float:
    xs = list(xs)
    return math.fsum(xs) / len(xs)


def mean_log(ts) -> float:
    return mean(math.log(t) for t in ts)


def paired(num: dict, den: dict, tasks) -> tuple[float, dict, list]:
    """(D = mean_t d(t), {t: d(t)}, regressed tasks) with d(t) = mean log num - mean log den."""
    d = {t: mean_log(num[t]) - mean_log(den[t]) for t in sorted(tasks)}
    return mean(d.values()), d, [t for t in d if d[t] < 0]


def percentile(sorted_vals: list, p: float) -> float:
    n = len(sorted_vals)
    h = (n - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return sorted_vals[lo] + (h - lo) * (sorted_vals[hi] - sorted_vals[lo])


CONFIDENCE = 0.95
MIN_UNITS = 2  # fewer units (workers of an arm, or sessions): no interval
# the verdicts (decide_ratio) and E2 decisions (decide_weighed) that decide: the others leave it open
DECIDED = ("exceeds", "faster", "equivalent", "below")
DEFAULT_THRESHOLD = 1.02  # the practical threshold of a plan that names none
NOISE_OK = "ok"  # the A/A interval holds 1
NOISE_BIASED = "biased"  # the A/A interval excludes 1


def sample_var(xs) -> float:
    xs = list(xs)
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) >= tiny else tiny)
    h = d
    for m in range(1, 301):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) >= tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) >= tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function: 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2 for t >= 0."""
    a, b, x = df / 2.0, 0.5, df / (df + t * t)
    if x <= 0.0:
        ib = 0.0
    elif x >= 1.0:
        ib = 1.0
    else:
        bt = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x))
        ib = bt * _betacf(a, b, x) / a if x < (a + 1.0) / (a + b + 2.0) else 1.0 - bt * _betacf(b, a, 1.0 - x) / b
    p = 0.5 * ib
    return 1.0 - p if t >= 0 else p


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t by bisection of t_cdf to the last bit."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def t_interval(D: float, se: float, df: float, level: float = CONFIDENCE) -> tuple[float, float]:
    q = t_quantile(0.5 + level / 2.0, df)
    return math.exp(D - q * se), math.exp(D + q * se)


def block_residuals(blocks: dict, tasks) -> list:
    """r_b = mean over block b's requests (t, x) of (log x - L(t)), L(t) the arm's mean log time of t."""
    keep = set(tasks)
    pooled: dict = {}
    for b in sorted(blocks):
        for t, x in blocks[b]:
            if t in keep:
                pooled.setdefault(t, []).append(x)
    L = {t: mean_log(v) for t, v in pooled.items()}
    out = []
    for b in sorted(blocks):
        terms = [math.log(x) - L[t] for t, x in blocks[b] if t in keep]
        if terms:
            out.append(math.fsum(terms) / len(terms))
    return out


def process_interval(num_blocks: dict, den_blocks: dict, tasks, level: float = CONFIDENCE):
    """(value, lo, hi, df, units) of the paired ratio with its Welch interval over the workers, or None
    with fewer than MIN_UNITS workers on a side."""
    tasks = sorted(tasks)
    num = {t: [x for b in sorted(num_blocks) for tt, x in num_blocks[b] if tt == t] for t in tasks}
    den = {t: [x for b in sorted(den_blocks) for tt, x in den_blocks[b] if tt == t] for t in tasks}
    if any(not num[t] or not den[t] for t in tasks):
        return None
    D = paired(num, den, tasks)[0]
    ra, rb = block_residuals(num_blocks, tasks), block_residuals(den_blocks, tasks)
    if min(len(ra), len(rb)) < MIN_UNITS:
        return None
    va, vb = sample_var(ra) / len(ra), sample_var(rb) / len(rb)
    se2 = va + vb
    df = se2 * se2 / (va * va / (len(ra) - 1) + vb * vb / (len(rb) - 1)) if se2 > 0 else float(len(ra) + len(rb) - 2)
    lo, hi = t_interval(D, math.sqrt(se2), df, level)
    return math.exp(D), lo, hi, df, min(len(ra), len(rb))


def unit_interval(cs: list, level: float = CONFIDENCE):
    """(value, lo, hi, df, units) of exp(mean c) with the one-sample t interval over independent units
    (sessions, processes), or None under MIN_UNITS."""
    n = len(cs)
    if n < MIN_UNITS:
        return None
    D = math.fsum(cs) / n
    lo, hi = t_interval(D, math.sqrt(sample_var(cs) / n), float(n - 1), level)
    return math.exp(D), lo, hi, float(n - 1), n


def session_interval(cs: list):
    """(value, lo, hi, df, units) of exp(mean c_s) with the one-sample t interval, or None under MIN_UNITS."""
    return unit_interval(cs)


def cpu_pooled_ratio(cpu: dict, key: tuple, num: str, den: str, tasks: list):
    """The paired ratio of CPU times (requests.cpu_ns > 0) pooled over sessions; None unless every task has both."""
    a = {t: cpu.get(key + (num, t), []) for t in tasks}
    b = {t: cpu.get(key + (den, t), []) for t in tasks}
    if not tasks or not all(a[t] and b[t] for t in tasks):
        return None
    return math.exp(paired(a, b, tasks)[0])


def floor_of(lo: float, hi: float) -> float:
    return max(hi, 1.0 / lo)


def aa_verdict(lo: float, hi: float) -> str:
    return NOISE_OK if lo <= 1.0 <= hi else NOISE_BIASED


def decide_weighed(lo: float, hi: float, thr: float, floor: float = 1.0) -> str:
    """exceeds: lo > thr * F; below: hi < thr / F; noise_too_high: clears thr only inside the band; else inconclusive."""
    if lo > thr * floor:
        return "exceeds"
    if hi < thr / floor:
        return "below"
    if lo > thr or hi < thr:
        return "noise_too_high"
    return "inconclusive"


def decision_floor(lo: float, hi: float, rule: str = DEFAULT_AA_RULE) -> float:
    """F under the A/A rule: 1 while [lo, hi] holds 1 under "calibration", else max(hi, 1/lo)."""
    if rule not in AA_RULES:
        raise ValueError(f"unknown A/A rule {rule!r}")
    if rule == AA_CALIBRATION and lo <= 1.0 <= hi:
        return 1.0
    return floor_of(lo, hi)


def minimum_detectable(lo: float, hi: float, thr: float, rule: str = DEFAULT_AA_RULE) -> float:
    return thr * decision_floor(lo, hi, rule) * math.sqrt(hi / lo)


def detectable_ratio(h: float, thr: float, floor: float = 1.0) -> float:
    """tau * F * exp(h): the smallest true ratio whose interval of log half width h clears tau * F."""
    return thr * floor * math.exp(h)


def units_needed(units: int, lo: float, hi: float, target: float, thr: float, rule: str = DEFAULT_AA_RULE):
    """units * (h / h*)^2 (at least units): h* = log(target / (thr * F)) under "calibration", F held at
    decision_floor (None when target <= thr * F); h* = log(target / thr) / 2 under "floor"."""
    if rule == AA_FLOOR:
        if target <= thr:
            return None
        h_star = math.log(target / thr) / 2.0
    else:
        bar = thr * decision_floor(lo, hi, rule)
        if target <= bar:
            return None
        h_star = math.log(target / bar)
    h = math.log(hi / lo) / 2.0
    return max(units, math.ceil(units * (h / h_star) ** 2))


def expected_detectable(h: float, thr: float, rule: str = DEFAULT_AA_RULE) -> float:
    """A sizing plan's expected detectable ratio: tau * exp(h) under "calibration", tau * exp(2 h) under "floor"."""
    if rule not in AA_RULES:
        raise ValueError(f"unknown A/A rule {rule!r}")
    return thr * math.exp(2.0 * h if rule == AA_FLOOR else h)


def median(xs) -> float:
    v = sorted(xs)
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2.0


# the paired design: one process serves every arm; rows are (process, arm, task, time)


def process_contrasts(rows, num_arm: str, den_arm: str, tasks=None) -> dict:
    """{p: c_p} in sorted order: c_p = mean over the tasks timed for both arms in process p (within tasks
    when given) of mean log num - mean log den."""
    keep = None if tasks is None else set(tasks)
    times: dict = {}
    for p, a, t, x in rows:
        if (a == num_arm or a == den_arm) and (keep is None or t in keep):
            times.setdefault(p, {num_arm: {}, den_arm: {}})[a].setdefault(t, []).append(x)
    out = {}
    for p in sorted(times):
        num, den = times[p][num_arm], times[p][den_arm]
        common = [t for t in num if t in den]
        if common:
            out[p] = paired(num, den, common)[0]
    return out


def paired_interval(cs, level: float = CONFIDENCE):
    """(value, lo, hi, df, units) over the process contrasts (a dict from process_contrasts, or a list)."""
    return unit_interval([cs[p] for p in sorted(cs)] if isinstance(cs, dict) else list(cs), level)


def variance_components(rows, design: str):
    """{design, between, within, interaction, n_processes, n_requests, share_between} by the method of
    moments (interaction None for the fresh design; negative estimates clip to 0), or None when the rows
    give no degrees of freedom for them."""
    y = [(p, a, t, math.log(x)) for p, a, t, x in rows]
    groups: dict = {}
    for _p, a, t, v in y:
        groups.setdefault((a, t), []).append(v)
    mu = {k: math.fsum(v) / len(v) for k, v in groups.items()}
    cells: dict = {}
    for p, a, t, v in y:
        cells.setdefault((p, a), []).append(v - mu[(a, t)])
    m = {k: math.fsum(z) / len(z) for k, z in cells.items()}
    arms, procs = sorted({k[1] for k in cells}), sorted({k[0] for k in cells})
    df_w = len(y) - len(cells) - len(groups) + len(arms)
    if df_w < 1:
        return None
    within = math.fsum((v - m[k]) ** 2 for k, z in cells.items() for v in z) / df_w
    n_h = len(cells) / math.fsum(1.0 / len(z) for z in cells.values())
    if design == "paired":
        by_p: dict = {}
        for k, v in m.items():
            by_p.setdefault(k[0], []).append(v)
        M = {p: math.fsum(v) / len(v) for p, v in by_p.items()}
        df_i = len(cells) - len(procs) - len(arms) + 1
        if len(procs) < MIN_UNITS or df_i < 1:
            return None
        ms_i = math.fsum((m[k] - M[k[0]]) ** 2 for k in cells) / df_i
        k_h = len(procs) / math.fsum(1.0 / len(by_p[p]) for p in procs)
        interaction = max(ms_i - within / n_h, 0.0)
        between = max(sample_var([M[p] for p in procs]) - ms_i / k_h, 0.0)
    elif design == "fresh":
        arm_of: dict = {}
        for p, a in cells:
            if arm_of.setdefault(p, a) != a:
                return None
        by_a: dict = {}
        for p in procs:
            by_a.setdefault(arm_of[p], []).append(m[(p, arm_of[p])])
        mbar = {a: math.fsum(v) / len(v) for a, v in by_a.items()}
        if len(procs) - len(arms) < 1:
            return None
        ms_b = math.fsum((m[(p, arm_of[p])] - mbar[arm_of[p]]) ** 2 for p in procs) / (len(procs) - len(arms))
        interaction, between = None, max(ms_b - within / n_h, 0.0)
    else:
        return None
    total = between + (interaction or 0.0) + within
    return dict(
        design=design,
        between=between,
        within=within,
        interaction=interaction,
        n_processes=len(procs),
        n_requests=len(y),
        share_between=between / total if total > 0 else 0.0,
    )


def equivalent(lo90: float, hi90: float, thr: float) -> bool:
    """Two one-sided tests: the 90 % interval lies inside [1/thr, thr]."""
    return 1.0 / thr <= lo90 and hi90 <= thr


def decide_ratio(lo95: float, hi95: float, lo90: float, hi90: float, thr: float, floor: float = 1.0) -> str:
    """exceeds: lo95 > thr * F; faster: hi95 < 1 / (thr * F); equivalent: the 90 % interval inside
    [F/thr, thr/F] (never when thr/F <= 1); noise_too_high: clears thr or 1/thr only inside the band;
    else inconclusive."""
    if lo95 > thr * floor:
        return "exceeds"
    if hi95 < 1.0 / (thr * floor):
        return "faster"
    if thr / floor > 1.0 and equivalent(lo90, hi90, thr / floor):
        return "equivalent"
    if lo95 > thr or hi95 < 1.0 / thr:
        return "noise_too_high"
    return "inconclusive"
