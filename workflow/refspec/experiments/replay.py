"""Numerical replay (E1): captured attention operands of the live target, replayed on frozen bytes.

For one family, 24 contexts: target layers ``0``, ``L // 2`` and ``L - 1`` × phase (prefill,
continuation) × ``q = 1..4`` occupied query rows. For each context the target runs three times
with the capture callback installed, once per layout (``mq``, ``pq``, ``qb``), and the eval
callback freezes, for the context's layer, the operands (Q, K, V, mask, softmax scale) exactly as
the graph saw them (``ne``, ``nb``, view offset and the bytes of the tensor they view) together
with the native stage outputs (``kq``, ``kq_soft_max``, ``kqv``). Each capture becomes one operand
file (``anc/operands.md``) with the native stages as ``ref.*`` tensors; the native replay tool
then rebuilds MQ, PQ, QB and QH attention on every file, twice, in two separate processes. QH (the
query-to-head view, the queries folded into the head batch axis) has no live capture here: it is
replayed on the operands the other layouts' graphs saw, and compared with PQ (``pq_eq_qh``).

Controls (``anc/e1.md``), each of which must pass before the context's numbers are claimed:

* observation: every capture is complete (the expected nodes, the requested layout active in the
  measured micro-batch, the operands consistent across the layer's nodes);
* own-path correspondence: replaying a layout's own capture with the same layout reproduces the
  native stage outputs bit for bit (mq, pq and qb);
* repeatability: the two replays of every (operand file, layout) are bitwise equal;
* capture on/off: the same request with and without the callback installed gives the same
  complete endpoint (a short greedy continuation after the measured rows).

Comparisons are made on identical operands, those captured from the native QB graph: PQ vs QB
and PQ vs QH (bitwise), MQ vs the repaired layouts (bitwise, largest finite absolute difference, largest ULP
distance, first differing element). The ``replay`` table has one row per context and stage.

A device that refuses a layout (the patched library refuses a graph whose layout nodes the
device does not support, e.g. QB's lifted query axis on ggml-vulkan at q >= 2) has no live
observation of that layout in that context: the refusal is recorded (``device_refused`` of the
context), the capture on/off and own-path controls of that layout do not apply, and the
comparisons use the PQ capture's operands instead (``comparison_layout``). The replay tool still
rebuilds every layout on those operands, and where it places a node the device refuses on
another backend, that fallback is observed and recorded (``fallback``). The continuation
history is prefilled with ``history_layout`` unless the device refuses it, then with PQ.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core import tables
from ..core.endpoint import Endpoint, first_difference
from ..core.errors import AdmissionError, RefspecError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_bytes
from ..core.layouts import CAPTURED_LAYOUTS, REPLAYED_LAYOUTS
from ..engine.transaction import greedy_continuation
from ..native import models, runtime
from ..native.runtime import Context, ContextSpec, layout_refusal
from . import bitwise, operands, replay_runner
from .capture import CAPTURED_STAGES, OperandCapture, operands_from_capture

STAGE_LABELS = {"kq": "QK", "kq_soft_max": "softmax", "kqv": "AV"}
PHASES = ("prefill", "continuation")
QUERY_WIDTHS = (1, 2, 3, 4)
COMPARISON_LAYOUT = "qb"  # the capture whose operands every layout is compared on
REPEATS = 2
PHASE_MASK = 3  # target prefill and target continuation: the layout is active in both phases

# The single fixed diagnostic input: a user turn (chat-templated with the family's template) and
# the first tokens of an assistant reply. Prefill contexts use the first q prompt tokens;
# continuation contexts prefill the whole prompt and decode the first q reply tokens.
PROMPT_TEXT = (
    "A bakery sells muffins for 3 dollars each and cookies for 2 dollars each. On Monday it sold "
    "48 muffins and twice as many cookies as muffins. On Tuesday it sold 15 fewer muffins than on "
    "Monday and 30 more cookies than on Monday. The owner pays 40 dollars a day for ingredients and "
    "25 dollars a day for rent. How much profit did the bakery make over the two days? Show the "
    "calculation for each day and give the final answer as a single number on the last line."
)
REPLY_TEXT = "On Monday the bakery sold 48 muffins"

# ------------------------------------------------------------------------------------------
# contexts and prompt


@dataclass(frozen=True)
class E1Context:
    family: str
    layer: int
    phase: str
    q: int

    @property
    def id(self) -> str:
        return f"L{self.layer:02d}-{self.phase}-q{self.q}"


def sampled_layers(n_layer: int) -> tuple[int, int, int]:
    """Target layers 0, floor(L/2) and L-1."""
    if n_layer < 1:
        raise UsageError(f"model has {n_layer} layers")
    return (0, n_layer // 2, n_layer - 1)


def contexts(
    family: str,
    n_layer: int,
    *,
    layers: Sequence[int] | None = None,
    phases: Sequence[str] = PHASES,
    qs: Sequence[int] = QUERY_WIDTHS,
) -> list[E1Context]:
    layers = tuple(layers) if layers is not None else sampled_layers(n_layer)
    for il in layers:
        if not 0 <= il < n_layer:
            raise UsageError(f"layer {il} outside 0..{n_layer - 1}")
    for ph in phases:
        if ph not in PHASES:
            raise UsageError(f"unknown phase {ph!r} (prefill, continuation)")
    for q in qs:
        if q not in QUERY_WIDTHS:
            raise UsageError(f"q={q} outside 1..4")
    return [E1Context(family, il, ph, q) for il in layers for ph in phases for q in qs]


@dataclass(frozen=True)
class Prompt:
    prefix: tuple[int, ...]  # the chat-templated prompt (continuation history)
    reply: tuple[int, ...]  # continuation rows

    def rows(self, phase: str, q: int) -> tuple[list[int], int]:
        """The measured rows and their first position."""
        if phase == "prefill":
            return list(self.prefix[:q]), 0
        return list(self.reply[:q]), len(self.prefix)

    def record(self) -> dict[str, Any]:
        return {"prefix_tokens": len(self.prefix), "prefix": list(self.prefix), "reply": list(self.reply)}


def make_prompt(model, text: str = PROMPT_TEXT, reply: str = REPLY_TEXT) -> Prompt:
    prefix = model.tokenize(model.chat_prompt(text), add_special=True, parse_special=True)
    rep = model.tokenize(reply, add_special=False, parse_special=False)
    if len(prefix) < max(QUERY_WIDTHS) or len(rep) < max(QUERY_WIDTHS):
        raise UsageError("the E1 prompt and reply need at least 4 tokens each")
    return Prompt(tuple(prefix), tuple(rep[: max(QUERY_WIDTHS)]))


@dataclass(frozen=True)
class Settings:
    n_ctx: int = 256
    n_ubatch: int = 4
    threads: int = 1
    history_layout: str = "qb"  # layout of the continuation history (same K/V for every layout)
    n_continue: int = 8  # greedy tokens after the measured rows (capture on/off endpoint)
    n_gpu_layers: int = 0
    backend: str = "CPU"  # ggml device of the replay tool
    replay_threads: int = 1

    def spec(self, layout: str) -> ContextSpec:
        return ContextSpec(
            n_ctx=self.n_ctx,
            n_batch=self.n_ctx,
            n_ubatch=self.n_ubatch,
            threads=self.threads,
            layout=layout,
            role="target",
            mask=PHASE_MASK,
        )


# ------------------------------------------------------------------------------------------
# native observation


@dataclass
class Observation:
    layout: str
    active_layout: str
    endpoint: Endpoint
    logits_sha256: str  # of the measured rows' logits (bit patterns)
    counters: dict[str, int]
    operands: operands.Operands | None = None
    error: str | None = None


def observe(
    model, ctx: E1Context, layout: str, prompt: Prompt, settings: Settings, *, capture: bool = True
) -> Observation:
    """One request: (history,) the measured q rows with ``layout`` active, then a greedy continuation.

    With ``capture`` the operand callback is installed and records the measured micrograph only.
    """
    cap = OperandCapture([ctx.layer]) if capture else None
    rows, pos0 = prompt.rows(ctx.phase, ctx.q)
    with Context(model, settings.spec(layout), capture=cap) as c:
        c.begin_request()
        if cap:
            cap.enabled = False
        if ctx.phase == "continuation":
            c.set_layout(settings.history_layout)
            c.decode(list(prompt.prefix), 0)
            c.set_layout(layout)
            c.set_phase("continuation")
        active = c.active_layout()
        before = c.counters()
        if cap:
            cap.enabled = True
        logits = c.decode(rows, pos0, outputs="all")
        if cap:
            cap.enabled = False
        after = c.counters()
        counters = {k: after[k] - before[k] for k in after}
        # greedy continuation (single rows) for the complete endpoint
        tokens = greedy_continuation(c, model, logits[-1], pos0 + len(rows), settings.n_continue)
    eog = model.is_eog(tokens[-1])
    endpoint = Endpoint(tuple(tokens), eog, "eog" if eog else "cap")
    obs = Observation(
        layout, active, endpoint, sha256_bytes(np.ascontiguousarray(logits).view(np.uint32).tobytes()), counters
    )
    if cap is not None:
        meta = {
            "family": ctx.family,
            "context": ctx.id,
            "layer": ctx.layer,
            "phase": ctx.phase,
            "q": ctx.q,
            "layout": layout,
            "pos0": pos0,
            "rows": rows,
            "model": str(model.path.name),
            "n_ubatch": settings.n_ubatch,
            "n_ctx": settings.n_ctx,
            "history_layout": settings.history_layout,
        }
        try:
            obs.operands = operands_from_capture(cap, ctx.layer, layout, ctx.q, meta)
        except (RefspecError, ValueError) as e:
            obs.error = f"{type(e).__name__}: {e}"
    return obs


@dataclass
class CapturedContext:
    """The native side of one context: operand files and the capture on/off endpoints."""

    context: E1Context
    files: dict[str, Path]  # layout -> operand file
    observations: dict[str, Observation]  # capture on
    controls_off: dict[str, Observation]  # capture off
    problems: list[str] = field(default_factory=list)  # observation control failures
    refused: dict[str, str] = field(default_factory=dict)  # layout -> the device's refusal (no observation)

    @property
    def comparison_layout(self) -> str:
        """The capture whose operands every layout is compared on: QB's, or PQ's where the device refused QB."""
        return "pq" if COMPARISON_LAYOUT in self.refused else COMPARISON_LAYOUT


def capture_context(model, ctx: E1Context, prompt: Prompt, settings: Settings, workdir: str | Path) -> CapturedContext:
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    on: dict[str, Observation] = {}
    off: dict[str, Observation] = {}
    problems: list[str] = []
    refused: dict[str, str] = {}
    for layout in CAPTURED_LAYOUTS:
        try:
            obs = observe(model, ctx, layout, prompt, settings, capture=True)
        except AdmissionError as e:  # the device refuses this layout here: recorded, never run elsewhere
            refused[layout] = str(e)
            continue
        on[layout] = obs
        off[layout] = observe(model, ctx, layout, prompt, settings, capture=False)
        if obs.active_layout != layout:
            problems.append(f"observation {layout}: active layout {obs.active_layout}")
        if obs.counters.get(f"micrographs_{layout}", 0) < 1:
            problems.append(f"observation {layout}: no {layout} micrograph in the measured decode")
        if obs.error or obs.operands is None:
            problems.append(f"observation {layout}: {obs.error or 'no operands'}")
            continue
        rows, pos0 = prompt.rows(ctx.phase, ctx.q)
        vis = _visible(obs.operands.logical_mask())
        if vis != [pos0 + j + 1 for j in range(len(rows))]:
            problems.append(f"observation {layout}: visible keys per query {vis}, expected causal from {pos0 + 1}")
        path = wd / f"{ctx.id}.{layout}.rsop"
        try:
            operands.write_operands(path, obs.operands)
        except operands.OperandError as e:
            problems.append(f"observation {layout}: operands refused: {e}")
            continue
        files[layout] = path
    if len(refused) == len(CAPTURED_LAYOUTS) or "pq" in refused and COMPARISON_LAYOUT in refused:
        problems.append("observation: the device refused every repaired layout: " + "; ".join(refused.values()))
    return CapturedContext(ctx, files, on, off, problems, refused)


# ------------------------------------------------------------------------------------------
# replay, controls, comparisons


def _canonical_ref(t: operands.OperandTensor, stage: str) -> np.ndarray:
    return operands._canonical(t, stage)  # the stage-file axis rules (anc/operands.md)


def _short(cmp: bitwise.ArrayComparison) -> str:
    return f"{cmp.n_diff}/{cmp.n_elements} elements differ, first at {list(cmp.first_diff or ())}"


def _visible(mask: np.ndarray) -> list[int]:
    return [int(x) for x in np.isfinite(mask).sum(axis=1)]


def _endpoint_controls(cc: CapturedContext, problems: list[str]) -> dict[str, dict]:
    """Capture on/off endpoints (of the layouts the device ran)."""
    endpoints = {}
    for layout in cc.observations:
        a, b = cc.observations[layout], cc.controls_off[layout]
        diff = first_difference(a.endpoint, b.endpoint)
        endpoints[layout] = {
            "capture_on": a.endpoint.record(),
            "capture_off_sha256": b.endpoint.sha256,
            "equal": diff is None,
            "logits_equal": a.logits_sha256 == b.logits_sha256,
            "counters": a.counters,
        }
        if diff is not None:
            problems.append(f"capture on/off {layout}: endpoints differ at token {diff}")
    return endpoints


def _replay_twice(
    cc: CapturedContext, tool: str | Path, settings: Settings, wd: Path, problems: list[str], detail: dict[str, Any]
) -> tuple[dict[tuple[str, str, int], dict[str, np.ndarray]], list[dict]]:
    """Two replays of every operand file with every layout, in two tool processes:
    the stages by (capture, layout, repeat) and the tool reports."""
    ctx = cc.context
    stages: dict[tuple[str, str, int], dict[str, np.ndarray]] = {}
    reports = []
    files = dict(cc.files)
    if not files:
        return stages, reports
    for rep in range(1, REPEATS + 1):
        jobs = [
            replay_runner.ReplayRun(path, REPLAYED_LAYOUTS, "none", wd / f"{ctx.id}.{lay}.r{rep}")
            for lay, path in files.items()
        ]
        try:
            report = replay_runner.run_replay(
                tool, jobs, backend=settings.backend, threads=settings.replay_threads, workdir=wd
            )
        except RefspecError as e:
            problems.append(f"replay {rep}: {e}")
            continue
        reports.append(
            {k: report.get(k) for k in ("backend", "sched_backends", "threads", "ggml_commit", "input_sha256")}
        )
        by_input = {str(p): lay for lay, p in files.items()}
        for job in report["jobs"]:
            src = by_input.get(job["input"])
            if job.get("status") != "ok" and job.get("error"):
                problems.append(f"replay {rep} {src}: {job['error']}")
            for ev in job.get("evaluations", []):
                if ev.get("status") != "ok":
                    problems.append(f"replay {rep} {src}/{ev.get('layout')}: {ev.get('error')}")
                    continue
                if ev.get("fallback"):
                    detail.setdefault("fallback", []).append(f"{src}/{ev['layout']} r{rep}")
                stages[(src, ev["layout"], rep)] = operands.read_stages(ev["stages"])
    return stages, reports


def _own_path(
    files: dict[str, Path], stages: dict, problems: list[str]
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, operands.Operands]]:
    """Own-path correspondence: a layout's capture replayed with that layout equals the native stages."""
    refs: dict[str, dict[str, np.ndarray]] = {}
    ops_by: dict[str, operands.Operands] = {}
    for lay, path in files.items():
        try:
            ops = operands.read_operands(path)
        except operands.OperandError as e:
            problems.append(f"observation {lay}: {e}")
            continue
        ops_by[lay] = ops
        refs[lay] = {s: _canonical_ref(ops.refs[s], s) for s in CAPTURED_STAGES if s in ops.refs}
        got = stages.get((lay, lay, 1))
        if got is None:
            problems.append(f"own-path {lay}: no replay")
            continue
        for s in CAPTURED_STAGES:
            if s not in refs[lay]:
                problems.append(f"own-path {lay} {s}: no native reference")
                continue
            cmp = bitwise.compare(refs[lay][s], got[s])
            if not cmp.bitwise_equal:
                problems.append(f"own-path {lay} {s}: native and replay differ ({_short(cmp)})")
    return refs, ops_by


