"""``refspec qualify``: complete-endpoint qualification against a micro-batch-1 reference, three
sub-commands with one exit rule (:func:`exit_status`): 0 when
every candidate reproduces its reference, 1 when one does not, 5 when a planned request has no
completed attempt, 2 for usage errors (3 integrity where an archive is sealed).

``refspec qualify arms``: refspec's arms against the reference R.

    refspec qualify arms --family F --panel P --arms R,M0,M3,C3 --repeats N
                         [--draft D] [--cap C] [--out DIR] [--resume] [--config CFG] [--threads T]

The confirmation campaign on the given arms, panel, cap and repeats, run in
``DIR/campaigns/confirmation`` (:mod:`refspec.campaigns.arm_qualification` says how); prints the
summary (``summary.json``), one verdict line per candidate (every arm but R and the unrepaired
controls such as M0, whose divergence is what makes the qualification non-vacuous) and where the
results are.

``refspec qualify server``: a llama.cpp server of any version against its own micro-batch-1
reference (:mod:`refspec.campaigns.server_self_qualification`; sealed archive with its report, one
verdict line per arm, then the report's findings as ``./run main`` prints them):

    refspec qualify server --server-binary PATH --model M [--draft D] [--panel humaneval:0-11] [--cap 128] [--json]
    refspec qualify server --url URL --reference-url URL --model M [--draft D] ...

``refspec qualify openvino``: OpenVINO GenAI's continuous-batching pipeline and its speculative
decoding against the engine's own greedy reference, its stateful pipeline, on the same GGUF files
(``anc/openvino.md``; the engine's environment is created on first use). The same archive and lines
as ``qualify server``:

    refspec qualify openvino --model target.gguf [--draft draft.gguf] [-k 4] [--execution-mode accuracy]
                             [--panel humaneval:0-11] [--cap 128]
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
from ..core.errors import EXIT_FAILED, EXIT_OK, EXIT_RUNTIME, UsageError
from ..pipeline.main import headline_text
from ..pipeline.server_qualification import ServerQualifyOptions, qualify_server, summary_lines, write_verdicts


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
    sub = p.add_subparsers(dest="kind", metavar="arms|server|openvino", required=True)
    a = sub.add_parser(
        "arms",
        help="refspec's arms against R (exit 0 every candidate reproduces R, 1 one does not, 5 a request failed)",
    )
    a.add_argument("--family", help="model family (default: the config's family)")
    a.add_argument("--panel", required=True, help="panel file, or humaneval:0-11 (from the pinned wheel)")
    a.add_argument("--arms", default="R,M0,M3,C3", help="comma-separated arm names (R is added when missing)")
    _common(a)
    s = sub.add_parser(
        "server",
        help="a llama.cpp server against its own micro-batch-1 reference (exit 0 every candidate reproduces it, "
        "1 one does not, 5 a request or server failed)",
    )
    s.add_argument("--panel", help="panel file, or humaneval:0-11 (default humaneval:0-11)")
    s.add_argument("--server-binary", help="a llama-server binary (any version); refspec starts its reference and arms")
    s.add_argument("--url", help="a candidate server you started (loopback)")
    s.add_argument("--reference-url", help="its reference, started by you with -ub 1 -b 1 -np 1 and no draft")
    s.add_argument("--model", required=True, help="the target GGUF file (or a family name)")
    s.add_argument("-k", type=int, default=3, help="draft proposals per cycle (default 3)")
    s.add_argument("--json", action="store_true", help="print the verdicts as one JSON object")
    s.add_argument("--no-seal", action="store_true", help="no sealed archive (results folder only)")
    _common(s)
    o = sub.add_parser(
        "openvino",
        help="OpenVINO GenAI's batched and speculative pipelines against its own stateful greedy pipeline "
        "(exit 0 every candidate reproduces it, 1 one does not, 5 a request or process failed)",
    )
    o.add_argument("--panel", help="panel file, or humaneval:0-11 (default humaneval:0-11)")
    o.add_argument("--model", required=True, help="the target GGUF file (or a family name)")
    o.add_argument("-k", type=int, default=4, help="draft tokens per step, num_assistant_tokens (default 4)")
    o.add_argument(
        "--execution-mode",
        choices=("performance", "accuracy"),
        default="performance",
        help="the CPU plugin's EXECUTION_MODE_HINT for every arm (performance, its default: bf16 where the "
        "CPU has it; accuracy: f32)",
    )
    o.add_argument("--json", action="store_true", help="print the verdicts as one JSON object")
    o.add_argument("--no-seal", action="store_true", help="no sealed archive (results folder only)")
    _common(o)


def exit_status(complete: bool, candidates: list[dict]) -> int:
    """The one exit rule of every ``refspec qualify`` sub-command: 5 (``EXIT_RUNTIME``) when a planned
    request has no completed attempt, else 1 (``EXIT_FAILED``) when a candidate does not reproduce its
    reference, else 0 (every candidate does)."""
    if not complete:
        return EXIT_RUNTIME
    return EXIT_OK if all(v["reproduces"] for v in candidates) else EXIT_FAILED


def run_server(args: argparse.Namespace) -> int:
    """``refspec qualify server --server-binary PATH | --url URL --reference-url URL --model M ...``
    and ``refspec qualify openvino --model M [--draft D]``
    (:func:`refspec.pipeline.server_qualification.qualify_server`): 5 when a planned request has
    no completed attempt, else 0 when every candidate reproduces the reference, else 1."""
    engine = "openvino" if args.kind == "openvino" else "server"
    if engine == "server" and not (args.server_binary or args.url):
        raise UsageError("qualify server needs --server-binary PATH, or --url URL with --reference-url URL")
    root = results_folder(args.out, args.resume).resolve()
    root.mkdir(parents=True, exist_ok=True)
    options = ServerQualifyOptions(
        model=args.model,
        engine=engine,
        execution_mode=getattr(args, "execution_mode", "performance"),
        server_binary=getattr(args, "server_binary", None),
        url=getattr(args, "url", None),
        reference_url=getattr(args, "reference_url", None),
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
    q = qualify_server(load_config(args.config), root, options)
    code = exit_status(q.complete, q.verdicts)
    doc = write_verdicts(q, code)
    if args.json:
        print(json.dumps(doc, sort_keys=True))
        return code
    target = "openvino-genai" if engine == "openvino" else args.server_binary or args.url
    for line in summary_lines(q, target, args.model):
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
    return run_server(args) if args.kind in ("server", "openvino") else run_arms(args)


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
