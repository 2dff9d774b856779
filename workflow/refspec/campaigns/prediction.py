"""Prospective prediction (companion study, arXiv 2610.03228).

Can a draft-free path predict the complete output of a speculative path whose
output differs from the reference? Three sessions:

``s01-discovery``
    The live speculative arm (default C0: unrepaired multi-query verification)
    and every draft-free candidate predictor (fast target-only arms; the
    reference R, or any arm that runs the reference recipe, is refused as a
    candidate: predicted vs live would equal reference vs live) run on the
    discovery panel. The candidate whose complete endpoints match the live
    endpoints most often is selected (ties: the candidate listed first). The
    selection and the scores are added to the plan as the amendment
    ``prediction_selection`` (ledger line ``plan_amendment``).
``s02-prediction``
    The selected predictor runs on the reserved panel. Its complete generated
    IDs (tokens, EOG flag, stop reason) are frozen into the plan record as the
    amendment ``predictions`` -- before any live speculation touches the
    reserved panel.
``s03-live``
    The live speculative arm runs on the reserved panel (``live_repeats`` runs
    per task), with the reference R on the same set.

Scoring (``prediction.json``): predicted against live complete endpoints
(matches out of the live runs), the same-set reference against live, the
reference-divergent tasks and whether the prediction held on them, and the
repeat stability of the live path. The predictions are read from the frozen
plan, never from the journal.
"""

from __future__ import annotations

from ..core.arms import REFERENCE_ARM
from ..core.errors import ConfigError, RefspecError
from ..provenance import plan as planmod
from .scheduler import BlockPlan, Req, SessionPlan, derive_rng, round_schedule, session_ids
from .text import table_text

SESSIONS = ("discovery", "prediction", "live")


def panels(defn: dict) -> dict:
    return {"discovery": defn["discovery_panel"], "reserved": defn["reserved_panel"]}


def arms(defn: dict, catalog: dict) -> list:
    names = [defn["live_arm"], *defn["candidates"]]
    missing = [n for n in names if n not in catalog]
    if missing:
        raise ConfigError(f"prediction: unknown arm(s) {', '.join(missing)}")
    live = catalog[defn["live_arm"]]
    if not live.speculative:
        raise ConfigError(f"prediction: the live arm {live.name} must be speculative")
    spec = [n for n in defn["candidates"] if catalog[n].speculative]
    if spec:
        raise ConfigError(
            f"prediction: candidate predictor(s) {', '.join(spec)} use a draft; predictors are draft-free"
        )
    ref = [n for n in defn["candidates"] if is_reference_recipe(catalog[n], catalog[REFERENCE_ARM])]
    if ref:
        raise ConfigError(
            f"prediction: candidate(s) {', '.join(ref)} run the reference recipe (target-only at physical "
            "micro-batch 1); a predictor must be a fast arm, otherwise predicted vs live equals "
            "reference vs live by construction"
        )
    out = [catalog[REFERENCE_ARM]]
    for n in names:
        if n != REFERENCE_ARM and n not in [a.name for a in out]:
            out.append(catalog[n])
    return out


def is_reference_recipe(arm, reference) -> bool:
    """Whether a draft-free arm computes the reference: R itself, or a target-only arm whose
    target runs one row per graph (micro-batch 1, or global serialization)."""
    return arm.name == reference.name or (not arm.speculative and (arm.ub == 1 or arm.layout == "gs"))


def schedule(ctx) -> list:
    d = ctx.defn
    ids = session_ids(3, SESSIONS)
    live = d["live_arm"]
    cands = list(d["candidates"])
    disc = round_schedule(
        [ids[0]],
        [live, *cands],
        ctx.task_ids("discovery"),
        caps=[d["cap"]],
        repeats=d["discovery_repeats"],
        block_by=d["block_by"],
        seed=d["seed"],
    )[0]
    disc.note = "live arm and draft-free candidates on the discovery panel"
    pred = SessionPlan(
        ids[1],
        [],
        note="the selected predictor on the reserved panel (blocks fixed by the amendment prediction_selection)",
    )
    live_s = round_schedule(
        [ids[2]],
        [live],
        ctx.task_ids("reserved"),
        caps=[d["cap"]],
        repeats=d["live_repeats"],
        block_by=d["block_by"],
        seed=d["seed"],
    )[0]
    live_s.note = "live speculation and the reference on the reserved panel, after the predictions are frozen"
    return [disc, pred, live_s]


