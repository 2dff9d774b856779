"""``refspec screen``: the divergence screen (:mod:`refspec.experiments.divergence_screen`).

    refspec screen [--config F] [--family F] [--panel SPEC] [--cap N] [--arms M0,C0,R_prod]
                   [--want K] [--budget B] [--controls C] --out DIR

R decodes the discovery panel (default: the config's ``screen.panel``), the unrepaired arms
decode its tasks in order of R's smallest top-2 margin until ``--want`` tasks diverge or
``--budget`` tasks were tried; DIR receives ``screen.json`` (the frozen rule, order, exposed tasks
and controls), the ``divergence_screen`` table and ``exposed-panel.jsonl``. Options default to the
config's ``screen`` section.

Exit status: 0 when the screen ran (whether or not it found an exposed task: a screen that finds
none says "vacuous"), 2 for usage or configuration errors.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core import tables as T
from ..core.config import gpu_layers, load_config, preset_settings
from ..core.errors import EXIT_OK
from ..experiments.divergence_screen import run_screen, summary
from ..native import build as native
from ..native import runtime


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="workflow config (default config/config.yaml)")
    p.add_argument("--family", help="model family (default: the config's)")
    p.add_argument("--panel", help="discovery panel (humaneval:0-23, a range, or a panel file; default screen.panel)")
    p.add_argument("--cap", type=int, help="new tokens per request (default screen.cap)")
    p.add_argument("--arms", help="unrepaired arms, comma-separated (default screen.arms)")
    p.add_argument("--want", type=int, help="stop after this many exposed tasks (default screen.want)")
    p.add_argument("--budget", type=int, help="stop after trying this many tasks (default screen.budget)")
    p.add_argument("--controls", type=int, help="stable controls added to the exposed panel (default screen.controls)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    sc = preset_settings(cfg, "screen")
    runtime.load(native.current(cfg).lib_dir)  # the configured build (cpu, cuda or vulkan)
    arms = args.arms.split(",") if args.arms else list(sc.arms)
    out = Path(args.out)
    rec = run_screen(
        cfg,
        panel=args.panel or sc.panel.to_dict(),
        cap=args.cap or sc.cap,
        arms=arms,
        want=args.want or sc.want,
        budget=args.budget or sc.budget,
        controls=sc.controls if args.controls is None else args.controls,
        out=out,
        family=args.family,
        gpu_layers=gpu_layers(cfg),
        progress=not args.no_progress,
    )
    print(summary(rec, T.read_records("divergence_screen", out)))
    return EXIT_OK
