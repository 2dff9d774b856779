"""The result tables recomputed: endpoints, qualification, qualified ratios (and their transitivity) and the
diagnostic timings."""

from __future__ import annotations

import math
from collections import defaultdict

from refspec_check import intervals as IV
from refspec_check.context import Context
from refspec_check.contract import DIAGNOSTIC_PAIRS, CsvTable
from refspec_check.digests import endpoint_digest
from refspec_check.divergence import check_row as check_divergence
from refspec_check.findings import add_fold, fold
from refspec_check.problems import Checker
from refspec_check.qualification import all_qualified, diagnostic_label, panels, recompute_qualification
from refspec_check.stats import cpu_pooled_ratio, median, paired
from refspec_check.vacuity import panel_exposure


def check_endpoints(ctx: Context) -> None:
    """Endpoint digests and the one-to-one match of endpoints with ok requests.

    endpoint_sha256 = sha256 of the canonical JSON {eog, last_token, n, stop_reason, tokens};
    n = len(tokens), last_token = tokens[-1] (null when empty); each ok request has exactly one
    endpoints.csv row with the same digest, and each endpoint row has an ok request."""
    c, tables = ctx.c, ctx.tables
    if "endpoints" not in tables:
        return
    t = tables["endpoints"]
    for i, e in enumerate(t.rows):
        if e["tokens"] is None:
            continue
        c.recomputed += 3
        c.same(
            t.where(i, "endpoint_sha256"),
            e["endpoint_sha256"],
            endpoint_digest(e["tokens"], e["eog"], e["stop_reason"]),
        )
        c.same(t.where(i, "n"), e["n"], len(e["tokens"]))
        c.same(t.where(i, "last_token"), e["last_token"], e["tokens"][-1] if e["tokens"] else None)
    if "requests" not in tables:
        return
    ep_by = {
        (e["campaign"], e["family"], e["task_id"], e["arm"], e["cap"], e["session"], e["repeat"]): e for e in t.rows
    }
    tr = tables["requests"]
    seen = set()
    for i, r in enumerate(tr.rows):
        if r["status"] != "ok":
            continue
        k = (r["campaign"], r["family"], r["task_id"], r["arm"], r["cap"], r["session"], r["repeat"])
        seen.add(k)
        e = ep_by.get(k)
        c.identities += 1
        if e is None:
            c.bad(tr.where(i), "ok request has no row in endpoints.csv")
        else:
            c.same(
                tr.where(i, "endpoint_sha256"),
                r["endpoint_sha256"],
                e["endpoint_sha256"],
                "request digest vs endpoints.csv:",
            )
    for i, e in enumerate(t.rows):
        k = (e["campaign"], e["family"], e["task_id"], e["arm"], e["cap"], e["session"], e["repeat"])
        if k not in seen:
            c.bad(t.where(i), "endpoint without an ok row in requests.csv")


