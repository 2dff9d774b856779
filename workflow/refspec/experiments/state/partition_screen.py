"""The partition screen (``refspec state screen``): where the way a prompt is partitioned changes
the state a continuation consumes, found before the partition study runs.

A state study only means something on inputs where its partition arms differ. The screen looks
for them by a rule fixed before it runs (written into ``partition-screen.json`` with its results):

1. Every input of a *discovery panel* is prefilled by each partition arm (``A``, ``B``, ``C``, the
   split sweep and, if asked, the micro-batch sweep; :func:`.partition.partition_arms`) with
   output capacity one: only the last prompt position requests logits, and nothing is decoded.
2. Per input, the arms fall into equivalence classes by identical sequence KV bytes and by
   identical initial logits (numbered in arm order, so ``A``'s class is 0). An input is
   *exposed* when some arm's KV or logits class is not ``A``'s.
3. The *pair* is the configured one, or (``auto``) the first of ``A/B``, ``A/C``, ``B/C``, then
   ``A`` with each further arm in arm order, whose two states (KV or logits) differ on at least
   one input: the paper's natural pair where the backend shows it.
4. The *study inputs* are the first ``inputs`` inputs, in panel order, on which the pair's states
   differ; the *controls* are the first ``controls`` inputs on which no arm differs from ``A``.

The outputs are frozen: ``partition-screen.json`` (the panel and its sha256, the arms, the rule,
the pair, the exposed inputs, the study inputs and the controls), the ``partition_screen`` table
(one row per input and arm) and ``exposed-panel.jsonl``, the panel the partition study reads
(study inputs, then controls). When no input is exposed the record says so (``vacuous``) and the
exposed panel holds the controls only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...core import tables as T
from ...core.errors import ConfigError
from ...core.fsutil import atomic_write_text
from ...core.panels import EXPOSED_PANEL, Task, prompt_tokens, read_frozen_screen, resolve_panel, write_panel
from ...native.models import ensure_family
from ...native.runtime import Context, ContextSpec, Model
from .partition import PartitionArm, classes, prefill_state, state_columns

SCREEN_FORMAT = 1
SCREEN_RECORD = "partition-screen.json"
RULE = (
    "every partition arm prefills each input of the discovery panel with output capacity one, nothing "
    "decoded; exposed: an input on which some arm's KV bytes or initial logits differ from A's; pair: "
    "the configured one, or the first of A/B, A/C, B/C, then A with each further arm, whose states "
    "differ on some input; study inputs: the first `inputs` inputs in panel order on which the pair "
    "differs; controls: the first `controls` inputs on which no arm differs from A"
)


def pair_order(arms: Sequence[str]) -> list[tuple[str, str]]:
    """The candidate pairs of ``auto``, in the order the rule tries them."""
    first = [("A", "B"), ("A", "C"), ("B", "C")]
    return first + [("A", x) for x in arms if x not in ("A", "B", "C")]


def pair_differs(rows: Sequence[dict], task_id: str, pair: tuple[str, str]) -> bool:
    """Whether the two arms' states (KV bytes or initial logits) differ on one input."""
    by = {r["arm"]: r for r in rows if r["task_id"] == task_id}
    x, y = by[pair[0]], by[pair[1]]
    return x["kv_sha256"] != y["kv_sha256"] or x["logits_sha256"] != y["logits_sha256"]


def choose(
    rows: Sequence[dict], tasks: Sequence[str], arms: Sequence[str], *, pair, inputs: int, controls: int
) -> dict:
    """The rule's choices from the screen's rows (pure: check.py recomputes the same).

    ``pair`` is a pair of arm names or ``None`` (``auto``). Returns ``exposed``, ``pair`` (``None``
    when ``auto`` finds no pair that differs), ``study`` and ``controls`` (task IDs)."""
    exposed = [t for t in tasks if any(r["differs"] for r in rows if r["task_id"] == t)]
    if pair is None:
        pair = next((p for p in pair_order(arms) if any(pair_differs(rows, t, p) for t in tasks)), None)
    else:
        pair = tuple(pair)
        missing = [a for a in pair if a not in arms]
        if missing:
            raise ConfigError(f"the pair names arms the screen does not run: {missing} (arms: {list(arms)})")
    study = [t for t in tasks if pair is not None and pair_differs(rows, t, pair)][:inputs]
    ctrl = [t for t in tasks if t not in exposed][:controls]
    return {"exposed": exposed, "pair": list(pair) if pair else None, "study": study, "controls": ctrl}


def _input_rows(
    model: Model,
    task: Task,
    arms: Sequence[PartitionArm],
    contexts: dict[int, Context],
    *,
    family: str,
    n_ctx: int,
    n_batch: int,
    threads: int,
    bar: Any,
) -> list[dict]:
    """One input prefilled by every arm (each in a context of its micro-batch, made once and kept in
    ``contexts``): a row per arm with its state's digests and its KV and logits classes."""
    prompt = prompt_tokens(model, task)
    n = len(prompt)
    if n > n_batch or n >= n_ctx:
        raise ConfigError(f"{task.task_id}: prompt of {n} tokens exceeds one caller of {n_batch} tokens")
    per: list[dict] = []
    for arm in arms:
        if arm.ub not in contexts:
            spec = ContextSpec(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=arm.ub, threads=threads)
            contexts[arm.ub] = Context(model, spec)
        ctx = contexts[arm.ub]
        chunks, degenerate = arm.chunks(n)
        logits, raw, counters = prefill_state(ctx, prompt, chunks)
        per.append(
            {"family": family, "task_id": task.task_id, "arm": arm.name}
            | state_columns(arm, n, chunks, degenerate, counters, logits, raw)
        )
        if bar is not None:
            bar.update(1)
    kv_cls = classes([r["kv_sha256"] for r in per])
    lg_cls = classes([r["logits_sha256"] for r in per])
    for r, k, g in zip(per, kv_cls, lg_cls):
        r.update({"kv_class": k, "logits_class": g, "differs": k != 0 or g != 0})
    return per


