r"""The derived tables each campaign writes: qualification, ratios, diagnostics, replication
contrasts and estimates, phase masks and session gaps (the report's own aggregates, Table 3's counts,
the request status counts and the draft acceptance, are :mod:`refspec_check.render.aggregates`).

They apply the definitions of :mod:`refspec.core.stats` to the ``requests`` and ``endpoints``
tables. ``report/check.py`` implements them again with the Python standard library; change
one only together with the other and with ``anc/report.md``.

Qualification (:func:`qualification_table`): for each campaign, family, task and cap the
reference endpoint is the first completed ``R`` endpoint in (session, repeat)
order (plain string order of the session id); ``ref_stable`` holds when every
completed ``R`` endpoint equals it. A *required* request is a distinct
(session, repeat) of the arm on the task among non-warmup ``requests`` rows;
an arm qualifies when the reference is stable and every required request has
a completed endpoint equal to the reference. A ratio or estimate is reported
only when both arms qualify on every task of the family's panel (the tasks
with qualification rows); otherwise it is shown as a dash with the reason.

Diagnostic (unqualified) timings (:func:`diagnostics_table`): for the
twelve registered pairs ``DIAGNOSTIC_PAIRS`` of a campaign (the price of preservation
M3/M0, C3/C0, R_prod/M3, and the servers campaign's nine ``SERVER_DIAGNOSTIC_PAIRS``:
each server arm over R, C3 over the patched server with the draft, the draft's effect on
each server build, the layout's effect in each mode) in which at least one of the two
arms fails qualification, the same paired ratio
over the panel tasks timed for both arms (``T_c``), and the median ``t_ns`` of
each arm's ok requests on ``T_c`` (the middle value, or the mean of the two
middle values). These rows live in their own table, labelled by which side is
not qualified; they are never qualified ratios.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

# the arm order and Table 3's counts have one owner, the archive's names and the report's aggregates
from refspec_check.names import arm_sort_key, natural_key  # noqa: F401
from refspec_check.render.aggregates import qualification_counts  # noqa: F401

from ..core.arms import REFERENCE_ARM, is_twin
from ..core.divergence import NEAR_TIE_MARGIN, divergence_class, margin_at
from ..core.endpoint import first_divergence
from ..core.stats import (
    DEFAULT_AA_RULE,
    DEFAULT_THRESHOLD,
    MIN_UNITS,
    TOO_FEW_SESSIONS,
    StatsError,
    decide_weighed,
    median,
    paired_ratio,
    ratio_of_pooled,
    session_interval,
    too_few_sessions_reason,
)
from ..core.tables import records
from . import intervals as IV

# diagnostic (unqualified) timing pairs, numerator / denominator: the price of preservation
# the servers campaign (anc/servers.md): each server arm over R, C3 beside the patched server with the
# draft, the draft's effect on each server build, the layout's effect in each mode
SERVER_DIAGNOSTIC_PAIRS = (
    ("S_stock", REFERENCE_ARM),
    ("S_stock_spec", REFERENCE_ARM),
    ("S_qb", REFERENCE_ARM),
    ("S_qb_spec", REFERENCE_ARM),
    ("C3", "S_qb_spec"),
    ("S_stock_spec", "S_stock"),
    ("S_qb_spec", "S_qb"),
    ("S_qb", "S_stock"),
    ("S_qb_spec", "S_stock_spec"),
)
DIAGNOSTIC_PAIRS = (("M3", "M0"), ("C3", "C0"), ("R_prod", "M3")) + SERVER_DIAGNOSTIC_PAIRS


# --------------------------------------------------------------------------- arms


def _arm_facts(reqs: list[dict]) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(campaign, family, arm) -> (mode, layout)."""
    out: dict[tuple[str, str, str], tuple[str, str]] = {}
    for r in reqs:
        out.setdefault((r["campaign"], r["family"], r["arm"]), (r["mode"], r["layout"]))
    return out


