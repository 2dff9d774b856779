"""``refspec campaign NAME``: the timing and qualification campaigns of the paper.

    refspec campaign NAME [--preset default|paper] [--config F] [--definition F]
                          [--out DIR] [--threads N] [--family F] [--manifest M]
                          [--resume] [--analyze]

NAME is one of ``phase_mask``, ``confirmation``, ``implementation``,
``replication``, ``width``, ``prediction`` (hyphens are accepted). The campaign
is defined in ``config/campaigns/NAME.yaml`` (``--definition`` points at another
file), validated against ``workflow/schemas/campaign.schema.yaml``; its top
level is the embedded-default size (minutes on a 2-core CPU), ``--preset
paper`` applies the paper's sizes. ``--config`` is the workflow config (family,
threads, results folder, models_dir).

Everything goes into ``DIR/campaigns/NAME/`` (DIR: ``--out``, default the
config's ``results``): ``plan.json`` (frozen before the first session,
:mod:`refspec.provenance.plan`), ``ledger.jsonl`` (every attempt, hash-chained),
``journal.jsonl`` (one line per attempt with its endpoint), ``arms.yaml`` (the
arms the workers load), ``panel-*.jsonl``, ``workers/`` (ready files and logs),
the result tables (Parquet + CSV, ``anc/tables.md``), ``timed_audit.json`` and
``summary.txt`` (the paper-shaped summary, also printed). A killed campaign is
continued with ``--resume`` (only requests without a final attempt run);
``--analyze`` only re-checks the plan and rewrites the tables. The campaigns
and their outputs are documented in ``anc/campaigns.md``.

Exit status: 0 when every planned request has a final attempt (completed,
whether or not the arms qualify, or failed as often as the retry rule allows;
failures are listed in the summary), 5 when some are left to run (resume),
1 when the plan differs from the frozen one, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.arms import REFERENCE_ARM
from ..core.campaign_names import CAMPAIGNS
from ..core.errors import EXIT_OK, EXIT_RUNTIME, ConfigError, IntegrityError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file, sha256_json
from ..core.paths import REPO_ROOT
from ..provenance import plan as planmod
from ..provenance.plan import PLAN_FORMAT
from .evidence import COMPARED_COUNTERS, arm_evidence, audit_text, timed_audit

# The analysis code as it was when this process imported it (stats.py, plan.py, campaigns/*.py).
ANALYSIS_CODE = planmod.analysis_code_digest()


def module_for(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def normalize_name(name: str) -> str:
    n = name.strip().lower().replace("-", "_")
    aliases = {"phase_masks": "phase_mask", "phasemask": "phase_mask", "e2": "replication", "predict": "prediction"}
    n = aliases.get(n, n)
    if n not in CAMPAIGNS:
        raise UsageError(f"unknown campaign {name!r} (one of {', '.join(CAMPAIGNS)})")
    return n


# --------------------------------------------------------------------------- definitions


def deep_merge(base: Any, over: Any) -> Any:
    """Mappings merge key by key; anything else in ``over`` replaces ``base``."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = deep_merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def definition_path(name: str) -> Path:
    from ..core.paths import config_dir

    return config_dir() / "campaigns" / f"{name}.yaml"


def load_definition(name: str, preset: str = "default", path: str | Path | None = None) -> tuple[dict, Path]:
    """The validated definition of campaign ``name`` with ``preset`` applied (defaults filled)."""
    from ..core.config import read_yaml, validate

    p = Path(path) if path else definition_path(name)
    raw = read_yaml(p)
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: a campaign definition is a mapping")
    validate(copy.deepcopy(raw), "campaign.schema.yaml", str(p))
    if raw.get("campaign") != name:
        raise ConfigError(f"{p} defines campaign {raw.get('campaign')!r}, not {name!r}")
    presets = raw.pop("presets", {}) or {}
    if preset not in ("default", None, ""):
        if preset not in presets:
            raise ConfigError(f"{p}: no preset {preset!r} (has: default{''.join(', ' + k for k in presets)})")
        over = dict(presets[preset])
        if "campaign" in over and over["campaign"] != name:
            raise ConfigError(f"{p}: preset {preset!r} changes the campaign name")
        raw = deep_merge(raw, over)
    defn = validate(raw, "campaign.schema.yaml", f"{p} (preset {preset or 'default'})")
    defn.pop("presets", None)
    return defn, p


