"""A campaign made ready to run: its :class:`PreparedCampaign` and :func:`prepare`, which resolves the
definition, panels, arms, models and run settings and computes the plan to freeze."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from ..core.arms import check_reference, is_twin, load_arms, reference_of, twin_name
from ..core.config import Config, campaign_dir, campaign_key, plain, study_families
from ..core.errors import ConfigError, IntegrityError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file, sha256_json
from ..core.panels import resolve_panel, write_panel
from ..core.paths import REPO_ROOT
from ..core.stats import DEFAULT_AA_RULE
from ..experiments.divergence_screen import SCREEN_RECORD, read_screen
from ..native import build as native
from ..native.models import config_families_file, ensure_family
from ..provenance import plan as planmod
from ..provenance.plan import PLAN_FORMAT
from .definitions import load_definition, module_for, normalize_name
from .pilot import PILOT_DIR
from .pilot import measure as pilot_measure
from .records import RunSettings
from .runner import CampaignRun
from .scheduler import schedule_record
from .sizing import resolve_size, with_goal

# The analysis code as it was when this process imported it (stats.py, plan.py, campaigns/*.py).
ANALYSIS_CODE = planmod.analysis_code_digest()


@dataclass
class PreparedCampaign:
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
    run: Any = None  # runner.CampaignRun
    materialize: Callable[[], None] | None = None
    sessions: list = field(default_factory=list)
    plan: dict = field(default_factory=dict)

    def task_ids(self, role: str = "panel") -> list[str]:
        return [t.task_id for t in self.panels[role]]


def write_arms_file(arms: dict, path: Path) -> None:
    """The campaign's arms as an arms file (validated by reading it back)."""
    doc = {"arms": {n: {k: v for k, v in a.record().items() if k != "name" and v is not None} for n, a in arms.items()}}
    text = "# The arms of this campaign, exactly as its workers run them (written by refspec campaign).\n"
    text += yaml.safe_dump(doc, sort_keys=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text, mode=0o644)
    back = load_arms(path)
    for n, a in arms.items():
        if back[n] != a:
            raise ConfigError(f"{path}: arm {n} does not read back as written")


def apply_overrides(arms: list, defn: dict, threads: int, cap: int, config: Config | None = None) -> dict:
    """The campaign's arms as its workers run them: threads, cap, overrides, and the run's GPU setting."""
    over = dict(defn.get("arm_overrides") or {})
    out = {}
    for a in arms:
        if a.name in out:
            raise ConfigError(f"arm {a.name} appears twice in the campaign")
        out[a.name] = a.with_(threads=int(threads), cap=int(cap), **over).placed(config)
    return out


# --------------------------------------------------------------------------- prepare, step by step


def _lib_dir(config: Config | None = None) -> Path:
    """The libraries of the configured build (its backend: a CUDA host times the CUDA build)."""
    env = os.environ.get("LLAMA_CPP_LIB_PATH")
    if env:
        return Path(env)
    return Path(native.current(config).lib_dir)


def _campaign_folder(
    name: str, cfg: Config, defn: dict, out: str | Path | None, family: str | None
) -> tuple[Path, Path]:
    """The run's results folder and the campaign's folder in it (refused for a family outside the study)."""
    out_root = Path(out or cfg.results).resolve()
    fam0 = family or defn.get("family") or cfg.family
    if len(study_families(cfg)) > 1 and fam0 not in study_families(cfg):
        raise UsageError(f"family {fam0} is not one of the study's families {study_families(cfg)}")
    return out_root, campaign_dir(out_root, name, fam0, cfg)


def _frozen_plan(cdir: Path, resume: bool) -> dict:
    """The frozen plan of a resumed or re-analysed campaign (it keeps its settings); else {}."""
    path = cdir / planmod.PLAN_NAME
    if not (resume and path.is_file()):
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise IntegrityError(f"{path}: not a readable plan ({e}); the campaign cannot be resumed from it") from e


def _screened(spec, screen_dir: Path):
    """A panel spec with ``source: screen`` as the exposed panel file the divergence screen froze
    in ``screen_dir``, and that screen's record (its digest goes into the plan); others as they are."""
    if not (isinstance(spec, dict) and spec.get("source") == "screen"):
        return spec, None
    rec = read_screen(screen_dir)
    return {"source": "file", "file": str(screen_dir / rec["exposed_panel"]["file"])}, rec


