"""The statistics, as ``workflow/refspec/core/stats.py``'s docstring defines them (anc/report.md: both agree
to 1e-12): means of logs, paired ratios, the seeded percentile bootstrap, the threshold decision and the
noise verdict."""

from __future__ import annotations

import math
import random

MIN_SESSIONS = 5  # fewer session contrasts: no threshold decision ("too few sessions")


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


def bootstrap(c: list, draws: int, seed: int, percentiles=(2.5, 97.5)) -> list:
    rng = random.Random(seed)
    n = len(c)
    means = []
    for _ in range(draws):
        s = 0.0
        for _j in range(n):
            s += c[rng.randrange(n)]
        means.append(s / n)
    means.sort()
    return [math.exp(percentile(means, p)) for p in percentiles]


def decide(lo: float, hi: float, thr: float, n_sessions: int | None = None) -> str:
    if n_sessions is not None and n_sessions < MIN_SESSIONS:
        return "too_few_sessions"
    return "exceeds" if lo > thr else "below" if hi < thr else "inconclusive"


def noise_verdict(lo: float, hi: float, thr: float) -> str:
    """The A/A control's verdict: ok when lo <= 1 <= hi and hi / lo <= thr, else noise_too_high."""
    return "ok" if lo <= 1.0 <= hi and hi / lo <= thr else "noise_too_high"


def gate(decision: str, noise) -> str:
    """exceeds/below become noise_too_high under an A/A verdict noise_too_high."""
    return "noise_too_high" if noise == "noise_too_high" and decision in ("exceeds", "below") else decision


def median(xs) -> float:
    v = sorted(xs)
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2.0