def _repeatability(stages: dict, problems: list[str]) -> None:
    for (src, lay, rep), st in sorted(stages.items()):
        if rep != 1:
            continue
        other = stages.get((src, lay, 2))
        if other is None:
            problems.append(f"repeatability {src}/{lay}: second replay missing")
            continue
        for s in CAPTURED_STAGES:
            cmp = bitwise.compare(st[s], other[s])
            if not cmp.bitwise_equal:
                problems.append(f"repeatability {src}/{lay} {s}: replays differ ({_short(cmp)})")


def _native_relations(refs: dict, ops_by: dict, detail: dict[str, Any]) -> None:
    """Informative: native pq vs native qb, and operand identity across the repaired captures."""
    if "pq" in refs and "qb" in refs:
        detail["native_pq_eq_qb"] = {
            s: bool(bitwise.compare(refs["pq"][s], refs["qb"][s]).bitwise_equal)
            for s in CAPTURED_STAGES
            if s in refs["pq"] and s in refs["qb"]
        }
    if "pq" in ops_by and "qb" in ops_by:
        a, b = ops_by["pq"], ops_by["qb"]
        detail["operands_pq_eq_qb"] = all(
            np.array_equal(np.ascontiguousarray(x).view(np.uint8), np.ascontiguousarray(y).view(np.uint8))
            for x, y in (
                (a.logical_q(), b.logical_q()),
                (a.logical_k(), b.logical_k()),
                (a.logical_v(), b.logical_v()),
                (a.logical_mask(), b.logical_mask()),
            )
        )


