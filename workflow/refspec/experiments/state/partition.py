"""The partition study (paper §6.1, S4): ``refspec state partition``.

For every input the prompt is prefilled by several arms that differ only in how the prompt is
partitioned (see :mod:`refspec.experiments.state`), then continued by natural greedy decoding
in the same context. Writes the ``partition`` and ``kv_diff`` tables, ``partition.json`` and
the kept payloads.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core import tables as T
from ...core.endpoint import Endpoint, first_difference
from ...core.errors import ConfigError, DecodeError, UsageError
from ...core.fsutil import atomic_write_text
from ...core.hashing import sha256_bytes
from ...core.panels import prompt_tokens
from ...engine.transaction import greedy_continuation
from ...native.models import ensure_family
from ...native.runtime import Context, ContextSpec, Model, top2_margin
from ...native.vulkan import process_device_env
from . import kvstate as kv

DEFAULT_SPLITS = (32, 64, 96, 128, -1)
DEFAULT_UB_SWEEP = (1,)


# --------------------------------------------------------------------------- arms


@dataclass(frozen=True)
class PartitionArm:
    name: str
    ub: int  # physical micro-batch capacity of the context
    split: int | None  # external split point (None: one caller); negative counts from the end

    def chunks(self, n: int) -> tuple[list[int], bool]:
        """External callers' sizes for a prompt of n tokens, and whether the split degenerates to one caller."""
        if self.split is None:
            return [n], False
        s = self.split if self.split > 0 else n + self.split
        if 0 < s < n:
            return [s, n - s], False
        return [n], True

    def record(self) -> dict:
        return {"name": self.name, "ub": self.ub, "split": self.split}


def split_name(s: int) -> str:
    return f"S{s}" if s > 0 else f"Sn{s}"


def partition_arms(
    *,
    ub_a: int = 512,
    ub_c: int = 128,
    b_split: int = 128,
    splits: Sequence[int] = DEFAULT_SPLITS,
    ub_sweep: Sequence[int] = DEFAULT_UB_SWEEP,
) -> list[PartitionArm]:
    arms = [PartitionArm("A", ub_a, None), PartitionArm("B", ub_a, b_split), PartitionArm("C", ub_c, None)]
    for s in splits:
        if s == 0:
            raise ConfigError("a split point of 0 is not a split")
        if s == b_split:
            continue  # that point of the sweep is B
        arms.append(PartitionArm(split_name(s), ub_a, int(s)))
    for u in ub_sweep:
        if u < 1:
            raise ConfigError(f"micro-batch {u} < 1")
        if u in (ub_a, ub_c):
            continue  # A / C
        arms.append(PartitionArm(f"U{u}", int(u), None))
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate partition arms: {names}")
    return arms


# --------------------------------------------------------------------------- decoding pieces


def prefill(ctx, prompt: Sequence[int], chunks: Sequence[int]) -> np.ndarray:
    """Submit the prompt as the given callers; only the final prompt position requests logits."""
    ctx.begin_request()
    ctx.set_phase("prefill")
    pos = 0
    logits = None
    n = len(prompt)
    for c in chunks:
        last = pos + c == n
        rows = ctx.decode(list(prompt[pos : pos + c]), pos, outputs="last" if last else [])
        pos += c
        if last:
            logits = rows[0].copy()
    if logits is None or pos != n:
        raise DecodeError(f"partition {list(chunks)} does not cover the prompt of {n} tokens")
    if ctx.pos_max() + 1 != n:
        raise DecodeError(f"after prefill the KV holds {ctx.pos_max() + 1} positions, expected {n}")
    return logits


def prefill_state(ctx, prompt: Sequence[int], chunks: Sequence[int]) -> tuple[np.ndarray, bytes, dict[str, int]]:
    """:func:`prefill`, then the state it left: the initial logits, the raw sequence state of
    sequence 0 and the prefill's counters (callers, micrographs)."""
    ctx.reset_counters()
    logits = prefill(ctx, prompt, chunks)
    counters = ctx.counters()
    return logits, kv.export_state(ctx), counters


def state_columns(
    arm: PartitionArm, n: int, chunks: Sequence[int], degenerate: bool, counters: dict, logits: np.ndarray, raw: bytes
) -> dict:
    """The columns the partition study and the partition screen share for one arm's prefill of one input."""
    return {
        "prompt_len": n,
        "ub": arm.ub,
        "partition": list(chunks),
        "degenerate": degenerate,
        "callers": counters["callers"],
        "micrographs": counters["micrographs"],
        "initial_token": int(np.argmax(logits)),
        "initial_margin": float(top2_margin(logits)),
        "logits_sha256": kv.logits_sha256(logits),
        "kv_sha256": sha256_bytes(raw),
        "kv_bytes": len(raw),
    }