def check_qualification(ctx: Context, references: dict | None = None) -> dict:
    """Every qualification row and the Table 3 counts; returns (campaign, family, task, cap, arm) -> facts.

    The reference arm of a campaign is the one its frozen plan names (``definition.reference``), else R.
    An arm qualifies on a task when the reference arm's endpoints are all one digest (stable), at least
    one (session, repeat) is required, and all required runs match that digest. For a failed arm the
    first divergence is the smallest first-difference index over its non-matching endpoints. Per
    (campaign, family, arm): matching = sum n_matching <= required = sum n_required, and
    tasks_failed = tasks - qualified tasks. Without requests.csv and endpoints.csv the stated rows
    stand in for the counts."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    qual: dict = {}
    if "qualification" not in tables:
        return qual
    tq = tables["qualification"]
    if "endpoints" not in tables or "requests" not in tables:
        c.bad(tq.rel, "cannot be recomputed: requests.csv and endpoints.csv are needed")
        for q in tq.rows:  # fall back to the stated values for the aggregates
            qual[(q["campaign"], q["family"], q["task_id"], q["cap"], q["arm"])] = dict(q)
    else:
        qual = recompute_qualification(tables["requests"].rows, tables["endpoints"].rows, references)
        stated_keys = set()
        for i, q in enumerate(tq.rows):
            k = (q["campaign"], q["family"], q["task_id"], q["cap"], q["arm"])
            stated_keys.add(k)
            rq = qual.get(k)
            if rq is None:
                c.bad(tq.where(i), "no requests or endpoints for this row")
                continue
            for col in (
                "n_required",
                "n_requests",
                "n_matching",
                "qualified",
                "ref_endpoint_sha256",
                "first_diff_index",
                "ref_token",
                "arm_token",
                "ref_stable",
            ):
                c.recomputed += 1
                c.same(tq.where(i, col), q[col], rq[col])
            for col in ("ref_margin", "arm_margin", "divergence", "near_tie_bound"):
                rq[col] = q[col]
            check_divergence(c, lambda col, i=i: tq.where(i, col), q)
            c.recomputed += 1
            c.same(tq.where(i, "reason"), q["reason"], rq["reason"], "reason")
            rq["reason"] = q["reason"]
        for k in sorted(set(qual) - stated_keys):
            c.bad(tq.rel, f"no row for campaign={k[0]} family={k[1]} task={k[2]} cap={k[3]} arm={k[4]}")
            qual.pop(k)
    # Table 3 counts and failed qualifications
    s_q = src("qualification")
    acc = {}
    for (camp, fam, task, cap, arm), q in qual.items():
        a = acc.setdefault((camp, fam, arm), [0, 0, 0, 0])
        a[0] += q["n_matching"]
        a[1] += q["n_required"]
        a[2] += 1
        a[3] += 1 if q["qualified"] else 0
        if not q["qualified"]:
            base = ("qfail", camp, fam, task, arm, cap)
            for col in ("first_diff_index", "ref_token", "arm_token", "ref_margin", "arm_margin", "near_tie_bound"):
                if q.get(col) is not None:
                    E.add(base + (col,), q[col], s_q)
    for (camp, fam, arm), (m, r, n, ok) in acc.items():
        E.add(("qual", camp, fam, arm, "matching"), m, s_q)
        E.add(("qual", camp, fam, arm, "required"), r, s_q)
        E.add(("qual", camp, fam, arm, "tasks_failed"), n - ok, s_q)
        c.identities += 1
        if m > r:
            c.bad(s_q, f"{camp} {fam} {arm}: more matching endpoints ({m}) than required ({r})")
    if "requests" in tables:  # vacuity: the panels whose unrepaired arms never diverge
        for (camp, fam), ex in panel_exposure(qual, tables["requests"].rows).items():
            if ex["vacuous"]:
                E.add(("vacuity", camp, fam, "screened"), ex["screened"], s_q)
    return qual


def unqualified_reason(panel: dict, arms) -> str | None:
    """Why a comparison is not qualified, as the ratio table says it: for each arm not qualified on every
    task of the panel, "ARM not qualified on BAD/ALL tasks (the first five bad tasks, ' ...' after them)"."""
    tasks = sorted(panel)
    parts = []
    for a in arms:
        bad = [t for t in tasks if not panel[t].get(a, False)]
        if bad:
            shown = " ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")
            parts.append(f"{a} not qualified on {len(bad)}/{len(tasks)} tasks ({shown})")
    return "; ".join(parts) if parts else None


def check_ratios(ctx: Context, qual: dict, facts: dict, rules=None) -> None:
    """Every pairwise qualified ratio, its task regressions, and ratio transitivity.

    On the panel of tasks of (campaign, family, cap), with both arms qualified on every task:
    d(t) = mean_r log t_A(t, r) - mean_r log t_B(t, r), ratio = exp(mean_t d(t)), regressed tasks
    are those with d(t) < 0. path = the arms' common mode, else "mixed". An unqualified comparison
    has no ratio. cpu_ratio: the same paired ratio of the serving processes' CPU times (cpu_ns), where
    every task has them for both arms. Identity on the stated values: ratio(A/C) = ratio(A/B) * ratio(B/C) (within 1e-9).
    ``rules``: (campaign, family) -> the A/A rule plan.json froze (refspec_check.intervals.AARules; "floor"
    for every campaign without it)."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "ratios" not in tables:  # that it must exist is refspec_check.completeness's
        return
    tr = tables["ratios"]
    s_r = src("ratios")
    times = defaultdict(list)
    cpu = defaultdict(list)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["status"] == "ok" and r["t_ns"] is not None:
            times[(r["campaign"], r["family"], r["cap"], r["arm"], r["task_id"])].append(float(r["t_ns"]))
        if r["status"] == "ok" and r.get("cpu_ns"):
            cpu[(r["campaign"], r["family"], r["cap"], r["arm"], r["task_id"])].append(float(r["cpu_ns"]))
    pcache: dict = {}
    icache: dict = {}
    for i, row in enumerate(tr.rows):
        camp, fam, cap, a, b = row["campaign"], row["family"], row["cap"], row["numerator"], row["denominator"]
        if camp not in pcache:
            pcache[camp] = panels(qual, camp)
        panel = pcache[camp].get((fam, cap))
        if panel is None:
            c.bad(tr.where(i), "no qualification rows for this campaign, family and cap")
            continue
        tasks = sorted(panel)
        ma, mb = facts.get((camp, fam, a)), facts.get((camp, fam, b))
        if ma is None or mb is None:
            c.bad(tr.where(i), "arm without requests rows")
            continue
        path = ma[0] if ma[0] == mb[0] else "mixed"
        c.same(tr.where(i, "path"), row["path"], path)
        c.same(tr.where(i, "n_tasks"), row["n_tasks"], len(tasks))
        base = ("ratio", camp, fam, cap, a, b)
        E.add(base + ("n_tasks",), len(tasks), s_r)
        q_ok = all_qualified(panel, (a, b))
        c.same(tr.where(i, "qualified"), row["qualified"], q_ok)
        if not q_ok:
            for col in ("ratio", "cpu_ratio", "n_regressions", "regressed_tasks") + INTERVAL_COLUMNS:
                c.same(tr.where(i, col), row.get(col), None, "unqualified comparison must have no value:")
            c.same(tr.where(i, "reason"), row.get("reason"), unqualified_reason(panel, (a, b)), "reason")
            continue
        num = {t: times.get((camp, fam, cap, a, t), []) for t in tasks}
        den = {t: times.get((camp, fam, cap, b, t), []) for t in tasks}
        missing = [t for t in tasks if not num[t] or not den[t]]
        if missing:
            c.bad(tr.where(i), f"qualified but no times for task(s) {missing}")
            continue
        D, _d, reg = paired(num, den, tasks)
        ratio = math.exp(D)
        c.recomputed += 3
        c.same(tr.where(i, "ratio"), row["ratio"], ratio)
        c.same(tr.where(i, "n_regressions"), row["n_regressions"], len(reg))
        c.same(tr.where(i, "regressed_tasks"), row["regressed_tasks"] or "", " ".join(reg))
        E.add(base + ("ratio",), ratio, s_r)
        E.add(base + ("n_regressions",), len(reg), s_r)
        cpu_r = cpu_pooled_ratio(cpu, (camp, fam, cap), a, b, tasks)
        c.recomputed += 1
        c.same(tr.where(i, "cpu_ratio"), row["cpu_ratio"], cpu_r)
        if cpu_r is not None:
            E.add(base + ("cpu_ratio",), cpu_r, s_r)
        rule = rules(camp, fam) if rules is not None else IV.LEGACY_AA_RULE
        want = check_ratio_interval(ctx, tr, i, row, (camp, fam, cap), tasks, (icache, rule), base)
        add_fold(E, base, ratio, want["lo"], want["hi"], s_r)  # the ratio read as a speed ("1.36× faster")
    check_ratio_transitivity(c, tr)


