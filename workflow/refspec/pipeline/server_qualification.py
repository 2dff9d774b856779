"""``refspec qualify server`` and ``refspec qualify openvino``
(:mod:`refspec.campaigns.server_self_qualification`): run
the campaign, then seal its results and render the report, as ``refspec main`` does for its
campaigns. :func:`qualify_server` does it and returns a :class:`ServerQualification`; the command
(:mod:`refspec.commands.qualify`) prints it and chooses the exit status.

``DIR`` (``--out``, default ``results/qualify/<UTC time>``) ends up with::

    campaigns/confirmation/    the campaign (plan, journal, ledger, tables, summary.json)
    qualify-arms.yaml          the server arms; qualify-families.yaml: the model files' pins
    manifest.json              the run's source manifest (the server binary, its sha256 and --version;
                               for OpenVINO GenAI the IR files and the engine environment's distributions)
    assembled/                 the assembled results (the seal chain: :mod:`refspec.pipeline.seal_chain`)
    sealed-data/               their sealed archive, the first seal of the chain
    rendered/                  the sealed data (without its seal) with the report rendered into it
    archive/                   the sealed archive with report.html (and report.pdf when pdflatex exists)
    verdicts.json              one verdict per candidate arm (:func:`write_verdicts`)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..campaigns import server_self_qualification as sq
from ..campaigns.arm_qualification import run_qualify, verdict_line, verdicts
from ..core.config import Config
from ..core.errors import IntegrityError
from ..core.fsutil import atomic_write_text
from ..engine.openvino_env import ensure_env, ensure_ir, verify_ir
from ..engine.server_cli import probe_binary
from ..native import build as native
from ..native.models import config_families_file, ensure_family
from ..native.runtime import Model
from ..provenance.manifest import Artifact, build_manifest, write_manifest
from .provenance_inputs import ensure_keys
from .seal_chain import run_chain


@dataclass(frozen=True)
class ServerQualifyOptions:
    """What to qualify: a binary refspec starts (``server_binary``) or two servers you started
    (``url``, ``reference_url``), the model files, the panel and the campaign's knobs."""

    model: str
    engine: str = "server"  # server (llama.cpp) | openvino (OpenVINO GenAI, anc/openvino.md)
    execution_mode: str = "performance"  # openvino: the CPU plugin's EXECUTION_MODE_HINT
    server_binary: str | None = None
    url: str | None = None
    reference_url: str | None = None
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
class ServerQualification:
    """One server qualification: its results folder, the campaign's summary, one verdict per
    candidate arm, the sealed archive (``None`` when not sealed) and the record for verdicts.json."""

    root: Path
    summary: dict
    verdicts: list[dict]
    version: str | None
    reference_args: str  # how the reference ran, for the summary line
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


def _openvino_pins(files, draft: str | None) -> tuple[list[Artifact], dict]:
    """The IR files the OpenVINO arms loaded (converted from the family's pinned GGUF ``files``,
    cached by their inputs' hashes) as model artifacts, and the engine environment's distributions."""
    env = ensure_env()
    models = {"target": files.target}
    if draft is not None:
        models["draft"] = files.draft(draft)
    arts = []
    for role, m in models.items():
        ir = ensure_ir(env, Path(m.path), m.sha256)
        bad = verify_ir(ir)
        if bad:
            raise IntegrityError("OpenVINO IR changed since its conversion: " + "; ".join(bad))
        arts += [Artifact(f"openvino-ir/{role}/{name}", "model", ir.folder / name) for name in sorted(ir.files)]
    return arts, {"openvino": env.site_packages()}


def _archive(root: Path, cfg: Config, res, binary: str | None, version: str | None, engine=None) -> Path:
    """The manifest, then the seal chain without its check (:func:`run_chain`): ``root/archive``.
    ``engine``: (artifacts, environments) of an OpenVINO qualification (:func:`_openvino_pins`)."""
    arts = [Artifact("panel", "panel", p) for p in sorted(res.out_dir.glob("panel-*.jsonl"))]
    if binary is not None:
        arts.append(Artifact(f"llama-server ({version or 'no --version'})", "tool", Path(binary)))
    extra, envs = engine or ([], {})
    q = {"server_binary": binary, "server_version": version}
    if engine is not None:
        q = {"engine": "openvino-genai", "engine_version": version}
    man = build_manifest([*arts, *extra], {**cfg.to_dict(), "qualify": q}, environments=envs)
    write_manifest(man, root / "manifest.json")
    pub = root / "signer.pub"
    ensure_keys(pub)
    return run_chain(root, root / "manifest.json", [res.out_dir], pub, campaign="qualify").folders.archive


