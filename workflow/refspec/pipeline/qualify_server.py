"""The server form of ``refspec qualify`` (:mod:`refspec.campaigns.server_qualify`): run the campaign,
then seal its results and render the report, as ``refspec main`` does for its campaigns.

``DIR`` (``--out``, default ``results/qualify/<UTC time>``) ends up with::

    campaigns/confirmation/    the campaign (plan, journal, ledger, tables, summary.json)
    qualify-arms.yaml          the server arms; qualify-families.yaml: the model files' pins
    manifest.json              the run's source manifest (the server binary, its sha256 and --version)
    stage/ data/               assembled results and their sealed archive
    archive/                   the sealed archive with report.html (and report.pdf when pdflatex exists)
    verdicts.json              one verdict per candidate arm
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from ..campaigns import server_qualify as sq
from ..campaigns.qualify import results_folder, run_qualify
from ..core.config import load_config
from ..core.errors import EXIT_FAILED, EXIT_OK, EXIT_RUNTIME, UsageError
from ..core.fsutil import atomic_write_text
from ..engine.server_cli import probe_binary
from ..native import build as native
from ..native.models import config_families_file, ensure_family
from ..native.runtime import Model
from ..provenance.manifest import Artifact, build_manifest, write_manifest
from ..provenance.seal import seal
from .stages import assemble, ensure_keys, report_stage


def _piece_reader(files, lib_dir: Path):
    """token ID -> its piece, read with the pinned tokenizer of the target file."""
    m = Model(files.target.path, sha256=files.target.sha256, lib_dir=lib_dir)

    def piece(t):
        return None if t is None else m.detokenize([int(t)], special=True)

    return piece, m


def _archive(root: Path, cfg: dict, res, binary: str | None, version: str | None) -> Path:
    """manifest -> assemble -> seal -> report -> seal again (chained): ``root/archive``."""
    arts = [Artifact("panel", "panel", p) for p in sorted(res.out_dir.glob("panel-*.jsonl"))]
    if binary is not None:
        arts.append(Artifact(f"llama-server ({version or 'no --version'})", "tool", Path(binary)))
    man = build_manifest(arts, {**cfg, "qualify": {"server_binary": binary, "server_version": version}})
    write_manifest(man, root / "manifest.json")
    assemble(root, root / "manifest.json", [res.out_dir], root / "stage")
    pub = root / "signer.pub"
    ensure_keys(pub)
    for d in ("data", "report", "archive"):
        if (root / d).exists():
            shutil.rmtree(root / d)
    seal(root / "stage", root / "data", campaign="qualify")
    report_stage(root / "data", root / "report", pub)
    seal(root / "report", root / "archive", campaign="qualify", previous=root / "data")
    return root / "archive"


def run_server(args) -> int:
    """``refspec qualify --server-binary PATH | --url URL --reference-url URL --model M ...``."""
    if not args.model:
        raise UsageError("--model is required with --server-binary or --url (the target GGUF file)")
    root = results_folder(args.out, args.resume).resolve()
    root.mkdir(parents=True, exist_ok=True)
    cfg = load_config(args.config)
    extra, family, draft = sq.model_family(root, args.model, args.draft)
    arms = sq.server_arms(
        binary=args.server_binary,
        url=args.url,
        reference_url=args.reference_url,
        speculative=args.draft is not None,
        k=args.k,
    )
    cfg = {**cfg, **extra, "arms_file": str(sq.write_arms(root, arms))}
    version, ref_args = None, "your server at --reference-url"
    if args.server_binary:
        probe = probe_binary(Path(args.server_binary), Path(args.server_binary).resolve().parent)
        version = probe["version"]
        ref_args = "-ub 1 -b 1 -np 1" if probe["options"].batch_one else "-ub 1 -np 1"
    t0 = time.monotonic()
    res = run_qualify(
        cfg,
        panel=args.panel or sq.DEFAULT_PANEL,
        arms=list(arms),
        repeats=args.repeats,
        family=family,
        cap=args.cap or sq.DEFAULT_CAP,
        draft=draft,
        out=root,
        resume=args.resume,
        threads=args.threads,
        retries=args.retries,
        request_timeout=args.request_timeout,
        progress=not args.no_progress,
        reference=sq.REFERENCE,
    )
    wall = time.monotonic() - t0
    lib_dir = native.current(cfg).lib_dir
    files = ensure_family(family, models_dir=cfg.get("models_dir"), families_file=config_families_file(cfg))
    piece, model = _piece_reader(files, lib_dir)
    try:
        vs = sq.verdicts(res.summary, piece)
    finally:
        model.close()
    archive = None if args.no_seal or not res.complete else _archive(root, cfg, res, args.server_binary, version)
    code = EXIT_RUNTIME if not res.complete else EXIT_OK if all(v["reproduces"] for v in vs) else EXIT_FAILED
    doc = {
        "server": {
            "binary": args.server_binary,
            "version": version,
            "url": args.url,
            "reference_url": args.reference_url,
        },
        "model": args.model,
        "draft": args.draft,
        "panel": res.summary["panel"],
        "cap": res.summary["cap"],
        "reference": sq.REFERENCE,
        "verdicts": vs,
        "wall_s": round(wall, 1),
        "results": str(root),
        "archive": None if archive is None else str(archive),
        "exit": code,
    }
    atomic_write_text(root / "verdicts.json", json.dumps(doc, indent=1, sort_keys=True) + "\n", mode=0o644)
    if args.json:
        print(json.dumps(doc, sort_keys=True))
        return code
    s = res.summary
    print(
        f"refspec qualify: {Path(args.server_binary or args.url).name} ({version or 'version unknown'}), "
        f"{Path(args.model).name}, panel {s['panel']['spec']} ({s['panel']['tasks']} tasks), cap {s['cap']}"
    )
    ref = s["reference"]
    print(
        f"reference {sq.REFERENCE} ({ref_args}, no draft): {ref['runs_per_task']} runs per task, "
        f"stable on {ref['stable_tasks']}/{s['panel']['tasks']} tasks"
    )
    for v in vs:
        print(sq.verdict_line(v))
    print(f"wall time {wall:.0f} s; results {root}" + (f"; sealed archive with report {archive}" if archive else ""))
    if not res.complete:
        print(f"refspec qualify: {len(s['incomplete'])} planned request(s) have no completed attempt", file=sys.stderr)
    return code
