"""``refspec admission``: backend admission of the lifted attention shapes
(:mod:`refspec.experiments.admission`); prints the verdicts and writes ``admission.json`` and
the ``admission`` table with ``--out``. With a family (``--family``, or ``--config``'s) it also
decodes that family's target on the configured build and writes the ``graph_size`` table
(:mod:`refspec.experiments.graph_size`): nodes, dispatches and splits per layout and q."""

from __future__ import annotations

import argparse
import sys

from ..core.config import Config, load_config
from ..core.config import gpu_layers as run_gpu_layers
from ..core.errors import EXIT_OK, UsageError
from ..core.layouts import LAYOUT_ORDER, REPLAYED_LAYOUTS
from ..experiments import graph_size
from ..experiments.admission import AttentionShape, gguf_attention_shape, run_admission, write_results
from ..experiments.replay_runner import BACKEND_DEVICES, resolve_tool
from ..native import build as native
from ..native import runtime
from ..native.models import config_families_file, ensure_family


def _queries(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    if not out or min(out) < 1:
        raise UsageError(f"bad --queries {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        default="auto",
        help="ggml device or registry name (CPU, CUDA0, Vulkan0, ...; auto: the configured build's device)",
    )
    p.add_argument("--gguf", help="read head counts, head dim and context length from this GGUF")
    p.add_argument("--family", help="read the shape from this family's target GGUF (the config's family with --config)")
    p.add_argument("--config", help="workflow config: its family (without --gguf) and its build (auto backend)")
    p.add_argument("--n-head", type=int, help="query heads")
    p.add_argument("--n-head-kv", type=int, help="KV heads (default: --n-head)")
    p.add_argument("--head-dim", type=int, help="head dimension")
    p.add_argument("--n-kv", type=int, help="key extent / context length (default: the GGUF's, else 256)")
    p.add_argument("--queries", default="1-4", help="occupied queries, e.g. 1-4 or 1,2 (default 1-4)")
    p.add_argument(
        "--layouts", default=",".join(REPLAYED_LAYOUTS), help=f"layouts (default {','.join(REPLAYED_LAYOUTS)})"
    )
    p.add_argument(
        "--no-graph-size",
        action="store_true",
        help="do not decode the family's target for the graph_size table",
    )
    p.add_argument("--out", help="directory for admission.json and admission.csv")
    p.add_argument("--tool", help="path to refspec-replay (default: $REFSPEC_REPLAY_TOOL, else the configured build's)")
    p.add_argument("--threads", type=int, default=1)


def run(args: argparse.Namespace) -> int:
    family = args.family
    cfg = None
    if args.config or args.family or args.backend == "auto":
        cfg = load_config(args.config)
    if args.backend == "auto":
        args.backend = BACKEND_DEVICES.get(str(cfg.native.backend), "CPU")
    if not args.gguf and not args.n_head and (args.family or args.config):
        family = args.family or cfg.family
        files = ensure_family(family, models_dir=cfg.models_dir, families_file=config_families_file(cfg))
        args.gguf = str(files.target.path)
    else:
        files = None  # a shape from the command line or a GGUF: no family's target to decode
    if args.gguf:
        shape = gguf_attention_shape(args.gguf, args.n_kv)
    else:
        if not (args.n_head and args.head_dim):
            raise UsageError("give --gguf, or --n-head and --head-dim (and optionally --n-head-kv, --n-kv)")
        shape = AttentionShape(args.n_head, args.n_head_kv or args.n_head, args.head_dim, args.n_kv or 256)
    layouts = [x for x in args.layouts.split(",") if x]
    for lay in layouts:
        if lay not in REPLAYED_LAYOUTS:
            raise UsageError(f"unknown layout {lay!r}")
    tool = resolve_tool(args.tool, cfg)
    res = run_admission(
        tool, args.backend, shape, queries=_queries(args.queries), layouts=layouts, threads=args.threads
    )
    b = res["backend"]
    print(
        f"refspec admission: {b['device']} ({b['description']}), h={shape.n_head}/{shape.n_head_kv}, "
        f"d={shape.head_dim}, n_kv={shape.n_kv} [{shape.source}]"
    )
    for r in res["rows"]:
        extra = f"  {r['reason']}" if r["reason"] else ""
        print(
            f"  {r['layout']} q={r['q']} {r['op']:<11} {r['verdict']:<7} observed={r['observed']}"
            f"{' FALLBACK' if r['fallback'] else ''}{extra}"
        )
    for e in res["errors"]:
        print(f"  ERROR {e}", file=sys.stderr)
    for c in res["tool_crashes"]:
        print(
            f"  replay tool process killed at q={c['q']} (attempt {c['attempt']}, exit status {c['returncode']}): "
            "run again in a fresh process (recorded in admission.json, tool_crashes)",
            file=sys.stderr,
        )
    if args.out:
        paths = write_results(res, args.out, family)
        print(f"  wrote {paths['json']}, {paths['parquet']}, {paths['csv']}")
    if files is not None and not args.no_graph_size:
        rows = _graph_size(cfg, family, files, _queries(args.queries), args.threads)
        for r in rows:
            if r["status"] == "ok":
                print(
                    f"  graph size {r['layout']} q={r['q']}: {r['micrographs']} micrograph(s), {r['nodes']} nodes, "
                    f"{r['dispatches']} dispatches, {r['splits']} splits"
                )
            else:
                print(f"  graph size {r['layout']} q={r['q']}: refused: {r['reason']}", file=sys.stderr)
        if args.out:
            paths = graph_size.write_graph_size(rows, args.out)
            print(f"  wrote {paths['parquet']}, {paths['csv']}")
    return EXIT_OK if not res["errors"] else 1


def _graph_size(cfg: Config | None, family: str, files, queries: list[int], threads: int) -> list[dict]:
    """The graph_size rows of ``family``'s target on the configured build, its layers where the run puts them."""
    build = native.current(cfg)
    runtime.load(build.lib_dir)
    kind = build.record.get("options", {}).get("backend", "cpu")
    layers = run_gpu_layers(cfg, backend=kind)
    model = runtime.Model(files.target.path, sha256=files.target.sha256, n_gpu_layers=layers, require_placement=True)
    try:
        return graph_size.run_graph_size(model, family, layouts=LAYOUT_ORDER, queries=queries, threads=threads)
    finally:
        model.close()
