"""The replication recomputed: session contrasts, estimates with their session t intervals and weighed decisions,
the A/A noise rows, the loads and the sessions. The floor of an A/A row, its mde and units_needed, and so the
E2 decisions it weighs, follow the A/A rule the campaign's plan froze (``aa_rule``; "floor" without the
field), as refspec.core.stats defines both rules, to the bit."""

from __future__ import annotations

import datetime
import math
from collections import defaultdict

from refspec_check import intervals as IV
from refspec_check.context import Context
from refspec_check.contract import TWIN_SUFFIX
from refspec_check.findings import add_fold
from refspec_check.qualification import all_qualified, panels
from refspec_check.stats import (
    LEGACY_AA_RULE,
    MIN_UNITS,
    TARGET_EFFECT,
    aa_verdict,
    cpu_pooled_ratio,
    decide_weighed,
    decision_floor,
    mean,
    minimum_detectable,
    paired,
    process_interval,
    session_interval,
    units_needed,
)


def bootstrap_parameters(plan) -> dict:
    """seed, draws and threshold frozen in plan.json (``bootstrap: {...}`` or ``bootstrap_<key>``), as present."""
    boot = {}
    if isinstance(plan, dict):
        b = plan.get("bootstrap")
        for k in ("seed", "draws", "threshold"):
            if isinstance(b, dict) and k in b:
                boot[k] = b[k]
            elif f"bootstrap_{k}" in plan:
                boot[k] = plan[f"bootstrap_{k}"]
    return boot


# the texts the pipeline writes beside a decision (refspec.campaigns.noise, refspec.core.stats), derived
# here from the numbers they stand beside: a reason rewritten after the run is a mismatch
AA_BIASED_REASON = "the A/A interval does not contain 1"


def control_of(ctx: Context, fam: str):
    """The replication A/A row of ``fam`` that weighs its estimates: the first with the largest floor."""
    best = None
    for r in ctx.tables["noise"].rows if "noise" in ctx.tables else []:
        if r["campaign"] == "replication" and r["family"] == fam and r["floor"] is not None:
            if best is None or r["floor"] > best["floor"]:
                best = r
    return best


def estimate_reason(dec: str, n_sessions: int, thr: float, floor, ctx: Context, fam: str) -> str | None:
    """The reason an estimate row gives for its decision: why it is undecided by noise, or has too few
    sessions for an interval; none for a decided or inconclusive estimate."""
    if dec == "too_few_sessions":
        return f"{n_sessions} session(s): at least {MIN_UNITS} are needed for an interval; no decision"
    if dec == "noise_too_high":
        n = control_of(ctx, fam)
        who = f" ({n['twin']}/{n['arm']})" if n else ""
        return f"machine noise too high: the interval clears the threshold {thr:g} but not by the A/A floor {floor:.4f}{who}"
    return None


def _stated_contrasts(tables: dict) -> dict[tuple, int]:
    """(family, path, comparison, session) -> the row index of that contrast in contrasts.csv."""
    stated_c = {}
    if "contrasts" in tables:
        for i, r in enumerate(tables["contrasts"].rows):
            stated_c[(r["family"], r["path"], r["comparison"], r["session"])] = i
    return stated_c


def _replication_times(tables: dict) -> dict[tuple, list[float]]:
    """(family, arm, task, session) -> the times of the replication's ok requests there."""
    times_s = defaultdict(list)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["campaign"] == "replication" and r["status"] == "ok" and r["t_ns"] is not None:
            times_s[(r["family"], r["arm"], r["task_id"], r["session"])].append(float(r["t_ns"]))
    return times_s


def _replication_arm(facts: dict, fam: str, path: str, layout: str) -> str | None:
    """The replication arm of ``fam`` and ``path`` with ``layout`` (never an A/A twin); None unless exactly one."""
    found = sorted(
        a
        for (cp, f, a), (m, l) in facts.items()
        if cp == "replication" and f == fam and m == path and l == layout and not a.endswith(TWIN_SUFFIX)
    )
    return found[0] if len(found) == 1 else None