def _arms_and_times(reqs: list[dict], column: str = "t_ns") -> tuple[dict, dict]:
    """(family, cap) -> arms requested; (family, cap, arm, task) -> times of the ok requests (ns):
    wall times (``t_ns``) or the serving process's CPU times (``cpu_ns``, where recorded and > 0)."""
    arm_caps: dict[tuple[str, int], set] = defaultdict(set)
    times: dict[tuple, list[float]] = defaultdict(list)
    for r in reqs:
        arm_caps[(r["family"], int(r["cap"]))].add(r["arm"])
        v = r.get(column)
        if r["status"] == "ok" and v is not None and v > 0:
            times[(r["family"], int(r["cap"]), r["arm"], r["task_id"])].append(float(v))
    return arm_caps, times


def cpu_ratio(cpu_times: dict, fam: str, cap: int, num: str, den: str, tasks: Sequence[str]) -> float | None:
    """The paired ratio of the serving processes' CPU times (``requests.cpu_ns``) on ``tasks``, beside the
    wall-time ratio; None unless every task has CPU times of both arms."""
    a = {t: cpu_times.get((fam, cap, num, t), []) for t in tasks}
    b = {t: cpu_times.get((fam, cap, den, t), []) for t in tasks}
    if not tasks or not all(a[t] and b[t] for t in tasks):
        return None
    return paired_ratio(a, b, tasks).ratio


