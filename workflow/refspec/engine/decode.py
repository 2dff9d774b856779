"""In-process greedy decoding of a panel with several arms, compared with R.

:func:`decode_panel` is the plain decoder over the bindings: it loads the family
once, runs every task with every arm in this process and returns, per request, whether
its complete endpoint equals the micro-batch-1 reference and where it first diverges
(``refspec decode``, :mod:`refspec.commands.decode`, prints the summary). Timed, isolated runs go through workers (``refspec qualify``);
this command is for inspecting the native layer directly.
"""

from __future__ import annotations

import sys

from ..core.arms import REFERENCE_ARM, select
from ..core.endpoint import compare_endpoints
from ..core.errors import ConfigError
from ..core.panels import prompt_tokens
from ..native.models import ensure_family
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
    print(  # contract: progress on stderr, where the target was placed
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
                cmp = compare_endpoints(ref.endpoint, res.endpoint)
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
