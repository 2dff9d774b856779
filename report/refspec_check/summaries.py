"""The report's other tables recomputed: phase masks, the prospective prediction, replay, audit, request
counts and the ledger's records."""

from __future__ import annotations

import os
from collections import defaultdict

from refspec_check import jsonio
from refspec_check.context import Context, Expected
from refspec_check.contract import LEDGER_KIND_KEYS, REFERENCE_ARM, CsvTable, posix_rel
from refspec_check.digests import endpoint_digest
from refspec_check.problems import Checker
from refspec_check.report import Report


def check_phase_masks(ctx: Context, qual: dict) -> None:
    """The phase-mask table (phase_masks.csv) from the phase_mask campaign's requests.

    Per (family, mask): matches = ok non-reference requests whose endpoint is the task's stable
    reference endpoint; repeats = the most (session, repeat) runs of one task; passes = n_tasks *
    repeats > 0 and matches = n_tasks * repeats; minimal = passes and no other passing mask s is a
    submask of m (s & m = s). Warm-up requests are left out."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "phase_masks" not in tables:
        return
    tm = tables["phase_masks"]
    s_m = src("phase_masks")
    ref, ptasks = {}, defaultdict(set)
    for (camp, fam, task, cap, arm), q in qual.items():
        if camp == "phase_mask":
            ptasks[fam].add(task)
            ref[(fam, task)] = q["ref_endpoint_sha256"] if q["ref_stable"] else None
    matches, reps, masks = defaultdict(int), defaultdict(set), defaultdict(set)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["campaign"] != "phase_mask" or r["arm"] == REFERENCE_ARM or r["status"] == "excluded_warmup":
            continue
        fam, m = r["family"], r["mask"]
        masks[fam].add(m)
        reps[(fam, m, r["task_id"])].add((r["session"], r["repeat"]))
        if (
            r["status"] == "ok"
            and ref.get((fam, r["task_id"])) is not None
            and r["endpoint_sha256"] == ref[(fam, r["task_id"])]
        ):
            matches[(fam, m)] += 1
    exp_rows = {}
    for fam in masks:
        nt = len(ptasks.get(fam, ()))
        passes = {}
        for m in masks[fam]:
            rp = max((len(v) for (f, mm, _t), v in reps.items() if f == fam and mm == m), default=0)
            passes[m] = nt * rp > 0 and matches[(fam, m)] == nt * rp
            exp_rows[(fam, m)] = dict(matches=matches[(fam, m)], n_tasks=nt, repeats=rp, passes=passes[m])
        for m in masks[fam]:
            exp_rows[(fam, m)]["minimal"] = passes[m] and not any(passes[s] for s in passes if s != m and (s & m) == s)
    seen = set()
    for i, r in enumerate(tm.rows):
        k = (r["family"], r["mask"])
        seen.add(k)
        e = exp_rows.get(k)
        if e is None:
            c.bad(tm.where(i), "no phase-mask requests for this family and mask")
            continue
        for col in ("matches", "n_tasks", "repeats", "passes", "minimal"):
            c.recomputed += 1
            c.same(tm.where(i, col), r[col], e[col])
        base = ("mask", r["family"], r["mask"])
        E.add(base + ("mask",), r["mask"], s_m)
        E.add(base + ("matches",), e["matches"], s_m)
        E.add(base + ("required",), e["n_tasks"] * e["repeats"], s_m)
    for k in sorted(set(exp_rows) - seen):
        c.bad(tm.rel, f"no row for family={k[0]} mask={k[1]}")


def frozen_predictions(c: Checker, tp: CsvTable, plan) -> tuple:
    """(the ``predictions`` amendment of plan.json, its task -> endpoint map); the map is empty (and a
    mismatch recorded) when no predictions were frozen."""
    frozen_doc = None
    if isinstance(plan, dict):
        camps = plan.get("campaigns") if isinstance(plan.get("campaigns"), dict) else {}
        pplan = camps.get("prediction") if isinstance(camps.get("prediction"), dict) else plan
        frozen_doc = pplan.get("predictions") if isinstance(pplan, dict) else None
    frozen = frozen_doc.get("endpoints") if isinstance(frozen_doc, dict) else None
    if not isinstance(frozen, dict):
        c.bad(
            tp.rel,
            "no frozen predictions (amendment 'predictions') in plan.json: predicted vs live cannot be recomputed",
        )
        frozen = {}
    return frozen_doc, frozen


def _prediction_endpoints(tables: dict) -> dict[tuple, list[dict]]:
    """(arm, task) -> the prediction campaign's endpoints, in (session, repeat) order."""
    peps = defaultdict(list)
    for e in tables["endpoints"].rows if "endpoints" in tables else []:
        if e["campaign"] == "prediction":
            peps[(e["arm"], e["task_id"])].append(e)
    for v in peps.values():
        v.sort(key=lambda e: (e["session"], e["repeat"]))
    return peps