# --------------------------------------------------------------------------- context


@dataclass
class Context:
    """What a campaign module gets: the definition, its panels and arms, the run."""

    name: str
    preset: str
    defn: dict
    panels: dict[str, list]  # role -> [Task]
    panel_records: dict[str, dict]
    arms: dict  # name -> Arm (as the workers run them)
    family: str
    draft: str | None
    threads: int
    out: Path
    results: Path | None = None  # the run's results folder (its ledger.jsonl pins the campaign's)
    run: Any = None  # scheduler.CampaignRun
    materialize: Callable[[], None] | None = None
    sessions: list = field(default_factory=list)
    plan: dict = field(default_factory=dict)

    def task_ids(self, role: str = "panel") -> list[str]:
        return [t.task_id for t in self.panels[role]]


def write_arms_file(arms: dict, path: Path) -> None:
    """The campaign's arms as an arms file (validated by reading it back)."""
    import yaml

    from ..core.arms import load_arms

    doc = {"arms": {n: {k: v for k, v in a.record().items() if k != "name" and v is not None} for n, a in arms.items()}}
    text = "# The arms of this campaign, exactly as its workers run them (written by refspec campaign).\n"
    text += yaml.safe_dump(doc, sort_keys=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text, mode=0o644)
    back = load_arms(path)
    for n, a in arms.items():
        if back[n] != a:
            raise ConfigError(f"{path}: arm {n} does not read back as written")


def apply_overrides(arms: list, defn: dict, threads: int, cap: int, config: dict | None = None) -> dict:
    """The campaign's arms as its workers run them: threads, cap, overrides, and the run's GPU setting."""
    over = dict(defn.get("arm_overrides") or {})
    out = {}
    for a in arms:
        if a.name in out:
            raise ConfigError(f"arm {a.name} appears twice in the campaign")
        out[a.name] = a.with_(threads=int(threads), cap=int(cap), **over).placed(config)
    return out


# --------------------------------------------------------------------------- text helpers


def fmt_ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.6f}"


def table_text(header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in header]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command


def _lib_dir(config: dict | None = None) -> Path:
    """The libraries of the configured build (its backend: a CUDA host times the CUDA build)."""
    env = os.environ.get("LLAMA_CPP_LIB_PATH")
    if env:
        return Path(env)
    from ..native import build as native

    return Path(native.current(config).lib_dir)


