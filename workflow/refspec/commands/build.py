"""``refspec build``: fetch, verify, patch and build the pinned llama.cpp
(:func:`refspec.native.build.build`), and with ``--server`` its llama-server."""

from __future__ import annotations

import argparse
import json
import time

from ..core.config import load_config
from ..core.fsutil import atomic_write_text
from ..native.build import SERVER_TARGET, SERVER_VARIANTS, BuildOptions, build, build_server
from ..native.tools import REPLAY_TOOL


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="workflow config (its native: section selects the backend)")
    p.add_argument("--backend", choices=["cpu", "cuda", "vulkan"], help="override the configured backend")
    p.add_argument("--cuda-arch", help="CUDA architectures (e.g. 90)")
    p.add_argument("--jobs", type=int, help="parallel build jobs (default: all cores)")
    p.add_argument("--record", help="also copy BUILD.json to this path")
    p.add_argument(
        "--server",
        action="store_true",
        help="also build llama-server of the pinned source, stock (no patches) and patched",
    )
    p.add_argument("--quiet", action="store_true")


def _options(args: argparse.Namespace) -> BuildOptions:
    opts = BuildOptions.from_config(load_config(args.config) if args.config else None)
    if args.backend:
        return BuildOptions(
            backend=args.backend, cuda_arch=args.cuda_arch or opts.cuda_arch, build_type=opts.build_type
        )
    if args.cuda_arch:
        return BuildOptions(backend=opts.backend, cuda_arch=args.cuda_arch, build_type=opts.build_type)
    return opts


def run(args: argparse.Namespace) -> int:
    opts = _options(args)
    t0 = time.monotonic()
    res = build(opts, jobs=args.jobs, quiet=args.quiet)
    dt = time.monotonic() - t0
    if args.record:
        atomic_write_text(args.record, json.dumps(res.record, indent=2, sort_keys=True) + "\n")
    state = "built" if res.built else "up to date"
    print(f"refspec build: {state} in {dt:.1f} s: {res.lib_dir} (key {res.key[:16]}), {REPLAY_TOOL} {res.replay_tool}")
    if args.server:
        for variant in SERVER_VARIANTS:
            t0 = time.monotonic()
            srv = build_server(opts, variant, jobs=args.jobs, quiet=args.quiet)
            state = "built" if srv.built else "up to date"
            print(
                f"refspec build: {variant} {SERVER_TARGET} {state} in {time.monotonic() - t0:.1f} s: "
                f"{srv.tool(SERVER_TARGET)} (key {srv.key[:16]})"
            )
    return 0