def _screen_rows(
    model: Model,
    tasks: Sequence[Task],
    arms: Sequence[PartitionArm],
    *,
    family: str,
    n_ctx: int,
    threads: int,
    progress: bool,
) -> list[dict]:
    """The screen's table: every input of the panel prefilled by every arm, in panel and arm order (the
    contexts are closed when it ends, or fails)."""
    n_batch = max(max(a.ub for a in arms), 512)
    contexts: dict[int, Context] = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks) * len(arms), desc="partition screen", unit="prefill", file=sys.stderr)
    rows: list[dict] = []
    try:
        for task in tasks:
            rows += _input_rows(
                model, task, arms, contexts, family=family, n_ctx=n_ctx, n_batch=n_batch, threads=threads, bar=bar
            )
    finally:
        if bar is not None:
            bar.close()
        for c in contexts.values():
            c.close()
    return rows


def run_partition_screen(
    *,
    family: str,
    panel,
    arms: Sequence[PartitionArm],
    out: str | Path,
    pair: Sequence[str] | None = None,
    inputs: int = 2,
    controls: int = 1,
    n_ctx: int = 1024,
    threads: int = 1,
    models_dir=None,
    families_file=None,
    gpu_layers: int = 0,
    progress: bool = True,
) -> dict:
    """Run the screen and write its frozen outputs under ``out``; returns the record."""
    if inputs < 1 or controls < 0:
        raise ConfigError("the partition screen needs inputs of at least 1 and controls of at least 0")
    arms = list(arms)
    if [a.name for a in arms[:3]] != ["A", "B", "C"]:
        raise ConfigError("the partition screen's first arms must be A, B and C")
    tasks, prec = resolve_panel(panel)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = ensure_family(family, models_dir=models_dir, families_file=families_file)
    model = Model(files.target.path, sha256=files.target.sha256, n_gpu_layers=gpu_layers, require_placement=True)
    rows = _screen_rows(model, tasks, arms, family=family, n_ctx=n_ctx, threads=threads, progress=progress)
    ids = [t.task_id for t in tasks]
    names = [a.name for a in arms]
    pick = choose(rows, ids, names, pair=pair, inputs=inputs, controls=controls)
    T.write_table(rows, "partition_screen", out)
    by_id = {t.task_id: t for t in tasks}
    picked = [by_id[t] for t in pick["study"] + pick["controls"]]
    panel_sha = write_panel(picked, out / EXPOSED_PANEL) if picked else None
    record = {
        "format": SCREEN_FORMAT,
        "stage": "partition_screen",
        "family": family,
        "device": model.placement["device"],
        "model_sha256": files.target.sha256,
        "panel": prec,
        "arms": [a.record() for a in arms],
        "rule": RULE,
        "pair_rule": "auto" if pair is None else "configured",
        "inputs_wanted": inputs,
        "controls_wanted": controls,
        "n_ctx": n_ctx,
        "threads": threads,
        "vacuous": not pick["exposed"],
        **pick,
        "exposed_panel": {"file": EXPOSED_PANEL, "sha256": panel_sha, "tasks": [t.task_id for t in picked]},
    }
    atomic_write_text(out / SCREEN_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def summary(record: dict, rows: Sequence[dict]) -> str:
    """The screen's result in a few lines (the command prints it)."""
    n = len(record["panel"]["tasks"])
    lines = [
        f"partition screen ({record['family']} on {record['device']}): {n} inputs, arms "
        f"{', '.join(a['name'] for a in record['arms'])}; {len(record['exposed'])} exposed"
    ]
    for t in record["panel"]["tasks"]:
        rs = [r for r in rows if r["task_id"] == t]
        kvc = " ".join(f"{r['arm']}={r['kv_class']}" for r in rs)
        lgc = " ".join(f"{r['arm']}={r['logits_class']}" for r in rs)
        mark = "exposed" if t in record["exposed"] else "one class"
        lines.append(f"  {t} n={rs[0]['prompt_len']}: {mark}; kv {kvc}; logits {lgc}")
    if record["vacuous"]:
        lines.append(f"  vacuous: no exposed input in {n} screened")
    pair = "/".join(record["pair"]) if record["pair"] else "none differs"
    lines.append(f"  pair ({record['pair_rule']}): {pair}; study inputs: {', '.join(record['study']) or 'none'}")
    lines.append(f"  controls: {', '.join(record['controls']) or 'none'}")
    return "\n".join(lines)


def read_partition_screen(folder: str | Path) -> dict:
    """The frozen record of a partition-screen folder; its exposed panel must have the recorded digest."""
    return read_frozen_screen(
        folder,
        SCREEN_RECORD,
        missing="no partition screen here (run the partition screen stage first)",
        empty="the partition screen found no input to study (none exposed, no control)",
    )
