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

*Worker-level interval of a paired ratio* (:func:`process_interval`, Welch)::

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
:func:`process_interval` of ``X_aa`` over ``X``, or :func:`paired_interval` in the paired design;
kind ``estimate``: :func:`session_interval` of their session contrasts) gives::

    verdict = "ok"      if lo <= 1 <= hi
              "biased"  otherwise (two runs of one recipe differ beyond the model of the noise)
    noise floor = max(hi, 1 / lo)                   (:func:`noise_floor_of`, >= 1 when ok)

The floor ``F`` that weighs the decisions (:func:`decision_floor`) follows the campaign's rule,
frozen in its plan as ``aa_rule`` (:data:`DEFAULT_AA_RULE`; a plan without the field was decided
under ``"floor"``, :data:`LEGACY_AA_RULE`)::

    rule "calibration" (the default):  F = 1                 if lo <= 1 <= hi   (the control holds)
                                       F = max(hi, 1 / lo)   otherwise          (the control failed)
    rule "floor" (before):             F = max(hi, 1 / lo)   always
    no control:                        F = 1

*Why calibration.* The twin is timed in the same processes (sessions) as the arms it controls,
so the noise the A/A interval measures is already inside each ratio's own interval: a ratio's
interval over the processes carries the process-by-arm interaction and the request noise exactly
as the twin's does. Weighing it again by ``F ~ exp(h)`` counts that noise twice (a detectable
ratio of about ``tau * exp(2 h)``, not ``tau * exp(h)``) and leaves true effects just above
``tau`` undecided. The A/A control is a test of that model instead: while its interval holds 1 the
model is calibrated and the ratios' own intervals decide (``F = 1``); when it excludes 1 the model
missed a cause (placement, schedule, drift), the control has failed, and every decision of the
campaign and family carries the measured bias ``max(hi, 1/lo)``. ``bench/decision_rules.py``
simulates the paired design with this module's intervals (3000 draws of 8 processes x 8 requests
per arm of ``X``, ``X_aa`` and ``Y``, the variance components of the implementation campaign's
prior; its module docstring has the table): the A/A interval held 1 in 95.2 % of draws; a true
ratio of 1 was never decided "exceeds" under either rule, a true ratio at ``tau`` (1.02) in 2.4 %
under the calibration rule (the 95 % interval's upper tail) and 0 % under the floor rule; a true
1.05 in 41.6 % against 0.8 %, and 1.08 in 89.9 % against 19.8 % (median detectable ratio 1.054,
``tau * exp(h)``, against 1.099, about ``tau * exp(2 h)``), and "equivalent" was never reached under
the floor rule (an ``F`` above ``tau`` leaves no equivalence band). So the calibration rule is the
default: it keeps the error rate at the threshold where the intervals put it, and a design needs a
margin of ``h`` above ``tau`` on the log scale instead of about ``2 h``.

An estimate with interval ``[lo, hi]`` is decided against the threshold ``tau``
(default 1.02) weighed by the floor ``F`` of its campaign and family (:func:`decide_weighed`)::

    lo > tau * F                   -> "exceeds"
    hi < tau / F                   -> "below"
    lo > tau  or  hi < tau         -> "noise_too_high"  (clears tau, but only inside the band)
    otherwise                      -> "inconclusive"
    fewer than 2 sessions          -> "too_few_sessions" (no interval, no decision)

(with ``F = 1``, ``noise_too_high`` cannot occur: an interval that clears ``tau`` is decided).

*Minimum detectable ratio* (:func:`minimum_detectable`): the smallest true ratio whose
interval, as wide as the control's (half width ``h = log(hi/lo)/2``), clears ``tau * F``::

    mde = tau * F * exp(h) = tau * F * sqrt(hi / lo)
        = tau * sqrt(hi / lo)                      (calibration rule, the control holds: F = 1)

*Units needed* for a minimum detectable ratio ``m`` (:func:`units_needed`, reported for
``m`` = :data:`TARGET_EFFECT`, 1.05), with ``h`` falling as ``1/sqrt(units)``: ``units' >= units *
(h / h*)^2`` for the largest half width ``h*`` that still gives ``mde <= m``::

    rule "calibration":  F held at decision_floor(lo, hi) (1 while the control holds)
                         tau * F * exp(h*) = m   ->  h* = log(m / (tau * F))   (none when m <= tau * F)
    rule "floor":        a centred control has F = exp(h), which shrinks with h
                         tau * exp(2 h*) = m     ->  h* = log(m / tau) / 2     (none when m <= tau)
    units_needed = max(units, ceil(units * (h / h*)^2))

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

The paired design
-----------------
In the design above every arm runs in its own fresh worker processes, so every contrast
carries two draws of the process effect. In the *paired design* one worker process loads
the models once and serves every arm of a comparison, request by request, interleaved in a
balanced order. The process stays the unit of variance: each process contributes its
within-process contrast, and the interval is taken over processes. The timed rows are
``(p, a, t, x)``: process, arm, task and time (``x > 0``).

*Process contrast* (:func:`process_contrasts`): with ``L_{a,p}(t)`` the mean log time of arm
``a`` on task ``t`` in process ``p``, and ``T_p`` the tasks timed for both arms in ``p``
(within the given task set)::

    c_p = (1/|T_p|) * sum_{t in T_p} (L_{A,p}(t) - L_{B,p}(t))      (D of process p, paired_ratio)

for every process with ``T_p`` not empty, in sorted order of the processes.

*Paired interval* (:func:`paired_interval`): the session interval's one-sample t interval
(:func:`unit_interval` computes both), over the ``P >= 2`` process contrasts::

    estimate = exp(mean c_p),  se = s(c) / sqrt(P),  [lo, hi] = exp(mean c -+ t_{(1 + level)/2, P-1} * se)

*Variance components* (:func:`variance_components`), by the method of moments. The model of
the log time ``y = log x`` of request ``r``::

    y_{p,a,t,r} = mu_{a,t} + b_p + g_{p,a} + e_{p,a,t,r}
    Var b = between (the process),  Var g = interaction (process by arm),  Var e = within (the request)

The residuals ``z = y - ybar_{a,t}`` remove the arm-by-task means (over every process); a
*cell* ``c`` is a pair ``(p, a)`` with ``n_c`` requests and mean residual ``m_c``; ``N``
requests, ``C`` cells, ``K`` arm-by-task means, ``A`` arms, ``P`` processes. Within: the
pooled variance around the cell means, on the residual degrees of freedom of the
arm-by-task and cell means (``N_a - P_a - T_a + 1`` for each arm)::

    within = sum_c sum_{i in c} (z_i - m_c)^2 / (N - C - K + A)        E[within] = Var e

Design ``"paired"`` (the processes serve every arm): with ``M_p`` the mean of the ``k_p``
cell means of process ``p``::

    MS_I = sum_c (m_c - M_{p(c)})^2 / (C - P - A + 1)     E[MS_I] = interaction + within / n~
    S_M  = s^2(M_p)  (P - 1 degrees of freedom)          E[S_M]  = between + interaction / k~ + within / (k~ * n~)
    interaction = MS_I - within / n~,   between = S_M - MS_I / k~

Design ``"fresh"`` (every process serves one arm; ``mbar_a`` the mean of the cell means of arm
``a``'s processes): the interaction is confounded with the process effect and is ``None``::

    MS_B = sum_p (m_p - mbar_{a(p)})^2 / (P - A)          E[MS_B] = between + within / n~
    between = MS_B - within / n~

``n~`` is the harmonic mean of the cell sizes ``n_c`` and ``k~`` the harmonic mean of the cells
per process ``k_p``: the expectations are exact for balanced cells (every process serves every
task of its arms equally often) and approximate otherwise. Each component is computed from the
raw moments and then clipped at 0 (a negative estimate is a component too small to see), and
``share_between = between / (between + interaction + within)`` (0 when all are 0).

*Equivalence* (two one-sided tests at 5 % each, :func:`equivalent`): the ratio is within
``tau`` of 1 when its 90 % interval lies inside ``[1/tau, tau]``::

    equivalent = 1/tau <= lo90  and  hi90 <= tau

*The ratio decision* (:func:`decide_ratio`), on the 95 % and 90 % intervals of one ratio,
weighed by the floor ``F`` of the campaign's A/A control under its rule (:func:`decision_floor`:
1 while the control holds under the calibration rule, and without a control), first match::

    lo95 > tau * F                                 -> "exceeds"        (the numerator slower beyond tau)
    hi95 < 1 / (tau * F)                           -> "faster"         (the numerator faster beyond tau)
    tau / F > 1  and  equivalent(lo90, hi90, tau / F) -> "equivalent"  (inside [F/tau, tau/F])
    lo95 > tau  or  hi95 < 1 / tau                 -> "noise_too_high" (clears tau or 1/tau only inside the band)
    otherwise                                      -> "inconclusive"

*Detectable ratio* (:func:`detectable_ratio`): the smallest true ratio whose interval, as wide
as one of half width ``h``, clears ``tau * F``; :func:`minimum_detectable` is the same with
``exp(h) = sqrt(hi / lo)`` of the control::

    detectable = tau * F * exp(h)
               = tau * exp(h)              (calibration rule while the control holds: F = 1)
               ~ tau * exp(2 h)            (floor rule: the twin, in the same processes, has F ~ exp(h))

*Sizing by a cost model* (:func:`plan_paired`; Kalibera and Jones, "Rigorous benchmarking in
reasonable time", ISMM 2013). With ``n`` timed requests per arm in each of ``P`` processes::

    Var(c_p) = 2 * interaction + 2 * within / n
    h        = t_{0.975, P-1} * sqrt(Var(c_p) / P)
    detectable = tau * exp(h)          rule "calibration": F = 1 while the control holds
               = tau * exp(2 h)        rule "floor": the A/A twin, in the same processes, has F of about exp(h)
    seconds  = P * (process_s + arms * n * request_s)      (process_s: a start with its warm-ups)

(:func:`expected_detectable`; the rule is the plan's ``aa_rule``).

The plan is the cheapest integer ``2 <= P <= max_processes``, ``1 <= n <= max_requests`` with
``detectable <= target`` and ``seconds <= budget`` (ties: the smaller detectable ratio, then
fewer processes); when none is, the plan within the budget with the smallest detectable ratio
(the smallest design when none fits), marked unreachable with a sentence that says what the
budget reaches and what the target would cost. Components of the fresh design have no
interaction; their process effect ``between`` stands in for it (an upper bound).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# the names the report, the checker and the pipeline share have one owner, the checker's statistics:
# the verdicts that decide, the default threshold, the A/A verdicts and the fewest units of an interval
from refspec_check.stats import DECIDED, DEFAULT_THRESHOLD, MIN_UNITS, NOISE_BIASED, NOISE_OK  # noqa: F401

from .errors import IntegrityError

if TYPE_CHECKING:  # numpy is imported where it computes
    import numpy as np

DEFAULT_SEED = 20261014
DEFAULT_DRAWS = 10_000
TOO_FEW_SESSIONS = "too_few_sessions"
NOISE_TOO_HIGH = "noise_too_high"  # an estimate that clears the threshold only inside the A/A band


class StatsError(IntegrityError, ValueError):
    """Inputs that the definitions do not cover (empty groups, ambiguous arms); exit code 3."""


# --------------------------------------------------------------------------- primitives


def mean_log(times: Sequence[float]) -> float:
    """``(1/R) * sum log t``; times must be positive."""
    import numpy as np

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
    import numpy as np

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
    import numpy as np

    pts = {t: math.exp(float(np.mean(np.asarray(v, dtype=np.float64)))) for t, v in sorted(d_by_task.items())}
    reg = tuple(t for t, v in sorted(d_by_task.items()) if float(np.mean(np.asarray(v, dtype=np.float64))) < 0)
    return pts, reg


def percentile(values: Sequence[float], p: float) -> float:
    """Linearly interpolated percentile (numpy's default method)."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), p))


def bootstrap_indices(n: int, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The ``draws x n`` resampling indices: ``rng.randrange(n)`` in draw-major order."""
    import numpy as np

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
# the rules of the floor F that weighs a campaign's decisions (:func:`decision_floor`), frozen in its plan
AA_CALIBRATION = "calibration"  # F = 1 while the A/A interval holds 1, max(hi, 1/lo) when it does not
AA_FLOOR = "floor"  # F = max(hi, 1/lo) always (the rule before the plan recorded one)
AA_RULES = (AA_CALIBRATION, AA_FLOOR)
DEFAULT_AA_RULE = AA_CALIBRATION  # the rule a campaign freezes into its plan (``aa_rule``)
LEGACY_AA_RULE = AA_FLOOR  # the rule of a plan without ``aa_rule``


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


def process_interval(
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


def unit_interval(
    c: Sequence[float], level: float = CONFIDENCE, *, unit: str = "session", units: str = "sessions"
) -> Interval:
    """``exp(mean c)`` with the one-sample t interval over the contrasts ``c`` of independent units
    (sessions, processes); ``unit``/``units`` name them in the error."""
    n = len(c)
    if n < MIN_UNITS:
        raise StatsError(f"a {unit} interval needs at least {MIN_UNITS} {units} ({n})")
    D = math.fsum(c) / n
    return _t_interval(D, math.sqrt(_sample_var(c) / n), float(n - 1), n, level)


def session_interval(c: Sequence[float], level: float = CONFIDENCE) -> Interval:
    """``exp(mean c_s)`` with the one-sample t interval over the session contrasts ``c_s``."""
    return unit_interval(c, level)


def noise_floor_of(lo: float, hi: float) -> float:
    """The A/A floor ``F = max(hi, 1 / lo)``: how far two runs of one recipe can stand apart."""
    return max(hi, 1.0 / lo)


def aa_verdict(lo: float, hi: float) -> str:
    """``ok`` when the A/A interval contains 1, else ``biased``."""
    return NOISE_OK if lo <= 1.0 <= hi else NOISE_BIASED


def aa_rule_of(plan: Mapping | None) -> str:
    """The A/A rule a frozen campaign plan records (``aa_rule``); :data:`LEGACY_AA_RULE` when it
    records none (a plan frozen before the field); an unknown rule is refused."""
    rule = (plan or {}).get("aa_rule", LEGACY_AA_RULE)
    if rule not in AA_RULES:
        raise StatsError(f"unknown A/A rule {rule!r} (one of {', '.join(AA_RULES)})")
    return rule


def decision_floor(lo: float, hi: float, rule: str = DEFAULT_AA_RULE) -> float:
    """The floor ``F`` that weighs the decisions beside an A/A interval ``[lo, hi]``: under the
    ``calibration`` rule 1 while the interval holds 1 and :func:`noise_floor_of` when it does not
    (the control failed); under the ``floor`` rule :func:`noise_floor_of` always."""
    if rule not in AA_RULES:
        raise StatsError(f"unknown A/A rule {rule!r} (one of {', '.join(AA_RULES)})")
    if rule == AA_CALIBRATION and lo <= 1.0 <= hi:
        return 1.0
    return noise_floor_of(lo, hi)


def decide_weighed(lo: float, hi: float, threshold: float = DEFAULT_THRESHOLD, floor: float = 1.0) -> str:
    """The threshold decision weighed by the floor ``F`` of the A/A control (:func:`decision_floor`;
    1 without a control):

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


def _clearing_ratio(threshold: float, floor: float, widening: float) -> float:
    """``tau * F * exp(h)``, with ``exp(h)`` given: the one product of :func:`detectable_ratio` and
    :func:`minimum_detectable` (which passes ``sqrt(hi / lo)``, its bits unchanged)."""
    return threshold * floor * widening


def detectable_ratio(half_width: float, threshold: float = DEFAULT_THRESHOLD, floor: float = 1.0) -> float:
    """The smallest true ratio whose interval, of log half width ``h``, clears ``tau * F``: ``tau * F * exp(h)``."""
    return _clearing_ratio(threshold, floor, math.exp(half_width))


def minimum_detectable(
    lo_aa: float, hi_aa: float, threshold: float = DEFAULT_THRESHOLD, rule: str = DEFAULT_AA_RULE
) -> float:
    """The smallest ratio this design decides as ``exceeds``: ``tau * F * sqrt(hi / lo)`` of its A/A control
    with ``F`` = :func:`decision_floor` under ``rule`` (:func:`detectable_ratio` with ``exp(h) = sqrt(hi / lo)``):
    ``tau * sqrt(hi / lo)`` while the control holds under the calibration rule."""
    return _clearing_ratio(threshold, decision_floor(lo_aa, hi_aa, rule), math.sqrt(hi_aa / lo_aa))


def units_needed(
    units: int,
    lo_aa: float,
    hi_aa: float,
    target: float,
    threshold: float = DEFAULT_THRESHOLD,
    rule: str = DEFAULT_AA_RULE,
) -> int | None:
    """Units (workers per arm, or sessions) for a minimum detectable ratio of ``target`` (``m``): the A/A
    half width ``h = log(hi / lo) / 2`` scales as ``1 / sqrt(units)``, so ``units * (h / h*)^2`` units
    bring it to ``h*``, the largest half width with ``mde <= m``:

    * rule ``calibration``: ``F`` held at :func:`decision_floor` (1 while the control holds), so
      ``tau * F * exp(h*) = m`` and ``h* = log(m / (tau * F))``; None when ``m <= tau * F``;
    * rule ``floor``: a centred control has ``F = exp(h)``, so ``tau * exp(2 h*) = m`` and
      ``h* = log(m / tau) / 2``; None when ``m <= tau``."""
    if rule == AA_FLOOR:
        if target <= threshold:
            return None
        h_star = math.log(target / threshold) / 2.0
    else:
        bar = threshold * decision_floor(lo_aa, hi_aa, rule)
        if target <= bar:
            return None
        h_star = math.log(target / bar)
    h = math.log(hi_aa / lo_aa) / 2.0
    return max(units, math.ceil(units * (h / h_star) ** 2))


def expected_detectable(half_width: float, threshold: float = DEFAULT_THRESHOLD, rule: str = DEFAULT_AA_RULE) -> float:
    """The detectable ratio a design of half width ``h`` expects before it runs (:func:`plan_paired`): ``tau *
    exp(h)`` under the calibration rule (``F = 1`` while the control holds), ``tau * exp(2 h)`` under the
    floor rule (the twin, in the same processes, has ``F`` of about ``exp(h)``)."""
    if rule not in AA_RULES:
        raise StatsError(f"unknown A/A rule {rule!r} (one of {', '.join(AA_RULES)})")
    return threshold * math.exp(2.0 * half_width if rule == AA_FLOOR else half_width)


# --------------------------------------------------------------------------- the paired design

PAIRED = "paired"  # one process serves every arm of a comparison
FRESH = "fresh"  # every process serves one arm
DESIGNS = (PAIRED, FRESH)

Row = tuple[str, str, str, float]  # (process, arm, task, time)


def process_contrasts(
    rows: Iterable[Row], numerator: str, denominator: str, tasks: Iterable[str] | None = None
) -> dict[str, float]:
    """``c_p``, the paired log ratio (:func:`paired_ratio`) of ``numerator`` over ``denominator`` within
    each process ``p`` over the tasks it timed for both arms (within ``tasks`` when given); processes
    that timed no task for both arms have none. Rows are ``(process, arm, task, time)``, times > 0."""
    if numerator == denominator:
        raise StatsError(f"a process contrast needs two arms ({numerator!r} twice)")
    keep = None if tasks is None else set(tasks)
    times: dict[str, dict[str, dict[str, list[float]]]] = {}
    for p, a, t, x in rows:
        if (a == numerator or a == denominator) and (keep is None or t in keep):
            times.setdefault(p, {numerator: {}, denominator: {}})[a].setdefault(t, []).append(x)
    out = {}
    for p in sorted(times):
        num, den = times[p][numerator], times[p][denominator]
        common = [t for t in num if t in den]
        if common:
            out[p] = paired_ratio(num, den, common).log_ratio
    return out


def paired_interval(c: Mapping[str, float] | Sequence[float], level: float = CONFIDENCE) -> Interval:
    """``exp(mean c_p)`` with the one-sample t interval over the process contrasts (``units``: processes);
    ``c`` as :func:`process_contrasts` returns it, or its values."""
    vals = [c[p] for p in sorted(c)] if isinstance(c, Mapping) else list(c)
    return unit_interval(vals, level, unit="paired", units="processes")


@dataclass(frozen=True)
class VarianceComponents:
    """The variances of log time by source (:func:`variance_components`); ``interaction`` is ``None``
    for the fresh design, where it is confounded with the process effect ``between``."""

    design: str
    between: float  # the process effect
    within: float  # the request noise
    interaction: float | None  # process by arm
    n_processes: int
    n_requests: int

    @property
    def share_between(self) -> float:
        """``between / (between + interaction + within)``; 0 when all are 0."""
        total = self.between + (self.interaction or 0.0) + self.within
        return self.between / total if total > 0 else 0.0

    @property
    def sd_between(self) -> float:
        return math.sqrt(self.between)

    @property
    def sd_within(self) -> float:
        return math.sqrt(self.within)

    @property
    def sd_interaction(self) -> float | None:
        return None if self.interaction is None else math.sqrt(self.interaction)


def variance_components(rows: Iterable[Row], design: str) -> VarianceComponents:
    """Between, within and (paired design) interaction variances of log time by the method of moments;
    see the module docstring. Rows are ``(process, arm, task, time)``, times > 0."""
    if design not in DESIGNS:
        raise StatsError(f"unknown design {design!r} (one of {', '.join(DESIGNS)})")
    y = []
    for p, a, t, x in rows:
        if not x > 0:
            raise StatsError("times must be positive")
        y.append((p, a, t, math.log(x)))
    groups: dict[tuple[str, str], list[float]] = {}
    for _p, a, t, v in y:
        groups.setdefault((a, t), []).append(v)
    mu = {k: math.fsum(v) / len(v) for k, v in groups.items()}
    cells: dict[tuple[str, str], list[float]] = {}
    for p, a, t, v in y:
        cells.setdefault((p, a), []).append(v - mu[(a, t)])
    m = {k: math.fsum(z) / len(z) for k, z in cells.items()}
    n_req, n_cells = len(y), len(cells)
    arms = sorted({a for _p, a in cells})
    procs = sorted({p for p, _a in cells})
    df_w = n_req - n_cells - len(groups) + len(arms)
    if df_w < 1:
        raise StatsError(f"no degrees of freedom for the within variance ({n_req} requests, {n_cells} cells)")
    within = math.fsum((v - m[k]) ** 2 for k, z in cells.items() for v in z) / df_w
    n_h = n_cells / math.fsum(1.0 / len(z) for z in cells.values())
    if design == PAIRED:
        by_p: dict[str, list[float]] = {}
        for k, v in m.items():
            by_p.setdefault(k[0], []).append(v)
        M = {p: math.fsum(v) / len(v) for p, v in by_p.items()}
        df_i = n_cells - len(procs) - len(arms) + 1
        if len(procs) < MIN_UNITS or df_i < 1:
            raise StatsError(f"the paired design needs at least {MIN_UNITS} processes serving two arms or more")
        ms_i = math.fsum((m[k] - M[k[0]]) ** 2 for k in cells) / df_i
        k_h = len(procs) / math.fsum(1.0 / len(by_p[p]) for p in procs)
        interaction = ms_i - within / n_h
        between = _sample_var([M[p] for p in procs]) - ms_i / k_h
        return VarianceComponents(PAIRED, max(between, 0.0), within, max(interaction, 0.0), len(procs), n_req)
    arm_of: dict[str, str] = {}
    for p, a in cells:
        if arm_of.setdefault(p, a) != a:
            raise StatsError(f"process {p!r} serves more than one arm: not the fresh design")
    by_a: dict[str, list[float]] = {}
    for p in procs:
        by_a.setdefault(arm_of[p], []).append(m[(p, arm_of[p])])
    mbar = {a: math.fsum(v) / len(v) for a, v in by_a.items()}
    df_b = len(procs) - len(arms)
    if df_b < 1:
        raise StatsError("the fresh design needs an arm served by at least two processes")
    ms_b = math.fsum((m[(p, arm_of[p])] - mbar[arm_of[p]]) ** 2 for p in procs) / df_b
    between = ms_b - within / n_h
    return VarianceComponents(FRESH, max(between, 0.0), within, None, len(procs), n_req)


def equivalent(lo90: float, hi90: float, threshold: float) -> bool:
    """Two one-sided tests: the 90 % interval lies inside ``[1/tau, tau]``."""
    return 1.0 / threshold <= lo90 and hi90 <= threshold


def decide_ratio(iv95: Interval, iv90: Interval, threshold: float = DEFAULT_THRESHOLD, floor: float = 1.0) -> str:
    """``exceeds``, ``faster``, ``equivalent``, ``noise_too_high`` or ``inconclusive``: the ratio decision
    of the module docstring, on the 95 % and 90 % intervals of one ratio, weighed by the A/A floor ``F``."""
    if iv95.lo > threshold * floor:
        return "exceeds"
    if iv95.hi < 1.0 / (threshold * floor):
        return "faster"
    band = threshold / floor
    if band > 1.0 and equivalent(iv90.lo, iv90.hi, band):
        return "equivalent"
    if iv95.lo > threshold or iv95.hi < 1.0 / threshold:
        return NOISE_TOO_HIGH
    return "inconclusive"


@dataclass(frozen=True)
class SizePlan:
    """A paired design's size from :func:`plan_paired`: ``processes`` x ``requests_per_arm`` timed requests."""

    processes: int
    requests_per_arm: int
    expected_half_width: float  # h of the paired interval (log scale)
    expected_detectable: float  # tau * exp(h) (calibration rule) or tau * exp(2 h) (floor rule)
    expected_seconds: float
    reachable: bool  # expected_detectable <= target within the budget
    reason: str


def plan_paired(
    components: VarianceComponents,
    *,
    process_s: float,
    request_s: float,
    arms: int,
    target: float = 1.03,
    threshold: float = DEFAULT_THRESHOLD,
    budget_s: float,
    max_processes: int = 64,
    max_requests: int = 64,
    aa_rule: str = DEFAULT_AA_RULE,
) -> SizePlan:
    """The cheapest paired design whose expected detectable ratio (:func:`expected_detectable` under
    ``aa_rule``) reaches ``target`` within ``budget_s`` seconds, or the best the budget reaches
    (``reachable`` False); see the module docstring."""
    if arms < 2 or max_processes < MIN_UNITS or max_requests < 1 or process_s < 0 or request_s < 0:
        raise StatsError("a plan needs at least two arms, two processes, one request and costs >= 0")
    inter = components.interaction if components.interaction is not None else components.between
    plans = []
    for P in range(MIN_UNITS, max_processes + 1):
        q = t_quantile(0.5 + CONFIDENCE / 2.0, float(P - 1))
        for n in range(1, max_requests + 1):
            h = q * math.sqrt((2.0 * inter + 2.0 * components.within / n) / P)
            seconds = P * (process_s + arms * n * request_s)
            plans.append((P, n, h, expected_detectable(h, threshold, aa_rule), seconds))

    def plan(x, reachable, reason):
        return SizePlan(x[0], x[1], x[2], x[3], x[4], reachable, reason)

    def said(x):
        return f"{x[0]} processes x {x[1]} requests per arm, {x[4]:.0f} s"

    reaching = [x for x in plans if x[3] <= target]
    cheapest = min(reaching, key=lambda x: (x[4], x[3], x[0], x[1])) if reaching else None
    if cheapest is not None and cheapest[4] <= budget_s:
        why = f"{said(cheapest)}: a detectable ratio of {cheapest[3]:.4f} <= {target} within {budget_s:.0f} s"
        return plan(cheapest, True, why)
    if cheapest is None:
        costs = f"the target {target} is not reached within {max_processes} processes x {max_requests} requests per arm"
    else:
        costs = f"the target {target} would cost {cheapest[4]:.0f} s ({said(cheapest)})"
    fits = [x for x in plans if x[4] <= budget_s]
    if not fits:
        small = min(plans, key=lambda x: (x[4], x[0], x[1]))
        return plan(
            small, False, f"the budget of {budget_s:.0f} s buys no design (the smallest: {said(small)}); {costs}"
        )
    best = min(fits, key=lambda x: (x[3], x[4], x[0], x[1]))
    why = f"the budget of {budget_s:.0f} s reaches a detectable ratio of {best[3]:.4f} at best ({said(best)}); {costs}"
    return plan(best, False, why)