def _panels(name: str, mod: ModuleType, defn: dict, cfg: Config, base: Path, screen_dir: Path) -> tuple[dict, dict]:
    """role -> tasks and role -> panel record (with the panel file's digest, nothing written yet)."""
    if "panel" not in defn and name != "prediction":  # the run's panel (config.yaml: panel) unless the design names one
        defn["panel"] = cfg.panel.to_dict()
    panels, precs = {}, {}
    for role, spec in mod.panels(defn).items():
        spec, screened = _screened(spec, screen_dir)
        panels[role], precs[role] = resolve_panel(spec, base)
        if screened is not None:
            if defn.get("cap") is not None and int(defn["cap"]) != int(screened["cap"]):
                raise ConfigError(
                    f"campaign {name} runs at cap {defn['cap']} on the divergence screen's panel, screened at cap "
                    f"{screened['cap']}: the exposure it found lies within the screen's cap"
                )
            precs[role]["source"] = "screen"
            precs[role]["screen"] = {
                "record_sha256": sha256_file(screen_dir / SCREEN_RECORD),
                "exposed": screened["exposed"],
                "controls": screened["controls"],
                "cap": screened["cap"],
            }
    ids = [t.task_id for ts in panels.values() for t in ts]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"campaign {name}: a task appears in more than one panel")
    with tempfile.TemporaryDirectory() as tmp:  # the panel files' digests; written for real once the plan checks
        for role, ts in panels.items():
            precs[role]["file_sha256"] = write_panel(ts, Path(tmp) / f"panel-{role}.jsonl")
    return panels, precs


def _arms(name: str, mod: ModuleType, defn: dict, cfg: Config, threads: int) -> dict:
    """The campaign's arms from the configured arms file, the reference first, as the workers run them."""
    arms_src = Path(cfg.arms_file)
    if not arms_src.is_absolute():
        arms_src = REPO_ROOT / arms_src
    catalog = load_arms(arms_src)
    arm_list = mod.arms(defn, catalog)
    ref = reference_of(defn)
    if not arm_list or arm_list[0].name != ref:
        raise ConfigError(f"campaign {name}: the first arm must be the reference {ref}")
    check_reference(arm_list[0], f"campaign {name}")
    cap = max(defn.get("caps") or [defn["cap"]])
    return apply_overrides(arm_list + aa_twins(name, defn, arm_list), defn, threads, cap, cfg)


AA_CAMPAIGNS = ("confirmation", "implementation", "replication")


def aa_twins(name: str, defn: dict, arm_list: list) -> list:
    """The A/A control's twin (``aa_arm``): the same recipe under the name ``<arm>_aa``; [] without one."""
    reserved = [a.name for a in arm_list if is_twin(a.name)]
    if reserved:
        raise ConfigError(f"campaign {name}: arm name(s) {', '.join(reserved)} end in _aa, reserved for A/A twins")
    aa = defn.get("aa_arm")
    if not aa:
        return []
    if name not in AA_CAMPAIGNS:
        raise ConfigError(f"campaign {name}: aa_arm is for {', '.join(AA_CAMPAIGNS)} (anc/campaigns.md)")
    ref = reference_of(defn)
    found = [a for a in arm_list if a.name == aa]
    if not found or aa == ref:
        raise ConfigError(f"campaign {name}: aa_arm {aa!r} is not one of its arms other than {ref}")
    return [found[0].with_(name=twin_name(aa))]


def _models(fam: str, cfg: Config, defn: dict, arms: dict):
    """The family's files, the draft (when an arm speculates) and the models' digests."""
    files = ensure_family(fam, models_dir=cfg.models_dir, families_file=config_families_file(cfg))
    draft = None
    if any(a.speculative for a in arms.values()):
        draft = defn.get("draft") or files.default_draft
        files.draft(draft)
    models = {"target": files.target.sha256}
    if draft:
        models[f"draft:{draft}"] = files.draft(draft).sha256
    return files, draft, models


def _piloted(
    defn: dict, frozen: dict, cfg: Config, fam: str, arms: dict, panels: dict, files, draft, cdir: Path
) -> dict:
    """A sized paired definition with its pilot's costs (``sizing.pilot``): the frozen plan's on a
    resumed or re-analysed campaign (none where that plan was frozen without one), the archive's
    in a reproduction (the config's ``reproduces.pilots``: it runs the registered plan), else
    measured now (:func:`refspec.campaigns.pilot.measure`); other definitions unchanged."""
    sizing = defn.get("sizing")
    if not sizing or defn.get("design") != "paired" or not panels:
        return defn
    archived = ((cfg.reproduces.pilots if cfg.reproduces else None) or {}).get(campaign_key(cdir))
    if frozen:
        pilot = ((frozen.get("definition") or {}).get("sizing") or {}).get("pilot")
        if pilot is None:
            return defn
    elif archived is not None:
        pilot = plain(archived)
    else:
        pdir = cdir / PILOT_DIR
        pdir.mkdir(parents=True, exist_ok=True)
        write_arms_file(arms, pdir / "arms.yaml")
        pilot = pilot_measure(
            family=fam,
            arms=arms,
            tasks=max(panels.values(), key=len),
            cap=int(defn["cap"]),
            files=files,
            draft=draft,
            lib_dir=Path(_lib_dir(cfg)),
            arms_file=pdir / "arms.yaml",
            out=pdir,
            warmup_cap=int(defn.get("warmup_cap", 16)),
            gap_s=float(defn.get("gap_s", 0)),
        )
    out = dict(defn)
    out["sizing"] = dict(sizing, pilot=pilot)
    return out


