"""A worker: one fresh process that serves timed requests for one arm, or for several side by side.

``python -m refspec.commands.worker --family F --arm A [--also-arm B ...] [--draft D] --port 0 --ready-file PATH``

With ``--also-arm`` the process serves every named arm (the paired design): the models are
loaded once, each arm has contexts of its own, and a request names its arm in ``refspec.arm``.

The driver starts it (:data:`refspec.engines.worker.process.WORKER_MODULE`); the engine is
:mod:`refspec.engines.worker.engine`, the HTTP side :mod:`refspec.engines.worker.http`. The HTTP
API, its errors, the exit codes and the environment the driver gives a worker are
documented in ``anc/worker.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.arms import load_arms
from ..core.errors import EXIT_OK, RefspecError, UsageError
from ..engines.worker.engine import WARMUP_CAP
from ..engines.worker.http import DEFAULT_MAX_BODY, ServeOptions, is_loopback, serve
from ..native.models import ModelFile, ensure_family


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", required=True)
    p.add_argument("--arm", required=True, help="arm name from the arms file")
    p.add_argument(
        "--also-arm",
        action="append",
        default=[],
        metavar="ARM",
        help="another arm the same process serves (repeatable; the paired design)",
    )
    p.add_argument("--arms-file", help="arms YAML (default config/arms.yaml)")
    p.add_argument(
        "--gpu-layers",
        type=int,
        default=None,
        help="n_gpu_layers for an arm without its own gpu_layers (-1 every layer; default 0)",
    )
    p.add_argument("--draft", help="draft model name (speculative arms; default: the family's default draft)")
    p.add_argument("--target-file", help="target GGUF (with --target-sha256; default: the family's files)")
    p.add_argument("--target-sha256")
    p.add_argument("--draft-file", help="draft GGUF (with --draft-sha256)")
    p.add_argument("--draft-sha256")
    p.add_argument("--models-dir", help="where user-placed family files live")
    p.add_argument("--lib-dir", help="patched llama.cpp libraries (default LLAMA_CPP_LIB_PATH or the cached build)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--allow-non-loopback", action="store_true", help="allow --host to be an address other than loopback"
    )
    p.add_argument("--port", type=int, default=0, help="0 = any free port (written to the ready file)")
    p.add_argument(
        "--ready-file",
        required=False,
        help="required: written atomically, mode 0600 (JSON: port, pid, identity, warmup, secret) once warm",
    )
    p.add_argument("--worker-id")
    p.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, help="largest request body in bytes")
    p.add_argument("--warmup-cap", type=int, default=WARMUP_CAP)
    p.add_argument(
        "--exit-with-parent",
        type=int,
        metavar="PID",
        help="stop (as on SIGTERM) once the process PID is no longer this worker's parent",
    )


def _files(args):
    tf = df = None
    if args.target_file:
        if not args.target_sha256:
            raise UsageError("--target-file needs --target-sha256")
        tf = ModelFile("target", "target", Path(args.target_file), args.target_sha256)
    if args.draft_file:
        if not args.draft_sha256:
            raise UsageError("--draft-file needs --draft-sha256")
        df = ModelFile("draft", args.draft or "draft", Path(args.draft_file), args.draft_sha256)
    draft_name = args.draft
    if tf is None or (df is None):
        fam = ensure_family(args.family, models_dir=args.models_dir)
        tf = tf or fam.target
        draft_name = draft_name or fam.default_draft
        if df is None:
            df = fam.draft(draft_name)
    return tf, df, draft_name


def _files_target(args):
    if args.target_file:
        if not args.target_sha256:
            raise UsageError("--target-file needs --target-sha256")
        return ModelFile("target", "target", Path(args.target_file), args.target_sha256)
    return ensure_family(args.family, models_dir=args.models_dir).target


def run(args: argparse.Namespace) -> int:
    if not is_loopback(args.host) and not args.allow_non_loopback:
        raise UsageError(
            f"--host {args.host} is not a loopback address; the worker is meant for this host "
            "only (plain HTTP), so binding elsewhere needs --allow-non-loopback"
        )
    if args.max_body < 1:
        raise UsageError("--max-body must be positive")
    arms = load_arms(args.arms_file)
    served = []
    for name in [args.arm, *args.also_arm]:
        if name not in arms:
            raise UsageError(f"unknown arm {name!r} (known: {', '.join(arms)})")
        a = arms[name]
        if a.gpu_layers is None:
            a = a.with_(gpu_layers=0 if args.gpu_layers is None else int(args.gpu_layers))
        served.append(a)
    arm = served[0]
    speculative = any(a.speculative for a in served)
    serve(
        ServeOptions(
            family=args.family,
            arm=arm,
            host=args.host,
            port=args.port,
            ready_file=args.ready_file,
            files=lambda: _files(args) if speculative else (_files_target(args), None, None),
            lib_dir=args.lib_dir,
            worker_id=args.worker_id,
            max_body=args.max_body,
            warmup_cap=args.warmup_cap,
            exit_with_parent=args.exit_with_parent,
            also_arms=tuple(served[1:]),
        )
    )
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m refspec.commands.worker", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except RefspecError as e:
        print(f"refspec worker: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
