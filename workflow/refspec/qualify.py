"""``refspec qualify``: complete-endpoint qualification of arms against the reference R.

    refspec qualify --family F --panel P --arms R,M0,M3,C3 --repeats N
                    [--draft D] [--cap C] [--out DIR] [--campaign confirmation] [--resume]

``--panel`` is a panel file (``refspec panel``) or ``humaneval:0-11`` (built
from the pinned HumanEval wheel). Each arm runs in its own block on a fresh
worker (see :mod:`refspec.driver`). The reference R runs twice per task as two
serial reference runs: repeat 1 in the first block, the remaining repeats
(``max(2, N)`` in all) in the last block, each on its own fresh worker. The
other arms run ``N`` repeats per task, repeat-major, in the order given.

Outputs in ``--out``: ``journal.jsonl`` (one line per attempt, appended as it
ends), ``ledger.jsonl`` (hash-chained), ``workers/`` (ready files and logs),
``tables/requests``, ``tables/endpoints``, ``tables/qualification`` (Parquet +
CSV, anc/tables.md) and ``summary.json`` (per-arm counts, acceptance, median
request time, first divergences, non-vacuity evidence; anc/worker.md). An arm
qualifies on a task when every required request completed with the reference
endpoint (:func:`refspec.stats.qualify`); a task whose two reference runs differ
is reported as an unstable reference and qualifies no arm.

Non-vacuity: a qualified speculative arm must show, on the tasks where it
qualified, multi-row verification (verification rows per verification caller
above 1), partial accepts (a cycle that accepted some but not all proposals),
rollbacks, and its layout active (``micrographs_<layout>`` > 0). Without that
evidence its qualification is marked vacuous.

Exit status: 0 when every planned request has a completed attempt (whether or
not arms qualify), 5 when some did not complete, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .arms import Arm, load_arms, select
from .driver import Journal, Planned, PromptBook, RunContext, Worker, run_block
from .errors import EXIT_OK, EXIT_RUNTIME, ConfigError, UsageError
from .fsutil import atomic_write_text
from .hashing import sha256_json
from .ledger import Ledger
from .panels import Task, load_panel_spec, tasks_sha256
from .stats import natural_key, qualification_counts, qualify
from .tables import TABLES, write_table

REFERENCE = "R"
CAMPAIGNS = tuple(TABLES["requests"].column("campaign").enum or ("confirmation",))


def load_panel(spec: str) -> tuple[list[Task], dict]:
    """``humaneval:0-11`` (pinned wheel) or a panel file; returns the tasks and a description."""
    tasks = load_panel_spec(spec)
    if spec.startswith("humaneval:"):
        desc = {"spec": spec, "source": "humaneval"}
    else:
        desc = {"spec": spec, "source": "file", "path": str(Path(spec).resolve())}
    desc["tasks"] = [t.task_id for t in tasks]
    desc["sha256"] = tasks_sha256(tasks)
    return tasks, desc


@dataclass
class Block:
    index: int
    arm: Arm
    planned: list[Planned]


def plan_blocks(arms: list[Arm], task_ids: list[str], repeats: int, cap: int) -> list[Block]:
    """R (repeat 1), then each other arm (repeats 1..N), then R again (repeats 2..max(2, N))."""
    ref = next(a for a in arms if a.name == REFERENCE)
    others = [a for a in arms if a.name != REFERENCE]

    def reqs(reps):
        return [Planned(t, cap, r) for r in reps for t in task_ids]

    blocks = [Block(0, ref, reqs([1]))]
    for a in others:
        blocks.append(Block(len(blocks), a, reqs(range(1, repeats + 1))))
    blocks.append(Block(len(blocks), ref, reqs(range(2, max(2, repeats) + 1))))
    return blocks


def _session_id(campaign: str) -> str:
    return f"{campaign}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"


@dataclass
class QualifyResult:
    out_dir: Path
    session: str
    records: list[dict]  # journal request records (all attempts, all runs of this session)
    requests: list[dict]
    endpoints: list[dict]
    qualification: list[dict]
    summary: dict
    complete: bool


def run_qualify(*, family: str, tasks: list[Task], panel: dict, arm_names: list[str] | str, repeats: int = 1,
                cap: int | None = None, draft: str | None = None, out_dir: str | Path, campaign: str = "confirmation",
                resume: bool = False, retries: int = 1, arms_file: str | None = None, lib_dir: str | Path | None = None,
                models_dir: str | None = None, families_file: str | Path | None = None,
                host: str = "127.0.0.1", request_timeout: float = 600.0,
                on_submit: Callable[[Worker, Planned, int], None] | None = None, progress: bool = True,
                session: str | None = None, warmup_cap: int | None = None,
                config: dict | None = None) -> QualifyResult:
    from .models import ensure_family

    if campaign not in CAMPAIGNS:
        raise UsageError(f"unknown campaign {campaign!r} (one of {', '.join(CAMPAIGNS)})")
    if repeats < 1:
        raise UsageError("--repeats must be at least 1")
    all_arms = {n: a.placed(config) for n, a in load_arms(arms_file).items()}  # the run's GPU setting
    arms = select(arm_names, all_arms)
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise UsageError("an arm is named twice")
    if REFERENCE not in names:
        arms = [all_arms[REFERENCE], *arms] if REFERENCE in all_arms else arms
        if REFERENCE not in [a.name for a in arms]:
            raise ConfigError("the arms file has no reference arm R")
    cap = int(cap or next(a for a in arms if a.name == REFERENCE).cap)
    if cap < 1:
        raise UsageError("--cap must be positive")
    files = ensure_family(family, models_dir=models_dir, families_file=families_file)
    spec_arms = [a for a in arms if a.speculative]
    draft_name = (draft or files.default_draft) if spec_arms else None
    if draft_name is not None:
        files.draft(draft_name)  # unknown draft: a usage error now, not in a worker
    if lib_dir is None:
        lib_dir = os.environ.get("LLAMA_CPP_LIB_PATH")
    if lib_dir is None:
        from . import native

        lib_dir = native.current(config).lib_dir
    lib_dir = Path(lib_dir)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    journal = Journal(out / "journal.jsonl")
    ledger = Ledger(out / "ledger.jsonl")
    plan = {
        "campaign": campaign, "family": family, "panel": panel, "arms": [a.record() for a in arms],
        "repeats": repeats, "cap": cap, "draft": draft_name,
        "models": {f.name: f.sha256 for f in files.all()},
    }
    plan_sha = sha256_json(plan)
    previous = journal.records()
    if previous:
        if not resume:
            raise UsageError(f"{journal.path} exists: pass --resume to continue that run, or choose another --out")
        head = previous[0]
        if head.get("type") != "plan" or head.get("plan_sha256") != plan_sha:
            raise UsageError(f"{journal.path} holds another plan (family, panel, arms, repeats, cap, draft or model "
                             "files differ); refusing to mix runs")
        session = head["session"]
    else:
        session = session or _session_id(campaign)
        journal.append({"type": "plan", "session": session, "plan_sha256": plan_sha, "plan": plan})
    prev_reqs = [r for r in previous if r.get("type") == "request"]
    n_workers = len({r["row"]["worker"] for r in prev_reqs if r["row"]["worker"].startswith("w")})

    book = PromptBook(tasks, chat=True)
    ctx = RunContext(campaign=campaign, family=family, session=session, files=files, lib_dir=lib_dir, out_dir=out,
                     journal=journal, ledger=ledger, prompts=book, draft=draft_name, arms_file=arms_file, host=host,
                     retries=retries, request_timeout=request_timeout, on_submit=on_submit, warmup_cap=warmup_cap,
                     n_workers=n_workers)
    blocks = plan_blocks(arms, [t.task_id for t in tasks], repeats, cap)

    # what is already done (a resumed run): completed (arm, task, repeat) and the last attempt numbers
    done = set()
    last_attempt: dict[tuple[str, str, int], int] = {}
    for r in prev_reqs:
        row = r["row"]
        if row["status"] == "excluded_warmup":
            continue
        k = (row["arm"], row["task_id"], row["repeat"])
        last_attempt[k] = max(last_attempt.get(k, 0), row["attempt"])
        if row["status"] == "ok":
            done.add(k)
    todo = [Block(b.index, b.arm, [p for p in b.planned if (b.arm.name, p.task_id, p.repeat) not in done])
            for b in blocks]
    total = sum(len(b.planned) for b in todo)
    ledger.append({"kind": "session_start", "campaign": campaign, "family": family, "session": session,
                   "reason": ("resumed: " if previous else "") + f"qualification of {', '.join(a.name for a in arms)} "
                             f"on {len(tasks)} tasks, cap {cap}, {repeats} repeat(s)",
                   "plan_sha256": plan_sha, "planned": total})

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="qualify", unit="req", file=sys.stderr, disable=None)

    def on_record(rec):
        row = rec["row"]
        if bar is not None and row["status"] in ("ok", "failed"):
            bar.set_postfix_str(f"{row['arm']} {row['task_id']} {row['status']}", refresh=False)
            bar.update(1 if row["status"] == "ok" else 0)

    ctx.on_record = on_record
    new_records: list[dict] = []
    try:
        for b in todo:
            if not b.planned:
                continue
            attempts = {(p.task_id, p.repeat): last_attempt.get((b.arm.name, p.task_id, p.repeat), 0)
                        for p in b.planned}
            if bar is None or bar.disable:
                print(f"refspec qualify: block {b.index}: arm {b.arm.name}, {len(b.planned)} requests",
                      file=sys.stderr, flush=True)
            new_records += run_block(ctx, b.arm, b.planned, block=b.index, attempts_before=attempts)
    finally:
        if bar is not None:
            bar.close()

    records = prev_reqs + new_records
    result = build_results(records, campaign=campaign, arms=arms, tasks=[t.task_id for t in tasks], cap=cap,
                           repeats=repeats, family=family, draft=draft_name, session=session, panel=panel,
                           prompts=book.digests())
    tdir = out / "tables"
    write_table(result["requests"], "requests", tdir)
    write_table(result["endpoints"], "endpoints", tdir)
    write_table(result["qualification"], "qualification", tdir)
    summary = result["summary"]
    import json

    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, sort_keys=True, allow_nan=False) + "\n")
    ledger.append({"kind": "session_end", "campaign": campaign, "family": family, "session": session,
                   "reason": "all blocks run" + ("" if summary["complete"] else
                                                 f"; {len(summary['incomplete'])} planned requests not completed"),
                   "complete": summary["complete"], "vacuous_arms": summary["vacuous_arms"]})
    return QualifyResult(out, session, records, result["requests"], result["endpoints"], result["qualification"],
                         summary, summary["complete"])


# --------------------------------------------------------------------------- results

def _sum(vals):
    return sum(v for v in vals if v is not None)


def nonvacuity(arm: Arm, recs: list[dict]) -> dict:
    """Evidence that an arm's qualification exercised what it claims (see the module docstring)."""
    lay = f"micrographs_{arm.layout}"
    ctr = [r["counters"] or {} for r in recs]
    ev = [r.get("evidence") for r in recs]
    out = {"requests": len(recs), lay: _sum(c.get(lay) for c in ctr)}
    if arm.speculative:
        known = [e for e in ev if e is not None]
        vc = _sum(e["verify_callers"] for e in known)
        vr = _sum(e["verify_rows"] for e in known)
        out.update({
            "verify_callers": vc, "verify_rows": vr,
            "rows_per_verify_caller": (vr / vc) if vc else None,
            "partial_accepts": _sum(e["partial_accepts"] for e in known),
            "rollbacks": _sum(c.get("rollbacks") for c in ctr),
            "cycle_trace_missing": len(ev) - len(known),
        })
        checks = {
            "multi_row_verification": bool(vc) and vr / vc > 1,
            "partial_accepts": out["partial_accepts"] > 0,
            "rollbacks": out["rollbacks"] > 0,
            "layout_active": out[lay] > 0,
        }
    else:
        rows = _sum(c.get("rows") for c in ctr)
        mg = _sum(c.get("micrographs") for c in ctr)
        out.update({"rows": rows, "micrographs": mg, "rows_per_micrograph": (rows / mg) if mg else None})
        checks = {"multi_row_micrographs": bool(mg) and rows > mg, "layout_active": out[lay] > 0}
    out["checks"] = checks
    out["nonvacuous"] = all(checks.values()) if recs else None
    return out