def prepare(
    name: str,
    *,
    preset: str = "default",
    definition: str | Path | None = None,
    config: str | Path | None = None,
    out: str | Path | None = None,
    threads: int | None = None,
    family: str | None = None,
    manifest: str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
):
    """Resolve everything a campaign needs; return (Context, CampaignRun, computed plan)."""
    from ..core.arms import load_arms
    from ..core.config import load_config
    from ..core.panels import resolve_panel, write_panel
    from ..native.models import config_families_file, ensure_family
    from .records import RunSettings
    from .runner import CampaignRun
    from .scheduler import schedule_record

    name = normalize_name(name)
    cfg = load_config(config)
    defn, dpath = load_definition(name, preset or "default", definition)
    mod = module_for(name)
    from ..core.config import campaign_dir, study_families

    out_root = Path(out or cfg.get("results", "results/default")).resolve()
    fam0 = family or defn.get("family") or cfg["family"]
    if len(study_families(cfg)) > 1 and fam0 not in study_families(cfg):
        raise UsageError(f"family {fam0} is not one of the study's families {study_families(cfg)}")
    cdir = campaign_dir(out_root, name, fam0, cfg)
    frozen: dict = {}
    if resume and (cdir / planmod.PLAN_NAME).is_file():  # a resumed or re-analysed campaign keeps its settings
        try:
            frozen = json.loads((cdir / planmod.PLAN_NAME).read_text(encoding="utf-8"))
        except ValueError as e:
            raise IntegrityError(
                f"{cdir / planmod.PLAN_NAME}: not a readable plan ({e}); the campaign cannot be resumed from it"
            ) from None
    fam = family or defn.get("family") or frozen.get("family") or cfg["family"]
    nthreads = int(threads or frozen.get("threads") or cfg.get("threads", 2))
    if nthreads < 1:
        raise UsageError("--threads must be at least 1")
    cdir.mkdir(parents=True, exist_ok=True)

    if "panel" not in defn and name != "prediction":  # the run's panel (config.yaml: panel) unless the design names one
        defn["panel"] = dict(cfg["panel"])
    panels, precs = {}, {}
    for role, spec in mod.panels(defn).items():
        panels[role], precs[role] = resolve_panel(spec, dpath.parent)
    ids = [t.task_id for ts in panels.values() for t in ts]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"campaign {name}: a task appears in more than one panel")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:  # the panel files' digests; written for real once the plan checks
        for role, ts in panels.items():
            precs[role]["file_sha256"] = write_panel(ts, Path(tmp) / f"panel-{role}.jsonl")

    arms_src = Path(cfg.get("arms_file") or "config/arms.yaml")
    if not arms_src.is_absolute():
        arms_src = REPO_ROOT / arms_src
    catalog = load_arms(arms_src)
    arm_list = mod.arms(defn, catalog)
    if not arm_list or arm_list[0].name != REFERENCE_ARM:
        raise ConfigError(f"campaign {name}: the first arm must be the reference R")
    cap = max(defn.get("caps") or [defn["cap"]])
    arms = apply_overrides(arm_list, defn, nthreads, cap, cfg)
    arms_file = cdir / "arms.yaml"

    files = ensure_family(fam, models_dir=cfg.get("models_dir"), families_file=config_families_file(cfg))
    draft = None
    if any(a.speculative for a in arms.values()):
        draft = defn.get("draft") or files.default_draft
        files.draft(draft)
    models = {"target": files.target.sha256}
    if draft:
        models[f"draft:{draft}"] = files.draft(draft).sha256

    ctx = Context(
        name=name,
        preset=preset or "default",
        defn=defn,
        panels=panels,
        panel_records=precs,
        arms=arms,
        family=fam,
        draft=draft,
        threads=nthreads,
        out=cdir,
        results=out_root,
    )
    sessions = mod.schedule(ctx)
    ctx.sessions = sessions
    man = Path(manifest) if manifest else None
    if man is not None and not man.is_file():
        raise UsageError(f"manifest {man} not found")

    def materialize() -> None:
        """Write the panel files, the arms file and the manifest copy (after the plan checked)."""
        for role, ts in panels.items():
            if write_panel(ts, cdir / f"panel-{role}.jsonl") != precs[role]["file_sha256"]:
                raise ConfigError(f"panel {role}: the written file differs from the planned one")
        write_arms_file(arms, arms_file)
        if man is not None:
            dst = cdir / "manifest.json"
            if not dst.exists():
                atomic_write_text(dst, man.read_text(encoding="utf-8"), mode=0o644)

    ctx.materialize = materialize
    boot = dict(defn["bootstrap"])
    computed = {
        "format": PLAN_FORMAT,
        "campaign": name,
        "preset": preset or "default",
        "definition": defn,
        "family": fam,
        "draft": draft,
        "models": models,
        "panels": precs,
        "arms": {n: a.record() for n, a in arms.items()},
        "threads": nthreads,
        "seed": int(defn["seed"]),
        "threshold": float(boot["threshold"]),
        "bootstrap": {"seed": int(boot["seed"]), "draws": int(boot["draws"]), "threshold": float(boot["threshold"])},
        "sessions": len(sessions),
        "gap_s": float(defn.get("gap_s", 0)),
        "schedule": schedule_record(sessions),
        "schedule_sha256": sha256_json(schedule_record(sessions)),
        "analysis_code": ANALYSIS_CODE,
        "manifest_sha256": sha256_file(man) if man is not None else None,
        "executor": {
            "driver": "refspec.engine.driver",
            "worker": "refspec.engine.worker",
            "fresh_worker_per_block": True,
        },
    }
    settings = RunSettings(
        campaign=name,
        out_dir=cdir,
        family=fam,
        files=files,
        draft=draft,
        arms=arms,
        arms_file=arms_file,
        lib_dir=_lib_dir(cfg),
        tasks={t.task_id: t for ts in panels.values() for t in ts},
        definition=defn,
        manifest=man,
        progress=progress,
        resume=resume,
    )
    run = CampaignRun(settings)
    ctx.run = run
    return ctx, run, computed