def _times(reqs: list[dict], campaign: str, by_session: bool = False) -> dict:
    """(family, arm, task[, session]) -> [t_ns] of ok rows of the campaign."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in reqs:
        if r["campaign"] != campaign or r["status"] != "ok" or r["t_ns"] is None:
            continue
        key = (r["family"], r["arm"], r["task_id"]) + ((r["session"],) if by_session else ())
        out[key].append(float(r["t_ns"]))
    return out


# --------------------------------------------------------------------------- qualification


def qualification_table(
    requests: Any,
    endpoints: Any,
    campaign: str | None = None,
    margins: Mapping[tuple[str, str, str, int], Sequence[float | None]] | None = None,
    reference_arm: str = REFERENCE_ARM,
    arm_margins: Mapping[tuple[str, str, str, int, str, str, int], Sequence[float | None]] | None = None,
) -> list[dict[str, Any]]:
    """Rows of the ``qualification`` table from ``requests`` and ``endpoints``.

    ``margins`` optionally maps (campaign, family, task_id, cap) to the
    reference's top-2 logit margin at each generated position; ``arm_margins`` maps one
    endpoint, (campaign, family, task_id, cap, arm, session, repeat), to its own request's
    margins (the target's top-2 margin along that request's path). At a first divergence the row
    records the reference's margin there (``ref_margin``), the margin of the divergent endpoint
    itself (``arm_margin``), and the class (:func:`refspec.core.divergence.divergence_class`:
    ``near tie`` or ``decisive``) with the bound it used (``near_tie_bound``).
    """
    reqs = [r for r in records(requests) if campaign is None or r["campaign"] == campaign]
    eps = [e for e in records(endpoints) if campaign is None or e["campaign"] == campaign]
    required, by_arm = _required_and_endpoints(reqs, eps)
    groups: dict[tuple, list[str]] = defaultdict(list)
    for k in sorted(set(required) | set(by_arm), key=lambda k: (k[0], k[1], k[2], k[3])):
        groups[k[:4]].append(k[4])
    rows = []
    for g in sorted(groups):
        camp, fam, task, cap = g
        ref_eps = by_arm.get(g + (reference_arm,), [])
        ref = ref_eps[0] if ref_eps else None
        ref_sha = ref["endpoint_sha256"] if ref else None
        distinct_ref = {e["endpoint_sha256"] for e in ref_eps}
        ref_stable = len(distinct_ref) == 1
        for arm in sorted(set(groups[g]), key=lambda a: (a != reference_arm, a)):
            k = g + (arm,)
            arm_eps = by_arm.get(k, [])
            need = required[k] | {(e["session"], e["repeat"]) for e in arm_eps}
            n_req = len(arm_eps)
            n_match = sum(1 for e in arm_eps if ref_sha is not None and e["endpoint_sha256"] == ref_sha)
            qualified = ref_stable and len(need) > 0 and n_match == len(need)
            fd = ref_tok = arm_tok = margin = arm_margin = None
            best = _earliest_divergence(ref, arm_eps) if ref is not None else None
            if best is not None:
                fd, e = best
                ref_tok = int(ref["tokens"][fd]) if fd < len(ref["tokens"]) else None
                arm_tok = int(e["tokens"][fd]) if fd < len(e["tokens"]) else None
                if margins is not None:
                    margin = margin_at(margins.get((camp, fam, task, cap)), fd)
                if arm_margins is not None:
                    arm_margin = margin_at(arm_margins.get(g + (arm, e["session"], e["repeat"])), fd)
            divergence = divergence_class(margin)
            rows.append(
                dict(
                    campaign=camp,
                    family=fam,
                    task_id=task,
                    arm=arm,
                    cap=int(cap),
                    n_required=len(need),
                    n_requests=n_req,
                    n_matching=n_match,
                    qualified=bool(qualified),
                    ref_endpoint_sha256=ref_sha,
                    first_diff_index=fd,
                    ref_token=ref_tok,
                    arm_token=arm_tok,
                    ref_margin=margin,
                    arm_margin=arm_margin,
                    divergence=divergence,
                    near_tie_bound=NEAR_TIE_MARGIN if divergence is not None else None,
                    ref_stable=bool(ref_stable),
                    reason=_qualification_reason(qualified, ref, distinct_ref, len(need), n_req, n_match, fd),
                )
            )
    return rows


def _required_and_endpoints(reqs: list[dict], eps: list[dict]) -> tuple[dict[tuple, set], dict[tuple, list[dict]]]:
    """Per (campaign, family, task, cap, arm): the required (session, repeat) pairs (warmups
    excluded; an endpoint without a request row counts too) and the endpoints in session, repeat order."""
    required: dict[tuple, set] = defaultdict(set)
    for r in reqs:
        if r["status"] == "excluded_warmup":
            continue
        k = (r["campaign"], r["family"], r["task_id"], r["cap"], r["arm"])
        required[k].add((r["session"], r["repeat"]))
    by_arm: dict[tuple, list[dict]] = defaultdict(list)
    for e in eps:
        k = (e["campaign"], e["family"], e["task_id"], e["cap"], e["arm"])
        by_arm[k].append(e)
        required[k]  # an endpoint without a request row still counts below
    for v in by_arm.values():
        v.sort(key=lambda e: (e["session"], e["repeat"]))
    return required, by_arm


def _earliest_divergence(ref: dict, arm_eps: list[dict]) -> tuple[int, dict] | None:
    """The smallest first-divergence index from the reference endpoint over an arm's endpoints that
    differ from it, with the first endpoint diverging there; None when every endpoint matches."""
    best = None
    for e in arm_eps:
        if e["endpoint_sha256"] == ref["endpoint_sha256"]:
            continue
        i = first_divergence(ref["tokens"], ref["eog"], ref["stop_reason"], e["tokens"], e["eog"], e["stop_reason"])
        if i is None:  # same tokens and stop facts, different digest: count at the end
            i = len(ref["tokens"])
        if best is None or i < best[0]:
            best = (i, e)
    return best


def _qualification_reason(
    qualified: bool, ref: dict | None, distinct_ref: set, n_need: int, n_req: int, n_match: int, fd: int | None
) -> str | None:
    """Why an arm does not qualify on a task (None when it does)."""
    if qualified:
        return None
    if ref is None:
        return "no completed reference request"
    if len(distinct_ref) != 1:
        return f"reference unstable: {len(distinct_ref)} distinct R endpoints"
    if n_need == 0:
        return "no required request"
    parts = []
    missing = n_need - n_req
    if missing:
        parts.append(f"{missing} of {n_need} required requests not completed")
    if n_req - n_match:
        parts.append(f"{n_req - n_match} of {n_req} endpoints differ, first at index {fd}")
    return "; ".join(parts) or "not qualified"


def _panels(qual: list[dict], campaign: str) -> dict[tuple[str, int], dict[str, dict[str, bool]]]:
    """(family, cap) -> task -> arm -> qualified."""
    out: dict[tuple[str, int], dict[str, dict[str, bool]]] = defaultdict(lambda: defaultdict(dict))
    for q in qual:
        if q["campaign"] == campaign:
            out[(q["family"], int(q["cap"]))][q["task_id"]][q["arm"]] = bool(q["qualified"])
    return out


def _unqualified_reason(panel: dict[str, dict[str, bool]], arms: Sequence[str]) -> str | None:
    parts = []
    tasks = sorted(panel)
    for a in arms:
        bad = [t for t in tasks if not panel[t].get(a, False)]
        if bad:
            shown = " ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
            parts.append(f"{a} not qualified on {len(bad)}/{len(tasks)} tasks ({shown})")
    return "; ".join(parts) if parts else None


# --------------------------------------------------------------------------- ratios


def path_of(mode_a: str, mode_b: str) -> str:
    return mode_a if mode_a == mode_b else "mixed"


def ratios_table(
    requests: Any,
    qualification: Any,
    campaign: str,
    pairs: Sequence[tuple[str, str]] | None = None,
    aa_rule: str = DEFAULT_AA_RULE,
) -> list[dict[str, Any]]:
    """Rows of the ``ratios`` table for one campaign.

    The panel of a family and cap is the set of tasks with qualification rows;
    the arms compared are those with requests rows at that cap. ``pairs``
    lists (numerator, denominator) arms; by default every unordered pair in
    :func:`arm_sort_key` order (earlier arm in the numerator), A/A twins left out. Times are
    pooled over sessions and repeats per task. Every qualified ratio carries its interval,
    verdict and detectable ratio in the design that timed it (:mod:`.intervals`), weighed by the
    A/A control's floor under ``aa_rule`` (the campaign plan's, :func:`refspec.core.stats.aa_rule_of`).
    """
    reqs = [r for r in records(requests) if r["campaign"] == campaign]
    qual = records(qualification)
    facts = _arm_facts(reqs)
    arm_caps, times = _arms_and_times(reqs)
    _caps, cpu_times = _arms_and_times(reqs, "cpu_ns")
    panels = _panels(qual, campaign)
    rows = []
    for fam, cap in sorted(panels):
        panel = panels[(fam, cap)]
        arms = sorted(arm_caps.get((fam, cap), ()), key=lambda a: arm_sort_key(a, *facts[(campaign, fam, a)]))
        plain = [a for a in arms if not is_twin(a)]  # an A/A twin is compared only with its arm (noise)
        fam_pairs = pairs if pairs is not None else [(a, b) for i, a in enumerate(plain) for b in plain[i + 1 :]]
        tasks = sorted(panel)
        timed = IV.timed(reqs, fam, cap)
        design = IV.design_of(timed)
        floor = IV.aa_floor(timed, tasks, design, aa_rule)
        for a, b in fam_pairs:
            if a not in arms or b not in arms:
                continue
            path = path_of(facts[(campaign, fam, a)][0], facts[(campaign, fam, b)][0])
            reason = _unqualified_reason(panel, (a, b))
            row = dict(
                campaign=campaign, family=fam, cap=cap, path=path, numerator=a, denominator=b, n_tasks=len(tasks)
            )
            if reason is None:
                num = {t: times.get((fam, cap, a, t), []) for t in tasks}
                den = {t: times.get((fam, cap, b, t), []) for t in tasks}
                pr = paired_ratio(num, den, tasks)
                row.update(
                    qualified=True,
                    ratio=pr.ratio,
                    cpu_ratio=cpu_ratio(cpu_times, fam, cap, a, b, tasks),
                    n_regressions=pr.n_regressions,
                    regressed_tasks=" ".join(pr.regressed),
                    reason=None,
                    **IV.ratio_columns(timed, a, b, tasks, design, floor),
                )
            else:
                row.update(
                    qualified=False,
                    ratio=None,
                    cpu_ratio=None,
                    n_regressions=None,
                    regressed_tasks=None,
                    reason=reason,
                    **IV.UNQUALIFIED,
                )
            rows.append(row)
    return rows


def diagnostic_label(num_ok: bool, den_ok: bool) -> str:
    """The label every diagnostic row carries: which side is not qualified."""
    if not num_ok and not den_ok:
        return "diagnostic: numerator and denominator not qualified"
    return "diagnostic: numerator not qualified" if not num_ok else "diagnostic: denominator not qualified"


def diagnostics_table(
    requests: Any,
    qualification: Any,
    campaign: str,
    pairs: Sequence[tuple[str, str]] = DIAGNOSTIC_PAIRS,
) -> list[dict[str, Any]]:
    """Rows of the ``diagnostics`` table: unqualified timing pairs of one campaign.

    For each registered (numerator, denominator) pair whose two arms ran at the
    same family and cap and of which at least one fails qualification on some
    panel task: medians of each arm's ok times and the paired ratio over the
    panel tasks timed for both arms. A pair whose arms both qualify is a
    qualified ratio (``ratios``) and gets no row here.
    """
    reqs = [r for r in records(requests) if r["campaign"] == campaign]
    facts = _arm_facts(reqs)
    arm_caps, times = _arms_and_times(reqs)
    panels = _panels(records(qualification), campaign)
    rows = []
    for fam, cap in sorted(panels):
        panel = panels[(fam, cap)]
        tasks = sorted(panel)
        for a, b in pairs:
            if a not in arm_caps.get((fam, cap), ()) or b not in arm_caps.get((fam, cap), ()):
                continue
            fail_a = sum(1 for t in tasks if not panel[t].get(a, False))
            fail_b = sum(1 for t in tasks if not panel[t].get(b, False))
            if not fail_a and not fail_b:
                continue
            common = [t for t in tasks if times.get((fam, cap, a, t)) and times.get((fam, cap, b, t))]
            row = dict(
                campaign=campaign,
                family=fam,
                cap=cap,
                path=path_of(facts[(campaign, fam, a)][0], facts[(campaign, fam, b)][0]),
                numerator=a,
                denominator=b,
                numerator_qualified=not fail_a,
                denominator_qualified=not fail_b,
                label=diagnostic_label(not fail_a, not fail_b),
                n_tasks=len(tasks),
                numerator_tasks_failed=fail_a,
                denominator_tasks_failed=fail_b,
                n_tasks_timed=len(common),
                reason=_unqualified_reason(panel, (a, b)),
            )
            if common:
                num = {t: times[(fam, cap, a, t)] for t in common}
                den = {t: times[(fam, cap, b, t)] for t in common}
                pr = paired_ratio(num, den, common)
                row.update(
                    median_numerator_ns=median([x for t in common for x in num[t]]),
                    median_denominator_ns=median([x for t in common for x in den[t]]),
                    ratio=pr.ratio,
                    n_regressions=pr.n_regressions,
                    regressed_tasks=" ".join(pr.regressed),
                )
            else:
                row.update(
                    median_numerator_ns=None,
                    median_denominator_ns=None,
                    ratio=None,
                    n_regressions=None,
                    regressed_tasks=None,
                )
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- replication


def _arm_for(facts, campaign: str, family: str, mode: str, layout: str) -> str | None:
    found = sorted(
        a
        for (c, f, a), (m, l) in facts.items()
        if c == campaign and f == family and m == mode and l == layout and not is_twin(a)
    )
    if len(found) > 1:
        raise StatsError(f"campaign {campaign}, family {family}: several {mode} arms with layout {layout}: {found}")
    return found[0] if found else None


def replication_tables(
    requests: Any,
    qualification: Any,
    campaign: str = "replication",
    comparisons: Sequence[tuple[str, str]] = (("pq", "qb"),),
    paths: Sequence[str] = ("target", "spec"),
    threshold: float = DEFAULT_THRESHOLD,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of the ``contrasts`` and ``estimates`` tables.

    For each family, path and comparison (numerator layout, denominator
    layout) whose two arms exist in the campaign. Sessions are taken in plain
    string order of their ids.
    """
    reqs = records(requests)
    qual = records(qualification)
    facts = _arm_facts(reqs)
    panels = _panels(qual, campaign)
    fams = [f for f, _c in panels]
    for f in set(fams):
        if fams.count(f) > 1:
            raise StatsError(f"campaign {campaign}, family {f}: several caps; a replication has one cap")
    times = _times(reqs, campaign, by_session=True)
    contrasts, estimates = [], []
    for fam, _cap in sorted(panels):
        panel = panels[(fam, _cap)]
        tasks = sorted(panel)
        for path in paths:
            for x, y in comparisons:
                a = _arm_for(facts, campaign, fam, path, x)
                b = _arm_for(facts, campaign, fam, path, y)
                if a is None or b is None:
                    continue
                comp = f"{x.upper()}/{y.upper()}"
                base = dict(family=fam, path=path, comparison=comp)
                reason = _unqualified_reason(panel, (a, b))
                est_row = dict(base, n_tasks=len(tasks), threshold=float(threshold))
                if reason is not None:
                    estimates.append(_unqualified_estimate(est_row, reason))
                    continue
                cs, per_task, session_rows = _session_contrasts(times, fam, a, b, tasks, base)
                contrasts.extend(session_rows)
                if not cs:
                    estimates.append(_unqualified_estimate(est_row, "no session timed both arms"))
                    continue
                estimates.append(_pooled_estimate(est_row, cs, per_task, threshold))
    return contrasts, estimates