def _materializer(
    panels: dict, precs: dict, arms: dict, cdir: Path, arms_file: Path, man: Path | None
) -> Callable[[], None]:
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

    return materialize


def _computed_plan(ctx: PreparedCampaign, models: dict, man: Path | None) -> dict:
    """The plan this start computes, to freeze (first start) or to check against the frozen one."""
    defn, sessions = ctx.defn, ctx.sessions
    boot = dict(defn["bootstrap"])
    return {
        "format": PLAN_FORMAT,
        "campaign": ctx.name,
        "preset": ctx.preset,
        "definition": defn,
        "family": ctx.family,
        "draft": ctx.draft,
        "models": models,
        "panels": ctx.panel_records,
        "arms": {n: a.record() for n, a in ctx.arms.items()},
        "threads": ctx.threads,
        "seed": int(defn["seed"]),
        "threshold": float(boot["threshold"]),
        # the A/A control's rule for the floor of every decision (refspec.core.stats.decision_floor);
        # a plan without it was decided under "floor"
        "aa_rule": DEFAULT_AA_RULE,
        "bootstrap": {"seed": int(boot["seed"]), "draws": int(boot["draws"]), "threshold": float(boot["threshold"])},
        "sessions": len(sessions),
        "gap_s": float(defn.get("gap_s", 0)),
        "schedule": schedule_record(sessions),
        "schedule_sha256": sha256_json(schedule_record(sessions)),
        "analysis_code": ANALYSIS_CODE,
        "manifest_sha256": sha256_file(man) if man is not None else None,
        "executor": {
            "driver": "refspec.engine.driver",
            # the worker's name as every plan records it: a fixed label, not an import path (the
            # worker's engine is refspec.engines.worker.engine, started as refspec.commands.worker);
            # unchanged so that a plan frozen before still matches on --resume
            "worker": "refspec.engine.worker",
            "fresh_worker_per_block": True,
        },
    }


def prepare(
    name: str,
    cfg: Config,
    *,
    preset: str = "default",
    definition: str | Path | dict | None = None,
    out: str | Path | None = None,
    threads: int | None = None,
    family: str | None = None,
    manifest: str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
    target: float | None = None,
    budget_s: float | None = None,
) -> tuple[PreparedCampaign, CampaignRun, dict]:
    """Resolve everything campaign ``name`` needs under the loaded workflow config ``cfg``;
    return (PreparedCampaign, CampaignRun, computed plan). ``definition``: a file, or a definition
    in hand (a mapping, validated as a file's would be). ``target`` / ``budget_s``: the user's goal,
    replacing the definition's sizing (:func:`refspec.campaigns.sizing.with_goal`; frozen in the plan)."""
    name = normalize_name(name)
    defn, dpath = load_definition(name, preset or "default", definition)
    defn = with_goal(defn, target, budget_s)
    mod = module_for(name)
    out_root, cdir = _campaign_folder(name, cfg, defn, out, family)
    frozen = _frozen_plan(cdir, resume)
    fam = family or defn.get("family") or frozen.get("family") or cfg.family
    nthreads = int(threads or frozen.get("threads") or cfg.threads)
    if nthreads < 1:
        raise UsageError("--threads must be at least 1")
    cdir.mkdir(parents=True, exist_ok=True)

    panels, precs = _panels(name, mod, defn, cfg, dpath.parent, campaign_dir(out_root, "screen", fam, cfg))
    arms = _arms(name, mod, defn, cfg, nthreads)
    arms_file = cdir / "arms.yaml"
    files, draft, models = _models(fam, cfg, defn, arms)
    defn = _piloted(defn, frozen, cfg, fam, arms, panels, files, draft, cdir)
    defn = resolve_size(defn, len(arms), max((len(ts) for ts in panels.values()), default=0), DEFAULT_AA_RULE)
    ctx = PreparedCampaign(
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
    ctx.sessions = mod.schedule(ctx)
    man = Path(manifest) if manifest else None
    if man is not None and not man.is_file():
        raise UsageError(f"manifest {man} not found")
    ctx.materialize = _materializer(panels, precs, arms, cdir, arms_file, man)
    computed = _computed_plan(ctx, models, man)
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
        reference=reference_of(defn),
    )
    ctx.run = CampaignRun(settings)
    return ctx, ctx.run, computed