def continue_greedy(ctx, model, logits: np.ndarray, pos: int, cap: int, *, keep_rows: bool = False):
    """Natural greedy continuation from a pending state: the initial logits give output 0.

    Returns the endpoint and, with ``keep_rows``, the logits row behind every output.
    """
    rows: list[np.ndarray] = []
    keep = (lambda row: rows.append(np.array(row, dtype=np.float32, copy=True))) if keep_rows else None
    generated = greedy_continuation(ctx, model, logits, pos, cap, each_row=keep)
    eog = model.is_eog(generated[-1])
    return Endpoint(tuple(generated), eog, "eog" if eog else "cap"), rows


def classes(values: Sequence[str]) -> list[int]:
    """Equivalence-class ids in order of first appearance (the first value is class 0)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(v, len(seen)) for v in values]


def task_slug(task_id: str) -> str:
    return task_id.replace("/", "_")


def load_partition(pdir: Path) -> tuple[dict, list[dict]]:
    """A finished partition campaign's ``partition.json`` and its ``partition`` rows."""
    meta_p = pdir / "partition.json"
    if not meta_p.is_file():
        raise UsageError(f"{pdir} holds no partition.json: run `refspec state partition` first")
    meta = json.loads(meta_p.read_text(encoding="utf-8"))
    return meta, T.read_records("partition", pdir)


# --------------------------------------------------------------------------- partition campaign


@dataclass
class _Study:
    """What every input of one partition campaign shares."""

    family: str
    model: Model
    model_sha256: str
    out: Path
    arms: list[PartitionArm]
    cap: int
    n_ctx: int
    n_batch: int
    threads: int
    repeats: int
    keep_payloads: bool
    progress: bool
    t_start: float
    contexts: dict[int, Context]

    def ctx_for(self, ub: int) -> Context:
        if ub not in self.contexts:
            spec = ContextSpec(n_ctx=self.n_ctx, n_batch=self.n_batch, n_ubatch=ub, threads=self.threads)
            self.contexts[ub] = Context(self.model, spec)
        return self.contexts[ub]


def _run_arms(st: _Study, task, prompt: list[int], problems: list[str]) -> tuple[dict[str, dict], dict[str, bytes]]:
    """Every arm's repeats on one input: prefill, export the KV, continue greedily."""
    n = len(prompt)
    per_arm: dict[str, dict] = {}
    raws: dict[str, bytes] = {}
    for arm in st.arms:
        chunks, degenerate = arm.chunks(n)
        ctx = st.ctx_for(arm.ub)
        reps = []
        for rep in range(1, st.repeats + 1):
            logits, raw, counters = prefill_state(ctx, prompt, chunks)
            ep, _ = continue_greedy(ctx, st.model, logits, n, st.cap)
            reps.append((rep, logits, raw, ep, counters))
        rep1 = reps[0]
        for rep, logits, raw, ep, counters in reps:
            if ep != rep1[3] or raw != rep1[2] or not np.array_equal(logits, rep1[1]):
                problems.append(f"{task.task_id} {arm.name}: repeat {rep} differs from repeat 1")
        raws[arm.name] = rep1[2]
        per_arm[arm.name] = {"chunks": chunks, "degenerate": degenerate, "reps": reps}
        if st.progress:
            el = time.time() - st.t_start
            print(  # contract: --progress lines on stderr
                f"[partition {el:6.0f}s] {task.task_id} n={n} {arm.name}: {len(rep1[3].tokens)} tokens "
                f"kv {rep1[2] and sha256_bytes(rep1[2])[:10]}",
                file=sys.stderr,
                flush=True,
            )
    return per_arm, raws


def _write_payloads(st: _Study, task, arm: PartitionArm, info: dict, n: int) -> tuple[str, str]:
    """Write an arm's KV and initial-logits payloads; their paths relative to the output folder."""
    _rep, logits, raw, _ep, _c = info["reps"][0]
    meta = {
        "task_id": task.task_id,
        "arm": arm.name,
        "prompt_len": n,
        "partition": info["chunks"],
        "ub": arm.ub,
        "family": st.family,
    }
    msha = st.model_sha256
    pdir = st.out / "payloads" / task_slug(task.task_id)
    kv.kv_payload(raw, model_sha256=msha, n_ctx=st.n_ctx, meta=meta).write(pdir / f"{arm.name}.kv")
    kv.logits_payload(logits, model_sha256=msha, meta=meta).write(pdir / f"{arm.name}.logits")
    return (
        f"payloads/{task_slug(task.task_id)}/{arm.name}.kv",
        f"payloads/{task_slug(task.task_id)}/{arm.name}.logits",
    )


def _partition_row(st: _Study, task, arm: PartitionArm, info: dict, n: int, rep_rec, a_ep: Endpoint) -> dict:
    rep, logits, raw, ep, counters = rep_rec
    fd = first_difference(a_ep, ep)
    rec = ep.record()
    return {
        "family": st.family,
        "task_id": task.task_id,
        "arm": arm.name,
        "repeat": rep,
        **state_columns(arm, n, info["chunks"], info["degenerate"], counters, logits, raw),
        "cap": st.cap,
        "endpoint_sha256": ep.sha256,
        "tokens": rec["tokens"],
        "n": rec["n"],
        "eog": rec["eog"],
        "last_token": rec["last_token"],
        "stop_reason": rec["stop_reason"],
        "first_diff_vs_A": fd,
    }