INTERVAL_COLUMNS = ("design", "units", "lo", "hi", "verdict", "detectable")


def check_ratio_interval(
    ctx: Context, tr, i: int, row: dict, key: tuple, tasks: list, cache: tuple, base: tuple
) -> dict:
    """A qualified ratio's interval columns (refspec_check.intervals): the design read from the
    requests, the interval in that design, the verdict weighed by the floor of the campaign's A/A
    control under its rule and the detectable ratio. ``cache``: (the intervals' cache, the rule).
    Returns the recomputed columns."""
    c, E, s_r = ctx.c, ctx.E, ctx.src("ratios")
    icache, rule = cache
    if key not in icache:
        rows = IV.timed(ctx.tables["requests"].rows if "requests" in ctx.tables else [], *key)
        design = IV.design_of(rows)
        icache[key] = (rows, design, IV.aa_floor(rows, tasks, design, rule))
    rows, design, floor = icache[key]
    want = IV.ratio_columns(rows, row["numerator"], row["denominator"], tasks, design, floor)
    for col in INTERVAL_COLUMNS:
        c.recomputed += 1
        c.same(tr.where(i, col), row.get(col), want[col])
        if want[col] is not None and col in ("units", "lo", "hi", "detectable"):
            E.add(base + (col,), want[col], s_r)
    return want


