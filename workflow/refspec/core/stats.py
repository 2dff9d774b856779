r"""The statistics of refspec: one definition of every ratio, contrast and interval.

``report/check.py`` implements the same definitions again with the Python
standard library; both must agree to 1e-12. Change one only together with the
other and with ``anc/report.md``.

Notation
--------
``t_{a,t,r}`` is the latency (``requests.t_ns``) of repeat ``r`` of arm ``a`` on
task ``t``; only rows with ``status == "ok"`` are times. Logs are natural.

Mean log time of an arm on a task (over the repeats that are pooled)::

    L_a(t) = (1/R) * sum_r log t_{a,t,r}

Paired log ratio of numerator ``A`` over denominator ``B`` on task ``t``::

    d(t) = L_A(t) - L_B(t)

Paired (geometric-mean) ratio over a task set ``T`` -- the one ratio
function, :func:`paired_ratio`, used for implementation ratios, session
contrasts and task point estimates::

    D = (1/|T|) * sum_{t in T} d(t)        ratio = exp(D)

``ratio > 1`` means ``A`` is slower, i.e. favours the denominator. Because
``d`` is additive per task, on a common task set
``ratio(A/C) = ratio(A/B) * ratio(B/C)`` exactly (up to rounding); the checker
uses this identity. A *task regression* is a task with ``d(t) < 0``
(task ratio ``exp(d(t)) < 1``: the denominator is slower on that task).

Session contrast (replication): within session ``s``, with ``L`` pooled over that
session's repeats only::

    c_s = D over the tasks timed for both arms in s

The unit of variance: the worker
--------------------------------
Every block of a campaign is served by one fresh worker process, and a process's
start-up luck (memory layout and page placement, what ran before it, the page cache)
moves all of its requests together: the requests of one worker are not independent.
A/A runs on this machine showed it: the two names of one recipe differed by 11 % with a
task bootstrap interval of [0.852, 0.960] that excluded 1, and a simulated A/A with a
worker effect of 5 % and request noise of 1 % covers 1 in about 12 % of runs under the
task bootstrap but in 95 % under the worker-level interval below
(``tests/core/test_worker_intervals.py``). The tasks of the panel are fixed (the
ratio is defined on them); the workers are the random draw.

*Worker residuals.* For arm ``a`` with blocks (workers) ``b`` and ``L_a(t)`` its mean
log time on task ``t`` over all its blocks::

    r_{a,b} = mean over the requests (t, x) of block b of (log x - L_a(t))

(with blocks that each serve the panel once, ``r_{a,b}`` is the block's mean log time
minus the arm's, and ``D = mean_b m_{A,b} - mean_b m_{B,b}``).

*Worker-level interval of a paired ratio* (:func:`worker_interval`, Welch)::

    v_A = s^2(r_A) / n_A,   v_B = s^2(r_B) / n_B     (s^2: sample variance, n - 1)
    se  = sqrt(v_A + v_B)
    df  = (v_A + v_B)^2 / (v_A^2 / (n_A - 1) + v_B^2 / (n_B - 1))    (n_A + n_B - 2 when se = 0)
    [lo, hi] = exp(D -+ t_{0.975, df} * se)

with ``n_a >= 2`` workers per arm (:data:`MIN_UNITS`); ``units`` is ``min(n_A, n_B)``.

*Session interval of an estimate* (:func:`session_interval`): each E2 session has its
own workers for every arm, so the session contrast ``c_s`` already carries the worker;
over ``n >= 2`` sessions::

    estimate = exp(mean c_s),  se = s(c) / sqrt(n),  [lo, hi] = exp(mean c -+ t_{0.975, n-1} * se)

Why t intervals and not a bootstrap: with 2 to 8 units the percentile bootstrap's
variance is ``(n - 1)/n`` of the truth and it has few distinct resamples, so it covers
less than it states; the t interval is exact for normal unit means, and means of log
times of whole blocks are close to normal. ``t_{p, df}`` is :func:`t_quantile`: the
bisection, to the last bit, of ``F(t) = 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2`` with the
regularized incomplete beta ``I`` from its continued fraction (modified Lentz), so that
the standard-library checker reproduces every bound.

The A/A control and the decision
--------------------------------
A timed campaign may run one arm twice, as ``X`` and its twin ``X_aa`` (the same recipe
under another name, in the same blocks and sessions). Its interval (kind ``ratio``:
:func:`worker_interval` of ``X_aa`` over ``X``; kind ``estimate``: :func:`session_interval`
of their session contrasts) gives::

    verdict = "ok"      if lo <= 1 <= hi
              "biased"  otherwise (two runs of one recipe differ beyond the model of the noise)
    F       = max(hi, 1 / lo)                       the A/A floor (>= 1 when ok)

An estimate with interval ``[lo, hi]`` is decided against the threshold ``tau``
(default 1.02) weighed by the floor of its campaign and family (:func:`decide_weighed`;
``F = 1`` without a control)::

    lo > tau * F                   -> "exceeds"
    hi < tau / F                   -> "below"
    lo > tau  or  hi < tau         -> "noise_too_high"  (clears tau, but only inside the band)
    otherwise                      -> "inconclusive"
    fewer than 2 sessions          -> "too_few_sessions" (no interval, no decision)

*Minimum detectable ratio* (:func:`minimum_detectable`): the smallest true ratio whose
interval, as wide as the control's (half width ``h = log(hi/lo)/2``), clears ``tau * F``::

    mde = tau * F * exp(h)

and, since ``h`` falls as ``1/sqrt(units)`` and a centred control has ``F = exp(h)``, the
units needed for a minimum detectable ratio ``m`` (:func:`units_needed`, reported for
``m`` = :data:`TARGET_EFFECT`, 1.05)::

    units * (h / h*)^2,   h* = log(m / tau) / 2

A task point estimate over sessions (for replication regressions) is
``exp(mean_s d_s(t))`` over the sessions in which ``t`` is timed for both
arms; it regresses when below 1.

The seeded resampling indices (:func:`bootstrap_indices`) remain for ``refspec compare``'s
interval of a ratio between two archives (:mod:`refspec.compare.timings`)::

    rng = random.Random(seed)                     # default seed 20261014
    for j in 1..draws:                            # default 10,000 draws
        idx = [rng.randrange(n) for _ in range(n)]   # drawn in this order

``P_p`` is the linearly interpolated percentile (numpy's default ``linear``
method): with the ``N`` values sorted ``x_0 <= ... <= x_{N-1}``,
``h = (N - 1) * p / 100``, ``P_p = x_floor(h) + (h - floor(h)) * (x_floor(h)+1 - x_floor(h))``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import IntegrityError

DEFAULT_SEED = 20261014
DEFAULT_DRAWS = 10_000
DEFAULT_THRESHOLD = 1.02
TOO_FEW_SESSIONS = "too_few_sessions"
NOISE_OK = "ok"
NOISE_TOO_HIGH = "noise_too_high"  # an estimate that clears the threshold only inside the A/A band


class StatsError(IntegrityError, ValueError):
    """Inputs that the definitions do not cover (empty groups, ambiguous arms); exit code 3."""


# --------------------------------------------------------------------------- primitives


def mean_log(times: Sequence[float]) -> float:
    """``(1/R) * sum log t``; times must be positive."""
    a = np.asarray(times, dtype=np.float64)
    if a.size == 0:
        raise StatsError("mean of no times")
    if np.any(a <= 0):
        raise StatsError("times must be positive")
    return float(np.log(a).mean())


def task_log_ratios(
    num: Mapping[str, Sequence[float]], den: Mapping[str, Sequence[float]], tasks: Iterable[str] | None = None
) -> dict[str, float]:
    """``d(t) = L_num(t) - L_den(t)`` for each task (sorted); default tasks: those timed in both."""
    if tasks is None:
        tasks = [t for t in num if len(num[t]) and t in den and len(den[t])]
    out = {}
    for t in sorted(tasks):
        if not len(num.get(t, ())) or not len(den.get(t, ())):
            raise StatsError(f"task {t!r} is not timed for both arms")
        out[t] = mean_log(num[t]) - mean_log(den[t])
    return out


@dataclass(frozen=True)
class PairedRatio:
    """Result of :func:`paired_ratio`."""

    ratio: float
    log_ratio: float
    n_tasks: int
    task_log_ratios: dict[str, float] = field(repr=False)
    regressed: tuple[str, ...] = ()

    @property
    def n_regressions(self) -> int:
        return len(self.regressed)

    @property
    def task_ratios(self) -> dict[str, float]:
        return {t: math.exp(d) for t, d in self.task_log_ratios.items()}


def paired_ratio(
    num: Mapping[str, Sequence[float]], den: Mapping[str, Sequence[float]], tasks: Iterable[str] | None = None
) -> PairedRatio:
    """The geometric-mean ratio of paired times, ``exp(mean_t d(t))``, with task regressions.

    ``num`` and ``den`` map task id -> positive times (any unit, the same for
    both). Tasks default to those timed for both arms; given ``tasks`` must
    all be timed for both. Regressions are tasks with ``d(t) < 0``.
    """
    d = task_log_ratios(num, den, tasks)
    if not d:
        raise StatsError("no task is timed for both arms")
    vals = np.fromiter(d.values(), dtype=np.float64, count=len(d))
    D = float(vals.mean())
    return PairedRatio(
        ratio=math.exp(D),
        log_ratio=D,
        n_tasks=len(d),
        task_log_ratios=d,
        regressed=tuple(t for t, v in d.items() if v < 0),
    )


def ratio_of_pooled(d_by_task: Mapping[str, Sequence[float]]) -> tuple[dict[str, float], tuple[str, ...]]:
    """Task point estimates ``exp(mean d)`` from per-session log ratios, and the regressions."""
    pts = {t: math.exp(float(np.mean(np.asarray(v, dtype=np.float64)))) for t, v in sorted(d_by_task.items())}
    reg = tuple(t for t, v in sorted(d_by_task.items()) if float(np.mean(np.asarray(v, dtype=np.float64))) < 0)
    return pts, reg


def percentile(values: Sequence[float], p: float) -> float:
    """Linearly interpolated percentile (numpy's default method)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), p))


def bootstrap_indices(n: int, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The ``draws x n`` resampling indices: ``rng.randrange(n)`` in draw-major order."""
    if n < 1:
        raise StatsError("bootstrap of no sessions")
    if draws < 1:
        raise StatsError("draws must be >= 1")
    rng = random.Random(seed)
    rr = rng.randrange
    flat = [rr(n) for _ in range(draws * n)]
    return np.asarray(flat, dtype=np.int64).reshape(draws, n)


def too_few_sessions_reason(n: int) -> str:
    return f"{n} session(s): at least {MIN_UNITS} are needed for an interval; no decision"


def median(xs: Sequence[float]) -> float:
    """The middle value of ``xs``, or the mean of the two middle values."""
    v = sorted(float(x) for x in xs)
    if not v:
        raise StatsError("median of no times")
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2.0


# --------------------------------------------------------------------------- worker-level intervals

CONFIDENCE = 0.95  # the two-sided level of every timing interval
TARGET_EFFECT = 1.05  # the effect size a timed design should resolve (PQ/QB of about 3-6 %)
MIN_UNITS = 2  # fewer units (workers of an arm, or sessions): no interval
NOISE_BIASED = "biased"  # the A/A interval excludes 1


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
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


def _betai(a: float, b: float, x: float) -> float:
    """``I_x(a, b)``, the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    bt = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return bt * _betacf(a, b, x) / a
    return 1.0 - bt * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` (real, > 0) degrees of freedom."""
    p = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - p if t >= 0 else p


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t: bisection of :func:`t_cdf` to the last bit."""
    if not 0.5 < p < 1.0 or not df > 0:
        raise StatsError(f"t quantile of p={p}, df={df}")
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


@dataclass(frozen=True)
class Interval:
    """A ratio ``exp(D)`` and its two-sided :data:`CONFIDENCE` interval from ``units`` units."""

    value: float
    lo: float
    hi: float
    log_value: float
    se: float  # standard error of D (log scale)
    df: float  # degrees of freedom of the t quantile
    units: int  # the units of variance: workers (blocks) per arm (the smaller side), or sessions

    @property
    def half_width(self) -> float:
        """``log(hi / lo) / 2``: the interval's half width on the log scale."""
        return math.log(self.hi / self.lo) / 2.0


def _sample_var(xs: Sequence[float]) -> float:
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def _t_interval(D: float, se: float, df: float, units: int, level: float = CONFIDENCE) -> Interval:
    q = t_quantile(0.5 + level / 2.0, df)
    return Interval(math.exp(D), math.exp(D - q * se), math.exp(D + q * se), D, se, df, units)


def block_residuals(blocks: Mapping[str, Sequence[tuple[str, float]]], tasks: Iterable[str]) -> dict[str, float]:
    """The worker residual of every block of one arm: ``r_b = mean_{(t, x) in b} (log x - L(t))``.

    ``blocks`` maps a block (worker) id to its timed requests ``(task, time)``; ``L(t)`` is the
    arm's mean log time of task ``t`` over all its blocks (:func:`mean_log`, as a paired ratio pools
    them). Requests of tasks outside ``tasks`` are left out; a block with none has no residual.
    """
    keep = set(tasks)
    pooled: dict[str, list[float]] = {}
    for b in sorted(blocks):
        for t, x in blocks[b]:
            if t in keep:
                pooled.setdefault(t, []).append(x)
    L = {t: mean_log(v) for t, v in pooled.items()}
    out = {}
    for b in sorted(blocks):
        terms = [math.log(x) - L[t] for t, x in blocks[b] if t in keep]
        if terms:
            out[b] = math.fsum(terms) / len(terms)
    return out


def worker_interval(
    num_blocks: Mapping[str, Sequence[tuple[str, float]]],
    den_blocks: Mapping[str, Sequence[tuple[str, float]]],
    tasks: Iterable[str],
    level: float = CONFIDENCE,
) -> Interval:
    """The paired ratio of two arms with its worker-level (Welch) interval; see the module docstring."""
    tasks = sorted(tasks)
    num = {t: [x for b in sorted(num_blocks) for tt, x in num_blocks[b] if tt == t] for t in tasks}
    den = {t: [x for b in sorted(den_blocks) for tt, x in den_blocks[b] if tt == t] for t in tasks}
    D = paired_ratio(num, den, tasks).log_ratio
    ra = list(block_residuals(num_blocks, tasks).values())
    rb = list(block_residuals(den_blocks, tasks).values())
    if min(len(ra), len(rb)) < MIN_UNITS:
        raise StatsError(f"a worker-level interval needs at least {MIN_UNITS} workers per arm ({len(ra)}, {len(rb)})")
    va, vb = _sample_var(ra) / len(ra), _sample_var(rb) / len(rb)
    se2 = va + vb
    if se2 > 0:
        df = se2 * se2 / (va * va / (len(ra) - 1) + vb * vb / (len(rb) - 1))
    else:
        df = float(len(ra) + len(rb) - 2)
    return _t_interval(D, math.sqrt(se2), df, min(len(ra), len(rb)), level)


def session_interval(c: Sequence[float], level: float = CONFIDENCE) -> Interval:
    """``exp(mean c_s)`` with the one-sample t interval over the session contrasts ``c_s``."""
    n = len(c)
    if n < MIN_UNITS:
        raise StatsError(f"a session interval needs at least {MIN_UNITS} sessions ({n})")
    D = math.fsum(c) / n
    return _t_interval(D, math.sqrt(_sample_var(c) / n), float(n - 1), n, level)


def noise_floor_of(lo: float, hi: float) -> float:
    """The A/A floor ``F = max(hi, 1 / lo)``: how far two runs of one recipe can stand apart."""
    return max(hi, 1.0 / lo)


def aa_verdict(lo: float, hi: float) -> str:
    """``ok`` when the A/A interval contains 1, else ``biased``."""
    return NOISE_OK if lo <= 1.0 <= hi else NOISE_BIASED


def decide_weighed(lo: float, hi: float, threshold: float = DEFAULT_THRESHOLD, floor: float = 1.0) -> str:
    """The threshold decision weighed by the A/A floor ``F`` (1 without a control):

    ``exceeds`` when lo > tau * F, ``below`` when hi < tau / F; an interval that clears the threshold
    only inside the band (lo > tau or hi < tau, but not by F) is ``noise_too_high``; else
    ``inconclusive``."""
    if lo > threshold * floor:
        return "exceeds"
    if hi < threshold / floor:
        return "below"
    if lo > threshold or hi < threshold:
        return NOISE_TOO_HIGH
    return "inconclusive"


def minimum_detectable(lo_aa: float, hi_aa: float, threshold: float = DEFAULT_THRESHOLD) -> float:
    """The smallest ratio this design decides as ``exceeds``: ``tau * F * sqrt(hi / lo)`` of its A/A control."""
    return threshold * noise_floor_of(lo_aa, hi_aa) * math.sqrt(hi_aa / lo_aa)


def units_needed(
    units: int, lo_aa: float, hi_aa: float, target: float, threshold: float = DEFAULT_THRESHOLD
) -> int | None:
    """Units (workers per arm, or sessions) for a minimum detectable effect of ``target``: the
    A/A half width scales as ``1 / sqrt(units)``, and a centred control has ``F = exp(h)``, so
    ``tau * exp(2 h) <= target`` needs ``units * (h / h*)^2`` with ``h* = log(target / tau) / 2``."""
    if target <= threshold:
        return None
    h = math.log(hi_aa / lo_aa) / 2.0
    h_star = math.log(target / threshold) / 2.0
    return max(units, math.ceil(units * (h / h_star) ** 2))