def _comparison_operands(cmp_ops: operands.Operands | None, detail: dict[str, Any]) -> list[int]:
    """The comparison capture's visible keys per query, key extent and attention shape."""
    vis = _visible(cmp_ops.logical_mask()) if cmp_ops is not None else []
    detail["visible_keys"] = vis
    detail["key_extent"] = cmp_ops.n_kv if cmp_ops is not None else None
    detail["shape"] = (
        {
            "n_head": cmp_ops.n_head,
            "n_head_kv": cmp_ops.n_head_kv,
            "head_dim": cmp_ops.d,
            "head_dim_v": cmp_ops.d_v,
            "scale": cmp_ops.scale,
        }
        if cmp_ops is not None
        else None
    )
    return vis


def _stage_comparison(stages: dict, base: str, s: str, ok: bool, reason: str | None) -> tuple[dict, dict]:
    """One stage's layout relations on the comparison capture's operands: (record, table cells)."""
    mq, pq, qb, qh = (stages[(base, lay, 1)][s] for lay in REPLAYED_LAYOUTS)
    c_pq_qb, c_mq_pq, c_mq_qb = bitwise.compare(pq, qb), bitwise.compare(mq, pq), bitwise.compare(mq, qb)
    c_pq_qh = bitwise.compare(pq, qh)
    rec: dict[str, Any] = {
        "pq_qb": c_pq_qb.as_dict(),
        "mq_pq": c_mq_pq.as_dict(),
        "mq_qb": c_mq_qb.as_dict(),
        "pq_qh": c_pq_qh.as_dict(),
    }
    for other in (lay for lay in CAPTURED_LAYOUTS if lay != base):  # the same relations on the other captures' operands
        if all((other, lay, 1) in stages for lay in REPLAYED_LAYOUTS):
            o = {lay: stages[(other, lay, 1)][s] for lay in REPLAYED_LAYOUTS}
            rec[f"on_{other}_operands"] = {
                "pq_eq_qb": bitwise.compare(o["pq"], o["qb"]).bitwise_equal,
                "mq_eq_pq": bitwise.compare(o["mq"], o["pq"]).bitwise_equal,
                "pq_eq_qh": bitwise.compare(o["pq"], o["qh"]).bitwise_equal,
            }
    max_abs = c_mq_pq.max_abs_diff
    row_ok, row_reason = ok, reason
    if not np.isfinite(max_abs):
        row_ok = False
        row_reason = "; ".join(filter(None, [reason, f"non-finite MQ difference at {s}"]))
        max_abs = 0.0
    first = None
    if c_mq_pq.first_diff is not None:
        first = int(np.ravel_multi_index(c_mq_pq.first_diff, mq.shape))
    row = {
        "pq_eq_qb": c_pq_qb.bitwise_equal,
        "pq_eq_qh": c_pq_qh.bitwise_equal,
        "mq_eq_pq": c_mq_pq.bitwise_equal,
        "max_abs_mq": float(max_abs),
        "max_ulp_mq": max(0, int(c_mq_pq.max_ulp)),
        "first_diff": first,
        "control_ok": row_ok,
        "reason": row_reason,
    }
    return rec, row