def build_results(records: list[dict], *, campaign: str, arms: list[Arm], tasks: list[str], cap: int, repeats: int,
                  family: str, draft: str | None, session: str, panel: dict, prompts: dict) -> dict:
    """The three tables and the summary from the journal records."""
    requests = [r["row"] for r in records]
    endpoints = [r["endpoint"] for r in records if r["endpoint"] is not None]
    # the reference's margins: the first completed R endpoint in (session, repeat) order, as stats.qualify picks it
    margins: dict = {}
    ref_recs = sorted((r for r in records if r["row"]["arm"] == REFERENCE and r["endpoint"] is not None),
                      key=lambda r: (r["row"]["session"], r["row"]["repeat"]))
    for r in ref_recs:
        k = (r["row"]["campaign"], r["row"]["family"], r["row"]["task_id"], r["row"]["cap"])
        margins.setdefault(k, r["margins"])
    qual = qualify(requests, endpoints, campaign=campaign, margins=margins)

    by_arm_task = {(q["arm"], q["task_id"]): q for q in qual}
    counts = {c["arm"]: c for c in qualification_counts(qual)}
    ok = [r for r in records if r["row"]["status"] == "ok"]
    arms_out = []
    vacuous = []
    for a in arms:
        mine = [r for r in ok if r["row"]["arm"] == a.name]
        qualified_tasks = [t for t in tasks if by_arm_task.get((a.name, t), {}).get("qualified")]
        times = [r["row"]["t_ns"] for r in mine]
        prop = _sum(r["row"]["proposals"] for r in mine)
        acc = _sum(r["row"]["accepted"] for r in mine)
        c = counts.get(a.name, {})
        entry = {
            "arm": a.name, "mode": a.mode, "layout": a.layout, "ub": a.ub, "mask": a.mask,
            "k": a.k if a.speculative else 0,
            "matching": c.get("matching", 0), "required": c.get("required", 0),
            "tasks": len(tasks), "tasks_qualified": len(qualified_tasks),
            "completed": len(mine),
            "acceptance": (acc / prop) if (a.speculative and prop) else None,
            "proposals": prop if a.speculative else None, "accepted": acc if a.speculative else None,
            "median_t_ns": int(statistics.median(times)) if times else None,
            "median_engine_ns": int(statistics.median([r["engine_ns"] for r in mine if r.get("engine_ns")]))
            if any(r.get("engine_ns") for r in mine) else None,
        }
        if a.name != REFERENCE:
            ev = nonvacuity(a, [r for r in mine if r["row"]["task_id"] in qualified_tasks])
            ev["all_requests"] = nonvacuity(a, mine)
            entry["nonvacuity"] = ev
            entry["vacuous"] = (ev["nonvacuous"] is False) if qualified_tasks else None
            if entry["vacuous"]:
                vacuous.append(a.name)
        arms_out.append(entry)
    divergences = []
    arm_pos = {a.name: i for i, a in enumerate(arms)}
    for q in sorted(qual, key=lambda q: (arm_pos.get(q["arm"], len(arm_pos)), natural_key(q["task_id"]))):
        if q["arm"] == REFERENCE or q["qualified"]:
            continue
        divergences.append({k: q[k] for k in ("arm", "task_id", "first_diff_index", "ref_token", "arm_token",
                                               "ref_margin", "n_matching", "n_required", "reason")})
    unstable = sorted({q["task_id"] for q in qual if q["arm"] == REFERENCE and not q["ref_stable"]})
    ref_ok = {q["task_id"]: q for q in qual if q["arm"] == REFERENCE}
    # every planned (arm, task, repeat) must have an ok row
    planned = set()
    for a in arms:
        reps = range(1, (max(2, repeats) if a.name == REFERENCE else repeats) + 1)
        planned |= {(a.name, t, r) for t in tasks for r in reps}
    have = {(r["row"]["arm"], r["row"]["task_id"], r["row"]["repeat"]) for r in ok}
    incomplete = sorted(planned - have)
    status: dict[str, int] = {}
    for r in requests:
        status[r["status"]] = status.get(r["status"], 0) + 1
    failures = [{"arm": r["arm"], "task_id": r["task_id"], "repeat": r["repeat"], "attempt": r["attempt"],
                 "worker": r["worker"], "reason": r["reason"]} for r in requests if r["status"] == "failed"]
    summary = {
        "campaign": campaign, "family": family, "session": session, "cap": cap, "repeats": repeats, "draft": draft,
        "panel": {k: panel[k] for k in ("spec", "sha256") if k in panel} | {"tasks": len(tasks)},
        "prompt_sha256": prompts,
        "reference": {"runs_per_task": max(2, repeats), "stable_tasks": sum(1 for q in ref_ok.values() if q["ref_stable"]),
                      "unstable_tasks": unstable, "missing_tasks": sorted(set(tasks) - set(ref_ok))},
        "arms": arms_out, "divergences": divergences, "vacuous_arms": vacuous,
        "status_counts": status, "failures": failures,
        "incomplete": [list(x) for x in incomplete], "complete": not incomplete,
    }
    return {"requests": requests, "endpoints": endpoints, "qualification": qual, "summary": summary}


