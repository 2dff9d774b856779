"""``refspec replay``: numerical replay (E1, :mod:`refspec.experiments.replay`) of one family on
the configured build; writes the ``replay`` table, ``e1_summary.json`` and ``e1_contexts.json``
and prints the summary."""

from __future__ import annotations

import argparse

from ..core.config import gpu_layers as run_gpu_layers
from ..core.config import load_config
from ..core.errors import EXIT_FAILED, EXIT_OK
from ..experiments.replay import PHASES, Settings, format_summary, run_e1, write_results
from ..experiments.replay_runner import BACKEND_DEVICES, resolve_tool
from ..native import build as native
from ..native import runtime
from ..native.models import config_families_file


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", default="smollm2-135m", help="model family (default smollm2-135m)")
    p.add_argument("--out", required=True, help="directory for replay.parquet/.csv, e1_summary.json, e1/ files")
    p.add_argument("--config", help="workflow config (its native: section selects the build)")
    p.add_argument(
        "--backend",
        default="auto",
        help="ggml device of the replay tool (default: CUDA0/Vulkan0 for a GPU build, else CPU)",
    )
    p.add_argument(
        "--gpu-layers",
        type=int,
        default=None,
        help="model layers on the GPU (default: all for a GPU build, 0 for a CPU build)",
    )
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the model and the tool (default 1)")
    p.add_argument("--layers", help="comma-separated layers (default: the config's e1.layers, else 0, L/2, L-1)")
    p.add_argument(
        "--phases", help=f"comma-separated phases (default: the config's e1.phases, else {','.join(PHASES)})"
    )
    p.add_argument("--q", help="query widths (default: the config's e1.q, else 1,2,3,4)")
    p.add_argument(
        "--continue-tokens",
        type=int,
        default=Settings.n_continue,
        help="greedy tokens after the measured rows for the capture on/off endpoint",
    )
    p.add_argument("--tool", help="path to refspec-replay (default: $REFSPEC_REPLAY_TOOL, else the configured build's)")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.config else None
    build = native.current(config)
    runtime.load(build.lib_dir)
    kind = build.record.get("options", {}).get("backend", "cpu")
    backend = BACKEND_DEVICES.get(kind, "CPU") if args.backend == "auto" else args.backend
    gpu_layers = args.gpu_layers if args.gpu_layers is not None else run_gpu_layers(config, backend=kind)
    tool = resolve_tool(args.tool or build.replay_tool)
    settings = Settings(
        threads=args.threads,
        n_continue=args.continue_tokens,
        n_gpu_layers=gpu_layers,
        backend=backend,
        replay_threads=args.threads,
    )
    e1 = config.e1 if config is not None else None  # the config's E1 contexts, else the paper's 24
    layers_s = args.layers if args.layers is not None else e1 and e1.layers
    layers = [int(x) for x in str(layers_s).split(",")] if layers_s else None
    phases_s = args.phases if args.phases is not None else (e1 and e1.phases) or ",".join(PHASES)
    phases = [x.strip() for x in str(phases_s).split(",") if x.strip()]
    qs = [int(x) for x in str(args.q if args.q is not None else (e1.q if e1 else "1,2,3,4")).split(",")]
    res = run_e1(
        args.family,
        args.out,
        tool=tool,
        settings=settings,
        layers=layers,
        phases=phases,
        qs=qs,
        models_dir=config.models_dir if config else None,
        progress=not args.no_progress,
        families_file=config_families_file(config),
    )
    res.summary["native_build"] = {"key": build.key, "backend": kind}
    paths = write_results(res, args.out)
    print(format_summary(res.summary))
    print(f"  wrote {paths['parquet']}, {paths['csv']}, {paths['summary']}, {paths['contexts']}")
    return EXIT_OK if res.summary["controls_passed"] == res.summary["contexts"] else EXIT_FAILED
