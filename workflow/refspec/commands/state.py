"""``refspec state STEP``: the state formation and transfer studies
(:mod:`refspec.experiments.state`): ``screen`` (the partition screen,
:mod:`refspec.experiments.state.partition_screen`), ``partition``, ``crosses``, ``projection``
(:mod:`refspec.experiments.projection`), ``summary`` and ``inspect``."""

from __future__ import annotations

import argparse
import json

from ..core import tables as T
from ..core.config import gpu_layers, load_config
from ..core.errors import UsageError
from ..core.panels import load_panel_spec
from ..experiments import projection
from ..experiments.replay_runner import BACKEND_DEVICES
from ..experiments.state import kvstate as kv
from ..experiments.state import partition_screen as pscreen
from ..experiments.state.crosses import run_crosses
from ..experiments.state.partition import DEFAULT_SPLITS, DEFAULT_UB_SWEEP, partition_arms, run_partition
from ..experiments.state.summaries import crosses_summary, partition_summary
from ..native import build as native
from ..native import runtime
from ..native.models import config_families_file
from ..native.tools import OPREPLAY_TOOL


def _int_list(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()] if s else []


def _task_ids(text: str) -> list[str] | None:
    """``auto`` (None) or comma-separated task ids; a bare index names a HumanEval task."""
    if text == "auto":
        return None
    return [t if "/" in t else f"HumanEval/{t}" for t in (s.strip() for s in text.split(",")) if t]