def format_summary(s: dict) -> str:
    lines = [f"refspec qualify: {s['family']}, panel {s['panel'].get('spec')} ({s['panel']['tasks']} tasks), "
             f"cap {s['cap']}, repeats {s['repeats']}, draft {s['draft'] or '-'}, session {s['session']}"]
    ref = s["reference"]
    lines.append(f"reference R: {ref['runs_per_task']} serial runs per task; stable on {ref['stable_tasks']} of "
                 f"{s['panel']['tasks']} tasks" + (f"; UNSTABLE (not used): {' '.join(ref['unstable_tasks'])}"
                                                   if ref["unstable_tasks"] else ""))
    hdr = f"{'arm':8s} {'mode':6s} {'layout':6s} {'matches':>9s} {'tasks':>7s} {'accept':>7s} {'median ms':>10s}  non-vacuity"
    lines.append(hdr)
    for a in s["arms"]:
        acc = f"{a['acceptance']:.3f}" if a["acceptance"] is not None else "-"
        med = f"{a['median_t_ns'] / 1e6:.1f}" if a["median_t_ns"] is not None else "-"
        nv = "-"
        ev = a.get("nonvacuity")
        if ev is not None:
            if a["vacuous"] is None:
                nv = "n/a (qualified on no task)"
            else:
                lay = f"micrographs_{a['layout']}"
                if a["mode"] == "spec":
                    rpc = ev["rows_per_verify_caller"]
                    detail = (f"rows/verify caller {rpc:.2f}" if rpc is not None else "rows/verify caller -") + \
                             f", partial accepts {ev['partial_accepts']}, rollbacks {ev['rollbacks']}, {lay} {ev[lay]}"
                else:
                    rpm = ev["rows_per_micrograph"]
                    detail = (f"rows/micrograph {rpm:.2f}" if rpm is not None else "rows/micrograph -") + \
                             f", {lay} {ev[lay]}"
                nv = ("VACUOUS: " if a["vacuous"] else "ok: ") + detail
        lines.append(f"{a['arm']:8s} {a['mode']:6s} {a['layout']:6s} {a['matching']:>4d}/{a['required']:<4d} "
                     f"{a['tasks_qualified']:>3d}/{a['tasks']:<3d} {acc:>7s} {med:>10s}  {nv}")
    if s["divergences"]:
        lines.append("first divergences from R (arm, task, index, R token, arm token, R top-2 margin):")
        for d in s["divergences"]:
            if d["first_diff_index"] is None:
                lines.append(f"  {d['arm']:8s} {d['task_id']:14s} {d['reason']}")
                continue
            m = f"{d['ref_margin']:.4f}" if d["ref_margin"] is not None else "-"
            lines.append(f"  {d['arm']:8s} {d['task_id']:14s} index {d['first_diff_index']:>4d}  R {d['ref_token']}  "
                         f"arm {d['arm_token']}  margin {m}  ({d['n_matching']}/{d['n_required']} match)")
    if s["vacuous_arms"]:
        lines.append(f"VACUOUS qualification (no evidence of the exercised path): {', '.join(s['vacuous_arms'])}")
    if s["failures"]:
        lines.append(f"failed attempts ({len(s['failures'])}):")
        for f in s["failures"]:
            lines.append(f"  {f['arm']} {f['task_id']} repeat {f['repeat']} attempt {f['attempt']}: {f['reason']}")
    if not s["complete"]:
        lines.append(f"INCOMPLETE: {len(s['incomplete'])} planned requests have no completed attempt")
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", help="model family (default: the config's family)")
    p.add_argument("--config", help="workflow config (default config/config.yaml)")
    p.add_argument("--panel", required=True, help="panel file, or humaneval:0-11 (from the pinned wheel)")
    p.add_argument("--arms", default="R,M0,M3,C3", help="comma-separated arm names (R is added when missing)")
    p.add_argument("--arms-file", help="arms YAML (default config/arms.yaml)")
    p.add_argument("--repeats", type=int, default=1, help="repeats per task for arms other than R (R: max(2, N))")
    p.add_argument("--draft", help="draft model name (default: the family's default draft)")
    p.add_argument("--cap", type=int, help="max new tokens (default: the R arm's cap)")
    p.add_argument("--out", help="output folder (default results/qualify/<session>)")
    p.add_argument("--campaign", default="confirmation", choices=CAMPAIGNS)
    p.add_argument("--resume", action="store_true", help="continue the run recorded in --out/journal.jsonl")
    p.add_argument("--retries", type=int, default=1, help="re-runs of a request whose worker died (default 1)")
    p.add_argument("--lib-dir", help="patched llama.cpp libraries (default LLAMA_CPP_LIB_PATH or the cached build)")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from .config import load_config

    cfg = None
    family = args.family
    models_dir = families_file = None
    try:
        cfg = load_config(args.config)
    except ConfigError:
        if args.config:
            raise
    if cfg is not None:
        family = family or cfg.get("family")
        models_dir = cfg.get("models_dir")
        from .models import config_families_file

        families_file = config_families_file(cfg)
    if not family:
        raise UsageError("--family is required")
    tasks, panel = load_panel(args.panel)
    session = None
    out = args.out
    if out is None:
        session = _session_id(args.campaign)
        out = Path("results") / "qualify" / session
    res = run_qualify(family=family, tasks=tasks, panel=panel, arm_names=args.arms, repeats=args.repeats,
                      cap=args.cap, draft=args.draft, out_dir=out, campaign=args.campaign, resume=args.resume,
                      retries=args.retries, arms_file=args.arms_file, lib_dir=args.lib_dir, models_dir=models_dir,
                      families_file=families_file,
                      request_timeout=args.request_timeout, progress=not args.no_progress, session=session,
                      config=cfg)
    print(format_summary(res.summary))
    print(f"results: {res.out_dir} (tables/, summary.json, journal.jsonl, ledger.jsonl)")
    return EXIT_OK if res.complete else EXIT_RUNTIME