def evaluate_context(
    cc: CapturedContext, tool: str | Path, settings: Settings, workdir: str | Path
) -> tuple[list[dict], dict]:
    """Replay a captured context twice, run the controls and compare the layouts.

    Returns the context's ``replay`` table rows (one per stage) and its detail record.
    """
    ctx = cc.context
    wd = Path(workdir)
    problems = list(cc.problems)
    detail: dict[str, Any] = {"context": ctx.id, **asdict(ctx)}
    detail["device_refused"] = dict(cc.refused)
    detail["comparison_layout"] = cc.comparison_layout
    detail["endpoints"] = _endpoint_controls(cc, problems)
    stages, detail["replay_reports"] = _replay_twice(cc, tool, settings, wd, problems, detail)
    files = dict(cc.files)
    refs, ops_by = _own_path(files, stages, problems)
    _repeatability(stages, problems)
    _native_relations(refs, ops_by, detail)
    # comparisons on the operands of the comparison capture
    base = cc.comparison_layout
    vis = _comparison_operands(ops_by.get(base), detail)
    detail["files"] = {lay: str(p) for lay, p in files.items()}
    per_stage: dict[str, dict[str, Any]] = {}
    have = all((base, lay, 1) in stages for lay in REPLAYED_LAYOUTS)
    if not have:
        problems.append(f"comparison: the {base} capture was not replayed with every layout")
    rows = []
    ok = not problems
    reason = "; ".join(problems) if problems else None
    for s in CAPTURED_STAGES:
        rec: dict[str, Any] = {}
        if have:
            rec, row = _stage_comparison(stages, base, s, ok, reason)
        else:
            row = {
                "pq_eq_qb": False,
                "pq_eq_qh": False,
                "mq_eq_pq": False,
                "max_abs_mq": 0.0,
                "max_ulp_mq": 0,
                "first_diff": None,
                "control_ok": False,
                "reason": reason,
            }
        rows.append(
            {
                "family": ctx.family,
                "layer": ctx.layer,
                "phase": ctx.phase,
                "q": ctx.q,
                "stage": s,
                **row,
                "visible_keys": max(vis) if vis else 0,
                "device_refused": ",".join(sorted(cc.refused)) or None,
            }
        )
        per_stage[s] = rec
    detail["stages"] = per_stage
    detail["control_ok"] = ok
    detail["problems"] = problems
    return rows, detail


