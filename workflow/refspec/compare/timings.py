r"""Timings of two archives: every qualified ratio and E2 estimate, and the ratio of the two.

For a comparison of arms ``num/den`` (a ``ratios`` row, or an ``estimates`` row whose arms
are the replication arms of that path and layouts) each archive ``X`` gives, from its
``requests`` table (``ok`` rows of the campaign, family and cap), for session ``s`` and
panel task ``t`` (the tasks with ``qualification`` rows)::

    S_a[s,t] = sum of log t_ns of arm a,   N_a[s,t] = number of those times

and its value as the archive defines it (``refspec.core.stats``)::

    ratio:     D_X = mean_t (L_num(t) - L_den(t)),  L_a(t) = sum_s S_a[s,t] / sum_s N_a[s,t]
    estimate:  D_X = mean_s c_s,  c_s = mean over tasks timed for both in s of
                                        (S_num[s,t]/N_num[s,t] - S_den[s,t]/N_den[s,t])

value = exp(D_X). The comparison is ``ratio = exp(D_B - D_A)`` (B over A; above 1: B's
ratio is the larger).

**Bootstrap over sessions and tasks.** With the plan's ``seed`` and ``draws`` and the
project's seeded indices (:func:`refspec.core.stats.bootstrap_indices`: ``rng =
random.Random(seed)``, ``n`` indices ``rng.randrange(n)`` per draw, in order)::

    IT = bootstrap_indices(n_tasks,      draws, seed)      # tasks, shared by A and B (paired)
    IA = bootstrap_indices(n_sessions_A, draws, seed + 1)  # A's sessions
    IB = bootstrap_indices(n_sessions_B, draws, seed + 2)  # B's sessions

Draw ``j`` weights task ``t`` by ``v_t`` = how often ``IT[j]`` holds it and session ``s``
of X by ``w_s`` = how often ``IX[j]`` holds it, and recomputes ``D_X`` with the sums
weighted::

    ratio:     L_a(t) = sum_s w_s S_a[s,t] / sum_s w_s N_a[s,t]  (undefined when the sum of N is 0)
               D_X = sum_t v_t d(t) / sum_t v_t                  (over the tasks where d is defined)
    estimate:  c_s = sum_t v_t m_st d_st / sum_t v_t m_st        (m_st: t timed for both in s)
               D_X = sum_s w_s c_s / sum_s w_s                   (over the sessions where c_s is defined)

A draw where ``D_A`` or ``D_B`` is undefined is dropped. ``lo, hi`` = exp of the 2.5th and
97.5th percentiles (linear interpolation, :func:`refspec.core.stats.percentile`) of
``D_B - D_A`` over the kept draws. For a ratio, which its archive states without an
interval, ``a_lo, a_hi`` (and ``b_lo, b_hi``) are the same percentiles of ``D_A`` (``D_B``)
alone over the kept draws; for an estimate they are the archive's own interval (``estimates.lo``/``hi``).

**Verdict** (``band`` >= 1: the practical threshold ``tau`` widened by the larger A/A noise
floor, ``tau * max(F_A, F_B)``, :class:`refspec.compare.model.ArchiveNoiseFloors`; the band of the
weighed decision, ``refspec.core.stats.decide_weighed``):

* ``not comparable`` -- the comparison is in one archive only, unqualified in either, the
  panels differ, the campaign's registered plan or the pinned inputs differ, or an
  archive's stated value is not the value its own requests give (1e-9 relative);
* ``reproduced`` -- ``lo <= 1 <= hi``, or ``1/band <= lo`` and ``hi <= band``;
* ``differs`` -- otherwise.

``report/check.py`` recomputes all of it with the standard library; change both together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from ..core import stats
from ..core.arms import is_twin
from .model import DIFFERS, NOT_COMPARABLE, REPRODUCED, ArchiveData, InputsComparison, TimingComparison

REL_TOL_STATED = 1e-9
PERCENTILES = (2.5, 97.5)


# --------------------------------------------------------------------------- per archive


class Sums:
    """``S_a[s,t]`` and ``N_a[s,t]`` of the numerator and denominator arms of one archive."""

    def __init__(self, rows: list[dict[str, Any]], campaign: str, family: str, cap: int | None, num: str, den: str):
        sel = [
            r
            for r in rows
            if r["campaign"] == campaign
            and r["family"] == family
            and (cap is None or int(r["cap"]) == cap)
            and r["status"] == "ok"
            and r["t_ns"] is not None
            and r["arm"] in (num, den)
        ]
        self.sessions = sorted({r["session"] for r in sel})
        self.times: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (arm, session, task) -> t_ns
        for r in sel:
            self.times[(r["arm"], r["session"], r["task_id"])].append(float(r["t_ns"]))
        self.num, self.den = num, den

    def arrays(self, tasks: list[str]) -> tuple[np.ndarray, ...]:
        shape = (len(self.sessions), len(tasks))
        out = []
        for arm in (self.num, self.den):
            S, N = np.zeros(shape), np.zeros(shape)
            for i, s in enumerate(self.sessions):
                for j, t in enumerate(tasks):
                    ts = self.times.get((arm, s, t), [])
                    if ts:
                        S[i, j] = sum(math.log(x) for x in ts)
                        N[i, j] = len(ts)
            out += [S, N]
        return tuple(out)

    def tasks_timed(self) -> set[str]:
        return {t for (_a, _s, t) in self.times}

    def point(self, kind: str, tasks: list[str]) -> float:
        """log of the archive's value, computed with :mod:`refspec.core.stats` (its definitions)."""
        if kind == "ratio":
            num = {
                t: [x for (a, _s, tt), v in self.times.items() if a == self.num and tt == t for x in v] for t in tasks
            }
            den = {
                t: [x for (a, _s, tt), v in self.times.items() if a == self.den and tt == t for x in v] for t in tasks
            }
            return stats.paired_ratio(num, den, tasks).log_ratio
        cs = []
        for s in self.sessions:
            num = {t: self.times.get((self.num, s, t), []) for t in tasks}
            den = {t: self.times.get((self.den, s, t), []) for t in tasks}
            common = [t for t in tasks if num[t] and den[t]]
            if common:
                cs.append(stats.paired_ratio(num, den, common).log_ratio)
        if not cs:
            raise stats.StatsError("no session timed both arms")
        return float(np.mean(np.asarray(cs, dtype=np.float64)))


