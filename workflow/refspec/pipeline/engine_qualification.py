"""``refspec qualify <engine>``: an engine against its own reference, run, sealed and rendered.

Each engine with a ``refspec qualify`` preset (its folder's ``qualify.py``,
:class:`refspec.core.engine_registry.QualifyPreset`) names its arms, its reference and what the
archive's manifest adds for it; :func:`qualify_engine` does the rest alike for every engine: the
model files (a GGUF file pinned by its sha256, or a family), the arms file, the confirmation preset
of the campaign engine (:func:`refspec.campaigns.arm_qualification.run_qualify`: the plan frozen
before the first request, fresh processes per block, every attempt journaled and ledgered), one
verdict per candidate, then the seal chain and the report, as ``refspec main`` does for its
campaigns. The command (:mod:`refspec.commands.qualify`) prints it and applies the exit rule.

``DIR`` (``--out``, default ``results/qualify/<UTC time>``) ends up with::

    campaigns/confirmation/    the campaign (plan, journal, ledger, tables, summary.json)
    qualify-arms.yaml          the engine's arms; qualify-families.yaml: the model files' pins
    manifest.json              the run's source manifest, with what the engine adds (a binary and its
                               --version, IR files, an environment's distributions, a package's files)
    assembled/                 the assembled results (the seal chain: :mod:`refspec.pipeline.seal_chain`)
    sealed-data/               their sealed archive, the first seal of the chain
    rendered/                  the sealed data (without its seal) with the report rendered into it
    archive/                   the sealed archive with report.html (and report.pdf when pdflatex exists)
    verdicts.json              one verdict per candidate arm (:func:`write_verdicts`)

Every candidate is qualified against the engine's own reference, not refspec's R: another engine
(or llama.cpp version) has other kernels, so only its own micro-batch-1 output says whether its
batching or speculation changed its tokens.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..campaigns.arm_qualification import run_qualify, verdict_line, verdicts
from ..core.config import Config
from ..core.engine_registry import QualifyPreset, QualifySetup
from ..core.errors import UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file
from ..native import build as native
from ..native.models import config_families_file, ensure_family
from ..native.runtime import Model
from ..provenance.manifest import Artifact, build_manifest, write_manifest
from .provenance_inputs import ensure_keys
from .seal_chain import run_chain

ARMS_FILE = "qualify-arms.yaml"
FAMILIES_FILE = "qualify-families.yaml"
DEFAULT_PANEL = "humaneval:0-11"
DEFAULT_CAP = 128


@dataclass(frozen=True)
class QualifyOptions:
    """What to qualify: the engine's sub-command (``engine``), its own options (``engine_options``:
    a binary, URLs, an execution mode ...), the model files, the panel and the campaign's knobs."""

    model: str
    engine: str  # the preset's sub-command (refspec.core.engine_registry.qualify_presets)
    engine_options: dict = field(default_factory=dict)
    draft: str | None = None
    k: int = 3
    panel: str | None = None
    cap: int | None = None
    repeats: int = 1
    resume: bool = False
    threads: int | None = None
    retries: int | None = None
    request_timeout: float | None = None
    progress: bool = True
    seal: bool = True


@dataclass
class EngineQualification:
    """One engine qualification: its results folder, the campaign's summary, one verdict per
    candidate arm, the sealed archive (``None`` when not sealed) and the record for verdicts.json."""

    root: Path
    summary: dict
    verdicts: list[dict]
    setup: QualifySetup
    reference: str  # the reference arm's name
    wall_s: float
    archive: Path | None
    complete: bool  # every planned request has a completed attempt
    record: dict  # verdicts.json without its "exit"

    @property
    def reproduces(self) -> bool:
        """Every candidate arm reproduces the reference."""
        return all(v["reproduces"] for v in self.verdicts)


def _piece_reader(files, lib_dir: Path):
    """token ID -> its piece, read with the pinned tokenizer of the target file."""
    m = Model(files.target.path, sha256=files.target.sha256, lib_dir=lib_dir)

    def piece(t):
        return None if t is None else m.detokenize([int(t)], special=True)

    return piece, m


def _archive(root: Path, cfg: Config, res, extra: tuple[list, dict, dict]) -> Path:
    """The manifest (the panel and what the engine adds, ``extra``: artifacts, environments, the
    manifest's ``qualify`` entry), then the seal chain without its check (:func:`run_chain`): ``root/archive``."""
    arts, envs, q = extra
    panels = [Artifact("panel", "panel", p) for p in sorted(res.out_dir.glob("panel-*.jsonl"))]
    man = build_manifest([*panels, *arts], {**cfg.to_dict(), "qualify": q}, environments=envs or None)
    write_manifest(man, root / "manifest.json")
    pub = root / "signer.pub"
    ensure_keys(pub)
    return run_chain(root, root / "manifest.json", [res.out_dir], pub, campaign="qualify").folders.archive