# ------------------------------------------------------------------------------------------
# the campaign


@dataclass
class E1Result:
    rows: list[dict]
    details: list[dict]
    summary: dict[str, Any]


def summarize(
    rows: list[dict], details: list[dict], *, family: str, layers: Sequence[int], backend: Any, seconds: float
) -> dict[str, Any]:
    ctx_ids = sorted({(r["layer"], r["phase"], r["q"]) for r in rows})
    ok_ctx = {(r["layer"], r["phase"], r["q"]) for r in rows if r["control_ok"]}
    ok_rows = [r for r in rows if r["control_ok"]]
    by_stage: dict[str, Any] = {}
    for s in CAPTURED_STAGES:
        rs = [r for r in ok_rows if r["stage"] == s]
        q1 = [r for r in rs if r["q"] == 1]
        qn = [r for r in rs if r["q"] > 1]
        diff = [r for r in rs if not r["mq_eq_pq"]]
        by_stage[s] = {
            "pq_eq_qb": [sum(r["pq_eq_qb"] for r in rs), len(rs)],
            "pq_eq_qh": [sum(r["pq_eq_qh"] for r in rs), len(rs)],
            "mq_eq_repair": [sum(r["mq_eq_pq"] for r in rs), len(rs)],
            "mq_eq_repair_q1": [sum(r["mq_eq_pq"] for r in q1), len(q1)],
            "mq_eq_repair_q_gt1": [sum(r["mq_eq_pq"] for r in qn), len(qn)],
            "max_abs_mq": max((r["max_abs_mq"] for r in rs), default=0.0),
            "max_ulp_mq": max((r["max_ulp_mq"] for r in rs), default=0),
            "contexts_differing": len(diff),
        }
    # where MQ first differs from the repairs, per context
    first_stage: dict[str, int] = {s: 0 for s in CAPTURED_STAGES}
    first_stage["none"] = 0
    for key in sorted(ok_ctx):
        rs = {r["stage"]: r for r in ok_rows if (r["layer"], r["phase"], r["q"]) == key}
        st = next((s for s in CAPTURED_STAGES if not rs[s]["mq_eq_pq"]), "none")
        first_stage[st] += 1
    # contexts where MQ equals the repairs at every stage, by query width
    all_eq = {"q1": [0, 0], "q_gt1": [0, 0]}
    for key in ok_ctx:
        rs = [r for r in ok_rows if (r["layer"], r["phase"], r["q"]) == key]
        slot = all_eq["q1" if key[2] == 1 else "q_gt1"]
        slot[0] += all(r["mq_eq_pq"] and r["pq_eq_qb"] for r in rs)
        slot[1] += 1
    # MQ vs QB too (the table measures MQ vs PQ)
    mq_qb = {s: {"max_abs": 0.0, "max_ulp": 0, "equal": 0, "of": 0} for s in CAPTURED_STAGES}
    for d in details:
        if not d["control_ok"]:
            continue
        for s in CAPTURED_STAGES:
            c = d["stages"].get(s, {}).get("mq_qb")
            if c:
                m = mq_qb[s]
                m["max_abs"] = max(m["max_abs"], c["max_abs_diff"])
                m["max_ulp"] = max(m["max_ulp"], c["max_ulp"])
                m["equal"] += bool(c["bitwise_equal"])
                m["of"] += 1
    vis: dict[str, list[int]] = {}
    for d in details:
        if d.get("visible_keys"):
            v = vis.setdefault(d["phase"], [10**9, 0])
            v[0] = min(v[0], min(d["visible_keys"]))
            v[1] = max(v[1], max(d["visible_keys"]))
    return {
        "family": family,
        "layers": list(layers),
        "phases": [ph for ph in PHASES if any(c[1] == ph for c in ctx_ids)],
        "contexts": len(ctx_ids),
        "controls_passed": len(ok_ctx),
        "withheld": [
            {"context": d["context"], "reason": "; ".join(d["problems"])} for d in details if not d["control_ok"]
        ],
        "stages": by_stage,
        "mq_vs_qb": mq_qb,
        "mq_first_difference_stage": first_stage,
        "mq_eq_repair_all_stages": all_eq,
        "native_pq_eq_qb_contexts": sum(
            1 for d in details if d.get("native_pq_eq_qb") and all(d["native_pq_eq_qb"].values())
        ),
        "operands_pq_eq_qb_contexts": sum(1 for d in details if d.get("operands_pq_eq_qb")),
        "capture_on_off_endpoints_equal": sum(1 for d in details if all(e["equal"] for e in d["endpoints"].values())),
        "key_extent": sorted({d["key_extent"] for d in details if d.get("key_extent")}),
        "visible_keys": vis,
        "backend": backend,
        "fallback_evaluations": sum(len(d.get("fallback", [])) for d in details),
        "seconds": round(seconds, 1),
    }