def _check_estimate_decision(
    ctx: Context, i: int, base: tuple, cs: list, per_task: dict, thr: float, floor: float
) -> str:
    """One estimate row's value, interval, floor, decision, reason and regressed tasks, recomputed from its
    session contrasts ``cs`` (``per_task``: task -> its d_s(t)); returns the decision."""
    c, E, te, s_e = ctx.c, ctx.E, ctx.tables["estimates"], ctx.src("estimates")
    row, fam = te.rows[i], base[1]
    iv = session_interval(cs)
    if iv is None:
        est, lo, hi, df, floor, dec = math.exp(mean(cs)), None, None, None, None, "too_few_sessions"
    else:
        est, lo, hi, df, _n = iv
        dec = decide_weighed(lo, hi, thr, floor)
    c.recomputed += 1
    c.same(te.where(i, "reason"), row["reason"] or None, estimate_reason(dec, len(cs), thr, floor, ctx, fam))
    reg = [t for t in sorted(per_task) if mean(per_task[t]) < 0]
    got = dict(estimate=est, lo=lo, hi=hi, df=df, floor=floor, decision=dec, n_regressions=len(reg))
    for col, v in got.items():
        c.recomputed += 1
        c.same(te.where(i, col), row[col], v)
        if col != "decision" and v is not None:
            E.add(base + (col,), v, s_e)
    add_fold(E, base, est, lo, hi, s_e)  # the estimate read as a speed (the findings' "PQ is 1.04× slower")
    c.same(te.where(i, "regressed_tasks"), row["regressed_tasks"] or "", " ".join(reg))
    return dec