def execute(ctx: Context, run, computed: dict, *, analyze_only: bool = False) -> dict:
    """Freeze or check the plan, run what is left, analyse; return the analysis."""
    mod = module_for(ctx.name)
    ctx.plan = run.freeze_or_check(computed, analyze_only=analyze_only)
    if ctx.materialize is not None and not analyze_only:
        ctx.materialize()
    complete = True
    if not analyze_only:
        remaining = run.remaining(ctx.sessions)
        run.begin_run(remaining)

        def _term(signum, _frame):
            raise KeyboardInterrupt(f"signal {signum}")

        old = signal.signal(signal.SIGTERM, _term)
        run.open_progress(run.remaining(ctx.sessions))
        try:
            getattr(mod, "execute", default_execute)(ctx)
        except BaseException as e:
            run.close_progress()
            what = "interrupted" if isinstance(e, KeyboardInterrupt) else f"stopped by {type(e).__name__}: {e}"
            run.note(
                "interruption" if isinstance(e, KeyboardInterrupt) else "failure",
                f"campaign run {run.run_no} {what}; resume with --resume",
                run=run.run_no,
            )
            run.end_run(f"ended early ({what})")
            link_run_ledger(ctx, "ended early", failing=True)
            raise
        finally:
            signal.signal(signal.SIGTERM, old)
            run.close_progress()
        left = run.remaining(ctx.sessions)
        complete = left == 0
        run.end_run("all sessions run" if complete else f"{left} planned request(s) without a final attempt")
        link_run_ledger(ctx, "complete" if complete else "incomplete")
        ctx.plan = planmod.check(run.out, run.ledger, computed)
    result = analyze(ctx)
    result["complete"] = complete if not analyze_only else run.remaining(ctx.sessions) == 0
    return result


def link_run_ledger(ctx: Context, outcome: str, *, failing: bool = False) -> None:
    """One line in the run's ledger (``<results>/ledger.jsonl``) pinning the campaign ledger's head.

    A failure to append is recorded in the campaign's own ledger and raised, unless the
    campaign is already failing (``failing``): then its own error is the one that propagates."""
    from ..provenance.ledger import Ledger

    run = ctx.run
    count, head = run.ledger.head()
    try:
        root = ctx.results or ctx.out.parent.parent
        Ledger(root / "ledger.jsonl").append(
            {
                "kind": "campaign_run",
                "reason": f"campaign {ctx.name} run {run.run_no}: {outcome}",
                "campaign": ctx.name,
                "family": ctx.family,
                "outcome": outcome,
                "run": run.run_no,
                "ledger": (ctx.out / "ledger.jsonl").relative_to(root).as_posix(),
                "ledger_records": count,
                "ledger_head_sha256": head,
                "plan_sha256": sha256_file(run.out / planmod.PLAN_NAME),
            }
        )
    except Exception as e:
        run.note("failure", f"could not append to the run ledger: {type(e).__name__}: {e}", run=run.run_no)
        print(f"refspec campaign {ctx.name}: could not append to the run ledger: {e}", file=sys.stderr)
        if not failing:
            raise


def default_execute(ctx: Context) -> None:
    prev = None
    for sp in ctx.sessions:
        ctx.run.run_session(sp, prev)
        prev = sp.id