def qualify_engine(cfg: Config, root: Path, preset: QualifyPreset, o: QualifyOptions) -> EngineQualification:
    """Run the engine's qualification in the results folder ``root`` (created) under the workflow
    config ``cfg``; sealed with its report when ``o.seal`` and every request completed."""
    given = {**o.engine_options, "model": o.model, "draft": o.draft, "k": o.k}
    if preset.usage is not None:
        preset.usage(given)
    extra, family, draft = model_family(root, o.model, o.draft)
    setup = preset.setup(given)
    cfg = cfg.replace(**extra, arms_file=str(write_arms(root, setup.arms)))
    t0 = time.monotonic()
    res = run_qualify(
        cfg,
        panel=o.panel or DEFAULT_PANEL,
        arms=list(setup.arms),
        repeats=o.repeats,
        family=family,
        cap=o.cap or DEFAULT_CAP,
        draft=draft,
        out=root,
        resume=o.resume,
        threads=o.threads,
        retries=o.retries,
        request_timeout=o.request_timeout,
        progress=o.progress,
        reference=preset.reference,
    )
    wall = time.monotonic() - t0
    lib_dir = native.current(cfg).lib_dir
    files = ensure_family(family, models_dir=cfg.models_dir, families_file=config_families_file(cfg))
    piece, model = _piece_reader(files, lib_dir)
    try:
        vs = verdicts(res.summary, piece)
    finally:
        model.close()
    archive = None
    if o.seal and res.complete:
        archive = _archive(root, cfg, res, preset.pins(files, draft, setup, lib_dir))
    record = {
        "engine": o.engine,
        **setup.record,
        "model": o.model,
        "draft": o.draft,
        "panel": res.summary["panel"],
        "cap": res.summary["cap"],
        "reference": preset.reference,
        "verdicts": vs,
        "wall_s": round(wall, 1),
        "results": str(root),
        "archive": None if archive is None else str(archive),
    }
    return EngineQualification(root, res.summary, vs, setup, preset.reference, wall, archive, res.complete, record)


def write_verdicts(q: EngineQualification, exit_status: int) -> dict:
    """Write ``root/verdicts.json``: the qualification's record and the command's exit status
    (``exit``); return what it holds."""
    doc = {**q.record, "exit": exit_status}
    atomic_write_text(q.root / "verdicts.json", json.dumps(doc, indent=1, sort_keys=True) + "\n", mode=0o644)
    return doc


def summary_lines(q: EngineQualification, model: str) -> list[str]:
    """The text the command prints: the run, the reference, one line per verdict, where it is."""
    s = q.summary
    ref = s["reference"]
    return [
        f"refspec qualify: {Path(q.setup.target).name} ({q.setup.version or 'version unknown'}), "
        f"{Path(model).name}, panel {s['panel']['spec']} ({s['panel']['tasks']} tasks), cap {s['cap']}",
        f"reference {q.reference} ({q.setup.reference_args}, no draft): {ref['runs_per_task']} runs per task, "
        f"stable on {ref['stable_tasks']}/{s['panel']['tasks']} tasks",
        *(verdict_line(v) for v in q.verdicts),
        f"wall time {q.wall_s:.0f} s; results {q.root}"
        + (f"; sealed archive with report {q.archive}" if q.archive else ""),
    ]


def write_arms(root: Path, arms: dict) -> Path:
    path = root / ARMS_FILE
    text = "# refspec qualify: the arms (anc/qualify.md)\n" + yaml.safe_dump({"arms": arms}, sort_keys=False)
    atomic_write_text(path, text, mode=0o644)
    return path


def model_family(root: Path, model: str, draft: str | None) -> tuple[dict, str, str | None]:
    """(config entries, family, draft name) for ``--model``: a GGUF file, pinned by its sha256 in
    ``DIR/qualify-families.yaml`` with the draft beside it (both linked into ``DIR/models``), or the
    name of a family of the config's families file (``--draft`` then names one of its drafts)."""
    p = Path(model).expanduser()
    if not p.is_file():
        if "/" in model or model.endswith(".gguf"):
            raise UsageError(f"--model {model}: no such file")
        return {}, model, draft
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)

    def link(src: Path) -> dict:
        dst = models / src.name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(src.resolve())
        return {"file": src.name, "sha256": sha256_file(src)}

    target = link(p)
    drafts = {}
    name = None
    if draft is not None:
        d = Path(draft).expanduser()
        if not d.is_file():
            raise UsageError(f"--draft {draft}: no such file")
        if d.name == p.name:
            raise UsageError("--draft is the target file itself")
        name = "draft"
        drafts[name] = link(d)
    else:  # the file format lists a draft; no arm speculates, so it is never loaded
        drafts["none"] = dict(target)
    family = "qualify-" + p.stem.lower().replace(" ", "-")
    doc = {
        "families": {
            family: {
                "description": f"refspec qualify: {p.name}" + (f" with draft {Path(draft).name}" if draft else ""),
                "target": target,
                "drafts": drafts,
                "default_draft": name or "none",
                "chat_template": "model",
                "stop": "eog",
            }
        }
    }
    path = root / FAMILIES_FILE
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False), mode=0o644)
    return {"families_file": str(path), "models_dir": str(models)}, family, name