def _first_endpoints(records: list[dict], session: str | None = None) -> dict[tuple[str, str], list[dict]]:
    """(arm, task) -> endpoint rows in (session, repeat) order."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in sorted(
        (r for r in records if r["endpoint"] is not None), key=lambda r: (r["row"]["session"], r["row"]["repeat"])
    ):
        if session is not None and r["row"]["session"] != session:
            continue
        out.setdefault((r["row"]["arm"], r["row"]["task_id"]), []).append(r["endpoint"])
    return out


def selection(ctx, records: list[dict]) -> dict:
    d = ctx.defn
    sid = ctx.sessions[0].id
    eps = _first_endpoints(records, sid)
    tasks = ctx.task_ids("discovery")
    live = d["live_arm"]
    scores = []
    for c in d["candidates"]:
        matches = total = 0
        unstable = []
        missing = []
        for t in tasks:
            ce = eps.get((c, t), [])
            le = eps.get((live, t), [])
            if not ce or not le:
                missing.append(t)
                continue
            if len({e["endpoint_sha256"] for e in ce}) > 1:
                unstable.append(t)
            for e in le:
                total += 1
                matches += 1 if e["endpoint_sha256"] == ce[0]["endpoint_sha256"] else 0
        scores.append(
            {
                "candidate": c,
                "matches": matches,
                "live_runs": total,
                "unstable_tasks": unstable,
                "missing_tasks": missing,
            }
        )
    usable = [s for s in scores if not s["missing_tasks"]]
    if not usable:
        raise RefspecError("prediction: no candidate has complete discovery endpoints; cannot select a predictor")
    best = max(usable, key=lambda s: (s["matches"], -d["candidates"].index(s["candidate"])))
    reps = [1]
    rng = derive_rng(d["seed"], "tasks", ctx.sessions[1].id, 0)
    order = list(ctx.task_ids("reserved"))
    rng.shuffle(order)
    block = {
        "index": 0,
        "arm": best["candidate"],
        "role": "predictor",
        "requests": [[t, d["cap"], r] for r in reps for t in order],
    }
    return {
        "predictor": best["candidate"],
        "rule": "most live discovery endpoints matched; ties: first listed",
        "live_arm": live,
        "scores": scores,
        "schedule": {"session": ctx.sessions[1].id, "blocks": [block]},
    }


def _fill(ctx, sel: dict) -> None:
    sp = ctx.sessions[1]
    if sp.blocks:
        return
    for b in sel["schedule"]["blocks"]:
        sp.blocks.append(
            BlockPlan(sp.id, b["index"], b["arm"], [Req(t, int(c), int(r)) for t, c, r in b["requests"]], b["role"])
        )


def execute(ctx) -> None:
    run = ctx.run
    s1, s2, s3 = ctx.sessions
    run.run_session(s1, None)
    plan = planmod.check_file(run.out, run.ledger)
    sel = plan.get("prediction_selection")
    if sel is None:
        sel = selection(ctx, run.journal_records())
        plan = planmod.amend(
            run.out,
            run.ledger,
            "prediction_selection",
            sel,
            f"predictor selected on the discovery panel: {sel['predictor']}",
        )
    _fill(ctx, sel)
    run.run_session(s2, s1.id)
    pred = plan.get("predictions")
    if pred is None:
        eps = _first_endpoints(run.journal_records(), s2.id)
        frozen = {}
        for t in ctx.task_ids("reserved"):
            e = eps.get((sel["predictor"], t))
            if not e:
                raise RefspecError(
                    f"prediction: the predictor has no completed endpoint for {t}; "
                    "resume to complete the prediction session"
                )
            frozen[t] = {k: e[0][k] for k in ("tokens", "eog", "stop_reason", "n", "last_token", "endpoint_sha256")}
        pred = {"predictor": sel["predictor"], "cap": ctx.defn["cap"], "endpoints": frozen}
        plan = planmod.amend(
            run.out,
            run.ledger,
            "predictions",
            pred,
            "complete generated IDs of the predictor frozen before live speculation",
        )
    ctx.plan = plan
    run.run_session(s3, s2.id)


def score(ctx, records: list[dict]) -> dict:
    plan = planmod.check_file(ctx.run.out, ctx.run.ledger)
    pred = (plan.get("predictions") or {}).get("endpoints")
    sel = plan.get("prediction_selection") or {}
    if ctx.sessions[1].blocks == [] and sel:
        _fill(ctx, sel)
    live = ctx.defn["live_arm"]
    s3 = ctx.sessions[2].id
    eps = _first_endpoints(records, s3)
    tasks = []
    pm = rm = n = 0
    for t in ctx.task_ids("reserved"):
        le = eps.get((live, t), [])
        re_ = eps.get((REFERENCE_ARM, t), [])
        p = (pred or {}).get(t)
        ref = re_[0]["endpoint_sha256"] if re_ else None
        runs = [e["endpoint_sha256"] for e in le]
        pmatch = sum(1 for h in runs if p is not None and h == p["endpoint_sha256"])
        rmatch = sum(1 for h in runs if ref is not None and h == ref)
        n += len(runs)
        pm += pmatch
        rm += rmatch
        tasks.append(
            {
                "task_id": t,
                "live_runs": len(runs),
                "live_stable": len(set(runs)) == 1 if runs else None,
                "predicted_matches": pmatch,
                "reference_matches": rmatch,
                "reference_divergent": bool(runs) and rmatch < len(runs),
            }
        )
    div = [x for x in tasks if x["reference_divergent"]]
    return {
        "predictor": sel.get("predictor"),
        "live_arm": live,
        "selection": sel.get("scores"),
        "predicted_matches": pm,
        "reference_matches": rm,
        "live_runs": n,
        "stable_tasks": sum(1 for x in tasks if x["live_stable"]),
        "reference_divergent_tasks": [x["task_id"] for x in div],
        "divergent_runs": sum(x["live_runs"] for x in div),
        "divergent_runs_predicted": sum(x["predicted_matches"] for x in div),
        "frozen": pred is not None,
        "tasks": tasks,
    }


def table_rows(ctx, sc: dict, records: list[dict]) -> list[dict]:
    """Rows of the ``prediction`` table (one per reserved task)."""
    plan = planmod.check_file(ctx.run.out, ctx.run.ledger)
    pred = (plan.get("predictions") or {}).get("endpoints") or {}
    s3 = ctx.sessions[2].id
    eps = _first_endpoints(records, s3)
    rows = []
    for x in sc["tasks"]:
        t = x["task_id"]
        ref = eps.get((REFERENCE_ARM, t), [])
        rows.append(
            {
                "family": ctx.family,
                "task_id": t,
                "live_arm": sc["live_arm"],
                "predictor": sc["predictor"] or "",
                "session": s3,
                "cap": int(ctx.defn["cap"]),
                "predicted_sha256": (pred.get(t) or {}).get("endpoint_sha256"),
                "reference_sha256": ref[0]["endpoint_sha256"] if ref else None,
                "live_runs": x["live_runs"],
                "live_stable": x["live_stable"],
                "predicted_matches": x["predicted_matches"],
                "reference_matches": x["reference_matches"],
                "reference_divergent": x["reference_divergent"],
            }
        )
    return rows


def analyze(ctx, base: dict) -> dict:
    sc = score(ctx, base["_records"])
    sel_rows = [
        [s["candidate"], f"{s['matches']}/{s['live_runs']}", " ".join(s["unstable_tasks"]) or "-"]
        for s in sc["selection"] or []
    ]
    task_rows = [
        [
            x["task_id"],
            x["live_runs"],
            "yes" if x["live_stable"] else "no",
            f"{x['predicted_matches']}/{x['live_runs']}",
            f"{x['reference_matches']}/{x['live_runs']}",
        ]
        for x in sc["tasks"]
    ]
    text = "\n".join(
        [
            f"Prospective prediction of {sc['live_arm']} (companion study): discovery "
            f"{len(ctx.task_ids('discovery'))} task(s), reserved {len(ctx.task_ids('reserved'))} task(s), "
            f"{ctx.defn['live_repeats']} live run(s) per task, cap {ctx.defn['cap']}",
            "discovery (candidate endpoints matching live endpoints):",
            table_text(["candidate", "matches", "unstable tasks"], sel_rows),
            f"selected predictor: {sc['predictor']} (frozen in plan.json before the live session: "
            f"{'yes' if sc['frozen'] else 'no'})",
            f"predicted vs live: {sc['predicted_matches']}/{sc['live_runs']} complete endpoints match; "
            f"same-set reference vs live: {sc['reference_matches']}/{sc['live_runs']}",
            f"reference-divergent tasks: {len(sc['reference_divergent_tasks'])} "
            f"({' '.join(sc['reference_divergent_tasks']) or 'none'}); predicted on "
            f"{sc['divergent_runs_predicted']}/{sc['divergent_runs']} of their runs; "
            f"{sc['stable_tasks']}/{len(sc['tasks'])} tasks repeat-stable",
            "(companion study: 72/72 predicted, 60/72 reference, all 12 runs of four reference-divergent prompts)",
            table_text(["task", "live runs", "stable", "predicted", "reference"], task_rows),
        ]
    )
    tables = {"prediction": table_rows(ctx, sc, base["_records"])} if sc["predictor"] else {}
    return {"tables": tables, "text": text, "json": {"prediction.json": sc}}