def _arm_arguments(sp: argparse.ArgumentParser, *, ub_sweep: str) -> None:
    """The partition arms' options (the screen and the partition campaign share them)."""
    sp.add_argument("--config", help="workflow config (default config/config.yaml)")
    sp.add_argument("--family", help="family (default: the config's family)")
    sp.add_argument("--n-ctx", type=int, default=1024)
    sp.add_argument("--threads", type=int, default=1, help="threads per context (default 1)")
    sp.add_argument("--gpu-layers", type=int, help="n_gpu_layers (-1 every layer; default: the config's gpu_layers)")
    sp.add_argument("--ub-a", type=int, default=512, help="micro-batch of A and B (default 512)")
    sp.add_argument("--ub-c", type=int, default=128, help="micro-batch of C (default 128)")
    sp.add_argument("--b-split", type=int, default=128, help="B's external split point (default 128)")
    sp.add_argument(
        "--splits",
        default=",".join(map(str, DEFAULT_SPLITS)),
        help="external split sweep; negative counts from the end (default 32,64,96,128,-1)",
    )
    sp.add_argument(
        "--ub-sweep",
        default=ub_sweep,
        help=f"runtime micro-batch sweep, whole prompt in one caller (default {ub_sweep or 'none'}; '' for none)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="state_command", metavar="STEP")
    sq = sub.add_parser("screen", help="partition screen: prefill only, the inputs where the partition arms differ")
    _arm_arguments(sq, ub_sweep="")
    sq.add_argument(
        "--tasks", default="0-23", help="discovery panel: HumanEval indices, humaneval:0-23 or a panel file"
    )
    sq.add_argument("--pair", default="auto", help="the study's pair X,Y, or auto: the first natural pair that differs")
    sq.add_argument("--inputs", type=int, default=2, help="study inputs: where the pair differs (default 2)")
    sq.add_argument("--controls", type=int, default=1, help="inputs where no arm differs (default 1)")
    sq.add_argument("--no-progress", action="store_true", help="no progress bar")
    sq.add_argument("--out", required=True)
    sp = sub.add_parser("partition", help="prefill partition campaign (arms A, B, C and sweeps)")
    _arm_arguments(sp, ub_sweep=",".join(map(str, DEFAULT_UB_SWEEP)))
    sp.add_argument(
        "--tasks", default="0-7", help="HumanEval indices (0-7), humaneval:0-7, or a panel file (default 0-7)"
    )
    sp.add_argument("--cap", type=int, default=64, help="maximum new tokens (default 64)")
    sp.add_argument("--repeats", type=int, default=1)
    sp.add_argument(
        "--keep-payloads",
        action="store_true",
        help="write KV and logits payloads of every arm (default: A, B and arms whose state differs)",
    )
    sp.add_argument("--out", required=True)
    sc = sub.add_parser("crosses", help="state crosses and subset interventions from a partition campaign")
    sc.add_argument("--partition", required=True, help="output folder of `refspec state partition`")
    sc.add_argument("--pair", default="A,B", help="the two donor states, X,Y (default A,B)")
    sc.add_argument("--screen", help="take the pair from the partition screen frozen in this folder")
    sc.add_argument(
        "--tasks",
        default="auto",
        help="task ids (comma-separated) or auto: two divergent then two stable inputs (default)",
    )
    sc.add_argument("--jobs", type=int, default=1, help="job processes run at a time (default 1)")
    sc.add_argument(
        "--divergent", type=int, default=2, help="with --tasks auto: inputs whose pair endpoints differ (default 2)"
    )
    sc.add_argument(
        "--stable", type=int, default=2, help="with --tasks auto: inputs whose pair endpoints agree (default 2)"
    )
    sc.add_argument("--selectors", default="", help=f"selectors (default all: {','.join(kv.SELECTOR_NAMES)})")
    sc.add_argument("--repeats", type=int, default=2, help="independent processes per task (default 2)")
    sc.add_argument(
        "--boundary",
        type=int,
        help="prefix/tail boundary (default: the pair's split point, else 128, else half a shorter prompt)",
    )
    sc.add_argument("--out", required=True)
    sp = sub.add_parser("projection", help="fixed-operand replay of the first layer's projections of differing arms")
    sp.add_argument("--partition", required=True, help="output folder of `refspec state partition`")
    sp.add_argument("--pair", default="A,U1", help="the two partition arms, X,Y (default A,U1)")
    sp.add_argument("--screen", help="take the pair from the partition screen frozen in this folder")
    sp.add_argument(
        "--tasks", default="auto", help="task ids (comma-separated) or auto: every input whose states differ"
    )
    sp.add_argument("--layers", default="0", help="layers whose projections are captured (default 0, the first)")
    sp.add_argument("--backend", default="auto", help="ggml device (CPU, CUDA0, Vulkan0; auto: the configured build's)")
    sp.add_argument("--config", help="workflow config (default config/config.yaml)")
    sp.add_argument("--tool", help=f"path to {OPREPLAY_TOOL} (default: the configured build's)")
    sp.add_argument("--out", required=True)
    ss = sub.add_parser("summary", help="print the summaries of finished campaigns")
    ss.add_argument("--partition", help="partition output folder")
    ss.add_argument("--crosses", help="crosses output folder")
    ss.add_argument("--b-arm", default="B", help="the arm compared with A in the partition counts (default B)")
    si = sub.add_parser("inspect", help="validate a payload file and print its header")
    si.add_argument("payload")
    si.add_argument("--model-sha256", help="also check that the KV payload belongs to this model")
    si.add_argument("--n-ctx", type=int, help="also check the context size")


def _arms(args: argparse.Namespace):
    return partition_arms(
        ub_a=args.ub_a,
        ub_c=args.ub_c,
        b_split=args.b_split,
        splits=_int_list(args.splits),
        ub_sweep=_int_list(args.ub_sweep),
    )


def _pair(args: argparse.Namespace) -> tuple[str, str]:
    """``--pair X,Y``, or the pair the partition screen in ``--screen`` froze (A,B when it found none)."""
    if getattr(args, "screen", None):
        rec = pscreen.read_partition_screen(args.screen)
        return tuple(rec["pair"] or ("A", "B"))  # type: ignore[return-value]
    pair = tuple(s.strip() for s in args.pair.split(","))
    if len(pair) != 2:
        raise UsageError(f"--pair takes two arm names, e.g. A,B (got {args.pair!r})")
    return pair  # type: ignore[return-value]


def _screen(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    runtime.load(native.current(cfg).lib_dir)
    pair = None if args.pair == "auto" else _pair(args)
    rec = pscreen.run_partition_screen(
        family=args.family or cfg.family,
        panel=args.tasks,
        arms=_arms(args),
        out=args.out,
        pair=pair,
        inputs=args.inputs,
        controls=args.controls,
        n_ctx=args.n_ctx,
        threads=args.threads,
        models_dir=cfg.models_dir,
        families_file=config_families_file(cfg),
        gpu_layers=args.gpu_layers if args.gpu_layers is not None else gpu_layers(cfg),
        progress=not args.no_progress,
    )
    print(pscreen.summary(rec, T.read_records("partition_screen", args.out)))
    return 0


def _partition(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    runtime.load(native.current(cfg).lib_dir)  # the configured build (cpu, cuda or vulkan)
    family = args.family or cfg.family
    tasks = load_panel_spec(args.tasks)
    arms = _arms(args)
    ngl = args.gpu_layers if args.gpu_layers is not None else gpu_layers(cfg)
    meta = run_partition(
        family=family,
        tasks=tasks,
        out=args.out,
        cap=args.cap,
        arms=arms,
        n_ctx=args.n_ctx,
        threads=args.threads,
        repeats=args.repeats,
        keep_payloads=args.keep_payloads,
        models_dir=cfg.models_dir,
        families_file=config_families_file(cfg),
        gpu_layers=ngl,
    )
    print(partition_summary(T.read_records("partition", args.out), T.read_records("kv_diff", args.out)))
    for p in meta["problems"]:
        print(f"problem: {p}")
    return 1 if meta["problems"] else 0


def _crosses(args: argparse.Namespace) -> int:
    pair = _pair(args)
    tasks = _task_ids(args.tasks)
    sels = [s.strip() for s in args.selectors.split(",") if s.strip()] or None
    summ = run_crosses(
        partition_dir=args.partition,
        out=args.out,
        pair=pair,  # type: ignore[arg-type]
        tasks=tasks,
        selectors=sels,
        repeats=args.repeats,
        boundary=args.boundary,
        n_div=args.divergent,
        n_stable=args.stable,
        parallel=max(1, args.jobs),
    )
    print(crosses_summary(T.read_records("crosses", args.out), T.read_records("frontier", args.out)))
    return 0 if summ["controls_ok"] and summ["repeats_agree"] else 1


def _projection(args: argparse.Namespace) -> int:
    pair = _pair(args)
    cfg = load_config(args.config)
    build = native.current(cfg)
    runtime.load(build.lib_dir)
    backend = args.backend
    if backend == "auto":
        backend = BACKEND_DEVICES.get(str(cfg.native.backend), "CPU")
    doc = projection.run_projection(
        partition_dir=args.partition,
        out=args.out,
        pair=pair,  # type: ignore[arg-type]
        tasks=_task_ids(args.tasks),
        backend=backend,
        layers=tuple(int(v) for v in args.layers.split(",") if v.strip()),
        tool=args.tool or build.tool(OPREPLAY_TOOL),
    )
    print(projection.summary(doc))
    return projection.exit_code(doc)


def _summary(args: argparse.Namespace) -> int:
    if not args.partition and not args.crosses:
        raise UsageError("give --partition and/or --crosses")
    if args.partition:
        print(
            partition_summary(
                T.read_records("partition", args.partition),
                T.read_records("kv_diff", args.partition),
                b_arm=args.b_arm,
            )
        )
    if args.crosses:
        print(crosses_summary(T.read_records("crosses", args.crosses), T.read_records("frontier", args.crosses)))
    return 0


def _inspect(args: argparse.Namespace) -> int:
    pl = kv.read_payload(args.payload)
    if pl.kind == "kv":
        layout = kv.parse_state(pl.body)
        if args.model_sha256:
            kv.check_kv_payload(
                pl,
                model_sha256=args.model_sha256,
                n_ctx=args.n_ctx if args.n_ctx else pl.header.get("n_ctx"),
                source=args.payload,
            )
        h = {k: v for k, v in pl.header.items() if k not in ("positions", "layers")}
        h["positions"] = f"{min(layout.positions)}..{max(layout.positions)}"
        h["layers"] = layout.n_layer
    else:
        h = dict(pl.header)
    print(json.dumps(h, indent=2, sort_keys=True))
    print(f"OK: {args.payload}")
    return 0


STEPS = {
    "screen": _screen,
    "partition": _partition,
    "crosses": _crosses,
    "projection": _projection,
    "summary": _summary,
    "inspect": _inspect,
}


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "state_command", None)
    if cmd is None:
        raise UsageError("refspec state needs a step: screen, partition, crosses, projection, summary or inspect")
    step = STEPS.get(cmd)
    if step is None:
        raise UsageError(f"unknown step {cmd!r}")
    return step(args)