def check_replication(ctx: Context, qual: dict, facts: dict, boot: dict, noise: dict | None = None) -> dict:
    """Every replication estimate (estimates.csv) with its session contrasts (contrasts.csv).

    The comparison "X/Y" names two layouts; its arms are the replication arms of the row's family and
    path with those layouts. With both arms qualified on the panel: c_s = mean_t d_s(t) per session s
    over the tasks timed in s for both arms; estimate = exp(mean_s c_s); [lo, hi] = the one-sample t
    interval over the c_s (t_{0.975, n-1}); floor F = the largest A/A floor of the campaign and family
    (``noise``: (campaign, family) -> floor, as recomputed by check_noise; 1 without a control);
    decision = exceeds if lo > threshold * F, below if hi < threshold / F, noise_too_high if it clears
    the threshold only inside that band, else inconclusive; too_few_sessions (no interval) under 2
    contrasts; regressed tasks have mean_s d_s(t) < 0. The threshold comes from plan.json when frozen
    there, else from the row. An A/A twin (arm name ending in _aa) is never a replication arm. Returns
    (family, path, comparison) -> decision (for the headline)."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    noise = noise or {}
    est_dec = {}
    if "estimates" not in tables:
        return est_dec
    te = tables["estimates"]
    s_e = src("estimates")
    stated_c = _stated_contrasts(tables)
    seen_c = set()
    times_s = _replication_times(tables)
    rpanels = panels(qual, "replication")
    for i, row in enumerate(te.rows):
        fam, path, comp = row["family"], row["path"], row["comparison"]
        thr = boot.get("threshold", row["threshold"])
        if "threshold" in boot:
            c.same(te.where(i, "threshold"), row["threshold"], float(thr), "threshold vs plan.json:")
        base = ("est", fam, path, comp)
        E.add(base + ("threshold",), float(thr), s_e)
        try:
            x, y = (p.lower() for p in comp.split("/"))
        except ValueError:
            c.bad(te.where(i, "comparison"), f"cannot read comparison {comp!r}")
            continue
        a, b = _replication_arm(facts, fam, path, x), _replication_arm(facts, fam, path, y)
        panel = next((p for (f, _cap), p in rpanels.items() if f == fam), None)
        if a is None or b is None or panel is None:
            c.bad(te.where(i), "arms or qualification rows of this comparison not found")
            continue
        tasks = sorted(panel)
        E.add(base + ("n_tasks",), len(tasks), s_e)
        c.same(te.where(i, "n_tasks"), row["n_tasks"], len(tasks))
        if not all_qualified(panel, (a, b)):
            est_dec[(fam, path, comp)] = "unqualified"
            c.same(te.where(i, "decision"), row["decision"], "unqualified")
            c.same(te.where(i, "estimate"), row["estimate"], None, "unqualified comparison must have no value:")
            E.add(base + ("n_sessions",), 0, s_e)
            continue
        cs, per_task = check_contrasts(ctx, (fam, path, comp), a, b, tasks, times_s, stated_c, seen_c)
        E.add(base + ("n_sessions",), len(cs), s_e)
        c.same(te.where(i, "n_sessions"), row["n_sessions"], len(cs))
        if not cs:
            est_dec[(fam, path, comp)] = "unqualified"
            c.same(te.where(i, "decision"), row["decision"], "unqualified")
            continue
        floor = noise.get(("replication", fam), 1.0)
        est_dec[(fam, path, comp)] = _check_estimate_decision(ctx, i, base, cs, per_task, float(thr), floor)
    if "contrasts" in tables:
        for key, j in stated_c.items():
            if key not in seen_c:
                c.bad(tables["contrasts"].where(j), "contrast row that no qualified comparison produces")
    return est_dec


def noise_interval(blocks: dict, times: dict, key: tuple, twin: str, arm: str, tasks: list, kind: str):
    """((value, lo, hi, df, units) or None, sessions timing both). kind ratio: the Welch interval over
    the workers (blocks) of twin and arm (times pooled over sessions and repeats); kind estimate: the
    one-sample t interval over the session contrasts c_s."""
    sessions = sorted({k[5] for k in times if k[:3] == key and k[3] in (twin, arm)})
    both = [s for s in sessions if any(times.get(key + (twin, t, s)) and times.get(key + (arm, t, s)) for t in tasks)]
    if kind == "ratio":
        return process_interval(blocks.get(key + (twin,), {}), blocks.get(key + (arm,), {}), tasks), len(both)
    cs = []
    for s in both:
        num = {t: times.get(key + (twin, t, s), []) for t in tasks}
        den = {t: times.get(key + (arm, t, s), []) for t in tasks}
        cs.append(paired(num, den, [t for t in tasks if num[t] and den[t]])[0])
    return session_interval(cs), len(both)


def _noise_times(tables: dict) -> tuple:
    """twins, (campaign, family, cap, arm) -> worker -> [(task, t_ns)], (..., arm, task, session) -> [t_ns],
    (..., arm, task) -> [cpu_ns] of requests.csv."""
    blocks: dict = defaultdict(lambda: defaultdict(list))
    times: dict = defaultdict(list)
    cpu: dict = defaultdict(list)
    twins = set()
    for r in tables["requests"].rows if "requests" in tables else []:
        k = (r["campaign"], r["family"], r["cap"], r["arm"])
        if r["arm"].endswith(TWIN_SUFFIX) and r["status"] != "excluded_warmup":  # the warmup is no control
            twins.add(k)
        if r["status"] == "ok" and r["t_ns"] is not None:
            blocks[k][r["worker"]].append((r["task_id"], float(r["t_ns"])))
            times[k + (r["task_id"], r["session"])].append(float(r["t_ns"]))
            if r.get("cpu_ns"):
                cpu[k + (r["task_id"],)].append(float(r["cpu_ns"]))
    return twins, blocks, times, cpu


def _missing_noise_rows(ctx: Context) -> None:
    rows = ctx.tables["requests"].rows if "requests" in ctx.tables else []
    for k in sorted({(r["campaign"], r["family"], r["arm"]) for r in rows if r["status"] != "excluded_warmup"}):
        if k[2].endswith(TWIN_SUFFIX):
            ctx.c.bad("noise.csv", f"missing: requests.csv has the A/A twin {k[2]} ({k[0]}, {k[1]}) but no A/A row")


def check_noise(ctx: Context, qual: dict, boot: dict, rules=None) -> dict:
    """The A/A control (noise.csv): an arm X and its twin X_aa, both qualified on the panel. Kind ratio
    (every campaign but replication): value = the paired ratio of twin over arm, [lo, hi] = its Welch
    interval over the workers (block residuals), or, when a process served several arms (the paired
    design, refspec_check.intervals), exp(mean c_p) with the t interval over the processes'
    within-process contrasts of twin over arm; kind estimate (replication): the one-sample t interval
    over the session contrasts c_s. verdict ok when lo <= 1 <= hi, else biased; floor F under the A/A rule
    of the campaign's plan (``rules``: refspec_check.intervals.AARules, "floor" without it): "calibration"
    F = 1 while lo <= 1 <= hi, else max(hi, 1/lo); "floor" F = max(hi, 1/lo); mde = threshold * F *
    sqrt(hi/lo); units_needed for 1.05 under the same rule; cpu_value the paired ratio of cpu_ns; unqualified
    (no value) when either arm fails a panel task or has too few units. Every twin in requests.csv has its
    row. Returns (campaign, family) -> the largest floor of its controls."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    out: dict = {}
    if "noise" not in tables:
        _missing_noise_rows(ctx)
        return out
    tn, s_n = tables["noise"], src("noise")
    twins, blocks, times, cpu = _noise_times(tables)
    seen = set()
    for i, row in enumerate(tn.rows):
        camp, fam, cap, arm, twin = row["campaign"], row["family"], row["cap"], row["arm"], row["twin"]
        seen.add((camp, fam, cap, twin))
        c.same(tn.where(i, "twin"), twin, arm + TWIN_SUFFIX)
        kind = "estimate" if camp == "replication" else "ratio"
        c.same(tn.where(i, "kind"), row["kind"], kind)
        thr = boot.get("threshold", row["threshold"])
        c.same(
            tn.where(i, "threshold"),
            row["threshold"],
            float(thr),
            "threshold vs plan.json:" if "threshold" in boot else "",
        )
        base = ("noise", camp, fam, twin, row["kind"], cap)
        E.add(base + ("threshold",), float(thr), s_n)
        panel = panels(qual, camp).get((fam, cap))
        if panel is None:
            c.bad(tn.where(i), "no qualification rows for this campaign, family and cap")
            continue
        tasks = sorted(panel)
        c.same(tn.where(i, "tasks"), row["tasks"], len(tasks))
        iv, n_both = (
            (None, 0)
            if not all_qualified(panel, (arm, twin))
            else noise_interval(blocks, times, (camp, fam, cap), twin, arm, tasks, kind)
        )
        timed = IV.timed(tables["requests"].rows, camp, fam, cap) if kind == "ratio" and "requests" in tables else []
        if iv is not None and IV.design_of(timed) == "paired":  # the twin in the same processes as its arm
            iv = IV.interval(timed, twin, arm, tasks, "paired", 0.95)
        if iv is not None:
            c.same(tn.where(i, "sessions"), row["sessions"], n_both)
        E.add(base + ("sessions",), n_both if iv is not None else row["sessions"], s_n)
        if iv is None:
            c.same(tn.where(i, "verdict"), row["verdict"], "unqualified")
            for col in ("value", "lo", "hi", "floor", "mde"):
                c.same(tn.where(i, col), row[col], None, "unqualified A/A control must have no value:")
            E.add(base + ("units",), 0, s_n)
            continue
        value, lo, hi, df, units = iv
        verdict = aa_verdict(lo, hi)
        rule = rules(camp, fam) if rules is not None else LEGACY_AA_RULE
        floor = decision_floor(lo, hi, rule)
        mde = minimum_detectable(lo, hi, float(thr), rule)
        need = units_needed(units, lo, hi, TARGET_EFFECT, float(thr), rule)
        cpu_v = cpu_pooled_ratio(cpu, (camp, fam, cap), twin, arm, tasks)
        out[(camp, fam)] = max(out.get((camp, fam), 1.0), floor)
        got = dict(value=value, cpu_value=cpu_v, lo=lo, hi=hi, df=df, units=units, floor=floor, mde=mde)
        got.update(units_needed=need, verdict=verdict)
        for col, v in got.items():
            c.recomputed += 1
            c.same(tn.where(i, col), row[col], v)
            if col not in ("verdict", "df") and v is not None:  # df is checked, not shown
                E.add(base + (col,), v, s_n)
        c.recomputed += 1
        c.same(tn.where(i, "reason"), row["reason"] or None, AA_BIASED_REASON if verdict == "biased" else None)
    for k in sorted(twins - seen):
        c.bad(tn.rel, f"no A/A row for the twin {k[3]} ({k[0]}, {k[1]}, cap {k[2]}) of requests.csv")
    return out


