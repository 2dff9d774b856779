"""``refspec qualify``: complete-endpoint qualification against a micro-batch-1 reference, one
sub-command for refspec's arms and one per engine with a qualify preset, all with one exit rule
(:func:`exit_status`): 0 when every candidate reproduces its reference, 1 when one does not, 5 when
a planned request has no completed attempt, 2 for usage errors (3 integrity where an archive is sealed).

``refspec qualify arms``: refspec's arms against the reference R.

    refspec qualify arms --family F --panel P --arms R,M0,M3,C3 --repeats N
                         [--draft D] [--cap C] [--out DIR] [--resume] [--config CFG] [--threads T]

The confirmation campaign on the given arms, panel, cap and repeats, run in
``DIR/campaigns/confirmation`` (:mod:`refspec.campaigns.arm_qualification` says how); prints the
summary (``summary.json``), one verdict line per candidate (every arm but R and the unrepaired
controls such as M0, whose divergence is what makes the qualification non-vacuous) and where the
results are.

``refspec qualify ENGINE``: an engine against its own reference
(:mod:`refspec.pipeline.engine_qualification`; its arms in the engine's folder,
``refspec/engines/<engine>/qualify.py``): a sealed archive with its report, one verdict line per
candidate arm (every arm but the engine's reference: what a user of the engine runs is the
subject), then the report's findings as ``./run main`` prints them:

    refspec qualify ENGINE --model target.gguf [--draft draft.gguf] [-k K] [--panel humaneval:0-11]
                           [--cap 128] [--json] [--no-seal] [the engine's own options]

``refspec qualify --help`` lists the engines; ``refspec qualify ENGINE --help`` their options.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..campaigns.arm_qualification import (
    DEFINITION_NAME,
    SUMMARY_NAME,
    format_summary,
    results_folder,
    run_qualify,
    verdict_line,
    verdicts,
)
from ..core.config import load_config
from ..core.engine_registry import QualifyPreset, qualify_presets
from ..core.errors import EXIT_FAILED, EXIT_OK, EXIT_RUNTIME
from ..pipeline.engine_qualification import QualifyOptions, qualify_engine, summary_lines, write_verdicts
from ..pipeline.main import headline_text


def _common(p: argparse.ArgumentParser) -> None:
    """The options both sub-commands take."""
    p.add_argument("--config", help="workflow config (default config/config.yaml); its arms_file names the arms")
    p.add_argument("--repeats", type=int, default=1, help="repeats per task for arms other than R (R: max(2, N))")
    p.add_argument("--draft", help="draft model name (default: the family's default draft)")
    p.add_argument("--cap", type=int, help="max new tokens (default: the confirmation definition's cap)")
    p.add_argument(
        "--out", help="results folder (default results/qualify/<UTC time>); the run is in DIR/campaigns/confirmation"
    )
    p.add_argument("--resume", action="store_true", help="continue the qualification recorded in --out")
    p.add_argument("--threads", type=int, help="threads per worker (default: the config's threads)")
    p.add_argument("--retries", type=int, help="re-runs of a request whose worker died (default: the definition's, 1)")
    p.add_argument("--request-timeout", type=float, help="seconds per request (default: the definition's, 600)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments(p: argparse.ArgumentParser) -> None:
    presets = qualify_presets()
    sub = p.add_subparsers(dest="kind", metavar="|".join(["arms", *presets]), required=True)
    a = sub.add_parser(
        "arms",
        help="refspec's arms against R (exit 0 every candidate reproduces R, 1 one does not, 5 a request failed)",
    )
    a.add_argument("--family", help="model family (default: the config's family)")
    a.add_argument("--panel", required=True, help="panel file, or humaneval:0-11 (from the pinned wheel)")
    a.add_argument("--arms", default="R,M0,M3,C3", help="comma-separated arm names (R is added when missing)")
    _common(a)
    for command, (_engine, preset) in presets.items():
        _engine_parser(sub.add_parser(command, help=preset.help), preset)


def _engine_parser(s: argparse.ArgumentParser, preset: QualifyPreset) -> None:
    """The options of an engine's sub-command: the preset's own, then those every engine takes."""
    for o in preset.options:
        kw = {"help": o.help, "default": o.default}
        if o.type is not None:
            kw["type"] = o.type
        if o.choices is not None:
            kw["choices"] = o.choices
        s.add_argument(*o.flags, **kw)
    s.add_argument("--panel", help="panel file, or humaneval:0-11 (default humaneval:0-11)")
    s.add_argument("--model", required=True, help="the target GGUF file (or a family name)")
    s.add_argument(
        "-k", type=int, default=preset.default_k, help=f"draft tokens per cycle (default {preset.default_k})"
    )
    s.add_argument("--json", action="store_true", help="print the verdicts as one JSON object")
    s.add_argument("--no-seal", action="store_true", help="no sealed archive (results folder only)")
    _common(s)


def exit_status(complete: bool, candidates: list[dict]) -> int:
    """The one exit rule of every ``refspec qualify`` sub-command: 5 (``EXIT_RUNTIME``) when a planned
    request has no completed attempt, else 1 (``EXIT_FAILED``) when a candidate does not reproduce its
    reference, else 0 (every candidate does)."""
    if not complete:
        return EXIT_RUNTIME
    return EXIT_OK if all(v["reproduces"] for v in candidates) else EXIT_FAILED


def run_engine(args: argparse.Namespace) -> int:
    """``refspec qualify ENGINE --model M ...`` (:func:`refspec.pipeline.engine_qualification.qualify_engine`):
    the exit rule of every sub-command (:func:`exit_status`)."""
    _engine, preset = qualify_presets()[args.kind]
    root = results_folder(args.out, args.resume).resolve()
    root.mkdir(parents=True, exist_ok=True)
    own = {o.flags[0].lstrip("-").replace("-", "_") for o in preset.options}
    options = QualifyOptions(
        model=args.model,
        engine=args.kind,
        engine_options={k: getattr(args, k) for k in sorted(own)},
        draft=args.draft,
        k=args.k,
        panel=args.panel,
        cap=args.cap,
        repeats=args.repeats,
        resume=args.resume,
        threads=args.threads,
        retries=args.retries,
        request_timeout=args.request_timeout,
        progress=not args.no_progress,
        seal=not args.no_seal,
    )
    q = qualify_engine(load_config(args.config), root, preset, options)
    code = exit_status(q.complete, q.verdicts)
    doc = write_verdicts(q, code)
    if args.json:
        print(json.dumps(doc, sort_keys=True))
        return code
    for line in summary_lines(q, args.model):
        print(line)
    if q.archive is not None and (q.archive / "numbers.json").is_file():
        # the findings and headline of the sealed report, as ./run main prints them
        print()
        print(headline_text(q.archive / "numbers.json", q.archive / "SEAL.dsse.json"))
    if not q.complete:
        print(
            f"refspec qualify: {len(q.summary['incomplete'])} planned request(s) have no completed attempt",
            file=sys.stderr,
        )
    return code


def run(args: argparse.Namespace) -> int:
    return run_arms(args) if args.kind == "arms" else run_engine(args)


def run_arms(args: argparse.Namespace) -> int:
    """``refspec qualify arms --panel P --arms ...`` (:func:`refspec.campaigns.arm_qualification.run_qualify`):
    a verdict line per candidate (every arm but R and the unrepaired controls), then the exit rule of
    every sub-command (:func:`exit_status`)."""
    out = results_folder(args.out, args.resume)
    res = run_qualify(
        load_config(args.config),
        panel=args.panel,
        arms=args.arms,
        repeats=args.repeats,
        family=args.family,
        cap=args.cap,
        draft=args.draft,
        out=out,
        resume=args.resume,
        threads=args.threads,
        retries=args.retries,
        request_timeout=args.request_timeout,
        progress=not args.no_progress,
    )
    print(format_summary(res.summary))
    candidates = verdicts(res.summary, controls=False)
    for v in candidates:
        print(verdict_line(v))
    print(
        f"results: {res.out_dir} ({SUMMARY_NAME}, summary.txt, tables, journal.jsonl, ledger.jsonl, {DEFINITION_NAME})"
    )
    if not res.complete:
        print(
            f"refspec qualify: {len(res.summary['incomplete'])} planned request(s) have no completed attempt; "
            "--resume runs those the retry rule still allows",
            file=sys.stderr,
        )
    return exit_status(res.complete, candidates)