def _unqualified_estimate(est_row: dict[str, Any], reason: str) -> dict[str, Any]:
    """An ``estimates`` row without an estimate, for ``reason``."""
    est_row.update(
        estimate=None,
        lo=None,
        hi=None,
        df=None,
        floor=None,
        n_sessions=0,
        n_regressions=None,
        regressed_tasks=None,
        decision="unqualified",
        reason=reason,
    )
    return est_row


def _session_contrasts(
    times: dict, fam: str, a: str, b: str, tasks: list[str], base: dict[str, Any]
) -> tuple[list[float], dict[str, list[float]], list[dict[str, Any]]]:
    """Per session (plain string order) that timed both arms on a common task: its log ratio
    ``c_s``; returns them, each task's per-session log ratios and the ``contrasts`` rows."""
    sessions = sorted({s for (f, arm, t, s) in times if f == fam and arm in (a, b)})
    cs = []
    per_task: dict[str, list[float]] = defaultdict(list)
    rows = []
    for s in sessions:
        num = {t: times.get((fam, a, t, s), []) for t in tasks}
        den = {t: times.get((fam, b, t, s), []) for t in tasks}
        common = [t for t in tasks if num[t] and den[t]]
        if not common:
            continue
        pr = paired_ratio(num, den, common)
        cs.append(pr.log_ratio)
        for t, d in pr.task_log_ratios.items():
            per_task[t].append(d)
        rows.append(dict(base, session=s, c_s=pr.log_ratio, n_tasks=pr.n_tasks))
    return cs, per_task, rows


