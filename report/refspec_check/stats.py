"""The statistics, as ``workflow/refspec/core/stats.py``'s docstring defines them (anc/report.md: both agree
to 1e-12): means of logs, paired ratios, percentiles, the worker-level (Welch) and session (t) intervals
with Student's t quantile, the A/A floor and verdict, the weighed decision and the minimum detectable
ratio."""

from __future__ import annotations

import math

TARGET_EFFECT = 1.05  # the minimum detectable ratio a design should reach (units_needed)


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


def t_interval(D: float, se: float, df: float) -> tuple[float, float]:
    q = t_quantile(0.5 + CONFIDENCE / 2.0, df)
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


def worker_interval(num_blocks: dict, den_blocks: dict, tasks):
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
    lo, hi = t_interval(D, math.sqrt(se2), df)
    return math.exp(D), lo, hi, df, min(len(ra), len(rb))


def session_interval(cs: list):
    """(value, lo, hi, df, units) of exp(mean c_s) with the one-sample t interval, or None under MIN_UNITS."""
    n = len(cs)
    if n < MIN_UNITS:
        return None
    D = math.fsum(cs) / n
    lo, hi = t_interval(D, math.sqrt(sample_var(cs) / n), float(n - 1))
    return math.exp(D), lo, hi, float(n - 1), n


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
    return "ok" if lo <= 1.0 <= hi else "biased"


def decide_weighed(lo: float, hi: float, thr: float, floor: float = 1.0) -> str:
    """exceeds: lo > thr * F; below: hi < thr / F; noise_too_high: clears thr only inside the band; else inconclusive."""
    if lo > thr * floor:
        return "exceeds"
    if hi < thr / floor:
        return "below"
    if lo > thr or hi < thr:
        return "noise_too_high"
    return "inconclusive"


def minimum_detectable(lo: float, hi: float, thr: float) -> float:
    return thr * floor_of(lo, hi) * math.sqrt(hi / lo)


def units_needed(units: int, lo: float, hi: float, target: float, thr: float):
    if target <= thr:
        return None
    h, h_star = math.log(hi / lo) / 2.0, math.log(target / thr) / 2.0
    return max(units, math.ceil(units * (h / h_star) ** 2))


def median(xs) -> float:
    v = sorted(xs)
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2.0
