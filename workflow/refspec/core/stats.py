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

Session contrast (the replication campaign, ``anc/campaigns.md``): within session ``s``,
with ``L`` pooled over that session's repeats only::

    c_s = D over the tasks timed for both arms in s

Estimate over ``n`` sessions::

    estimate = exp((1/n) * sum_s c_s)

Bootstrap interval (exactly, so that a second implementation reproduces it)::

    rng = random.Random(seed)                     # default seed 20261014
    for j in 1..draws:                            # default 10,000 draws
        idx = [rng.randrange(n) for _ in range(n)]   # drawn in this order
        m_j = mean(c_s[i] for i in idx)
    lo, hi = exp(P_2.5(m)), exp(P_97.5(m))

``P_p`` is the linearly interpolated percentile (numpy's default ``linear``
method): with the ``N`` values sorted ``x_0 <= ... <= x_{N-1}``,
``h = (N - 1) * p / 100``, ``P_p = x_floor(h) + (h - floor(h)) * (x_floor(h)+1 - x_floor(h))``.

Threshold decision (threshold ``tau``, default 1.02, on the ratio scale)::

    n < 5 sessions         -> "too_few_sessions" (the interval is descriptive, no decision)
    lo > tau               -> "exceeds"      (the effect exceeds the practical threshold)
    hi < tau               -> "below"        (the whole interval is below the threshold)
    otherwise              -> "inconclusive"

With fewer than ``MIN_SESSIONS`` (5) session contrasts a percentile bootstrap
has too few distinct resample means to carry a decision (with 2 sessions the
"interval" is the range of the two contrasts); the estimate and interval are
still reported, the decision is ``too_few_sessions``.

A/A noise floor (``anc/campaigns.md``, "The A/A control"): a timed campaign may
run one arm twice, as the arm ``X`` and its twin ``X_aa`` (the same recipe under
another name, in the same blocks and sessions). Its log contrasts ``u_i`` (kind
``ratio``: the task log ratios ``d(t)`` of ``X_aa`` over ``X`` on the panel,
pooled over sessions and repeats; kind ``estimate``: the session contrasts
``c_s`` of ``X_aa`` over ``X``) give ``value = exp(mean u_i)`` and ``[lo, hi]``
by the same bootstrap as above (:func:`noise_floor`). The noise verdict::

    lo <= 1 <= hi and hi / lo <= tau   -> "ok"
    otherwise                          -> "noise_too_high"

"Wider than the practical threshold" means ``hi / lo > tau`` (with ``tau``
1.02: the A/A interval spans more than 2 %). A decision taken beside an A/A
control whose verdict is ``noise_too_high`` is ``"noise_too_high"`` ("machine
noise too high") instead of ``exceeds`` or ``below``; ``inconclusive`` and
``too_few_sessions`` stay as they are (they claim nothing). Without an A/A
control (or with an unqualified one) the decision is the plain one.

A task point estimate over sessions (for replication regressions) is
``exp(mean_s d_s(t))`` over the sessions in which ``t`` is timed for both
arms; it regresses when below 1.
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
DEFAULT_PERCENTILES = (2.5, 97.5)
MIN_SESSIONS = 5  # fewer session contrasts: the interval is descriptive, no threshold decision
TOO_FEW_SESSIONS = "too_few_sessions"
NOISE_OK = "ok"
NOISE_TOO_HIGH = "noise_too_high"  # the A/A control's verdict, and the decision it forces


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


def bootstrap_means(c: Sequence[float], draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Means of the resampled contrasts, one per draw (log scale)."""
    arr = np.asarray(c, dtype=np.float64)
    idx = bootstrap_indices(arr.size, draws, seed)
    return arr[idx].mean(axis=1)


def bootstrap_interval(
    c: Sequence[float],
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> tuple[float, ...]:
    """``exp`` of the given percentiles of the bootstrap means of ``c`` (default 2.5, 97.5)."""
    m = bootstrap_means(c, draws, seed)
    return tuple(math.exp(float(v)) for v in np.percentile(m, list(percentiles)))


def decide(lo: float, hi: float, threshold: float = DEFAULT_THRESHOLD, noise: str | None = None) -> str:
    """``exceeds`` if lo > threshold, ``below`` if hi < threshold, else ``inconclusive``;
    ``noise_too_high`` instead of ``exceeds``/``below`` when the A/A verdict ``noise`` is."""
    if lo > threshold:
        out = "exceeds"
    elif hi < threshold:
        out = "below"
    else:
        return "inconclusive"
    return NOISE_TOO_HIGH if noise == NOISE_TOO_HIGH else out


def noise_verdict(lo: float, hi: float, threshold: float = DEFAULT_THRESHOLD) -> str:
    """``ok`` when the A/A interval contains 1 and ``hi / lo <= threshold``; else ``noise_too_high``."""
    if lo <= 1.0 <= hi and hi / lo <= threshold:
        return NOISE_OK
    return NOISE_TOO_HIGH


def gate(decision: str, noise: str | None) -> str:
    """A decision already taken, under the A/A verdict ``noise`` (see :func:`decide`)."""
    if noise == NOISE_TOO_HIGH and decision in ("exceeds", "below"):
        return NOISE_TOO_HIGH
    return decision


@dataclass(frozen=True)
class Estimate:
    estimate: float
    lo: float
    hi: float
    n_sessions: int
    draws: int
    seed: int
    threshold: float
    decision: str


def estimate(
    c: Sequence[float],
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
    threshold: float = DEFAULT_THRESHOLD,
) -> Estimate:
    """``exp(mean c_s)`` with its bootstrap interval and threshold decision."""
    arr = np.asarray(c, dtype=np.float64)
    if arr.size == 0:
        raise StatsError("estimate of no sessions")
    lo, hi = bootstrap_interval(arr, draws, seed)
    return Estimate(
        estimate=math.exp(float(arr.mean())),
        lo=lo,
        hi=hi,
        n_sessions=int(arr.size),
        draws=int(draws),
        seed=int(seed),
        threshold=float(threshold),
        decision=TOO_FEW_SESSIONS if arr.size < MIN_SESSIONS else decide(lo, hi, threshold),
    )


@dataclass(frozen=True)
class AAControl:
    value: float
    lo: float
    hi: float
    n: int
    verdict: str


def noise_floor(
    u: Sequence[float],
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
    threshold: float = DEFAULT_THRESHOLD,
) -> AAControl:
    """The A/A control from its log contrasts ``u`` (task log ratios or session contrasts):
    :func:`estimate`'s value and interval, and :func:`noise_verdict`."""
    e = estimate(u, draws, seed, threshold)
    return AAControl(e.estimate, e.lo, e.hi, e.n_sessions, noise_verdict(e.lo, e.hi, threshold))


def noise_reason(lo: float, hi: float, threshold: float) -> str:
    """Why an A/A verdict is ``noise_too_high`` (the same words in the checker)."""
    parts = []
    if not lo <= 1.0 <= hi:
        parts.append("the A/A interval does not contain 1")
    if hi / lo > threshold:
        parts.append(f"the A/A interval is wider than the threshold (hi/lo {hi / lo:.4f} > {threshold:g})")
    return "; ".join(parts)


def too_few_sessions_reason(n: int) -> str:
    return f"{n} session(s): at least {MIN_SESSIONS} are needed for a decision; the interval is descriptive"


def median(xs: Sequence[float]) -> float:
    """The middle value of ``xs``, or the mean of the two middle values."""
    v = sorted(float(x) for x in xs)
    if not v:
        raise StatsError("median of no times")
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2.0