def _pooled_estimate(
    est_row: dict[str, Any], cs: list[float], per_task: dict[str, list[float]], threshold: float
) -> dict[str, Any]:
    """The ``estimates`` row of sessions' contrasts ``cs``: their interval and decision, or their mean
    alone with fewer than :data:`MIN_UNITS` sessions."""
    _pts, reg = ratio_of_pooled(per_task)
    est_row.update(n_sessions=len(cs), n_regressions=len(reg), regressed_tasks=" ".join(reg))
    if len(cs) < MIN_UNITS:
        est_row.update(
            estimate=math.exp(math.fsum(cs) / len(cs)),
            lo=None,
            hi=None,
            df=None,
            floor=None,
            decision=TOO_FEW_SESSIONS,
            reason=too_few_sessions_reason(len(cs)),
        )
    else:
        iv = session_interval(cs)
        est_row.update(
            estimate=iv.value,
            lo=iv.lo,
            hi=iv.hi,
            df=iv.df,
            floor=1.0,  # no A/A control weighed in yet (refspec.campaigns.noise.weigh_estimates)
            decision=decide_weighed(iv.lo, iv.hi, threshold),
            reason=None,
        )
    return est_row


# --------------------------------------------------------------------------- other derived tables


def phase_mask_table(
    requests: Any, qualification: Any, campaign: str = "phase_mask", reference_arm: str = REFERENCE_ARM
) -> list[dict[str, Any]]:
    """Rows of the ``phase_masks`` table.

    For each family and mask of the non-reference arms: ``matches`` = ok
    requests whose endpoint equals the (stable) reference of their task,
    ``n_tasks`` = tasks of the family's panel, ``repeats`` = the largest number
    of distinct repeats of a task under the mask (non-warmup rows),
    ``passes`` = matches == n_tasks * repeats > 0, ``minimal`` = passes and no
    proper sub-mask in the table passes.
    """
    reqs = [r for r in records(requests) if r["campaign"] == campaign]
    ref: dict[tuple[str, str], str | None] = {}
    tasks: dict[str, set] = defaultdict(set)
    for q in records(qualification):
        if q["campaign"] != campaign:
            continue
        tasks[q["family"]].add(q["task_id"])
        ref[(q["family"], q["task_id"])] = q["ref_endpoint_sha256"] if q["ref_stable"] else None
    matches: dict[tuple[str, int], int] = defaultdict(int)
    reps: dict[tuple[str, int, str], set] = defaultdict(set)
    masks: dict[str, set] = defaultdict(set)
    for r in reqs:
        if r["arm"] == reference_arm or r["status"] == "excluded_warmup":
            continue
        fam, m = r["family"], int(r["mask"])
        masks[fam].add(m)
        reps[(fam, m, r["task_id"])].add((r["session"], r["repeat"]))
        if r["status"] == "ok":
            rs = ref.get((fam, r["task_id"]))
            if rs is not None and r["endpoint_sha256"] == rs:
                matches[(fam, m)] += 1
    rows = []
    for fam in sorted(masks):
        n_tasks = len(tasks.get(fam, ()))
        passes = {}
        info = {}
        for m in sorted(masks[fam]):
            repeats = max((len(v) for (f, mm, _t), v in reps.items() if f == fam and mm == m), default=0)
            ok = n_tasks * repeats > 0 and matches[(fam, m)] == n_tasks * repeats
            passes[m] = ok
            info[m] = (repeats, matches[(fam, m)])
        for m in sorted(masks[fam]):
            minimal = passes[m] and not any(passes[s] for s in passes if s != m and (s & m) == s)
            rows.append(
                dict(
                    family=fam,
                    mask=m,
                    matches=info[m][1],
                    n_tasks=n_tasks,
                    repeats=info[m][0],
                    passes=passes[m],
                    minimal=minimal,
                )
            )
    return rows


def session_gaps(sessions: Any) -> list[dict[str, Any]]:
    """Fill ``gap_before_s`` of ``sessions`` rows: start minus the previous session's end.

    Previous = the session of the same campaign and family that started
    immediately before (by ``started_utc``); the first has a null gap.
    """

    def ts(s: str) -> dt.datetime:
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))

    rows = [dict(r) for r in records(sessions)]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["campaign"], r["family"])].append(r)
    for g in groups.values():
        g.sort(key=lambda r: (ts(r["started_utc"]), r["session"]))
        prev = None
        for r in g:
            r["gap_before_s"] = None if prev is None else (ts(r["started_utc"]) - ts(prev["ended_utc"])).total_seconds()
            prev = r
    return rows