def analyze(ctx: Context) -> dict:
    """Write every table, timed_audit.json and summary.txt; return them."""
    from ..core.tables import write_table

    run = ctx.run
    mod = module_for(ctx.name)
    base = run.base_tables()
    res = mod.analyze(ctx, base)
    tables = {k: base[k] for k in ("requests", "endpoints", "qualification", "sessions")}
    tables.update(res.get("tables", {}))
    refused = [t for t in tables if not t.startswith("_") and not table_accepts_campaign(t, ctx.name)]
    if refused:
        raise IntegrityError(
            f"campaign {ctx.name}: the contract of table(s) {', '.join(refused)} does not list "
            f"this campaign in its campaign column (anc/tables.md); nothing was written"
        )
    written = {}
    for tname, rows in tables.items():
        if not tname.startswith("_"):
            written[tname] = sha256_file(write_table(rows, tname, run.out)["parquet"])
    audit = timed_audit(base, res.get("counter_pairs"), res.get("counter_keys", COMPARED_COUNTERS))
    atomic_write_text(
        run.out / "timed_audit.json", json.dumps(audit, indent=1, sort_keys=True, allow_nan=False) + "\n", mode=0o644
    )
    extra = res.get("json") or {}
    for fname, doc in extra.items():
        atomic_write_text(
            run.out / fname, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n", mode=0o644
        )
    header = (
        f"campaign {ctx.name} (preset {ctx.preset}), family {ctx.family}, {ctx.threads} thread(s); "
        f"plan sha256 {sha256_file(run.out / planmod.PLAN_NAME)[:16]}"
    )
    parts = [header, res["text"], arm_evidence(ctx.arms, base), audit_text(audit)]
    text = "\n\n".join(parts) + "\n"
    atomic_write_text(run.out / "summary.txt", text, mode=0o644)
    run.note(
        "analysis",
        "tables written from the journal under the frozen plan",
        tables=written,
        mismatches=len(audit["mismatches"]),
        requests_compared=audit["requests_compared"],
    )
    return {"tables": tables, "audit": audit, "text": text, "extra": res}


def table_accepts_campaign(table: str, campaign: str) -> bool:
    from ..core.tables import spec

    sp = spec(table)
    if "campaign" not in sp.names:
        return True
    enum = sp.column("campaign").enum
    return enum is None or campaign in enum


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help=f"campaign: {', '.join(CAMPAIGNS)}")
    p.add_argument("--preset", default="default", help="default (embedded size) or paper (the paper's sizes)")
    p.add_argument("--config", help="workflow config (default config/config.yaml)")
    p.add_argument("--definition", help="campaign definition file (default config/campaigns/NAME.yaml)")
    p.add_argument(
        "--out", help="results folder (default: the config's results); the campaign writes DIR/campaigns/NAME"
    )
    p.add_argument("--threads", type=int, help="threads per worker (default: the config's threads)")
    p.add_argument("--family", help="model family (default: the definition's, else the config's)")
    p.add_argument("--manifest", help="source manifest: freeze-checked before every session")
    p.add_argument("--resume", action="store_true", help="continue a campaign from its ledger and journal")
    p.add_argument("--analyze", action="store_true", help="only check the plan and rewrite the tables")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    ctx, crun, computed = prepare(
        args.name,
        preset=args.preset,
        definition=args.definition,
        config=args.config,
        out=args.out,
        threads=args.threads,
        family=args.family,
        manifest=args.manifest,
        resume=args.resume or args.analyze,
        progress=not args.no_progress,
    )
    result = execute(ctx, crun, computed, analyze_only=args.analyze)
    sys.stdout.write(result["text"])
    sys.stdout.flush()
    if not result["complete"]:
        print(
            f"refspec campaign {ctx.name}: some planned requests are left to run; continue with --resume "
            "(see timed_audit.json and the ledger)",
            file=sys.stderr,
        )
        return EXIT_RUNTIME
    return EXIT_OK
