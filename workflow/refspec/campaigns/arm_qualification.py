"""Complete-endpoint qualification of arms against the reference R (``refspec qualify arms``,
:mod:`refspec.commands.qualify`).

A preset of the confirmation campaign (:mod:`refspec.campaigns.confirmation`):
the definition ``config/campaigns/confirmation.yaml`` with ``--arms``,
``--panel``, ``--cap``, ``--repeats``, ``--draft`` and ``--family`` put in its
place and one session. That definition is written to
``DIR/campaigns/confirmation/qualify.yaml`` and run by the campaign engine
(:func:`refspec.campaigns.context.prepare`, :func:`refspec.campaigns.execution.execute`) exactly
as ``refspec campaign confirmation --definition that-file --out DIR`` runs it:
the plan frozen before the first request, every attempt in the journal and
the hash-chained ledger, fresh workers per block, the engine's retry rule and
``--resume`` (only requests without a final attempt run).

``--panel`` is a panel file (``refspec panel``) or ``humaneval:0-11`` (built
from the pinned HumanEval wheel). The reference R runs ``max(2, N)`` times per
task in separate blocks on fresh workers (serial reference runs); a task whose
reference runs differ is reported as an unstable reference and qualifies no
arm. An arm qualifies on a task when every required request completed with the
reference endpoint (:func:`refspec.campaigns.derived.qualification_table`).

Beside the campaign's own outputs (tables, ``summary.txt``,
``timed_audit.json``; anc/campaigns.md) the campaign folder gets
``summary.json``: per-arm counts, acceptance, median request time, first
divergences and non-vacuity evidence (:func:`refspec.campaigns.evidence.nonvacuity`;
anc/worker.md).
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..core.arms import REFERENCE_ARM, reference_of
from ..core.config import Config, read_yaml, validate
from ..core.divergence import DECISIVE, DIVERGENCE_TEXT, NEAR_TIE, NEAR_TIE_MARGIN
from ..core.errors import UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file
from ..core.panels import panel_spec, parse_range
from ..core.vacuity import is_unrepaired, panel_exposure, vacuous_text
from ..provenance.plan import PLAN_NAME
from .context import prepare
from .definitions import load_definition
from .derived import natural_key, qualification_counts
from .evidence import nonvacuity
from .execution import execute

PRESET_CAMPAIGN = "confirmation"
DEFINITION_NAME = "qualify.yaml"
SUMMARY_NAME = "summary.json"


def panel_definition(spec: str) -> dict:
    """``humaneval:0-11`` or a panel file as a campaign definition's ``panel:``
    (:func:`refspec.core.panels.panel_spec`), checked before anything is written."""
    sp = panel_spec(spec)
    if sp["source"] == "humaneval":
        try:
            ok = bool(parse_range(sp["tasks"]))
        except ValueError:
            ok = False
        if not ok:
            raise UsageError(f"--panel {spec}: not a HumanEval index range such as humaneval:0-11 or humaneval:0,4,7-9")
        return sp
    p = Path(sp["file"]).expanduser()
    if not p.is_file():
        raise UsageError(f"--panel {spec}: no such panel file (a panel file, or humaneval:0-11)")
    return {"source": "file", "file": str(p.resolve())}


def qualify_definition(
    *,
    panel: str,
    arms: str | list[str],
    repeats: int,
    family: str,
    cap: int | None = None,
    draft: str | None = None,
    retries: int | None = None,
    request_timeout: float | None = None,
    reference: str = REFERENCE_ARM,
) -> dict:
    """The confirmation definition with the qualification's values in place (validated, defaults filled);
    ``reference`` names the reference arm (refspec's R unless another micro-batch-1 arm is named)."""
    names = [n.strip() for n in arms.split(",")] if isinstance(arms, str) else [str(n).strip() for n in arms]
    names = [n for n in names if n]
    if not names:
        raise UsageError("--arms names no arm")
    if len(set(names)) != len(names):
        raise UsageError("an arm is named twice")
    if repeats < 1:
        raise UsageError("--repeats must be at least 1")
    if cap is not None and cap < 1:
        raise UsageError("--cap must be positive")
    if retries is not None and retries < 0:
        raise UsageError("--retries must be 0 or more")
    if request_timeout is not None and request_timeout <= 0:
        raise UsageError("--request-timeout must be positive")
    others = [n for n in names if n != reference]
    defn, _ = load_definition(PRESET_CAMPAIGN)
    defn.update(
        {
            "description": f"refspec qualify: {', '.join(others) or 'no arm'} against the reference {reference} on {panel}",
            "family": family,
            "arms": [reference, *others],
            "panel": panel_definition(panel),
            "repeats": int(repeats),
            "sessions": 1,
            # a qualification, not a timing study: no A/A control, no sizing to a ratio, and each
            # arm in its own fresh processes as a user's deployment runs it
            "aa_arm": None,
            "design": "fresh",
            "sizing": None,
        }
    )
    if reference != REFERENCE_ARM:
        defn["reference"] = reference
    for key, value in (("cap", cap), ("draft", draft), ("retries", retries), ("request_timeout_s", request_timeout)):
        if value is not None:
            defn[key] = value
    defn = validate(defn, "campaign.schema.yaml", "refspec qualify")
    defn.pop("presets", None)
    return defn


def definition_text(defn: dict) -> str:
    return (
        "# refspec qualify: a confirmation campaign (config/campaigns/confirmation.yaml) with the values\n"
        "# given to refspec qualify. The same run: refspec campaign confirmation --definition THIS_FILE\n"
        "#   --out <the folder holding campaigns/> [--resume]\n" + yaml.safe_dump(defn, sort_keys=True)
    )


@dataclass
class QualifyResult:
    out_dir: Path  # the campaign folder (DIR/campaigns/confirmation)
    root: Path  # DIR: the results folder given as --out
    session: str
    records: list[dict]  # journal request records (every attempt of every run of the campaign)
    requests: list[dict]
    endpoints: list[dict]
    qualification: list[dict]
    summary: dict
    complete: bool
    campaign: Any = None  # the prepared campaign (PreparedCampaign: definition, arms, family, draft, plan)


def results_folder(out: str | Path | None, resume: bool) -> Path:
    """``out``, or a new ``results/qualify/<UTC time>`` (a resumed run names its folder)."""
    if out is None:
        if resume:
            raise UsageError("--resume continues the run in --out: name it")
        out = Path("results") / "qualify" / _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(out)


def run_qualify(
    cfg: Config,
    *,
    panel: str,
    arms: str | list[str] = "R,M0,M3,C3",
    repeats: int = 1,
    family: str | None = None,
    cap: int | None = None,
    draft: str | None = None,
    out: str | Path,
    resume: bool = False,
    threads: int | None = None,
    retries: int | None = None,
    request_timeout: float | None = None,
    progress: bool = True,
    reference: str = REFERENCE_ARM,
) -> QualifyResult:
    """Run (or resume) the qualification as a confirmation campaign in ``out`` (:func:`results_folder`)
    under the loaded workflow config ``cfg``; write ``summary.json``."""
    root = Path(out).resolve()
    defn = qualify_definition(
        panel=panel,
        arms=arms,
        repeats=repeats,
        family=family or cfg.family,
        cap=cap,
        draft=draft,
        retries=retries,
        request_timeout=request_timeout,
        reference=reference,
    )
    text = definition_text(defn)
    ctx, crun, computed = prepare(
        PRESET_CAMPAIGN, cfg, definition=defn, out=root, threads=threads, resume=resume, progress=progress
    )
    dfile = ctx.out / DEFINITION_NAME
    if (ctx.out / PLAN_NAME).is_file():
        if not dfile.is_file():
            raise UsageError(
                f"{ctx.out} holds a confirmation campaign not started by refspec qualify; choose another --out"
            )
        if read_yaml(dfile) != ctx.defn:
            raise UsageError(
                f"{dfile} holds another qualification (family, panel, arms, repeats, cap, draft, "
                "retries or request timeout differ); refusing to mix runs: choose another --out"
            )
    elif not dfile.is_file() or dfile.read_text(encoding="utf-8") != text:
        atomic_write_text(dfile, text, mode=0o644)

    result = execute(ctx, crun, computed)
    tables = result["tables"]
    records = crun.journal_records()
    summary = build_summary(ctx, tables, records, panel_spec=panel)
    summary["plan_sha256"] = sha256_file(ctx.out / PLAN_NAME)
    atomic_write_text(
        ctx.out / SUMMARY_NAME, json.dumps(summary, indent=1, sort_keys=True, allow_nan=False) + "\n", mode=0o644
    )
    return QualifyResult(
        ctx.out,
        root,
        summary["session"],
        records,
        tables["requests"],
        tables["endpoints"],
        tables["qualification"],
        summary,
        summary["complete"],
        ctx,
    )


# --------------------------------------------------------------------------- results


def build_summary(ctx, tables: dict, records: list[dict], *, panel_spec: str) -> dict:
    """``summary.json`` from the campaign's tables and journal records."""
    arms = list(ctx.arms.values())
    reference = reference_of(ctx.defn)
    tasks = ctx.task_ids("confirm")
    requests = tables["requests"]
    qual = tables["qualification"]
    ok = [r for r in records if r["row"]["status"] == "ok"]
    arms_out = _arm_entries(arms, reference, tasks, qual, ok)
    vacuous = [entry["arm"] for entry in arms_out if entry.get("vacuous")]
    # vacuity (refspec.core.vacuity): did any unrepaired arm leave the reference on some task?
    ex = panel_exposure(qual, requests).get((ctx.name, ctx.family))
    for entry in arms_out:
        entry["unrepaired"] = is_unrepaired(entry["ub"], entry["mask"])
    arm_pos = {a.name: i for i, a in enumerate(arms)}
    # every planned (arm, task, repeat) of the frozen schedule must have a completed attempt
    planned = {(b.arm, q.task_id, q.repeat) for s in ctx.sessions for b in s.blocks for q in b.requests}
    have = {(r["row"]["arm"], r["row"]["task_id"], r["row"]["repeat"]) for r in ok}
    incomplete = sorted(planned - have, key=lambda x: (arm_pos.get(x[0], len(arm_pos)), natural_key(x[1]), x[2]))
    d = ctx.defn
    return {
        "campaign": ctx.name,
        "family": ctx.family,
        "session": ", ".join(s.id for s in ctx.sessions),
        "cap": d["cap"],
        "repeats": d["repeats"],
        "draft": ctx.draft,
        "threads": ctx.threads,
        "panel": {"spec": panel_spec, "sha256": ctx.panel_records["confirm"]["sha256"], "tasks": len(tasks)},
        "prompt_sha256": _prompt_digests(records),
        "reference": _reference_summary(reference, tasks, qual, planned),
        "arms": arms_out,
        "divergences": _divergences(qual, reference, arm_pos),
        "vacuous_arms": vacuous,
        "exposure": ex,
        "status_counts": _status_counts(requests),
        "failures": _failures(requests),
        "incomplete": [list(x) for x in incomplete],
        "complete": not incomplete,
    }


def _arm_entries(arms: list, reference: str, tasks: list[str], qual: list[dict], ok: list[dict]) -> list[dict]:
    """Per arm: its counts, acceptance and median times; for an arm other than the reference, its
    non-vacuity evidence (:func:`refspec.campaigns.evidence.nonvacuity`) and whether it is vacuous."""
    by_arm_task = {(q["arm"], q["task_id"]): q for q in qual}
    counts = {c["arm"]: c for c in qualification_counts(qual)}
    arms_out = []
    for a in arms:
        mine = [r for r in ok if r["row"]["arm"] == a.name]
        qualified_tasks = [t for t in tasks if by_arm_task.get((a.name, t), {}).get("qualified")]
        times = [r["row"]["t_ns"] for r in mine]
        engine = [r["engine_ns"] for r in mine if r.get("engine_ns")]
        prop = sum(r["row"]["proposals"] or 0 for r in mine)
        acc = sum(r["row"]["accepted"] or 0 for r in mine)
        c = counts.get(a.name, {})
        entry = {
            "arm": a.name,
            "mode": a.mode,
            "layout": a.layout,
            "ub": a.ub,
            "mask": a.mask,
            "k": a.k if a.speculative else 0,
            "matching": c.get("matching", 0),
            "required": c.get("required", 0),
            "tasks": len(tasks),
            "tasks_qualified": len(qualified_tasks),
            "completed": len(mine),
            "acceptance": (acc / prop) if (a.speculative and prop) else None,
            "proposals": prop if a.speculative else None,
            "accepted": acc if a.speculative else None,
            "median_t_ns": int(statistics.median(times)) if times else None,
            "median_engine_ns": int(statistics.median(engine)) if engine else None,
        }
        if a.name != reference:
            ev = nonvacuity(a, [r for r in mine if r["row"]["task_id"] in qualified_tasks])
            ev["all_requests"] = nonvacuity(a, mine)
            entry["nonvacuity"] = ev
            entry["vacuous"] = (ev["nonvacuous"] is False) if qualified_tasks else None
        arms_out.append(entry)
    return arms_out


def _divergences(qual: list[dict], reference: str, arm_pos: dict[str, int]) -> list[dict]:
    """The failed qualifications of the arms other than the reference, in arm then task order."""
    return [
        {
            k: q[k]
            for k in (
                "arm",
                "task_id",
                "first_diff_index",
                "ref_token",
                "arm_token",
                "ref_margin",
                "arm_margin",
                "divergence",
                "n_matching",
                "n_required",
                "reason",
            )
        }
        for q in sorted(qual, key=lambda q: (arm_pos.get(q["arm"], len(arm_pos)), natural_key(q["task_id"])))
        if q["arm"] != reference and not q["qualified"]
    ]


def _reference_summary(reference: str, tasks: list[str], qual: list[dict], planned: set[tuple]) -> dict:
    """The reference's runs per task and its stable, unstable and missing tasks."""
    ref_q = {q["task_id"]: q for q in qual if q["arm"] == reference}
    return {
        "arm": reference,
        "runs_per_task": len({k[2] for k in planned if k[0] == reference}),
        "stable_tasks": sum(1 for q in ref_q.values() if q["ref_stable"]),
        "unstable_tasks": sorted({t for t, q in ref_q.items() if not q["ref_stable"]}, key=natural_key),
        "missing_tasks": sorted(set(tasks) - set(ref_q), key=natural_key),
    }


def _status_counts(requests: list[dict]) -> dict[str, int]:
    status: dict[str, int] = {}
    for r in requests:
        status[r["status"]] = status.get(r["status"], 0) + 1
    return status


def _failures(requests: list[dict]) -> list[dict]:
    return [
        {
            "arm": r["arm"],
            "task_id": r["task_id"],
            "repeat": r["repeat"],
            "attempt": r["attempt"],
            "worker": r["worker"],
            "reason": r["reason"],
        }
        for r in requests
        if r["status"] == "failed"
    ]


def _prompt_digests(records: list[dict]) -> dict[str, str]:
    """Each task's prompt sha256 (its first recorded one, warmups excluded), in task order."""
    prompts: dict[str, str] = {}
    for r in records:
        if r["row"]["status"] != "excluded_warmup" and r.get("prompt_sha256"):
            prompts.setdefault(r["row"]["task_id"], r["prompt_sha256"])
    return {t: prompts[t] for t in sorted(prompts, key=natural_key)}


def divergence_verdict(divergences: list[dict]) -> str:
    """What an arm's verdict line says of its first divergences' classes (refspec.core.divergence): each
    decisive one flagged as a likely defect, not numerics; near ties named as such; empty without any."""
    n_dec = sum(1 for d in divergences if d.get("divergence") == DECISIVE)
    n_tie = sum(1 for d in divergences if d.get("divergence") == NEAR_TIE)
    parts = []
    if n_dec:
        parts.append(f"{n_dec} decisive divergence{'s' if n_dec > 1 else ''}: likely defect, not numerics")
    if n_tie:
        parts.append(f"{n_tie} near tie{'s' if n_tie > 1 else ''}")
    return ("  " + "; ".join(parts)) if parts else ""


def format_summary(s: dict) -> str:
    lines = [
        f"refspec qualify: {s['family']}, panel {s['panel'].get('spec')} ({s['panel']['tasks']} tasks), "
        f"cap {s['cap']}, repeats {s['repeats']}, draft {s['draft'] or '-'}, session {s['session']}"
    ]
    ref = s["reference"]
    lines.append(
        f"reference {ref.get('arm', REFERENCE_ARM)}: {ref['runs_per_task']} serial runs per task; stable on {ref['stable_tasks']} of "
        f"{s['panel']['tasks']} tasks"
        + (f"; UNSTABLE (not used): {' '.join(ref['unstable_tasks'])}" if ref["unstable_tasks"] else "")
    )
    exposure = s.get("exposure")
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
                    detail = (
                        f"rows/verify caller {rpc:.2f}" if rpc is not None else "rows/verify caller -"
                    ) + f", partial accepts {ev['partial_accepts']}, rollbacks {ev['rollbacks']}, {lay} {ev[lay]}"
                else:
                    rpm = ev["rows_per_micrograph"]
                    detail = (
                        f"rows/micrograph {rpm:.2f}" if rpm is not None else "rows/micrograph -"
                    ) + f", {lay} {ev[lay]}"
                nv = ("VACUOUS: " if a["vacuous"] else "ok: ") + detail
        verdict = ""
        if exposure and exposure["vacuous"] and a["arm"] != ref.get("arm", REFERENCE_ARM) and not a.get("unrepaired"):
            verdict = "  " + vacuous_text(exposure["screened"])
        verdict += divergence_verdict([d for d in s["divergences"] if d["arm"] == a["arm"]])
        lines.append(
            f"{a['arm']:8s} {a['mode']:6s} {a['layout']:6s} {a['matching']:>4d}/{a['required']:<4d} "
            f"{a['tasks_qualified']:>3d}/{a['tasks']:<3d} {acc:>7s} {med:>10s}  {nv}{verdict}"
        )
    if s["divergences"]:
        r = ref.get("arm", REFERENCE_ARM)
        lines.append(
            f"first divergences from {r} (arm, task, index, {r} token, arm token, {r} top-2 margin, the arm's own "
            f"margin, class: near tie below {r} margin {NEAR_TIE_MARGIN:g}, else decisive):"
        )
        for d in s["divergences"]:
            if d["first_diff_index"] is None:
                lines.append(f"  {d['arm']:8s} {d['task_id']:14s} {d['reason']}")
                continue
            m = f"{d['ref_margin']:.4f}" if d["ref_margin"] is not None else "-"
            am = f"{d['arm_margin']:.4f}" if d.get("arm_margin") is not None else "-"
            cls = DIVERGENCE_TEXT.get(d.get("divergence") or "", "class -")
            lines.append(
                f"  {d['arm']:8s} {d['task_id']:14s} index {d['first_diff_index']:>4d}  {r} {d['ref_token']}  "
                f"arm {d['arm_token']}  margin {m}  arm margin {am}  {cls}  ({d['n_matching']}/{d['n_required']} match)"
            )
    if exposure is not None and exposure["vacuous"]:
        lines.append(
            f"{vacuous_text(exposure['screened'])}: the unrepaired arms ({', '.join(exposure['unrepaired'])}) "
            f"never diverge from {ref.get('arm', REFERENCE_ARM)}; the other arms' matches show nothing"
        )
    if s["vacuous_arms"]:
        lines.append(f"VACUOUS qualification (no evidence of the exercised path): {', '.join(s['vacuous_arms'])}")
    if s["failures"]:
        lines.append(f"failed attempts ({len(s['failures'])}):")
        for f in s["failures"]:
            lines.append(f"  {f['arm']} {f['task_id']} repeat {f['repeat']} attempt {f['attempt']}: {f['reason']}")
    if not s["complete"]:
        lines.append(f"INCOMPLETE: {len(s['incomplete'])} planned requests have no completed attempt")
    return "\n".join(lines)


# --------------------------------------------------------------------------- verdicts


def verdicts(summary: dict, piece=None, *, controls: bool = True) -> list[dict]:
    """One verdict per arm other than the reference: matches / required, the earliest first divergence
    (token index and the two tokens), acceptance and the median request time over the reference's;
    ``controls=False`` leaves out the unrepaired controls (:func:`refspec.core.vacuity.is_unrepaired`),
    whose divergence is what makes the qualification non-vacuous, not a failure."""
    ref_name = summary["reference"]["arm"]
    arms = {a["arm"]: a for a in summary["arms"]}
    ref = arms.get(ref_name, {})
    out = []
    for a in summary["arms"]:
        if a["arm"] == ref_name or (not controls and is_unrepaired(a["ub"], a["mask"])):
            continue
        divs = [d for d in summary["divergences"] if d["arm"] == a["arm"]]
        first = None
        located = [d for d in divs if d["first_diff_index"] is not None]
        if located:
            d = min(located, key=lambda d: d["first_diff_index"])
            first = {k: d[k] for k in ("task_id", "first_diff_index", "ref_token", "arm_token")}
            if piece is not None:
                first["ref_piece"] = piece(d["ref_token"])
                first["arm_piece"] = piece(d["arm_token"])
        elif divs:
            first = {"task_id": divs[0]["task_id"], "first_diff_index": None, "reason": divs[0]["reason"]}
        ratio = None
        if a["median_t_ns"] and ref.get("median_t_ns"):
            ratio = a["median_t_ns"] / ref["median_t_ns"]
        ok = a["required"] > 0 and a["matching"] == a["required"] and a["tasks_qualified"] == a["tasks"]
        out.append(
            {
                "arm": a["arm"],
                "reference": ref_name,
                "reproduces": ok,
                "matching": a["matching"],
                "required": a["required"],
                "tasks_diverging": len({d["task_id"] for d in divs}),
                "tasks": a["tasks"],
                "first_divergence": first,
                "acceptance": a["acceptance"],
                "median_ms": None if a["median_t_ns"] is None else a["median_t_ns"] / 1e6,
                "median_ratio": ratio,
            }
        )
    return out


def _tok(t, p) -> str:
    return "end" if t is None else f"{t}" + (f" {p!r}" if p is not None else "")


def verdict_line(v: dict) -> str:
    word = "REPRODUCES" if v["reproduces"] else "DIVERGES"
    parts = [f"{v['arm']:8s} {word:10s} {v['matching']}/{v['required']} match"]
    f = v["first_divergence"]
    if f is not None and f.get("first_diff_index") is not None:
        parts.append(
            f"first divergence {f['task_id']} token {f['first_diff_index']}: "
            f"{v['reference']} {_tok(f['ref_token'], f.get('ref_piece'))} vs {_tok(f['arm_token'], f.get('arm_piece'))}"
            f" ({v['tasks_diverging']}/{v['tasks']} tasks diverge)"
        )
    elif f is not None:
        parts.append(f"{f['task_id']}: {f['reason']}")
    parts.append("acceptance " + ("-" if v["acceptance"] is None else f"{v['acceptance']:.3f}"))
    if v["median_ratio"] is not None:
        parts.append(
            f"median request time {v['median_ratio']:.2f}x {v['reference']}"
            + ("" if v["reproduces"] else " (not qualified: diagnostic)")
        )
    return "; ".join(parts)