def check_loads(ctx: Context) -> None:
    """The machine load of every block (loads.csv): busy = competing_before or competing_after above
    busy_threshold; per campaign and family the blocks sampled and the busy ones. The sampled values
    are measurements: shown as stated."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "loads" not in tables:
        return
    tl = tables["loads"]
    s_l = src("loads")
    counts = defaultdict(lambda: [0, 0])
    for i, r in enumerate(tl.rows):
        busy = r["competing_before"] > r["busy_threshold"] or r["competing_after"] > r["busy_threshold"]
        c.recomputed += 1
        c.same(tl.where(i, "busy"), r["busy"], busy)
        k = (r["campaign"], r["family"])
        counts[k][0] += 1
        counts[k][1] += 1 if busy else 0
        base = ("load", r["campaign"], r["family"], r["session"], r["block"])
        for col in ("block", "competing_before", "competing_after") if busy else ():  # busy blocks are listed
            E.add(base + (col,), r[col], s_l)
    for (camp, fam), (n, nb) in counts.items():
        E.add(("loadsum", camp, fam, "blocks"), n, s_l)
        E.add(("loadsum", camp, fam, "busy"), nb, s_l)


def check_contrasts(
    ctx: Context,
    comparison: tuple,
    a: str,
    b: str,
    tasks: list,
    times_s: dict,
    stated_c: dict,
    seen_c: set,
) -> tuple[list, dict]:
    """The session contrasts of one qualified replication comparison of arm ``a`` over arm ``b``.

    For each session s (in order) with tasks timed for both arms: d_s(t) = mean_r log t_a(t, r, s) -
    mean_r log t_b(t, r, s) and c_s = mean_t d_s(t), compared with the contrasts.csv row (recorded in
    ``seen_c``). Returns ([c_s], {task: [d_s(t)]})."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    fam, path, comp = comparison
    s_c = src("contrasts") if "contrasts" in tables else None
    sessions = sorted({s for (f, arm, _t, s) in times_s if f == fam and arm in (a, b)})
    cs, per_task = [], defaultdict(list)
    for s in sessions:
        common = [t for t in tasks if times_s.get((fam, a, t, s)) and times_s.get((fam, b, t, s))]
        if not common:
            continue
        D, d, _reg = paired(
            {t: times_s[(fam, a, t, s)] for t in common}, {t: times_s[(fam, b, t, s)] for t in common}, common
        )
        cs.append(D)
        for t, v in d.items():
            per_task[t].append(v)
        key = (fam, path, comp, s)
        seen_c.add(key)
        cbase = ("contrast", fam, path, comp, s)
        if s_c is not None:
            E.add(cbase + ("c_s",), D, s_c)
            E.add(cbase + ("n_tasks",), len(common), s_c)
        if key not in stated_c and not (ctx.partial and "contrasts" not in tables):
            c.bad(
                tables["contrasts"].rel if "contrasts" in tables else "contrasts.csv",
                f"missing contrast for {fam} {path} {comp} session {s}",
            )
        elif key in stated_c:
            tc = tables["contrasts"]
            j = stated_c[key]
            c.same(tc.where(j, "c_s"), tc.rows[j]["c_s"], D)
            c.same(tc.where(j, "n_tasks"), tc.rows[j]["n_tasks"], len(common))
    return cs, per_task


