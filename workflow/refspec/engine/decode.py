"""In-process greedy decoding of a panel with several arms, compared with R.

``refspec decode`` is the plain decoder over the bindings: it loads the family
once, runs every task with every arm in this process and prints, per arm, how
many complete endpoints equal the micro-batch-1 reference and where the others
first diverge. Timed, isolated runs go through workers (``refspec qualify``);
this command is for inspecting the native layer directly.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..core.arms import REFERENCE_ARM, select
from ..core.config import load_config
from ..core.endpoint import compare
from ..core.errors import ConfigError
from ..core.panels import load_panel_spec, prompt_tokens
from ..native.models import config_families_file, ensure_family
from ..native.runtime import Model
from .transaction import ArmRunner


def decode_panel(
    family: str,
    tasks,
    arm_names: list[str],
    *,
    cap: int | None = None,
    draft: str | None = None,
    threads: int | None = None,
    models_dir=None,
    families_file=None,
    progress: bool = True,
    gpu_layers: int = 0,
) -> list[dict]:
    """Decode every task with every arm in this process; ``gpu_layers`` is n_gpu_layers of both models."""
    files = ensure_family(family, models_dir=models_dir, families_file=families_file)
    arms = select(arm_names)
    if arms[0].name != REFERENCE_ARM:
        raise ConfigError("the first arm must be the reference R")
    target = Model(files.target.path, sha256=files.target.sha256, n_gpu_layers=gpu_layers, require_placement=True)
    draft_model = None
    if any(a.speculative for a in arms):
        d = files.draft(draft)
        draft_model = Model(d.path, sha256=d.sha256, n_gpu_layers=gpu_layers, require_placement=True)
    print(
        f"decode: target on {target.placement['device']} ({target.placement['offloaded']}/"
        f"{target.placement['offloadable']} layers offloaded)",
        file=sys.stderr,
    )
    prompts = [prompt_tokens(target, t) for t in tasks]
    rows: list[dict] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(arms) * len(tasks), desc="decode", unit="req", file=sys.stderr)
    refs = {}
    for arm in arms:
        arm = arm.with_(cap=cap) if cap else arm
        arm = arm.with_(threads=threads) if threads else arm
        with ArmRunner(arm, target, draft_model) as runner:
            for task, prompt in zip(tasks, prompts):
                res = runner.run(prompt)
                if arm.name == REFERENCE_ARM:
                    refs[task.task_id] = res
                ref = refs[task.task_id]
                cmp = compare(ref.endpoint, res.endpoint)
                margin = None
                if not cmp.qualified and cmp.first_diff_index is not None and cmp.first_diff_index < len(ref.margins):
                    margin = ref.margins[cmp.first_diff_index]
                rows.append(
                    {
                        "task_id": task.task_id,
                        "arm": arm.name,
                        "qualified": cmp.qualified,
                        "first_diff_index": cmp.first_diff_index,
                        "ref_margin": margin,
                        "n": res.endpoint.n,
                        "stop_reason": res.endpoint.stop_reason,
                        "acceptance": res.stats.acceptance,
                        **res.stats.flat(),
                        "seconds": res.seconds,
                        "device": target.placement["device"],
                        "gpu_layers": target.placement["offloaded"],
                    }
                )
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    return rows


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
    from ..core.config import gpu_layers
    from ..native import build as native
    from ..native import runtime

    cfg = load_config(args.config)
    runtime.load(native.current(cfg).lib_dir)  # the configured build (cpu, cuda or vulkan)
    ngl = args.gpu_layers if args.gpu_layers is not None else gpu_layers(cfg)
    rows = decode_panel(
        args.family or cfg["family"],
        load_panel_spec(args.panel),
        args.arms.split(","),
        cap=args.cap,
        draft=args.draft,
        threads=args.threads,
        models_dir=cfg.get("models_dir"),
        families_file=config_families_file(cfg),
        gpu_layers=ngl,
    )
    if args.json:
        from ..core.fsutil import atomic_write_text

        atomic_write_text(args.json, json.dumps(rows, indent=1) + "\n")
    print(summarize(rows))
    return 0