def _check_predicted(c: Checker, tp: CsvTable, i: int, frozen_doc, frozen: dict, peps: dict) -> str | None:
    """One prediction row's predictor (neither the reference nor the live arm, the one plan.json froze)
    and its frozen prediction (its digest is its tokens', and the predictor's own first endpoint);
    returns the predicted digest (None: no frozen prediction)."""
    r = tp.rows[i]
    task = r["task_id"]
    c.identities += 1
    if r["predictor"] == REFERENCE_ARM or r["predictor"] == r["live_arm"]:
        c.bad(
            tp.where(i, "predictor"),
            f"predictor {r['predictor']!r} is the reference or the live arm: "
            "predicted vs live would equal reference vs live by construction",
        )
    if isinstance(frozen_doc, dict) and frozen_doc.get("predictor") not in (None, r["predictor"]):
        c.bad(tp.where(i, "predictor"), f"plan.json froze predictions of {frozen_doc.get('predictor')!r}")
    f = frozen.get(task)
    pred_sha = None
    if isinstance(f, dict) and isinstance(f.get("tokens"), list):
        pred_sha = endpoint_digest(f["tokens"], f.get("eog"), f.get("stop_reason"))
        c.same(
            f"plan.json: predictions.endpoints[{task!r}].endpoint_sha256",
            f.get("endpoint_sha256"),
            pred_sha,
            "frozen digest vs its tokens:",
        )
        own = peps.get((r["predictor"], task), [])
        c.identities += 1
        if not own or own[0]["endpoint_sha256"] != pred_sha:
            c.bad(
                tp.where(i, "predicted_sha256"),
                "the frozen prediction is not the predictor's own completed endpoint in endpoints.csv",
            )
    elif frozen:
        c.bad(tp.where(i), "no frozen prediction for this task in plan.json")
    return pred_sha


def _live_columns(r: dict, peps: dict, pred_sha: str | None) -> dict:
    """A prediction row's recomputed columns: the predicted and reference digests and, over the live arm's
    endpoints in the row's session, its runs, their stability and the runs equal to each digest."""
    task = r["task_id"]
    live = [e["endpoint_sha256"] for e in peps.get((r["live_arm"], task), []) if e["session"] == r["session"]]
    refs = [e for e in peps.get((REFERENCE_ARM, task), []) if e["session"] == r["session"]]
    ref_sha = refs[0]["endpoint_sha256"] if refs else None
    exp = dict(
        predicted_sha256=pred_sha,
        reference_sha256=ref_sha,
        live_runs=len(live),
        live_stable=(len(set(live)) == 1) if live else None,
        predicted_matches=sum(1 for h in live if pred_sha is not None and h == pred_sha),
        reference_matches=sum(1 for h in live if ref_sha is not None and h == ref_sha),
    )
    exp["reference_divergent"] = bool(live) and exp["reference_matches"] < len(live)
    return exp


PREDICTION_TOTALS = (
    "tasks",
    "live_runs",
    "stable_tasks",
    "predicted_matches",
    "reference_matches",
    "divergent_tasks",
    "divergent_runs",
    "divergent_predicted",
)


def _add_to_totals(t: dict, exp: dict) -> None:
    """Count one task's row into its family's totals (over every task, and over the divergent ones)."""
    t["tasks"] += 1
    t["live_runs"] += exp["live_runs"]
    t["stable_tasks"] += 1 if exp["live_stable"] else 0
    t["predicted_matches"] += exp["predicted_matches"]
    t["reference_matches"] += exp["reference_matches"]
    if exp["reference_divergent"]:
        t["divergent_tasks"] += 1
        t["divergent_runs"] += exp["live_runs"]
        t["divergent_predicted"] += exp["predicted_matches"]