def check_sessions(ctx: Context) -> None:
    """Session gaps and counts (sessions.csv).

    Within (campaign, family), sessions in order of start: gap_before_s = started(s) - ended(previous),
    null for the first; n_requests and n_workers = rows and distinct workers of the session in
    requests.csv (the stated values stand when requests.csv is absent)."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "sessions" not in tables:
        return
    ts = tables["sessions"]
    s_s = src("sessions")
    reqs = tables["requests"].rows if "requests" in tables else []

    def tparse(s):
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))

    groups = defaultdict(list)
    for i, r in enumerate(ts.rows):
        groups[(r["campaign"], r["family"])].append(i)
    cnt = defaultdict(int)
    wrk = defaultdict(set)
    for r in reqs:
        cnt[(r["campaign"], r["family"], r["session"])] += 1
        wrk[(r["campaign"], r["family"], r["session"])].add(r["worker"])
    for g, idx in groups.items():
        try:
            idx.sort(key=lambda i: (tparse(ts.rows[i]["started_utc"]), ts.rows[i]["session"]))
        except (ValueError, AttributeError) as e:
            c.unread(ts.rel, f"bad timestamp ({e})")
            continue
        prev = None
        for i in idx:
            r = ts.rows[i]
            gap = (
                None
                if prev is None
                else (tparse(r["started_utc"]) - tparse(ts.rows[prev]["ended_utc"])).total_seconds()
            )
            base = ("session", r["campaign"], r["family"], r["session"])
            c.same(ts.where(i, "gap_before_s"), r["gap_before_s"], gap)
            if gap is not None:
                E.add(base + ("gap_before_s",), gap, s_s)
            k = (r["campaign"], r["family"], r["session"])
            if reqs:
                c.same(ts.where(i, "n_requests"), r["n_requests"], cnt.get(k, 0))
                c.same(ts.where(i, "n_workers"), r["n_workers"], len(wrk.get(k, ())))
            E.add(base + ("n_requests",), cnt.get(k, 0) if reqs else r["n_requests"], s_s)
            E.add(base + ("n_workers",), len(wrk.get(k, ())) if reqs else r["n_workers"], s_s)
            prev = i