def _task_rows(st: _Study, task, n: int, per_arm: dict[str, dict], raws: dict[str, bytes]) -> tuple[list, list]:
    """One input's ``partition`` rows (with the arms' classes and kept payloads) and ``kv_diff`` rows."""
    rows: list[dict] = []
    diff_rows: list[dict] = []
    names = [a.name for a in st.arms]
    a_rec = per_arm["A"]["reps"][0]
    ep_cls = classes([per_arm[x]["reps"][0][3].sha256 for x in names])
    kv_cls = classes([sha256_bytes(raws[x]) for x in names])
    lg_cls = classes([kv.logits_sha256(per_arm[x]["reps"][0][1]) for x in names])
    for j, arm in enumerate(st.arms):
        info = per_arm[arm.name]
        keep = st.keep_payloads or arm.name in ("A", "B") or kv_cls[j] != 0 or lg_cls[j] != 0
        kv_path = lg_path = None
        if keep:
            kv_path, lg_path = _write_payloads(st, task, arm, info, n)
        for rep_rec in info["reps"]:
            row = _partition_row(st, task, arm, info, n, rep_rec, a_rec[3])
            row.update(
                {
                    "endpoint_class": ep_cls[j],
                    "kv_class": kv_cls[j],
                    "logits_class": lg_cls[j],
                    "kv_payload": kv_path,
                    "logits_payload": lg_path,
                }
            )
            rows.append(row)
        if arm.name != "A" and raws[arm.name] != raws["A"]:
            for d in kv.layer_differences(raws["A"], raws[arm.name]):
                diff_rows.append({"family": st.family, "task_id": task.task_id, "arm_a": "A", "arm_b": arm.name, **d})
    return rows, diff_rows


def _check_prompt(task, n: int, cap: int, n_ctx: int, n_batch: int) -> None:
    if n + cap > n_ctx:
        raise ConfigError(f"{task.task_id}: prompt of {n} tokens plus cap {cap} exceeds n_ctx {n_ctx}")
    if n > n_batch:
        raise ConfigError(f"{task.task_id}: prompt of {n} tokens exceeds one caller of {n_batch} tokens")


def run_partition(
    *,
    family: str,
    tasks,
    out: str | Path,
    cap: int = 64,
    arms: Sequence[PartitionArm] | None = None,
    n_ctx: int = 1024,
    threads: int = 1,
    repeats: int = 1,
    keep_payloads: bool = False,
    models_dir=None,
    families_file=None,
    progress: bool = True,
    gpu_layers: int = 0,
) -> dict:
    """Run the partition campaign and write ``partition`` and ``kv_diff`` tables plus payloads to ``out``.

    ``gpu_layers`` is the target's n_gpu_layers (-1 every layer); the placement llama.cpp
    actually made is recorded in ``partition.json`` and the crosses' processes use the same.
    """
    arms = list(arms or partition_arms())
    if arms[0].name != "A":
        raise ConfigError("the first partition arm must be A")
    out = Path(out)
    (out / "payloads").mkdir(parents=True, exist_ok=True)
    files = ensure_family(family, models_dir=models_dir, families_file=families_file)
    model = Model(files.target.path, sha256=files.target.sha256, n_gpu_layers=gpu_layers, require_placement=True)
    msha = files.target.sha256
    n_batch = max(max(a.ub for a in arms), 512)
    st = _Study(
        family, model, msha, out, arms, cap, n_ctx, n_batch, threads, repeats, keep_payloads, progress, time.time(), {}
    )
    rows: list[dict] = []
    diff_rows: list[dict] = []
    problems: list[str] = []
    for task in tasks:
        prompt = prompt_tokens(model, task)
        n = len(prompt)
        _check_prompt(task, n, cap, n_ctx, n_batch)
        per_arm, raws = _run_arms(st, task, prompt, problems)
        task_rows, task_diffs = _task_rows(st, task, n, per_arm, raws)
        rows += task_rows
        diff_rows += task_diffs
        del raws, per_arm
    T.write_table(rows, "partition", out)
    T.write_table(diff_rows, "kv_diff", out)
    meta = {
        "family": family,
        "model_sha256": msha,
        "model_path": str(files.target.path),
        "n_ctx": n_ctx,
        "n_batch": n_batch,
        "threads": threads,
        "cap": cap,
        "repeats": repeats,
        "gpu_layers": gpu_layers,
        "placement": {k: v for k, v in model.placement.items() if k != "devices"},
        "arms": [a.record() for a in arms],
        "tasks": [t.task_id for t in tasks],
        "problems": problems,
        "lib_dir": os.environ.get("LLAMA_CPP_LIB_PATH"),
        "device_env": process_device_env(),  # the Vulkan device the partition ran on, for the crosses
        "n_layer": model.n_layer,
    }
    atomic_write_text(out / "partition.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    for c in st.contexts.values():
        c.close()
    return meta