def run_e1(
    family: str,
    out_dir: str | Path,
    *,
    tool: str | Path,
    settings: Settings = Settings(),
    layers: Sequence[int] | None = None,
    phases: Sequence[str] = PHASES,
    qs: Sequence[int] = QUERY_WIDTHS,
    models_dir=None,
    families_file=None,
    progress: bool = True,
) -> E1Result:
    """Capture, replay and compare every E1 context of one family; files go under ``out_dir/e1``."""
    t0 = time.monotonic()
    files = models.ensure_family(family, models_dir=models_dir, families_file=families_file)
    model = runtime.Model(
        files.target.path, sha256=files.target.sha256, n_gpu_layers=settings.n_gpu_layers, require_placement=True
    )
    try:
        ctxs = contexts(family, model.n_layer, layers=layers, phases=phases, qs=qs)
        prompt = make_prompt(model)
        if len(prompt.prefix) + max(qs) + settings.n_continue > settings.n_ctx:
            raise UsageError(f"the prompt ({len(prompt.prefix)} tokens) does not fit n_ctx {settings.n_ctx}")
        history_refused = layout_refusal(model, settings.spec(settings.history_layout), prompt.prefix)
        if history_refused:  # e.g. QB at n_ubatch 4 on ggml-vulkan: the history is prefilled with PQ
            settings = replace(settings, history_layout="pq")
        work = Path(out_dir) / "e1"
        work.mkdir(parents=True, exist_ok=True)
        rows: list[dict] = []
        details: list[dict] = []
        bar = None
        if progress:
            from tqdm import tqdm  # lazy: the progress bar only

            bar = tqdm(total=len(ctxs), desc=f"E1 {family}", unit="ctx", file=sys.stderr)
        backend = None
        for ctx in ctxs:
            d = work / ctx.id
            if d.exists():
                shutil.rmtree(d)
            cc = capture_context(model, ctx, prompt, settings, d)
            r, det = evaluate_context(cc, tool, settings, d)
            rows.extend(r)
            details.append(det)
            if det.get("replay_reports"):
                backend = det["replay_reports"][0].get("backend")
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{ctx.id} {'ok' if det['control_ok'] else 'WITHHELD'}")
        if bar is not None:
            bar.close()
        layer_set = sorted({c.layer for c in ctxs})
        summary = summarize(
            rows, details, family=family, layers=layer_set, backend=backend, seconds=time.monotonic() - t0
        )
        summary["prompt"] = prompt.record()
        summary["n_layer"] = model.n_layer
        summary["placement"] = {k: v for k, v in model.placement.items() if k != "devices"}
        summary["model"] = {"file": files.target.path.name, "sha256": files.target.sha256}
        summary["settings"] = asdict(settings)
        summary["q"] = list(qs)
        summary["history_layout_refused"] = history_refused
        summary["device_refused"] = {d["context"]: d["device_refused"] for d in details if d.get("device_refused")}
        return E1Result(rows, details, summary)
    finally:
        model.close()