def check_prediction(ctx: Context, plan) -> None:
    """The prospective-prediction table (prediction.csv): predicted vs live and reference vs live.

    predicted_sha256 = the digest of the endpoint frozen in plan.json for the task, which must be the
    predictor's own first endpoint; reference_sha256 = the reference arm's first endpoint in the row's
    session; over the live arm's endpoints of that session: live_runs, live_stable (one digest),
    predicted_matches and reference_matches (runs equal to each digest), reference_divergent = some
    live run differs from the reference. Per family the totals over tasks, and over divergent tasks."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "prediction" not in tables:
        return
    tp = tables["prediction"]
    s_pr = src("prediction")
    frozen_doc, frozen = frozen_predictions(c, tp, plan)
    peps = _prediction_endpoints(tables)
    tot = defaultdict(lambda: defaultdict(int))
    for i, r in enumerate(tp.rows):
        fam, task = r["family"], r["task_id"]
        pred_sha = _check_predicted(c, tp, i, frozen_doc, frozen, peps)
        exp = _live_columns(r, peps, pred_sha)
        for col, v in exp.items():
            c.recomputed += 1
            c.same(tp.where(i, col), r[col], v)
        base = ("pred", fam, task)
        for col in ("live_runs", "predicted_matches", "reference_matches"):
            E.add(base + (col,), exp[col], s_pr)
        _add_to_totals(tot[fam], exp)
    for fam, t in tot.items():
        for k in PREDICTION_TOTALS:
            E.add(("predsum", fam, k), t.get(k, 0), s_pr)


def check_replay(ctx: Context) -> None:
    """The replay summary per (family, stage): contexts, those where the device refused QB and those where
    it admitted it, counts of PQ = QB (among the admitted), PQ = QH, MQ = PQ and passing
    controls, maxima of |MQ - PQ|, its ULPs and the visible keys. Identity: a context with MQ = PQ
    records no difference (max_abs_mq = max_ulp_mq = 0, no first_diff)."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "replay" not in tables:
        return
    s_p = src("replay")
    g = defaultdict(list)
    for r in tables["replay"].rows:
        g[(r["family"], r["stage"])].append(r)
    for (fam, stage), rs in g.items():
        base = ("replay", fam, stage)
        refused = [r for r in rs if "qb" in (r["device_refused"] or "").split(",")]
        E.add(base + ("contexts",), len(rs), s_p)
        E.add(base + ("qb_refused",), len(refused), s_p)
        E.add(base + ("qb_admitted",), len(rs) - len(refused), s_p)
        E.add(base + ("pq_eq_qb",), sum(1 for r in rs if r["pq_eq_qb"] and r not in refused), s_p)
        E.add(base + ("pq_eq_qh",), sum(1 for r in rs if r["pq_eq_qh"]), s_p)
        E.add(base + ("mq_eq_pq",), sum(1 for r in rs if r["mq_eq_pq"]), s_p)
        E.add(base + ("control_ok",), sum(1 for r in rs if r["control_ok"]), s_p)
        E.add(base + ("max_abs_mq",), max(r["max_abs_mq"] for r in rs), s_p)
        E.add(base + ("max_ulp_mq",), max(r["max_ulp_mq"] for r in rs), s_p)
        E.add(base + ("max_visible_keys",), max(r["visible_keys"] for r in rs), s_p)
        for r in rs:
            c.identities += 1
            if r["mq_eq_pq"] and (r["max_abs_mq"] != 0 or r["max_ulp_mq"] != 0 or r["first_diff"] is not None):
                c.bad(
                    tables["replay"].rel,
                    f"{fam} {stage} layer {r['layer']} {r['phase']} q={r['q']}: MQ = PQ but a difference is recorded",
                )