def qualify_server(cfg: Config, root: Path, o: ServerQualifyOptions) -> ServerQualification:
    """Run the server qualification in the results folder ``root`` (created) under the workflow
    config ``cfg``; sealed with its report when ``o.seal`` and every request completed."""
    extra, family, draft = sq.model_family(root, o.model, o.draft)
    if o.engine == "openvino":
        arms = sq.openvino_arms(speculative=o.draft is not None, k=o.k, execution_mode=o.execution_mode)
        reference = sq.OV_REFERENCE
        version = ensure_env().version  # created on first use, before the campaign starts
        ref_args = f"the stateful LLMPipeline, execution mode {o.execution_mode}"
    else:
        arms = sq.server_arms(
            binary=o.server_binary,
            url=o.url,
            reference_url=o.reference_url,
            speculative=o.draft is not None,
            k=o.k,
        )
        reference = sq.REFERENCE
        version, ref_args = None, "your server at --reference-url"
        if o.server_binary:
            probe = probe_binary(Path(o.server_binary), Path(o.server_binary).resolve().parent)
            version = probe["version"]
            ref_args = "-ub 1 -b 1 -np 1" if probe["options"].batch_one else "-ub 1 -np 1"
    cfg = cfg.replace(**extra, arms_file=str(sq.write_arms(root, arms)))
    t0 = time.monotonic()
    res = run_qualify(
        cfg,
        panel=o.panel or sq.DEFAULT_PANEL,
        arms=list(arms),
        repeats=o.repeats,
        family=family,
        cap=o.cap or sq.DEFAULT_CAP,
        draft=draft,
        out=root,
        resume=o.resume,
        threads=o.threads,
        retries=o.retries,
        request_timeout=o.request_timeout,
        progress=o.progress,
        reference=reference,
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
        engine = _openvino_pins(files, draft) if o.engine == "openvino" else None
        archive = _archive(root, cfg, res, o.server_binary, version, engine)
    record = {
        "engine": o.engine,
        **(
            {"openvino": {"version": version, "execution_mode": o.execution_mode}}
            if o.engine == "openvino"
            else {
                "server": {
                    "binary": o.server_binary,
                    "version": version,
                    "url": o.url,
                    "reference_url": o.reference_url,
                }
            }
        ),
        "model": o.model,
        "draft": o.draft,
        "panel": res.summary["panel"],
        "cap": res.summary["cap"],
        "reference": reference,
        "verdicts": vs,
        "wall_s": round(wall, 1),
        "results": str(root),
        "archive": None if archive is None else str(archive),
    }
    return ServerQualification(root, res.summary, vs, version, ref_args, reference, wall, archive, res.complete, record)


def write_verdicts(q: ServerQualification, exit_status: int) -> dict:
    """Write ``root/verdicts.json``: the qualification's record and the command's exit status
    (``exit``); return what it holds."""
    doc = {**q.record, "exit": exit_status}
    atomic_write_text(q.root / "verdicts.json", json.dumps(doc, indent=1, sort_keys=True) + "\n", mode=0o644)
    return doc


def summary_lines(q: ServerQualification, target: str, model: str) -> list[str]:
    """The text the command prints: the run, the reference, one line per verdict, where it is."""
    s = q.summary
    ref = s["reference"]
    return [
        f"refspec qualify: {Path(target).name} ({q.version or 'version unknown'}), "
        f"{Path(model).name}, panel {s['panel']['spec']} ({s['panel']['tasks']} tasks), cap {s['cap']}",
        f"reference {q.reference} ({q.reference_args}, no draft): {ref['runs_per_task']} runs per task, "
        f"stable on {ref['stable_tasks']}/{s['panel']['tasks']} tasks",
        *(verdict_line(v) for v in q.verdicts),
        f"wall time {q.wall_s:.0f} s; results {q.root}"
        + (f"; sealed archive with report {q.archive}" if q.archive else ""),
    ]