def write_results(result: E1Result, out_dir: str | Path) -> dict[str, Path]:
    """The ``replay`` table (Parquet + CSV), ``e1_summary.json`` and ``e1_contexts.json``."""
    out = Path(out_dir)
    paths = tables.write_table(result.rows, "replay", out)
    paths["summary"] = out / "e1_summary.json"
    atomic_write_text(paths["summary"], json.dumps(result.summary, indent=2, sort_keys=True) + "\n")
    paths["contexts"] = out / "e1_contexts.json"
    atomic_write_text(paths["contexts"], json.dumps(result.details, indent=1, sort_keys=True, default=str) + "\n")
    return paths


def format_summary(s: dict[str, Any]) -> str:
    """A Table-S7-shaped text summary."""
    n, ok = s["contexts"], s["controls_passed"]
    be = s.get("backend") or {}
    lines = [
        f"E1 {s['family']}: {n} contexts (layers {'/'.join(map(str, s['layers']))} x {'/'.join(s.get('phases', PHASES))} x "
        f"q={','.join(map(str, s.get('q', QUERY_WIDTHS)))}) "
        f"on {be.get('device', be.get('requested', '?')) if isinstance(be, dict) else be} in {s['seconds']} s",
        f"  controls (observation, own-path mq/pq/qb, repeatability, capture on/off): {ok}/{n} contexts pass; "
        f"capture on/off endpoints equal {s['capture_on_off_endpoints_equal']}/{n}",
    ]
    refused = s.get("device_refused") or {}
    if refused:
        by_layout: dict[str, int] = {}
        for layouts in refused.values():
            for lay in layouts:
                by_layout[lay] = by_layout.get(lay, 0) + 1
        lines.append(
            "  refused by the device (no live observation; compared on the PQ capture's operands): "
            + ", ".join(f"{lay} in {n} contexts" for lay, n in sorted(by_layout.items()))
        )
    if s.get("history_layout_refused"):
        lines.append(f"  continuation history prefilled with pq: {s['history_layout_refused']}")
    if s.get("fallback_evaluations"):
        lines.append(f"  replay evaluations with a node on another backend (fallback): {s['fallback_evaluations']}")
    st = s["stages"]
    lines.append(
        "  PQ = QB bitwise:   "
        + "   ".join(f"{STAGE_LABELS[k]} {v['pq_eq_qb'][0]}/{v['pq_eq_qb'][1]}" for k, v in st.items())
    )
    lines.append(
        "  PQ = QH bitwise:   "
        + "   ".join(f"{STAGE_LABELS[k]} {v['pq_eq_qh'][0]}/{v['pq_eq_qh'][1]}" for k, v in st.items())
    )
    lines.append(
        "  MQ = PQ = QB, q=1: "
        + "   ".join(f"{STAGE_LABELS[k]} {v['mq_eq_repair_q1'][0]}/{v['mq_eq_repair_q1'][1]}" for k, v in st.items())
    )
    lines.append(
        "  MQ = PQ = QB, q>1: "
        + "   ".join(
            f"{STAGE_LABELS[k]} {v['mq_eq_repair_q_gt1'][0]}/{v['mq_eq_repair_q_gt1'][1]}" for k, v in st.items()
        )
    )
    ae = s["mq_eq_repair_all_stages"]
    lines.append(
        f"  contexts with MQ = PQ = QB at every stage: q=1 {ae['q1'][0]}/{ae['q1'][1]}, "
        f"q>1 {ae['q_gt1'][0]}/{ae['q_gt1'][1]}"
    )
    fs = s["mq_first_difference_stage"]
    lines.append(
        "  MQ first differs at: " + ", ".join(f"{STAGE_LABELS.get(k, k)} {v}" for k, v in fs.items()) + " (contexts)"
    )
    lines.append("  Table S7 shape: maximum MQ-to-repair differences (PQ/QB: 0 and 0 ULP where equal)")
    lines.append(f"    {'stage':<8} {'max abs (vs PQ)':>16} {'max ULP':>12} {'max abs (vs QB)':>16} {'differing':>10}")
    for k, v in st.items():
        m = s["mq_vs_qb"][k]
        lines.append(
            f"    {STAGE_LABELS[k]:<8} {v['max_abs_mq']:>16.6g} {v['max_ulp_mq']:>12d} "
            f"{m['max_abs']:>16.6g} {v['contexts_differing']:>6d}/{v['mq_eq_repair'][1]}"
        )
    vis = s.get("visible_keys", {})
    lines.append(
        f"  key extent {s.get('key_extent')}; visible keys " + ", ".join(f"{ph} {a}-{b}" for ph, (a, b) in vis.items())
    )
    for w in s["withheld"]:
        lines.append(f"  WITHHELD {w['context']}: {w['reason']}")
    return "\n".join(lines)
