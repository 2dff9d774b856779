"""State formation and transfer studies (paper §6.1-6.2, S4, S5): ``refspec state``.

Partition campaign (``refspec state partition``)
    For every input the prompt is prefilled by several arms that differ only in
    how the prompt is partitioned, then continued by natural greedy decoding
    (target only, one token per caller) in the same context:

    * ``A``  -- micro-batch ``--ub-a`` (512), the whole prompt in one caller;
    * ``B``  -- the same context, the prompt split externally into ``--b-split``
      (128) tokens plus the remainder (two callers);
    * ``C``  -- micro-batch ``--ub-c`` (128), the whole prompt in one caller,
      partitioned by the runtime;
    * ``S<s>`` -- external split sweep at ``s`` tokens (``--splits``; a negative
      ``s`` counts from the end, ``Sn-1`` = all but the last token, then one);
    * ``U<u>`` -- runtime micro-batch sweep (``--ub-sweep``), whole prompt in one caller.

    Only the final prompt position requests logits (output capacity one).
    Recorded per input and arm: the complete endpoint, the initial FP32 logits
    (sha256; payload file when kept), the sequence KV bytes
    (``llama_state_seq_get_data``; sha256; payload file when kept), the first
    output difference from ``A`` and the equivalence classes of the arms by
    identical endpoint, identical KV and identical logits. Where two arms' KV
    bytes differ, per-layer K/V differences are tabled (``kv_diff``).

Crosses (``refspec state crosses``)
    A common receiver (a fresh context) restores a sequence KV payload and its
    positions with ``llama_state_seq_set_data``, applies the greedy sampler to
    the recipient's stored initial logits (the generated prefix is empty and
    that token is pending), then continues greedy decoding. For a donor pair
    (X, Y) of partition arms and both directions, the controls run first --
    ``EMPTY`` (own-path sham: the recipient's own state; it must reproduce the
    recipient's natural endpoint) and ``ALL`` (whole-KV cross) -- then the subset
    selectors (layer-0 K, layer-0 V, layer-0 K+V, K of every layer, V of every
    layer, early/middle/late layer groups, prefix/tail positions), spliced
    from the donor into the recipient's payload using the actual storage
    strides. Each (task, repeat) runs in its own fresh process. Outcomes are
    classified as the recipient's natural endpoint, the donor's (only when the
    two differ) or a third trajectory; the bytes an intervention actually
    changed are recorded. Frontier contrasts (S5.2): for the panels
    L0 = (EMPTY, L0_K, L0_V, L0_KV), KV = (EMPTY, K_ALL, V_ALL, ALL) and
    POSITION = (EMPTY, PREFIX, TAIL, ALL)
    the first output where the four trajectories cease to agree is located and
    the full logits there are compared: the additive prediction of the two
    single components against the actual joint effect.

Tables: ``partition``, ``kv_diff`` (partition), ``crosses``, ``frontier``
(crosses); documented in ``anc/state.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.endpoint import Endpoint, first_difference
from ..core.errors import ConfigError, DecodeError, IntegrityError, RefspecError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_bytes
from ..engine import kvstate as kv
from ..native.vulkan import process_device_env
from . import projection

DEFAULT_SPLITS = (32, 64, 96, 128, -1)
DEFAULT_UB_SWEEP = (1,)
CONTROL_SELECTORS = ("EMPTY", "ALL")
PANELS = {
    "L0": ("EMPTY", "L0_K", "L0_V", "L0_KV"),
    "KV": ("EMPTY", "K_ALL", "V_ALL", "ALL"),
    "POSITION": ("EMPTY", "PREFIX", "TAIL", "ALL"),
}
OUTCOME_CODES = {"recipient": "=", "donor": "D", "third": "3"}


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


def continue_greedy(ctx, model, logits: np.ndarray, pos: int, cap: int, *, keep_rows: bool = False):
    """Natural greedy continuation from a pending state: the initial logits give output 0.

    Returns the endpoint and, with ``keep_rows``, the logits row behind every output.
    """
    from ..engine.transaction import greedy_continuation

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


# --------------------------------------------------------------------------- partition campaign


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
    from ..core import tables as T
    from ..core.panels import prompt_tokens
    from ..native.models import ensure_family
    from ..native.runtime import Context, ContextSpec, Model, load, top2_margin

    arms = list(arms or partition_arms())
    if arms[0].name != "A":
        raise ConfigError("the first partition arm must be A")
    out = Path(out)
    (out / "payloads").mkdir(parents=True, exist_ok=True)
    files = ensure_family(family, models_dir=models_dir, families_file=families_file)
    model = Model(files.target.path, sha256=files.target.sha256, n_gpu_layers=gpu_layers, require_placement=True)
    msha = files.target.sha256
    load()
    n_batch = max(max(a.ub for a in arms), 512)
    contexts: dict[int, object] = {}

    def ctx_for(ub: int):
        if ub not in contexts:
            contexts[ub] = Context(model, ContextSpec(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=ub, threads=threads))
        return contexts[ub]

    rows: list[dict] = []
    diff_rows: list[dict] = []
    problems: list[str] = []
    t_start = time.time()
    for ti, task in enumerate(tasks):
        prompt = prompt_tokens(model, task)
        n = len(prompt)
        if n + cap > n_ctx:
            raise ConfigError(f"{task.task_id}: prompt of {n} tokens plus cap {cap} exceeds n_ctx {n_ctx}")
        if n > n_batch:
            raise ConfigError(f"{task.task_id}: prompt of {n} tokens exceeds one caller of {n_batch} tokens")
        per_arm: dict[str, dict] = {}
        raws: dict[str, bytes] = {}
        for arm in arms:
            chunks, degenerate = arm.chunks(n)
            ctx = ctx_for(arm.ub)
            reps = []
            for rep in range(1, repeats + 1):
                ctx.reset_counters()
                logits = prefill(ctx, prompt, chunks)
                counters = ctx.counters()
                raw = kv.export_state(ctx)
                ep, _ = continue_greedy(ctx, model, logits, n, cap)
                reps.append((rep, logits, raw, ep, counters))
            rep1 = reps[0]
            for rep, logits, raw, ep, counters in reps:
                if ep != rep1[3] or raw != rep1[2] or not np.array_equal(logits, rep1[1]):
                    problems.append(f"{task.task_id} {arm.name}: repeat {rep} differs from repeat 1")
            raws[arm.name] = rep1[2]
            per_arm[arm.name] = {"chunks": chunks, "degenerate": degenerate, "reps": reps}
            if progress:
                el = time.time() - t_start
                print(
                    f"[partition {el:6.0f}s] {task.task_id} n={n} {arm.name}: {len(rep1[3].tokens)} tokens "
                    f"kv {rep1[2] and sha256_bytes(rep1[2])[:10]}",
                    file=sys.stderr,
                    flush=True,
                )
        # classes and payloads
        names = [a.name for a in arms]
        a_rec = per_arm["A"]["reps"][0]
        ep_cls = classes([per_arm[x]["reps"][0][3].sha256 for x in names])
        kv_cls = classes([sha256_bytes(raws[x]) for x in names])
        lg_cls = classes([kv.logits_sha256(per_arm[x]["reps"][0][1]) for x in names])
        pdir = out / "payloads" / task_slug(task.task_id)
        for j, arm in enumerate(arms):
            info = per_arm[arm.name]
            keep = keep_payloads or arm.name in ("A", "B") or kv_cls[j] != 0 or lg_cls[j] != 0
            kv_path = lg_path = None
            if keep:
                _rep, logits, raw, _ep, _c = info["reps"][0]
                meta = {
                    "task_id": task.task_id,
                    "arm": arm.name,
                    "prompt_len": n,
                    "partition": info["chunks"],
                    "ub": arm.ub,
                    "family": family,
                }
                kv.kv_payload(raw, model_sha256=msha, n_ctx=n_ctx, meta=meta).write(pdir / f"{arm.name}.kv")
                kv.logits_payload(logits, model_sha256=msha, meta=meta).write(pdir / f"{arm.name}.logits")
                kv_path = f"payloads/{task_slug(task.task_id)}/{arm.name}.kv"
                lg_path = f"payloads/{task_slug(task.task_id)}/{arm.name}.logits"
            for rep, logits, raw, ep, counters in info["reps"]:
                fd = first_difference(a_rec[3], ep)
                rec = ep.record()
                rows.append(
                    {
                        "family": family,
                        "task_id": task.task_id,
                        "arm": arm.name,
                        "repeat": rep,
                        "prompt_len": n,
                        "ub": arm.ub,
                        "partition": list(info["chunks"]),
                        "degenerate": info["degenerate"],
                        "cap": cap,
                        "callers": counters["callers"],
                        "micrographs": counters["micrographs"],
                        "endpoint_sha256": ep.sha256,
                        "tokens": rec["tokens"],
                        "n": rec["n"],
                        "eog": rec["eog"],
                        "last_token": rec["last_token"],
                        "stop_reason": rec["stop_reason"],
                        "initial_token": int(np.argmax(logits)),
                        "initial_margin": float(top2_margin(logits)),
                        "logits_sha256": kv.logits_sha256(logits),
                        "kv_sha256": sha256_bytes(raw),
                        "kv_bytes": len(raw),
                        "first_diff_vs_A": fd,
                        "endpoint_class": ep_cls[j],
                        "kv_class": kv_cls[j],
                        "logits_class": lg_cls[j],
                        "kv_payload": kv_path,
                        "logits_payload": lg_path,
                    }
                )
            if arm.name != "A" and raws[arm.name] != raws["A"]:
                for d in kv.layer_differences(raws["A"], raws[arm.name]):
                    diff_rows.append({"family": family, "task_id": task.task_id, "arm_a": "A", "arm_b": arm.name, **d})
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
    for c in contexts.values():
        c.close()
    return meta


def partition_summary(rows: list[dict], diff_rows: list[dict] | None = None, *, b_arm: str = "B") -> str:
    """Per input: prompt length, the arms' endpoint/KV/logits classes and first differences from A."""
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        if r["repeat"] == 1:
            by_task.setdefault(r["task_id"], []).append(r)
    if not by_task:
        return "no partition rows"
    arms = [r["arm"] for r in next(iter(by_task.values()))]
    lines = [
        "Partition classes per input (endpoint/KV/logits class ids; 0 = A's class; "
        "@i = first generated index differing from A; * = split degenerates to one caller)"
    ]
    w = max(10, *(len(a) + 6 for a in arms))
    lines.append(f"{'task':14s} {'n':>4s} " + " ".join(f"{a:>{w}s}" for a in arms))
    n_ab = n_state = 0
    n_any = 0
    for tid, rs in by_task.items():
        cells = []
        for r in rs:
            c = f"{r['endpoint_class']}/{r['kv_class']}/{r['logits_class']}"
            if r["first_diff_vs_A"] is not None:
                c += f"@{r['first_diff_vs_A']}"
            if r["degenerate"]:
                c += "*"
            cells.append(f"{c:>{w}s}")
        lines.append(f"{tid:14s} {rs[0]['prompt_len']:4d} " + " ".join(cells))
        d = {r["arm"]: r for r in rs}
        if b_arm in d and d[b_arm]["endpoint_sha256"] != d["A"]["endpoint_sha256"]:
            n_ab += 1
        if b_arm in d and (
            d[b_arm]["kv_sha256"] != d["A"]["kv_sha256"] or d[b_arm]["logits_sha256"] != d["A"]["logits_sha256"]
        ):
            n_state += 1
        if any(r["endpoint_class"] for r in rs):
            n_any += 1
    nt = len(by_task)
    lines.append(
        f"inputs with A != {b_arm} endpoints: {n_ab} of {nt}; with A != {b_arm} KV or logits: {n_state} of {nt}; "
        f"with any arm's endpoint != A: {n_any} of {nt}"
    )
    for a in arms[1:]:
        ne = sum(1 for rs in by_task.values() for r in rs if r["arm"] == a and r["endpoint_class"] != 0)
        nk = sum(1 for rs in by_task.values() for r in rs if r["arm"] == a and r["kv_class"] != 0)
        nl = sum(1 for rs in by_task.values() for r in rs if r["arm"] == a and r["logits_class"] != 0)
        lines.append(f"  {a:8s} vs A: endpoint differs on {ne}, KV differs on {nk}, initial logits differ on {nl}")
    if diff_rows:
        lines.append("KV byte differences from A (layers with any difference: K cells/V cells, max |diff|):")
        pairs: dict[tuple[str, str], list[dict]] = {}
        for d in diff_rows:
            pairs.setdefault((d["task_id"], d["arm_b"]), []).append(d)
        for (tid, arm), ds in pairs.items():
            layers: dict[int, dict] = {}
            for d in ds:
                layers.setdefault(d["layer"], {})[d["part"]] = d
            changed = [
                (il, p) for il, p in sorted(layers.items()) if p["K"]["bytes_differing"] or p["V"]["bytes_differing"]
            ]
            total = sum(d["bytes_differing"] for d in ds)
            if not changed:
                lines.append(f"  {tid} A vs {arm}: KV bytes identical (payload metadata only)")
                continue
            il0 = changed[0][0]
            first_pos = min(
                p[x]["first_position"] for _il, p in changed for x in ("K", "V") if p[x]["first_position"] is not None
            )
            desc = ", ".join(
                f"L{il}:{p['K']['cells_differing']}/{p['V']['cells_differing']}"
                f" {max(p['K']['max_abs'], p['V']['max_abs']):.3g}"
                for il, p in changed[:6]
            )
            more = f" ... ({len(changed)} layers)" if len(changed) > 6 else ""
            lines.append(
                f"  {tid} A vs {arm}: {total} bytes differ from layer {il0}, first position {first_pos}; {desc}{more}"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- the common receiver


def receive(
    ctx,
    model,
    payload: kv.Payload,
    init_logits: np.ndarray,
    cap: int,
    *,
    model_sha256: str,
    keep_rows: bool = False,
    source: str = "payload",
):
    """Restore a KV payload (validated first), sample the stored initial logits, continue greedily."""
    ctx.begin_request()
    layout = kv.import_state(ctx, payload, model_sha256=model_sha256, source=source)
    n = layout.cell_count
    return continue_greedy(ctx, model, init_logits, n, cap, keep_rows=keep_rows)


def frontier_contrast(
    panel: str, names: Sequence[str], eps: dict[str, Endpoint], rows: dict[str, list[np.ndarray]]
) -> dict:
    """Additive versus joint effect at the first output where the panel's four trajectories disagree.

    ``names`` = (EMPTY, first, second, joint). Effects are logits differences from
    EMPTY at the frontier output t*: additive = d_first + d_second, actual = d_joint.
    The fixed token pair is (EMPTY's argmax, the first other argmax among joint,
    first, second); its score is logit[a] - logit[b].
    """
    e, x1, x2, j = names
    trajs = [eps[x].tokens for x in names]
    t_star = None
    for t in range(max(len(x) for x in trajs)):
        toks = {x[t] if t < len(x) else None for x in trajs}
        if len(toks) > 1:
            t_star = t
            break
    rec = {
        "panel": panel,
        "arms": ",".join(names),
        "frontier": t_star,
        "argmax": [],
        "token_a": None,
        "token_b": None,
        "score_empty": None,
        "d_first": None,
        "d_second": None,
        "additive": None,
        "actual": None,
        "interaction": None,
        "max_abs_delta_first": None,
        "max_abs_delta_second": None,
        "max_abs_delta_joint": None,
        "max_abs_interaction": None,
        "rows_sha256": None,
        "note": None,
    }
    if t_star is None:
        rec["note"] = "the four trajectories agree to the end"
        return rec
    if any(t_star >= len(rows[x]) for x in names):
        rec["note"] = "a trajectory ended before the frontier"
        return rec
    v = {x: rows[x][t_star].astype(np.float64) for x in names}
    am = [int(np.argmax(rows[x][t_star])) for x in names]
    a = am[0]
    b = next((am[i] for i in (3, 1, 2) if am[i] != a), None)
    d1, d2, dj = v[x1] - v[e], v[x2] - v[e], v[j] - v[e]
    inter = dj - (d1 + d2)
    rec.update(
        {
            "argmax": am,
            "token_a": a,
            "token_b": b,
            "max_abs_delta_first": float(np.abs(d1).max()),
            "max_abs_delta_second": float(np.abs(d2).max()),
            "max_abs_delta_joint": float(np.abs(dj).max()),
            "max_abs_interaction": float(np.abs(inter).max()),
            "rows_sha256": sha256_bytes(b"".join(rows[x][t_star].astype("<f4").tobytes() for x in names)),
        }
    )
    if b is not None:
        s = {x: float(v[x][a] - v[x][b]) for x in names}
        rec.update(
            {
                "score_empty": s[e],
                "d_first": s[x1] - s[e],
                "d_second": s[x2] - s[e],
                "additive": (s[x1] - s[e]) + (s[x2] - s[e]),
                "actual": s[j] - s[e],
            }
        )
        rec["interaction"] = rec["actual"] - rec["additive"]
    else:
        rec["note"] = "all four argmax tokens agree at the frontier (a trajectory differs only by ending)"
    return rec


def run_worker_job(job: dict) -> dict:
    """One (task, repeat): controls then subsets in both directions, in this process."""
    from ..native.runtime import Context, ContextSpec, Model, load

    load(job.get("lib_dir"))
    model = Model(
        job["model_path"],
        sha256=job["model_sha256"],
        n_gpu_layers=int(job.get("gpu_layers", 0)),
        require_placement=True,
    )
    msha = job["model_sha256"]
    spec = ContextSpec(n_ctx=job["n_ctx"], n_batch=job["n_batch"], n_ubatch=job["ub"], threads=job["threads"])
    cap = int(job["cap"])
    order = list(job["selectors"])
    panel_arms = {x for names in PANELS.values() for x in names} if job.get("frontier", True) else set()
    results, frontier = [], []
    dirs = []
    for d in job["directions"]:
        rec_kv = kv.read_payload(d["recipient_kv"])
        don_kv = kv.read_payload(d["donor_kv"])
        rec_lg = kv.read_payload(d["recipient_logits"])
        if rec_lg.kind != "logits" or rec_lg.header["model_sha256"] != msha:
            raise IntegrityError(f"{d['recipient_logits']}: not logits of model {msha}")
        dirs.append((d, rec_kv, don_kv, rec_lg.logits()))
    # controls first (both directions), then the subsets
    ctrl = [s for s in order if s in CONTROL_SELECTORS]
    subs = [s for s in order if s not in CONTROL_SELECTORS]
    kept: dict[tuple[str, str], tuple[Endpoint, list[np.ndarray]]] = {}
    for group in (ctrl, subs):
        for d, rec_kv, don_kv, logits in dirs:
            for name in group:
                sel = kv.make_selector(name, model.n_layer, int(job["boundary"]))
                spliced, facts = kv.splice(rec_kv, don_kv, sel, meta={"donor": d["donor"]})
                # the spliced payload goes through the same checks as a file would
                payload = kv.parse_payload(spliced.to_bytes(), source=f"{d['recipient']}<-{d['donor']}:{name}")
                ctx = Context(model, spec)
                try:
                    ep, rows = receive(
                        ctx,
                        model,
                        payload,
                        logits,
                        cap,
                        model_sha256=msha,
                        keep_rows=name in panel_arms,
                        source=f"{name} payload",
                    )
                finally:
                    ctx.close()
                if name in panel_arms:
                    kept[(d["direction"], name)] = (ep, rows)
                results.append(
                    {
                        "direction": d["direction"],
                        "donor": d["donor"],
                        "recipient": d["recipient"],
                        "selector": name,
                        "selector_record": sel.record(),
                        **facts,
                        "spliced_kv_sha256": payload.sha256,
                        "recipient_kv_sha256": rec_kv.sha256,
                        "donor_kv_sha256": don_kv.sha256,
                        "recipient_logits_sha256": kv.logits_sha256(logits),
                        "endpoint": ep.record(),
                        "endpoint_sha256": ep.sha256,
                    }
                )
    for d, *_ in dirs:
        for panel, names in PANELS.items():
            if not all((d["direction"], x) in kept for x in names):
                continue
            eps = {x: kept[(d["direction"], x)][0] for x in names}
            rws = {x: kept[(d["direction"], x)][1] for x in names}
            frontier.append(
                {
                    "direction": d["direction"],
                    "donor": d["donor"],
                    "recipient": d["recipient"],
                    **frontier_contrast(panel, names, eps, rws),
                }
            )
    return {
        "task_id": job["task_id"],
        "repeat": job["repeat"],
        "pid": os.getpid(),
        "results": results,
        "frontier": frontier,
    }


def worker_main(job_path: str, out_path: str) -> int:
    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    try:
        res = run_worker_job(job)
    except RefspecError as e:
        print(f"refspec state worker: error: {e}", file=sys.stderr)
        return e.exit_code
    atomic_write_text(out_path, json.dumps(res, sort_keys=True) + "\n")
    return 0


def spawn_worker(job: dict, workdir: str | Path, tag: str, *, timeout: float | None = None) -> dict:
    """Run one job in a fresh Python process; return its result (raise on failure)."""
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    jp, op = wd / f"{tag}.job.json", wd / f"{tag}.out.json"
    atomic_write_text(jp, json.dumps(job, sort_keys=True, indent=1) + "\n")
    if op.exists():
        op.unlink()
    from ..engine.spawn import spawn
    from ..native.runtime import load

    lib_dir = job.get("lib_dir") or os.environ.get("LLAMA_CPP_LIB_PATH")
    if not lib_dir:
        load()
        lib_dir = os.environ["LLAMA_CPP_LIB_PATH"]
    code = (
        "import sys; from refspec.experiments.state import worker_main; sys.exit(worker_main(sys.argv[1], sys.argv[2]))"
    )
    log_path = wd / f"{tag}.log"
    log_path.write_bytes(b"")
    # the job's paths are the caller's: the worker runs in the caller's folder
    proc = spawn(
        [sys.executable, "-c", code, str(jp), str(op)],
        lib_dir,
        int(job.get("threads", 1)),
        log_path=log_path,
        cwd=Path.cwd(),
        extra=job.get("env") or None,
    )
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise DecodeError(f"state worker {tag} did not finish within {timeout} s (log {log_path})") from None
    if rc != 0 or not op.is_file():
        tail = log_path.read_text(errors="replace")[-2000:]
        raise DecodeError(f"state worker {tag} failed (exit {rc}):\n{tail}")
    return json.loads(op.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- crosses campaign


def _load_partition(pdir: Path) -> tuple[dict, list[dict]]:
    from ..core import tables as T

    meta_p = pdir / "partition.json"
    if not meta_p.is_file():
        raise UsageError(f"{pdir} holds no partition.json: run `refspec state partition` first")
    meta = json.loads(meta_p.read_text(encoding="utf-8"))
    return meta, T.read_records("partition", pdir)


def choose_tasks(prows: list[dict], x: str, y: str, n_div: int = 2, n_stable: int = 2) -> list[str]:
    """Inputs for the subset matrix: divergent (X/Y endpoints differ) first, then stable ones
    (equal endpoints; those whose X/Y KV differs preferred), each in panel order."""
    by = {}
    for r in prows:
        if r["repeat"] == 1 and r["arm"] in (x, y):
            by.setdefault(r["task_id"], {})[r["arm"]] = r
    div, stable_kv, stable_same = [], [], []
    for tid, d in by.items():
        if x not in d or y not in d:
            continue
        if d[x]["endpoint_sha256"] != d[y]["endpoint_sha256"]:
            div.append(tid)
        elif d[x]["kv_sha256"] != d[y]["kv_sha256"] or d[x]["logits_sha256"] != d[y]["logits_sha256"]:
            stable_kv.append(tid)
        else:
            stable_same.append(tid)
    return div[:n_div] + (stable_kv + stable_same)[:n_stable]


def classify(ep_sha: str, recipient_sha: str, donor_sha: str) -> str:
    if ep_sha == recipient_sha:
        return "recipient"
    if ep_sha == donor_sha:
        return "donor"
    return "third"


def run_crosses(
    *,
    partition_dir: str | Path,
    out: str | Path,
    pair: tuple[str, str] = ("A", "B"),
    tasks: Sequence[str] | None = None,
    selectors: Sequence[str] | None = None,
    repeats: int = 2,
    boundary: int | None = None,
    progress: bool = True,
    n_div: int = 2,
    n_stable: int = 2,
    parallel: int = 1,
) -> dict:
    """Run the controls and the subset interventions for a donor pair, each (task, repeat) in a fresh process."""
    from ..core import tables as T

    pdir = Path(partition_dir)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta, prows = _load_partition(pdir)
    x, y = pair
    arms = {a["name"]: a for a in meta["arms"]}
    for a in (x, y):
        if a not in arms:
            raise UsageError(f"arm {a!r} is not in the partition campaign (arms: {', '.join(arms)})")
    if x == y:
        raise UsageError("the donor pair needs two different arms")
    if tasks is None:
        tasks = choose_tasks(prows, x, y, n_div=n_div, n_stable=n_stable)
        if not tasks:
            raise UsageError(f"no input of the partition campaign has rows for both {x} and {y}")
    sels = list(selectors or kv.SELECTOR_NAMES)
    for s in CONTROL_SELECTORS:
        if s not in sels:
            sels.insert(CONTROL_SELECTORS.index(s), s)
    for s in sels:
        if s not in kv.SELECTOR_NAMES:
            raise UsageError(f"unknown selector {s!r} (known: {', '.join(kv.SELECTOR_NAMES)})")
    by = {(r["task_id"], r["arm"]): r for r in prows if r["repeat"] == 1}
    jobs_list = []
    for tid in tasks:
        rx, ry = by.get((tid, x)), by.get((tid, y))
        if rx is None or ry is None:
            raise UsageError(f"{tid}: the partition campaign has no rows for arms {x} and {y}")
        for r in (rx, ry):
            if not r["kv_payload"] or not r["logits_payload"]:
                raise UsageError(f"{tid} {r['arm']}: no payload was kept (rerun the partition with --keep-payloads)")
        # prefix/tail boundary: --boundary, else the pair's external split point (B: 128), else 128 when
        # the prompt is longer, else half the prompt
        b = boundary
        if b is None:
            n = rx["prompt_len"]
            b = next((c[0] for c in (rx["partition"], ry["partition"]) if len(c) > 1), 128 if n > 128 else n // 2)
        dirs = []
        for donor, rec in ((rx, ry), (ry, rx)):
            dirs.append(
                {
                    "direction": f"{donor['arm']}->{rec['arm']}",
                    "donor": donor["arm"],
                    "recipient": rec["arm"],
                    "donor_kv": str(pdir / donor["kv_payload"]),
                    "recipient_kv": str(pdir / rec["kv_payload"]),
                    "recipient_logits": str(pdir / rec["logits_payload"]),
                }
            )
        for rep in range(1, repeats + 1):
            jobs_list.append(
                {
                    "lib_dir": meta.get("lib_dir"),
                    "env": meta.get("device_env") or {},
                    "model_path": meta["model_path"],
                    "model_sha256": meta["model_sha256"],
                    "n_ctx": meta["n_ctx"],
                    "n_batch": meta["n_batch"],
                    "ub": arms["A"]["ub"] if "A" in arms else 512,
                    "threads": meta["threads"],
                    "cap": rx["cap"],
                    "gpu_layers": int(meta.get("gpu_layers", 0)),
                    "task_id": tid,
                    "repeat": rep,
                    "boundary": int(b),
                    "selectors": sels,
                    "directions": dirs,
                }
            )
    t0 = time.time()

    def one(i: int, job: dict) -> tuple[dict, dict]:
        tag = f"{task_slug(job['task_id'])}.r{job['repeat']}"
        if progress:
            print(
                f"[crosses {time.time() - t0:6.0f}s] process {i + 1}/{len(work)}: {job['task_id']} repeat "
                f"{job['repeat']}",
                file=sys.stderr,
                flush=True,
            )
        return job, spawn_worker(job, out / "work", tag)

    work = jobs_list
    if parallel > 1:  # independent fresh processes, up to `parallel` at a time; results in job order
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=parallel) as ex:
            results = list(ex.map(lambda a: one(*a), enumerate(work)))
    else:
        results = [one(i, job) for i, job in enumerate(work)]
    rows, frows = _assemble(results, by, meta)
    T.write_table(rows, "crosses", out)
    T.write_table(frows, "frontier", out)
    summary = {
        "partition": str(pdir),
        "pair": [x, y],
        "tasks": list(tasks),
        "selectors": sels,
        "repeats": repeats,
        "family": meta["family"],
        "n_rows": len(rows),
        "controls_ok": all(r["controls_ok"] for r in rows),
        "repeats_agree": all(r["repeats_agree"] for r in rows),
    }
    atomic_write_text(out / "crosses.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _assemble(results, by: dict, meta: dict) -> tuple[list[dict], list[dict]]:
    rows, frows = [], []
    # repeat agreement per coordinate (task, direction, selector)
    seen: dict[tuple, set] = {}
    fseen: dict[tuple, set] = {}
    for job, res in results:
        for r in res["results"]:
            seen.setdefault((job["task_id"], r["direction"], r["selector"]), set()).add(
                (r["endpoint_sha256"], r["spliced_kv_sha256"])
            )
        for f in res["frontier"]:
            fseen.setdefault((job["task_id"], f["direction"], f["panel"]), set()).add(json.dumps(f, sort_keys=True))
    # sham controls per (task, repeat): EMPTY must reproduce the recipient's natural endpoint
    ctrl_ok: dict[tuple, bool] = {}
    for job, res in results:
        ok = True
        for r in res["results"]:
            if r["selector"] == "EMPTY":
                nat = by[(job["task_id"], r["recipient"])]["endpoint_sha256"]
                ok = ok and r["endpoint_sha256"] == nat and r["changed_bytes"] == 0
        ctrl_ok[(job["task_id"], job["repeat"])] = ok
    for job, res in results:
        tid = job["task_id"]
        for r in res["results"]:
            nat_r = by[(tid, r["recipient"])]
            nat_d = by[(tid, r["donor"])]
            ep = Endpoint.from_record(r["endpoint"])
            ep_r = Endpoint.from_record({k: nat_r[k] for k in ("tokens", "eog", "stop_reason")})
            ep_d = Endpoint.from_record({k: nat_d[k] for k in ("tokens", "eog", "stop_reason")})
            sel = r["selector_record"]
            rec = ep.record()
            rows.append(
                {
                    "family": meta["family"],
                    "task_id": tid,
                    "prompt_len": nat_r["prompt_len"],
                    "direction": r["direction"],
                    "donor_arm": r["donor"],
                    "recipient_arm": r["recipient"],
                    "selector": r["selector"],
                    "kind": "control" if r["selector"] in CONTROL_SELECTORS else "subset",
                    "repeat": job["repeat"],
                    "process": f"pid{res['pid']}",
                    "layers": sel["layers"],
                    "parts": "".join(sel["parts"]) or "-",
                    "p0": sel["p0"],
                    "p1": sel["p1"],
                    "selected_bytes": r["selected_bytes"],
                    "changed_bytes": r["changed_bytes"],
                    "value_bytes": r["value_bytes"],
                    "bytes_changed": r["changed_bytes"] > 0,
                    "spliced_kv_sha256": r["spliced_kv_sha256"],
                    "recipient_kv_sha256": r["recipient_kv_sha256"],
                    "donor_kv_sha256": r["donor_kv_sha256"],
                    "recipient_logits_sha256": r["recipient_logits_sha256"],
                    "endpoint_sha256": r["endpoint_sha256"],
                    "tokens": rec["tokens"],
                    "n": rec["n"],
                    "eog": rec["eog"],
                    "last_token": rec["last_token"],
                    "stop_reason": rec["stop_reason"],
                    "outcome": classify(r["endpoint_sha256"], nat_r["endpoint_sha256"], nat_d["endpoint_sha256"]),
                    "distinguishable": nat_r["endpoint_sha256"] != nat_d["endpoint_sha256"],
                    "first_diff_vs_recipient": first_difference(ep_r, ep),
                    "first_diff_vs_donor": first_difference(ep_d, ep),
                    "repeats_agree": len(seen[(tid, r["direction"], r["selector"])]) == 1,
                    "controls_ok": ctrl_ok[(tid, job["repeat"])],
                }
            )
        for f in res["frontier"]:
            frows.append(
                {
                    "family": meta["family"],
                    "task_id": tid,
                    "direction": f["direction"],
                    "donor_arm": f["donor"],
                    "recipient_arm": f["recipient"],
                    "repeat": job["repeat"],
                    **{
                        k: f[k]
                        for k in (
                            "panel",
                            "arms",
                            "frontier",
                            "argmax",
                            "token_a",
                            "token_b",
                            "score_empty",
                            "d_first",
                            "d_second",
                            "additive",
                            "actual",
                            "interaction",
                            "max_abs_delta_first",
                            "max_abs_delta_second",
                            "max_abs_delta_joint",
                            "max_abs_interaction",
                            "rows_sha256",
                            "note",
                        )
                    },
                    "repeats_agree": len(fseen[(tid, f["direction"], f["panel"])]) == 1,
                }
            )
    return rows, frows


def crosses_summary(rows: list[dict], frows: list[dict] | None = None) -> str:
    """The subset matrix (paper Table S11 shape): selectors x (task, direction)."""
    if not rows:
        return "no crosses rows"
    cols: list[tuple[str, str]] = []
    for r in rows:
        c = (r["task_id"], r["direction"])
        if c not in cols:
            cols.append(c)
    sels = []
    for r in rows:
        if r["selector"] not in sels:
            sels.append(r["selector"])
    cell: dict[tuple, list[dict]] = {}
    for r in rows:
        cell.setdefault((r["selector"], r["task_id"], r["direction"]), []).append(r)
    lines = [
        "Subset matrix: outcome per selector and (task, donor->recipient); '=' recipient endpoint retained, "
        "'D' donor endpoint (distinguishable), '3' third trajectory; '.' suffix: no byte changed; "
        "'!' repeats disagree; '?' sham failed"
    ]
    w = max(max(len(d) for _t, d in cols), 7) + 1
    tasks = []
    for t, _d in cols:
        if t not in tasks:
            tasks.append(t)
    head1 = f"{'':8s} " + " ".join(f"{t:>{w * 2 + 1}s}" for t in tasks)
    head2 = f"{'selector':8s} " + " ".join(f"{d:>{w}s}" for _t, d in cols)
    lines += [head1, head2]
    counts = {"recipient": 0, "donor": 0, "third": 0}
    unchanged_recipient = changed_recipient = 0
    for s in sels:
        out = []
        for t, d in cols:
            rs = cell.get((s, t, d), [])
            if not rs:
                out.append(f"{'':>{w}s}")
                continue
            r = rs[0]
            code = OUTCOME_CODES[r["outcome"]]
            if not r["bytes_changed"] and r["selector"] != "EMPTY":
                code += "."
            if not all(x["repeats_agree"] for x in rs):
                code += "!"
            if not all(x["controls_ok"] for x in rs):
                code += "?"
            out.append(f"{code:>{w}s}")
            if r["kind"] == "subset":
                for x in rs:
                    counts[x["outcome"]] += 1
                    if x["outcome"] == "recipient":
                        if x["bytes_changed"]:
                            changed_recipient += 1
                        else:
                            unchanged_recipient += 1
        lines.append(f"{s:8s} " + " ".join(out))
    n_sub = sum(counts.values())
    n_proc = len({r["process"] for r in rows})
    lines.append(
        f"{n_sub} subset requests in {n_proc} processes: donor {counts['donor']}, third {counts['third']}, "
        f"recipient {counts['recipient']} (bytes changed in {changed_recipient}, unchanged in "
        f"{unchanged_recipient}); controls ok: {all(r['controls_ok'] for r in rows)}; "
        f"repeats agree: {all(r['repeats_agree'] for r in rows)}"
    )
    shams = [r for r in rows if r["selector"] == "EMPTY"]
    lines.append(
        f"own-path shams reproducing the recipient endpoint: "
        f"{sum(r['outcome'] == 'recipient' for r in shams)} of {len(shams)}"
    )
    if frows:
        lines.append(
            "Frontier contrasts (logits at the first output where a panel's four trajectories disagree; "
            "pair score = logit[a] - logit[b]):"
        )
        for f in frows:
            if f["repeat"] != 1:
                continue
            head = f"  {f['task_id']} {f['direction']:>9s} {f['panel']:8s}"
            if f["frontier"] is None or f["max_abs_interaction"] is None:
                lines.append(f"{head} no frontier ({f['note']})")
                continue
            pair = f"{f['token_a']}/{f['token_b']}"
            if f["additive"] is None:
                lines.append(
                    f"{head} t*={f['frontier']} argmax {f['argmax']} ({f['note']}); "
                    f"max|interaction| {f['max_abs_interaction']:.6g}"
                )
                continue
            lines.append(
                f"{head} t*={f['frontier']} argmax {'/'.join(map(str, f['argmax']))} pair {pair}: "
                f"additive {f['additive']:.6g} actual {f['actual']:.6g} interaction {f['interaction']:.6g}; "
                f"max|joint-(first+second)| {f['max_abs_interaction']:.6g}, max|joint| "
                f"{f['max_abs_delta_joint']:.6g}{'' if f['repeats_agree'] else ' (repeats disagree)'}"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def _int_list(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()] if s else []


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="state_command", metavar="STEP")
    sp = sub.add_parser("partition", help="prefill partition campaign (arms A, B, C and sweeps)")
    sp.add_argument("--config", help="workflow config (default config/config.yaml)")
    sp.add_argument("--family", help="family (default: the config's family)")
    sp.add_argument(
        "--tasks", default="0-7", help="HumanEval indices (0-7), humaneval:0-7, or a panel file (default 0-7)"
    )
    sp.add_argument("--cap", type=int, default=64, help="maximum new tokens (default 64)")
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
        default=",".join(map(str, DEFAULT_UB_SWEEP)),
        help="runtime micro-batch sweep, whole prompt in one caller (default 1; '' for none)",
    )
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
    sc.add_argument(
        "--tasks",
        default="auto",
        help="task ids (comma-separated) or auto: two divergent then two stable inputs (default)",
    )
    sc.add_argument("--jobs", type=int, default=1, help="worker processes run at a time (default 1)")
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
    projection.add_parser(sub)
    ss = sub.add_parser("summary", help="print the summaries of finished campaigns")
    ss.add_argument("--partition", help="partition output folder")
    ss.add_argument("--crosses", help="crosses output folder")
    ss.add_argument("--b-arm", default="B", help="the arm compared with A in the partition counts (default B)")
    si = sub.add_parser("inspect", help="validate a payload file and print its header")
    si.add_argument("payload")
    si.add_argument("--model-sha256", help="also check that the KV payload belongs to this model")
    si.add_argument("--n-ctx", type=int, help="also check the context size")


def run(args: argparse.Namespace) -> int:
    from ..core import tables as T

    cmd = getattr(args, "state_command", None)
    if cmd is None:
        raise UsageError("refspec state needs a step: partition, crosses, projection, summary or inspect")
    if cmd == "partition":
        from ..core.config import load_config
        from ..native import build as native
        from ..native import runtime
        from ..native.models import config_families_file

        cfg = load_config(args.config)
        runtime.load(native.current(cfg).lib_dir)  # the configured build (cpu, cuda or vulkan)
        family = args.family or cfg["family"]
        from ..core.panels import load_panel_spec

        tasks = load_panel_spec(args.tasks)
        arms = partition_arms(
            ub_a=args.ub_a,
            ub_c=args.ub_c,
            b_split=args.b_split,
            splits=_int_list(args.splits),
            ub_sweep=_int_list(args.ub_sweep),
        )
        from ..core.config import gpu_layers

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
            models_dir=cfg.get("models_dir"),
            families_file=config_families_file(cfg),
            gpu_layers=ngl,
        )
        print(partition_summary(T.read_records("partition", args.out), T.read_records("kv_diff", args.out)))
        for p in meta["problems"]:
            print(f"problem: {p}")
        return 1 if meta["problems"] else 0
    if cmd == "crosses":
        pair = tuple(s.strip() for s in args.pair.split(","))
        if len(pair) != 2:
            raise UsageError("--pair takes two arm names, e.g. A,B")
        tasks = (
            None
            if args.tasks == "auto"
            else [t if "/" in t else f"HumanEval/{t}" for t in (s.strip() for s in args.tasks.split(",")) if t]
        )
        sels = [s.strip() for s in args.selectors.split(",") if s.strip()] or None
        summ = run_crosses(
            partition_dir=args.partition,
            out=args.out,
            pair=pair,
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
    if cmd == "projection":
        return projection.run(args)
    if cmd == "summary":
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
    if cmd == "inspect":
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
    raise UsageError(f"unknown step {cmd!r}")