def check_audit(ctx: Context) -> None:
    """The audit summary per (layout, stage): clean fixtures and those passing the oracle, injected
    faults and those detected, and the largest absolute and relative errors of the clean fixtures
    (0 when none)."""
    E, tables, src = ctx.E, ctx.tables, ctx.src
    if "audit" not in tables:
        return
    s_a = src("audit")
    g = defaultdict(list)
    for r in tables["audit"].rows:
        g[(r["layout"], r["stage"])].append(r)
    for (lay, stage), rs in g.items():
        clean = [r for r in rs if r["fault"] is None]
        faulty = [r for r in rs if r["fault"] is not None]
        base = ("audit", lay, stage)
        E.add(base + ("fixtures",), len(clean), s_a)
        E.add(base + ("oracle_ok",), sum(1 for r in clean if r["oracle_ok"]), s_a)
        E.add(base + ("faults",), len(faulty), s_a)
        E.add(base + ("detected",), sum(1 for r in faulty if r["detected"]), s_a)
        E.add(base + ("max_abs_err",), max((r["max_abs_err"] for r in clean), default=0.0), s_a)
        E.add(base + ("max_rel_err",), max((r["max_rel_err"] for r in clean), default=0.0), s_a)


def check_requests(ctx: Context) -> None:
    """Draft acceptance and request status counts (requests.csv).

    Per (family, draft) over ok speculative requests: proposals, accepted, requests and acceptance =
    accepted / proposals; per campaign the count of each status and of each (status, reason).
    Identities: the status counts add up to the rows, an ok request has a time, any other status a
    reason."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    if "requests" not in tables:
        return
    reqs = tables["requests"].rows
    s_q = src("requests")
    acc = {}
    for r in reqs:
        if r["status"] != "ok" or r["mode"] != "spec" or r["draft"] is None or r["proposals"] is None:
            continue
        a = acc.setdefault((r["family"], r["draft"]), [0, 0, 0])
        a[0] += r["proposals"]
        a[1] += r["accepted"] or 0
        a[2] += 1
    for (fam, draft), (p, k, n) in acc.items():
        base = ("accept", fam, draft)
        E.add(base + ("proposals",), p, s_q)
        E.add(base + ("accepted",), k, s_q)
        E.add(base + ("requests",), n, s_q)
        if p:
            E.add(base + ("acceptance",), k / p, s_q)
    st, rs_ = defaultdict(int), defaultdict(int)
    for r in reqs:
        st[(r["campaign"], r["status"])] += 1
        if r["reason"]:
            rs_[(r["campaign"], r["status"], r["reason"])] += 1
    for (camp, status), n in st.items():
        E.add(("status", camp, status, "count"), n, s_q)
    for (camp, status, reason), n in rs_.items():
        E.add(("reason", camp, status, reason, "count"), n, s_q)
    c.identities += 1
    if sum(st.values()) != len(reqs):
        c.bad(tables["requests"].rel, "status counts do not add up to the rows")
    for i, r in enumerate(reqs):
        if r["status"] == "ok" and r["t_ns"] is None:
            c.bad(tables["requests"].where(i, "t_ns"), "ok request without a time")
        if r["status"] != "ok" and not r["reason"]:
            c.bad(tables["requests"].where(i, "reason"), f"{r['status']} row without a reason")


def check_ledger(c: Checker, E: Expected, rep: Report) -> None:
    """Ledger records: the number of lines of ledger.jsonl and the count of each record kind (the first
    string among ``LEDGER_KIND_KEYS``, "(none)" when absent or not a JSON object)."""
    lp = os.path.join(c.archive, "ledger.jsonl")
    if not os.path.isfile(lp):
        return
    s_l = posix_rel(lp, rep.dir)
    n, kinds = 0, defaultdict(int)
    with open(lp, "rb") as f:
        for raw in f:
            n += 1
            try:
                rec = jsonio.loads(raw)
            except (ValueError, RecursionError):
                continue
            kind = "(none)"
            if isinstance(rec, dict):
                for k in LEDGER_KIND_KEYS:
                    if isinstance(rec.get(k), str):
                        kind = rec[k]
                        break
            kinds[kind] += 1
    E.add(("ledger", "records"), n, s_l)
    for k, v in kinds.items():
        E.add(("ledger", "kind", k, "count"), v, s_l)
