"""The replication recomputed: session contrasts, estimates with their bootstrap intervals and decisions,
the A/A noise rows, the loads and the sessions."""

from __future__ import annotations

import datetime
import math
from collections import defaultdict

from refspec_check.context import Context
from refspec_check.contract import TWIN_SUFFIX
from refspec_check.qualification import all_qualified, panels
from refspec_check.stats import bootstrap, decide, gate, mean, noise_verdict, paired


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


def check_replication(ctx: Context, qual: dict, facts: dict, boot: dict, noise: dict | None = None) -> dict:
    """Every replication estimate (estimates.csv) with its session contrasts (contrasts.csv).

    The comparison "X/Y" names two layouts; its arms are the replication arms of the row's family and
    path with those layouts. With both arms qualified on the panel: c_s = mean_t d_s(t) per session s
    over the tasks timed in s for both arms; estimate = exp(mean_s c_s); [lo, hi] = exp of the 2.5 and
    97.5 percentiles of ``draws`` bootstrap means of the c_s (random.Random(seed)); decision = exceeds
    if lo > threshold, below if hi < threshold, else inconclusive, and too_few_sessions under
    ``MIN_SESSIONS`` contrasts; regressed tasks have mean_s d_s(t) < 0. Seed, draws and threshold come
    from plan.json when frozen there, else from the row. An A/A twin (arm name ending in _aa) is never a
    replication arm; under an A/A verdict noise_too_high (``noise``: (campaign, family) -> verdict, as
    recomputed by check_noise) exceeds and below read noise_too_high. Returns (family, path, comparison)
    -> decision (for the headline)."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    noise = noise or {}
    est_dec = {}
    if "estimates" not in tables:
        return est_dec
    te = tables["estimates"]
    s_e = src("estimates")
    stated_c = {}
    if "contrasts" in tables:
        for i, r in enumerate(tables["contrasts"].rows):
            stated_c[(r["family"], r["path"], r["comparison"], r["session"])] = i
    seen_c = set()
    times_s = defaultdict(list)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["campaign"] == "replication" and r["status"] == "ok" and r["t_ns"] is not None:
            times_s[(r["family"], r["arm"], r["task_id"], r["session"])].append(float(r["t_ns"]))
    rpanels = panels(qual, "replication")
    for i, row in enumerate(te.rows):
        fam, path, comp = row["family"], row["path"], row["comparison"]
        seed = boot.get("seed", row["seed"])
        draws = boot.get("draws", row["draws"])
        thr = boot.get("threshold", row["threshold"])
        if "seed" in boot:
            c.same(te.where(i, "seed"), row["seed"], int(seed), "seed vs plan.json:")
        if "draws" in boot:
            c.same(te.where(i, "draws"), row["draws"], int(draws), "draws vs plan.json:")
        if "threshold" in boot:
            c.same(te.where(i, "threshold"), row["threshold"], float(thr), "threshold vs plan.json:")
        base = ("est", fam, path, comp)
        E.add(base + ("draws",), int(draws), s_e)
        E.add(base + ("seed",), int(seed), s_e)
        E.add(base + ("threshold",), float(thr), s_e)
        try:
            x, y = (p.lower() for p in comp.split("/"))
        except ValueError:
            c.bad(te.where(i, "comparison"), f"cannot read comparison {comp!r}")
            continue
        arms = {}
        for lay in (x, y):
            found = sorted(
                a
                for (cp, f, a), (m, l) in facts.items()
                if cp == "replication" and f == fam and m == path and l == lay and not a.endswith(TWIN_SUFFIX)
            )
            arms[lay] = found[0] if len(found) == 1 else None
        a, b = arms[x], arms[y]
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
        est = math.exp(mean(cs))
        lo, hi = bootstrap(cs, int(draws), int(seed))
        dec = gate(decide(lo, hi, float(thr), len(cs)), noise.get(("replication", fam)))
        est_dec[(fam, path, comp)] = dec
        if dec == "noise_too_high" and not row["reason"]:
            c.bad(te.where(i, "reason"), "machine noise too high, but no reason is given")
        if dec == "too_few_sessions" and not row["reason"]:
            c.bad(te.where(i, "reason"), "too few sessions for a decision, but no reason is given")
        reg = [t for t in sorted(per_task) if mean(per_task[t]) < 0]
        c.recomputed += 5
        c.same(te.where(i, "estimate"), row["estimate"], est)
        c.same(te.where(i, "lo"), row["lo"], lo)
        c.same(te.where(i, "hi"), row["hi"], hi)
        c.same(te.where(i, "decision"), row["decision"], dec)
        c.same(te.where(i, "n_regressions"), row["n_regressions"], len(reg))
        c.same(te.where(i, "regressed_tasks"), row["regressed_tasks"] or "", " ".join(reg))
        for k, v in (("estimate", est), ("lo", lo), ("hi", hi), ("n_regressions", len(reg))):
            E.add(base + (k,), v, s_e)
    if "contrasts" in tables:
        for key, j in stated_c.items():
            if key not in seen_c:
                c.bad(tables["contrasts"].where(j), "contrast row that no qualified comparison produces")
    return est_dec


def noise_units(times: dict, key: tuple, twin: str, arm: str, tasks: list, kind: str) -> tuple[list, int]:
    """(log contrasts of twin over arm, sessions timing both). kind ratio: d(t) per panel task, times
    pooled over sessions and repeats; kind estimate: c_s per session over the tasks timed for both."""
    camp, fam, cap = key
    sessions = sorted({k[5] for k in times if k[:3] == key and k[3] in (twin, arm)})
    both = [s for s in sessions if any(times.get(key + (twin, t, s)) and times.get(key + (arm, t, s)) for t in tasks)]

    def pooled(a, ss):
        return {t: [x for s in ss for x in times.get(key + (a, t, s), [])] for t in tasks}

    if kind == "ratio":
        num, den = pooled(twin, sessions), pooled(arm, sessions)
        if any(not num[t] or not den[t] for t in tasks):
            return [], len(both)
        _D, d, _reg = paired(num, den, tasks)
        return [d[t] for t in sorted(d)], len(both)
    cs = []
    for s in both:
        num, den = pooled(twin, [s]), pooled(arm, [s])
        common = [t for t in tasks if num[t] and den[t]]
        cs.append(paired(num, den, common)[0])
    return cs, len(both)


def check_noise(ctx: Context, qual: dict, boot: dict) -> dict:
    """The A/A control (noise.csv): an arm X and its twin X_aa, both qualified on the panel. Log
    contrasts u of twin over arm (kind ratio: d(t) per task, pooled; kind estimate: c_s per session;
    kind estimate for the replication campaign, ratio otherwise); value = exp(mean u); [lo, hi] = the
    bootstrap of u; verdict ok when lo <= 1 <= hi and hi/lo <= threshold, else noise_too_high;
    unqualified (no value) when either arm fails a panel task. Every twin in requests.csv has its row.
    Returns (campaign, family) -> noise_too_high when any of its controls is, else ok."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    out: dict = {}
    if "noise" not in tables:
        twins = sorted(
            {
                (r["campaign"], r["family"], r["arm"])
                for r in tables["requests"].rows
                if r["status"] != "excluded_warmup"
            }
            if "requests" in tables
            else set()
        )
        for k in twins:
            if k[2].endswith(TWIN_SUFFIX):
                c.bad("noise.csv", f"missing: requests.csv has the A/A twin {k[2]} ({k[0]}, {k[1]}) but no A/A row")
        return out
    tn = tables["noise"]
    s_n = src("noise")
    times = defaultdict(list)
    twins = set()
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["arm"].endswith(TWIN_SUFFIX) and r["status"] != "excluded_warmup":  # the warmup is no control
            twins.add((r["campaign"], r["family"], r["cap"], r["arm"]))
        if r["status"] == "ok" and r["t_ns"] is not None:
            times[(r["campaign"], r["family"], r["cap"], r["arm"], r["task_id"], r["session"])].append(float(r["t_ns"]))
    seen = set()
    for i, row in enumerate(tn.rows):
        camp, fam, cap, arm, twin = row["campaign"], row["family"], row["cap"], row["arm"], row["twin"]
        seen.add((camp, fam, cap, twin))
        c.same(tn.where(i, "twin"), twin, arm + TWIN_SUFFIX)
        kind = "estimate" if camp == "replication" else "ratio"
        c.same(tn.where(i, "kind"), row["kind"], kind)
        draws, seed, thr = (boot.get(k, row[k]) for k in ("draws", "seed", "threshold"))
        for k, v in (("draws", int(draws)), ("seed", int(seed)), ("threshold", float(thr))):
            c.same(tn.where(i, k), row[k], v, f"{k} vs plan.json:" if k in boot else "")
        base = ("noise", camp, fam, twin, row["kind"], cap)
        E.add(base + ("threshold",), float(thr), s_n)
        panel = panels(qual, camp).get((fam, cap))
        if panel is None:
            c.bad(tn.where(i), "no qualification rows for this campaign, family and cap")
            continue
        tasks = sorted(panel)
        c.same(tn.where(i, "tasks"), row["tasks"], len(tasks))
        u, n_both = (
            ([], 0)
            if not all_qualified(panel, (arm, twin))
            else noise_units(times, (camp, fam, cap), twin, arm, tasks, kind)
        )
        if u:
            c.same(tn.where(i, "sessions"), row["sessions"], n_both)
        E.add(base + ("sessions",), n_both if u else row["sessions"], s_n)
        if not u:
            out.setdefault((camp, fam), "ok")
            c.same(tn.where(i, "verdict"), row["verdict"], "unqualified")
            for col in ("value", "lo", "hi"):
                c.same(tn.where(i, col), row[col], None, "unqualified A/A control must have no value:")
            E.add(base + ("units",), 0, s_n)
            continue
        value = math.exp(mean(u))
        lo, hi = bootstrap(u, int(draws), int(seed))
        verdict = noise_verdict(lo, hi, float(thr))
        if out.get((camp, fam)) != "noise_too_high":
            out[(camp, fam)] = verdict
        c.recomputed += 4
        c.same(tn.where(i, "value"), row["value"], value)
        c.same(tn.where(i, "lo"), row["lo"], lo)
        c.same(tn.where(i, "hi"), row["hi"], hi)
        c.same(tn.where(i, "units"), row["units"], len(u))
        c.same(tn.where(i, "verdict"), row["verdict"], verdict)
        if verdict == "noise_too_high" and not row["reason"]:
            c.bad(tn.where(i, "reason"), "machine noise too high, but no reason is given")
        for k, v in (("value", value), ("lo", lo), ("hi", hi), ("units", len(u))):
            E.add(base + (k,), v, s_n)
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
        if key not in stated_c:
            c.bad(
                tables["contrasts"].rel if "contrasts" in tables else "contrasts.csv",
                f"missing contrast for {fam} {path} {comp} session {s}",
            )
        else:
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