def _weights(idx: np.ndarray, n: int) -> np.ndarray:
    """draws x n counts of each index in each draw."""
    w = np.zeros((idx.shape[0], n))
    rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
    np.add.at(w, (rows, idx.ravel()), 1.0)
    return w


def resampled(kind: str, arrays: tuple[np.ndarray, ...], v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``D_X`` for every draw (NaN where undefined), given task weights ``v`` and session weights ``w``."""
    Sn, Nn, Sd, Nd = arrays
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "ratio":
            Ln = (w @ Sn) / (w @ Nn)
            Ld = (w @ Sd) / (w @ Nd)
            d = Ln - Ld  # draws x tasks
            ok = np.isfinite(d)
            num = (v * np.where(ok, d, 0.0)).sum(axis=1)
            den = (v * ok).sum(axis=1)
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        dst = Sn / Nn - Sd / Nd  # sessions x tasks
        m = np.isfinite(dst).astype(np.float64)
        d0 = np.where(m > 0, dst, 0.0)
        cn = v @ d0.T  # draws x sessions
        cd = v @ m.T
        okc = cd > 0
        c = np.where(okc, cn / np.where(okc, cd, 1.0), 0.0)
        ws = w * okc
        tot = ws.sum(axis=1)
        return np.where(tot > 0, (ws * c).sum(axis=1) / np.where(tot > 0, tot, 1.0), np.nan)


def _interval(x: np.ndarray) -> tuple[float, float]:
    lo, hi = (math.exp(stats.percentile(x, p)) for p in PERCENTILES)
    return lo, hi


# --------------------------------------------------------------------------- both archives


def _panel(rows: list[dict[str, Any]], campaign: str, family: str, cap: int | None) -> list[str]:
    return sorted(
        {
            r["task_id"]
            for r in rows
            if r["campaign"] == campaign and r["family"] == family and (cap is None or int(r["cap"]) == cap)
        }
    )


def _arms_of(rows: list[dict[str, Any]], campaign: str, family: str, path: str, layout: str) -> str | None:
    """The one arm of the campaign and family with this mode (path) and layout, as the replication has
    (an A/A twin, the same recipe under the name ``<arm>_aa``, is the noise control, not a side)."""
    found = sorted(
        {
            r["arm"]
            for r in rows
            if r["campaign"] == campaign
            and r["family"] == family
            and r["mode"] == path
            and r["layout"] == layout
            and not is_twin(r["arm"])
        }
    )
    return found[0] if len(found) == 1 else None


def _rel_differs(x: float, y: float) -> bool:
    return abs(x - y) > REL_TOL_STATED * max(1.0, abs(y))


def verdict(lo: float, hi: float, band: float) -> str:
    """``reproduced`` when [lo, hi] contains 1 or lies within [1/band, band]; else ``differs``."""
    if lo <= 1.0 <= hi or (1.0 / band <= lo and hi <= band):
        return REPRODUCED
    return DIFFERS


def _items(x: ArchiveData) -> dict[tuple, dict[str, Any]]:
    """(kind, campaign, family, cap, comparison, path) -> the ratios/estimates row."""
    out = {}
    for r in x.rows("ratios"):
        out[("ratio", r["campaign"], r["family"], int(r["cap"]), f"{r['numerator']}/{r['denominator']}", r["path"])] = r
    for r in x.rows("estimates"):
        out[("estimate", "replication", r["family"], None, r["comparison"], r["path"])] = r
    return out


def _sides(
    a: ArchiveData, b: ArchiveData, key: tuple, ra: dict[str, Any] | None, rb: dict[str, Any] | None
) -> tuple[str | None, str | None, Any, Any, bool, bool, list[str]]:
    """(numerator, denominator, A's value, B's value, qualified in A, qualified in B, the reasons so far) of
    one timing item. A ratio names its arms; an estimate's arms are the ones A's requests give its layouts,
    and B's must be the same."""
    kind, campaign, family, _cap, comp, path = key
    why: list[str] = []
    if kind == "ratio":
        num, den = comp.split("/", 1)
        a_val = ra["ratio"] if ra else None
        b_val = rb["ratio"] if rb else None
        return num, den, a_val, b_val, bool(ra and ra["qualified"]), bool(rb and rb["qualified"]), why
    x_l, y_l = (s.lower() for s in comp.split("/", 1))
    num = _arms_of(a.rows("requests"), campaign, family, path, x_l)
    den = _arms_of(a.rows("requests"), campaign, family, path, y_l)
    num_b = _arms_of(b.rows("requests"), campaign, family, path, x_l)
    den_b = _arms_of(b.rows("requests"), campaign, family, path, y_l)
    if (num, den) != (num_b, den_b):
        why.append(f"the arms differ: A {num}/{den}, B {num_b}/{den_b}")
    a_val = ra["estimate"] if ra else None
    b_val = rb["estimate"] if rb else None
    ok_a = bool(ra and ra["estimate"] is not None)
    ok_b = bool(rb and rb["estimate"] is not None)
    return num, den, a_val, b_val, ok_a, ok_b, why


def _availability_reasons(ra: dict[str, Any] | None, rb: dict[str, Any] | None, ok_a: bool, ok_b: bool) -> list[str]:
    """The reasons an item is missing or unqualified on a side."""
    why = []
    if ra is None or rb is None:
        why.append(f"only in {'B' if ra is None else 'A'}")
    if ra is not None and not ok_a:
        why.append(f"not qualified in A ({ra['reason']})")
    if rb is not None and not ok_b:
        why.append(f"not qualified in B ({rb['reason']})")
    return why


def _set_verdict(t: TimingComparison, why: list[str], band: float) -> None:
    """``t``'s verdict and reason: not comparable with the reasons, else the verdict of its interval (left not
    comparable, without a reason, when it has none)."""
    if why:
        t.verdict, t.reason = NOT_COMPARABLE, "; ".join(why)
    elif t.lo is not None and t.hi is not None:
        t.verdict = verdict(t.lo, t.hi, band)
        t.reason = (
            "the interval contains 1"
            if t.lo <= 1.0 <= t.hi
            else "the interval lies within the band"
            if t.verdict == REPRODUCED
            else "the interval excludes 1 and leaves the band"
        )
        if min(t.n_sessions_a, t.n_sessions_b) < 2:
            t.reason += " (a single session: the interval holds the tasks' noise only)"


def compare_timings(a: ArchiveData, b: ArchiveData, inputs: InputsComparison, band: float) -> list[TimingComparison]:
    boot = inputs.bootstrap_a
    seed, draws = int(boot["seed"]), int(boot["draws"])
    ia, ib = _items(a), _items(b)
    out = []
    for key in sorted(set(ia) | set(ib), key=lambda k: (k[0] != "ratio", k[1], k[2], k[3] or 0, k[5], k[4])):
        kind, campaign, family, cap, comp, path = key
        ra, rb = ia.get(key), ib.get(key)
        num, den, a_val, b_val, ok_a, ok_b, why = _sides(a, b, key, ra, rb)
        why += _availability_reasons(ra, rb, ok_a, ok_b)
        # unqualified comparisons are not timings of the study: listed only when one side has one
        if not ok_a and not ok_b:
            continue
        t = TimingComparison(
            kind=kind,
            campaign=campaign,
            family=family,
            cap=cap,
            comparison=comp,
            path=path,
            numerator=num,
            denominator=den,
            a_value=a_val,
            a_lo=(ra or {}).get("lo") if kind == "estimate" else None,
            a_hi=(ra or {}).get("hi") if kind == "estimate" else None,
            b_value=b_val,
            b_lo=(rb or {}).get("lo") if kind == "estimate" else None,
            b_hi=(rb or {}).get("hi") if kind == "estimate" else None,
            ratio=None,
            lo=None,
            hi=None,
            n_tasks=0,
            n_sessions_a=0,
            n_sessions_b=0,
            draws=draws,
            seed=seed,
            band=band,
            verdict=NOT_COMPARABLE,
            reason="",
        )
        if ok_a and ok_b and not (num and den):
            why.append(f"no single arm per side in A's requests ({comp}, {path}: {num}/{den})")
        if ok_a and ok_b and num and den:
            tasks_a = _panel(a.rows("qualification"), campaign, family, cap)
            tasks_b = _panel(b.rows("qualification"), campaign, family, cap)
            if tasks_a != tasks_b:
                why.append("the panels differ")
            else:
                why += _resample(t, a, b, kind, tasks_a, seed, draws)
        plan_why = inputs.campaign_reason(campaign)
        if plan_why:
            why.append(plan_why)
        _set_verdict(t, why, band)
        out.append(t)
    return out


def _resample(
    t: TimingComparison, a: ArchiveData, b: ArchiveData, kind: str, tasks: list[str], seed: int, draws: int
) -> list[str]:
    """Fill the ratio, its interval and the per-archive intervals of ``t``; return reasons it is not comparable."""
    why = []
    cap = t.cap
    sa = Sums(a.rows("requests"), t.campaign, t.family, cap, t.numerator, t.denominator)
    sb = Sums(b.rows("requests"), t.campaign, t.family, cap, t.numerator, t.denominator)
    if not sa.sessions or not sb.sessions:
        return ["no timed session in " + ("A" if not sa.sessions else "B")]
    try:
        da, db = sa.point(kind, tasks), sb.point(kind, tasks)
    except stats.StatsError as e:
        return [f"the requests do not give the value ({e})"]
    for lab, d, stated in (("A", da, t.a_value), ("B", db, t.b_value)):
        if stated is None or _rel_differs(math.exp(d), float(stated)):
            why.append(f"{lab}'s stated value {stated} is not the value its requests give ({math.exp(d)!r})")
    t.n_tasks, t.n_sessions_a, t.n_sessions_b = len(tasks), len(sa.sessions), len(sb.sessions)
    v = _weights(stats.bootstrap_indices(len(tasks), draws, seed), len(tasks))
    wa = _weights(stats.bootstrap_indices(len(sa.sessions), draws, seed + 1), len(sa.sessions))
    wb = _weights(stats.bootstrap_indices(len(sb.sessions), draws, seed + 2), len(sb.sessions))
    xa = resampled(kind, sa.arrays(tasks), v, wa)
    xb = resampled(kind, sb.arrays(tasks), v, wb)
    keep = np.isfinite(xa) & np.isfinite(xb)
    if not keep.any():
        return why + ["no bootstrap draw defines both values"]
    t.ratio = math.exp(db - da)
    t.lo, t.hi = _interval(xb[keep] - xa[keep])
    if kind == "ratio":
        t.a_lo, t.a_hi = _interval(xa[keep])
        t.b_lo, t.b_hi = _interval(xb[keep])
    return why
