"""``refspec decode``: greedy decoding of a panel in this process with several arms, compared with R.

``--arms`` (default ``R,M0,M3``; the first is R); speculative arms decode with the family's
default draft or ``--draft``.

Timed, isolated runs go through workers (``refspec qualify``); this command is for
inspecting the native layer directly (:func:`refspec.engine.decode.decode_panel`).
"""

from __future__ import annotations

import argparse
import json

from ..core.config import gpu_layers, load_config
from ..core.fsutil import atomic_write_text
from ..core.panels import load_panel_spec
from ..engine.decode import decode_panel
from ..native import build as native
from ..native import runtime
from ..native.models import config_families_file


def summarize(rows: list[dict]) -> str:
    lines = []
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    for a in arms:
        rs = [r for r in rows if r["arm"] == a]
        ok = sum(r["qualified"] for r in rs)
        div = ", ".join(f"{r['task_id']}@{r['first_diff_index']}" for r in rs if not r["qualified"])
        acc = [r["acceptance"] for r in rs if r["acceptance"] is not None]
        acc_s = f"  acceptance {sum(acc) / len(acc):.3f}" if acc else ""
        lines.append(f"{a:8s} {ok}/{len(rs)} match R{acc_s}" + (f"  first divergence: {div}" if div else ""))
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config")
    p.add_argument("--family")
    p.add_argument("--panel", default="humaneval:0-11")
    p.add_argument("--arms", default="R,M0,M3")
    p.add_argument("--draft")
    p.add_argument("--cap", type=int)
    p.add_argument("--threads", type=int, help="override the arms' thread count")
    p.add_argument("--gpu-layers", type=int, help="n_gpu_layers (-1 every layer; default: the config's gpu_layers)")
    p.add_argument("--json", help="write the per-request rows to this JSON file")


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    runtime.load(native.current(cfg).lib_dir)  # the configured build (cpu, cuda or vulkan)
    ngl = args.gpu_layers if args.gpu_layers is not None else gpu_layers(cfg)
    rows = decode_panel(
        args.family or cfg.family,
        load_panel_spec(args.panel),
        args.arms.split(","),
        cap=args.cap,
        draft=args.draft,
        threads=args.threads,
        models_dir=cfg.models_dir,
        families_file=config_families_file(cfg),
        gpu_layers=ngl,
    )
    if args.json:
        atomic_write_text(args.json, json.dumps(rows, indent=1) + "\n")
    print(summarize(rows))
    return 0