def check_ratio_transitivity(c: Checker, tr: CsvTable) -> None:
    """ratio(A/C) = ratio(A/B) * ratio(B/C) (within 1e-9 relative) for every triple of stated qualified
    ratios of one campaign, family and cap, using ratio(B/A) = 1 / ratio(A/B)."""
    stated = {
        (r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"]): r
        for r in tr.rows
        if r["qualified"] and r["ratio"] is not None
    }
    by_group = defaultdict(dict)
    for (camp, fam, cap, a, b), r in stated.items():
        by_group[(camp, fam, cap)][(a, b)] = r["ratio"]
        by_group[(camp, fam, cap)][(b, a)] = 1.0 / r["ratio"]
    for g, pairs in sorted(by_group.items()):
        arms = sorted({a for a, _b in pairs})
        for a in arms:
            for b in arms:
                for cc in arms:
                    if len({a, b, cc}) < 3 or not ((a, b) in pairs and (b, cc) in pairs and (a, cc) in pairs):
                        continue
                    if not (a < cc):
                        continue
                    c.identities += 1
                    lhs, rhs = pairs[(a, cc)], pairs[(a, b)] * pairs[(b, cc)]
                    if abs(lhs - rhs) > 1e-9 * max(1.0, abs(lhs)):
                        c.bad(tr.rel, f"{g[0]} {g[1]}: ratio {a}/{cc} = {lhs!r} but {a}/{b} x {b}/{cc} = {rhs!r}")


def check_diagnostics(ctx: Context, qual: dict, facts: dict) -> None:
    """The diagnostic (unqualified) timings of the registered pairs ``DIAGNOSTIC_PAIRS``.

    Per row: tasks failed by each side (tasks where the arm is not qualified), the label naming the
    unqualified side(s) (a row whose both sides qualify is refused), and over the tasks timed for both
    arms: ratio = exp(mean_t d(t)) with d(t) as for qualified ratios, the medians of all pooled
    times of each arm (reported in ms), regressed tasks (d(t) < 0). That every registered pair with an
    unqualified side has its row is refspec_check.completeness's."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "diagnostics" not in tables:
        return
    td = tables["diagnostics"]
    s_d = src("diagnostics")
    dtimes = defaultdict(list)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["status"] == "ok" and r["t_ns"] is not None:
            dtimes[(r["campaign"], r["family"], r["cap"], r["arm"], r["task_id"])].append(float(r["t_ns"]))
    for i, row in enumerate(td.rows):
        camp, fam, cap, a, b = row["campaign"], row["family"], row["cap"], row["numerator"], row["denominator"]
        base = ("diag", camp, fam, cap, a, b)
        if (a, b) not in DIAGNOSTIC_PAIRS:
            c.bad(td.where(i), f"{a}/{b} is not a registered diagnostic pair {DIAGNOSTIC_PAIRS}")
        panel = panels(qual, camp).get((fam, cap))
        ma, mb = facts.get((camp, fam, a)), facts.get((camp, fam, b))
        if panel is None or ma is None or mb is None:
            c.bad(td.where(i), "no qualification or requests rows for this campaign, family, cap and arms")
            continue
        tasks = sorted(panel)
        fa = sum(1 for t in tasks if not panel[t].get(a, False))
        fb = sum(1 for t in tasks if not panel[t].get(b, False))
        c.recomputed += 8
        c.same(td.where(i, "path"), row["path"], ma[0] if ma[0] == mb[0] else "mixed")
        c.same(td.where(i, "n_tasks"), row["n_tasks"], len(tasks))
        c.same(td.where(i, "numerator_qualified"), row["numerator_qualified"], fa == 0)
        c.same(td.where(i, "denominator_qualified"), row["denominator_qualified"], fb == 0)
        c.same(td.where(i, "numerator_tasks_failed"), row["numerator_tasks_failed"], fa)
        c.same(td.where(i, "denominator_tasks_failed"), row["denominator_tasks_failed"], fb)
        c.identities += 1
        if fa == 0 and fb == 0:
            c.bad(td.where(i), "both arms qualify: a qualified ratio is not a diagnostic timing")
        else:
            c.same(td.where(i, "label"), row["label"], diagnostic_label(fa == 0, fb == 0))
            c.same(td.where(i, "reason"), row["reason"], unqualified_reason(panel, (a, b)), "reason")
        common = [t for t in tasks if dtimes.get((camp, fam, cap, a, t)) and dtimes.get((camp, fam, cap, b, t))]
        c.same(td.where(i, "n_tasks_timed"), row["n_tasks_timed"], len(common))
        E.add(base + ("n_tasks",), len(tasks), s_d)
        E.add(base + ("n_tasks_timed",), len(common), s_d)
        if not common:
            for col in ("ratio", "median_numerator_ns", "median_denominator_ns"):
                c.same(td.where(i, col), row[col], None, "no task timed for both arms:")
            continue
        num = {t: dtimes[(camp, fam, cap, a, t)] for t in common}
        den = {t: dtimes[(camp, fam, cap, b, t)] for t in common}
        D, _d, reg = paired(num, den, common)
        mn = median([x for t in common for x in num[t]])
        md = median([x for t in common for x in den[t]])
        c.recomputed += 5
        c.same(td.where(i, "ratio"), row["ratio"], math.exp(D))
        c.same(td.where(i, "median_numerator_ns"), row["median_numerator_ns"], mn)
        c.same(td.where(i, "median_denominator_ns"), row["median_denominator_ns"], md)
        c.same(td.where(i, "n_regressions"), row["n_regressions"], len(reg))
        c.same(td.where(i, "regressed_tasks"), row["regressed_tasks"] or "", " ".join(reg))
        E.add(base + ("ratio",), math.exp(D), s_d)
        E.add(base + ("fold",), fold(math.exp(D))[1], s_d)  # "1.37x faster" beside the diagnostic ratio
        E.add(base + ("median_numerator_ms",), mn / 1e6, s_d)
        E.add(base + ("median_denominator_ms",), md / 1e6, s_d)
        E.add(base + ("n_regressions",), len(reg), s_d)


def check_qualified_ratios(ctx: Context) -> None:
    """A diagnostic (unqualified) value never appears as a qualified ratio: a row of ratios.csv with a
    ratio must be qualified."""
    c, tables = ctx.c, ctx.tables
    if "ratios" not in tables:
        return
    for i, row in enumerate(tables["ratios"].rows):
        if row["ratio"] is not None and not row["qualified"]:
            c.bad(tables["ratios"].where(i, "ratio"), "a ratio of an unqualified comparison is in the qualified table")
