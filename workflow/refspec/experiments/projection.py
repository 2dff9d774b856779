"""Projection-operator replay (paper §6.1, its fixed-operand replay of the projections that
differ): ``refspec state projection``.

For every input whose two partition arms (``--pair X,Y``) formed different states, each arm's
prefill is run again in a fresh context with an eval callback on the first layer's input
projections (:class:`ProjectionCapture`, the E1 capture machinery of
:mod:`refspec.experiments.capture`):

* ``norm-0`` -- RMS_NORM of the layer input (its input and output);
* ``attn_norm-0`` -- the MUL by the norm weight (both operands and the output);
* ``Qcur-0``, ``Kcur-0``, ``Vcur-0`` -- the Q, K and V projection MUL_MATs (the weight's name,
  type, buffer type and digest, the activation operand and the output).

One call per node and micrograph (``U1`` has one micrograph per prompt token). The captured
prefill must reproduce the sequence KV bytes of the partition campaign (the capture splits
the graph's execution at the nodes it reads; a state that differs withholds the claim).

Each captured call is replayed with its operands fixed by ``refspec-opreplay`` (native/tools)
on the build's ggml device: that single op, the captured ``op_params`` (the RMS norm's eps,
MUL_MAT's precision), the weight read from the model's GGUF with its own type into the buffer
type it had in the model; the output is compared bitwise with the captured one: *qualified*
(equal) or *mismatch*. A call whose output the allocator placed over one of its operands
(ggml-alloc computes RMS_NORM, MUL and other element-wise ops in place when the operand has no
other consumer) had that operand overwritten before the callback could read it: it is
*excluded* with the reason, never replayed. The two arms' outputs of each projection are
compared at the same token positions: the first position and feature where they differ is
where the arms' states first diverge.

Outputs: ``projection.parquet/.csv`` (one row per captured call), ``projection.json``
(counts, controls and the arm comparison), ``calls/<task>/<arm>.rsop`` with the tool's
output and report beside them; documented in ``anc/state.md`` and ``anc/tables.md``.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core import tables as T
from ..core.errors import EXIT_FAILED, EXIT_OK, ConfigError, RefspecError, ReplayToolError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import file_digest, sha256_bytes
from ..core.panels import humaneval_tasks, prompt_tokens
from ..native.runtime import GGML_TYPE_F32, Context, ContextSpec, GGMLTensor, Model
from ..native.tools import OPREPLAY_TOOL as TOOL
from . import bitwise, operands
from .capture import OperandCapture, SourceView, _view
from .state import kvstate as kv
from .state.partition import PartitionArm, load_partition, prefill, task_slug

# node base name -> the ggml op llama.cpp computes under it (build_norm, build_qkv of the pinned source)
PROJECTIONS = {"norm": "RMS_NORM", "attn_norm": "MUL", "Qcur": "MUL_MAT", "Kcur": "MUL_MAT", "Vcur": "MUL_MAT"}
WEIGHTS_USAGE = 1  # GGML_BACKEND_BUFFER_USAGE_WEIGHTS
STATUSES = ("qualified", "mismatch", "excluded", "error")


class _GGML:
    """The few ggml-base entry points the capture needs beyond :mod:`runtime`'s (own handle)."""

    def __init__(self, lib_dir: Path):
        c = ctypes
        lib = c.CDLL(str(lib_dir / "libggml-base.so"))
        lib.ggml_op_name.argtypes = [c.c_int]
        lib.ggml_op_name.restype = c.c_char_p
        lib.ggml_type_name.argtypes = [c.c_int]
        lib.ggml_type_name.restype = c.c_char_p
        lib.ggml_backend_buffer_name.argtypes = [c.c_void_p]
        lib.ggml_backend_buffer_name.restype = c.c_char_p
        lib.ggml_backend_buffer_get_usage.argtypes = [c.c_void_p]
        lib.ggml_backend_buffer_get_usage.restype = c.c_int
        self.lib = lib
        self._ops: dict[int, str] = {}

    def op_name(self, op: int) -> str:
        if op not in self._ops:
            self._ops[op] = self.lib.ggml_op_name(op).decode()
        return self._ops[op]

    def type_name(self, t: int) -> str:
        return self.lib.ggml_type_name(t).decode()


@dataclass
class Operand:
    """One source of a captured call: a model weight (by name) or an activation view."""

    name: str
    type: str
    ne: tuple[int, int, int, int]
    weight: bool
    buffer_type: str
    span: tuple[int, int, int]  # (buffer, first byte, one past the last byte the view touches)
    view: SourceView | None = None  # activations only


@dataclass
class Call:
    node: str  # e.g. Qcur-0
    base: str
    layer: int
    op: str
    op_params: tuple[int, ...]
    ne: tuple[int, int, int, int]
    out: bytes  # the captured output, f32 contiguous
    span: tuple[int, int, int]
    srcs: list[Operand] = field(default_factory=list)
    p0: int = 0
    p1: int = 0
    excluded: str | None = None


def _overlap(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


class ProjectionCapture(OperandCapture):
    """:class:`OperandCapture` of the first layer's norm, scale MUL and Q/K/V MUL_MATs.

    Only nodes whose op is the one llama.cpp computes under the name are asked for (``Qcur-0``
    also names the reshape and the RoPE after the MUL_MAT). Activation operands are frozen with
    :meth:`OperandCapture._source`; weights are identified by name, type, buffer type and the
    digest of their bytes (read once per tensor).
    """

    def __init__(self, layers=(0,)):
        super().__init__(layers)
        self.names = tuple(PROJECTIONS)
        self._g = _GGML(Path(os.environ["LLAMA_CPP_LIB_PATH"]))
        self.calls: list[Call] = []
        self.weight_digests: dict[str, str] = {}
        self._tokens: dict[tuple[str, int], int] = {}

    def _wanted(self, t: GGMLTensor) -> tuple[str, int] | None:
        m = self._match(t.name.decode("utf-8", "replace"))
        if m is None or self._g.op_name(int(t.op)) != PROJECTIONS.get(m[0]):
            return None
        if m[0] == "norm" and t.src[0]:
            # build_norm names the FFN's RMS norm "norm-<il>" as well; its input is ffn_inp-<il>
            if GGMLTensor.from_address(t.src[0]).name.decode("utf-8", "replace").startswith("ffn_inp"):
                return None
        return m

    def _span(self, ptr: int, t: GGMLTensor) -> tuple[int, int, int]:
        start = int(t.data or 0)
        return (int(t.buffer or 0), start, start + int(self._ggml.ggml_nbytes(ptr)))

    def _operand(self, ptr: int) -> Operand:
        s = GGMLTensor.from_address(ptr)
        name = s.name.decode("utf-8", "replace")
        buf = int(s.buffer or 0)
        weight = bool(buf) and self._g.lib.ggml_backend_buffer_get_usage(buf) == WEIGHTS_USAGE
        op = Operand(
            name,
            self._g.type_name(int(s.type)),
            tuple(int(x) for x in s.ne),
            weight,
            self._g.lib.ggml_backend_buffer_name(buf).decode() if buf else "",
            self._span(ptr, s),
        )
        if weight:
            if name not in self.weight_digests:
                n = int(self._ggml.ggml_nbytes(ptr))
                raw = ctypes.create_string_buffer(n)
                self._ggml.ggml_backend_tensor_get(ptr, raw, 0, n)
                self.weight_digests[name] = sha256_bytes(raw.raw)
        else:
            op.view = self._source(ptr)
        return op

    def _on_node(self, tptr, ask: bool) -> bool:
        if not self.enabled:
            return not ask
        t = GGMLTensor.from_address(tptr)
        m = self._wanted(t)
        if ask or m is None:
            return m is not None
        if t.type != GGML_TYPE_F32:
            self.errors.append(f"{m[0]}-{m[1]}: output of type {self._g.type_name(int(t.type))}, expected f32")
            return True
        n = int(self._ggml.ggml_nbytes(tptr))
        raw = ctypes.create_string_buffer(n)
        self._ggml.ggml_backend_tensor_get(tptr, raw, 0, n)
        base, layer = m
        ne = tuple(int(x) for x in t.ne)
        p0 = self._tokens.get(m, 0)
        self._tokens[m] = p0 + ne[1]
        call = Call(
            f"{base}-{layer}",
            base,
            layer,
            PROJECTIONS[base],
            tuple(int(x) for x in t.op_params),
            ne,
            raw.raw,
            self._span(tptr, t),
            p0=p0,
            p1=p0 + ne[1],
        )
        for j in range(2):
            if t.src[j]:
                call.srcs.append(self._operand(int(t.src[j])))
        for j, s in enumerate(call.srcs):
            if not s.weight and _overlap(s.span, call.span):
                call.excluded = (
                    f"in-place: ggml-alloc placed the output of {call.node} over its operand src{j} ({s.name}), "
                    "which the op overwrote before the capture could read it"
                )
                break
        self.calls.append(call)
        return True

    def clear(self) -> None:
        super().clear()
        self.calls.clear()
        self._tokens.clear()


# --------------------------------------------------------------------------- calls file and replay


def write_calls(path: Path, calls: list[Call], meta: dict) -> dict[int, str]:
    """The call file of ``refspec-opreplay`` for the calls that are not excluded; returns call index -> id."""
    tensors: dict[str, operands.OperandTensor] = {}
    entries, ids = [], {}
    for i, c in enumerate(calls):
        if c.excluded:
            continue
        cid = f"c{i}"
        srcs = []
        for j, s in enumerate(c.srcs):
            if s.weight:
                srcs.append({"weight": s.name, "buffer_type": s.buffer_type})
            else:
                assert s.view is not None
                tensors[f"{cid}.s{j}"] = _view(s.view, s.view.ne, s.view.nb, f"{c.node} src{j}")
                srcs.append({"tensor": f"{cid}.s{j}"})
        entries.append({"id": cid, "node": c.node, "op": c.op, "op_params": list(c.op_params), "src": srcs})
        ids[i] = cid
    path.parent.mkdir(parents=True, exist_ok=True)
    operands.write_container(path, {"format": "refspec-calls", "meta": meta, "calls": entries}, tensors)
    return ids


def run_tool(tool: Path, calls: Path, *, model: Path, backend: str, threads: int) -> tuple[dict, dict]:
    """Run ``refspec-opreplay`` on a call file: (report, replayed tensors by call id)."""
    out = calls.with_suffix(".out.rsop")
    rep = calls.with_suffix(".report.json")
    cmd = [str(tool), "--calls", str(calls), "--out", str(out), "--report", str(rep)]
    cmd += ["--model", str(model), "--backend", backend, "--threads", str(threads)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1) or not rep.is_file():
        raise ReplayToolError(f"{TOOL} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    report = json.loads(rep.read_text(encoding="utf-8"))
    _h, tensors = operands.read_container(out, verify_hashes=False)
    return report, tensors


def gguf_digests(path: Path, names: set[str]) -> dict[str, str]:
    """sha256 of the named tensors' bytes as stored in the GGUF (the replay's weight operands)."""
    from gguf import GGUFReader  # lazy: the gguf package is read only for the weight digests

    rd = GGUFReader(str(path))
    return {t.name: sha256_bytes(np.ascontiguousarray(t.data).tobytes()) for t in rd.tensors if t.name in names}


def _f32(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype="<f4")


def row_digests(c: Call) -> str:
    """sha256 of each token row of a call's captured output (``ne[0]`` float32 values, positions
    ``p0`` to ``p1 - 1`` in order), space-separated: the ``row_sha256`` cell, from which the report
    and its checker locate where two arms' outputs first differ."""
    width = 4 * c.ne[0]
    return " ".join(sha256_bytes(c.out[i : i + width]) for i in range(0, len(c.out), width))


def compare_arms(x: list[Call], y: list[Call]) -> dict[str, dict]:
    """Per node (projection and layer), whether two arms' outputs are bitwise equal at the same
    token positions, and where they first differ (position, feature, max |difference|)."""
    res = {}
    for node in dict.fromkeys(c.node for c in x):
        mats = []
        for calls in (x, y):
            rows = sorted((c for c in calls if c.node == node), key=lambda c: c.p0)
            if not rows:
                break
            mats.append(np.concatenate([_f32(c.out).reshape(c.ne[1], c.ne[0]) for c in rows], axis=0))
        if len(mats) != 2 or mats[0].shape != mats[1].shape:
            res[node] = {"compared": False}
            continue
        a, b = mats
        ne = a.view(np.uint32) != b.view(np.uint32)
        pos = np.flatnonzero(ne.any(axis=1))
        rec: dict = {"compared": True, "positions": int(a.shape[0]), "features": int(a.shape[1])}
        rec["equal"] = not len(pos)
        rec["positions_differing"] = int(len(pos))
        rec["elements_differing"] = int(ne.sum())
        if len(pos):
            p = int(pos[0])
            rec["first_position"] = p
            rec["first_feature"] = int(np.flatnonzero(ne[p])[0])
            rec["max_abs"] = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        else:
            rec.update(first_position=None, first_feature=None, max_abs=0.0)
        res[node] = rec
    return res


# --------------------------------------------------------------------------- campaign


def _tasks_from_ids(ids):
    out = []
    for tid in ids:
        src, _, idx = tid.partition("/")
        if src != "HumanEval" or not idx.isdigit():
            raise UsageError(f"{tid}: projection replay re-tokenises HumanEval inputs only")
        out.append(humaneval_tasks([int(idx)])[0])
    return out


def differing_tasks(prows: list[dict], x: str, y: str) -> list[str]:
    """Inputs whose arms X and Y formed different states (KV bytes or initial logits), panel order."""
    by: dict[str, dict] = {}
    for r in prows:
        if r["repeat"] == 1 and r["arm"] in (x, y):
            by.setdefault(r["task_id"], {})[r["arm"]] = r
    return [
        t
        for t, d in by.items()
        if len(d) == 2 and (d[x]["kv_sha256"] != d[y]["kv_sha256"] or d[x]["logits_sha256"] != d[y]["logits_sha256"])
    ]


def _ne(t: tuple[int, ...]) -> list[int]:
    return [int(v) for v in t]


def _pair_rows(prows: list[dict], arms: dict, pair: tuple[str, str], tasks: list[str] | None):
    """Check the pair against the partition campaign; the tasks and the rows by (task, arm)."""
    x, y = pair
    for a in pair:
        if a not in arms:
            raise UsageError(f"arm {a!r} is not in the partition campaign (arms: {', '.join(arms)})")
    if x == y:
        raise UsageError("the pair needs two different arms")
    if tasks is None:
        tasks = differing_tasks(prows, x, y)
    by = {(r["task_id"], r["arm"]): r for r in prows if r["repeat"] == 1}
    for t in tasks:
        if (t, x) not in by or (t, y) not in by:
            raise UsageError(f"{t}: the partition campaign has no rows for arms {x} and {y}")
    return tasks, by


def _capture_arm(model, meta: dict, arm: PartitionArm, prompt: list[int], layers, label: str):
    """The arm's prefill in a fresh context with the projection capture: (capture, KV sha256)."""
    cap = ProjectionCapture(layers)
    spec = ContextSpec(n_ctx=meta["n_ctx"], n_batch=meta["n_batch"], n_ubatch=arm.ub, threads=meta["threads"])
    ctx = Context(model, spec, capture=cap)
    try:
        prefill(ctx, prompt, arm.chunks(len(prompt))[0])
        kv_sha = sha256_bytes(kv.export_state(ctx))
    finally:
        ctx.close()
    if cap.errors:
        raise RefspecError(f"{label}: capture failed: {'; '.join(cap.errors[:3])}")
    return cap, kv_sha


@dataclass
class _Run:
    """What every captured arm of one projection replay shares, and what it collects."""

    meta: dict
    out: Path
    tool: Path
    model_path: Path
    layers: tuple[int, ...]
    perturb: tuple[str, str, int] | None
    backend: str
    rows: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    eps: set[float] = field(default_factory=set)
    weights: dict[str, dict] = field(default_factory=dict)


def _replay_arm(run: _Run, task_id: str, arm_name: str, n: int, kv_sha: str, prow: dict, cap) -> list[Call]:
    """Check a captured arm, write its call file, replay it with the tool and add its rows."""
    if kv_sha != prow["kv_sha256"]:
        run.problems.append(f"{task_id} {arm_name}: the captured prefill's KV differs from the partition's")
    calls = cap.calls
    for node in (f"{b}-{la}" for la in run.layers for b in PROJECTIONS):
        got = sum(c.p1 - c.p0 for c in calls if c.node == node)
        if got != n:
            run.problems.append(f"{task_id} {arm_name}: {node} calls cover {got} of {n} tokens")
    for name, dg in cap.weight_digests.items():
        w = run.weights.setdefault(name, {"live_sha256": dg})
        if w["live_sha256"] != dg:
            run.problems.append(f"{name}: the weight's bytes differ between captures")
    cpath = run.out / "calls" / task_slug(task_id) / f"{arm_name}.rsop"
    ids = write_calls(cpath, calls, {"task_id": task_id, "arm": arm_name, "layers": list(run.layers)})
    if run.perturb and run.perturb[:2] == (task_id, arm_name):
        _flip_operand(cpath, ids[run.perturb[2]])
    report, replayed = run_tool(run.tool, cpath, model=run.model_path, backend=run.backend, threads=run.meta["threads"])
    results = {r["id"]: r for r in report["calls"]}
    for i, c in enumerate(calls):
        run.rows.append(_row(run.meta, task_id, arm_name, i, c, ids.get(i), results, replayed, cap))
        if c.op == "RMS_NORM":
            run.eps.add(float(np.array(c.op_params[:1], dtype=np.int32).view(np.float32)[0]))
    return calls


def _document(run: _Run, pdir: Path, pair, tasks, backend: str, comparisons: dict, t0: float) -> dict:
    """Weight digests from the GGUF, the table and ``projection.json``."""
    rows, weights, layers = run.rows, run.weights, run.layers
    digests = gguf_digests(run.model_path, set(weights))
    for name, w in weights.items():
        w["gguf_sha256"] = digests.get(name)
        w["live_equals_gguf"] = w["live_sha256"] == w["gguf_sha256"]
    for r in rows:
        r["weight_sha256"] = digests.get(r["src0_name"]) if r["op"] == "MUL_MAT" else None
    for r in rows:
        if r["status"] == "error":
            run.problems.append(f"{r['task_id']} {r['arm']} {r['node']} call {r['call']}: {r['reason']}")
    T.write_table(rows, "projection", run.out)
    counts = {s: sum(r["status"] == s for r in rows) for s in STATUSES}
    doc = {
        "family": run.meta["family"],
        "partition": str(pdir),
        "pair": list(pair),
        "tasks": list(tasks),
        "backend": backend,
        "layers": list(layers),
        "nodes": {f"{b}-{la}": op for la in layers for b, op in PROJECTIONS.items()},
        "rms_eps": sorted(run.eps),
        "model_sha256": run.meta["model_sha256"],
        "tool": {"name": TOOL, "path": str(run.tool), **file_digest(run.tool)},
        "weights": weights,
        "counts": counts,
        "by_node": {
            node: {s: sum(r["status"] == s for r in rows if r["node"] == node) for s in STATUSES}
            for node in (f"{b}-{la}" for la in layers for b in PROJECTIONS)
        },
        "arms": comparisons,
        "problems": run.problems,
        "seconds": round(time.time() - t0, 1),
    }
    atomic_write_text(run.out / "projection.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return doc


def run_projection(
    *,
    partition_dir: str | Path,
    out: str | Path,
    pair: tuple[str, str] = ("A", "U1"),
    tasks: list[str] | None = None,
    backend: str = "CPU",
    tool: str | Path,
    progress: bool = True,
    layers: tuple[int, ...] = (0,),
    perturb: tuple[str, str, int] | None = None,
) -> dict:
    """Capture, replay and compare; writes ``projection`` and ``projection.json`` to ``out``.

    ``perturb = (task_id, arm, call index)`` flips one bit of that call's first activation operand
    in its call file: the sign of the first row's largest-magnitude element (a negative control:
    the call must mismatch; a small element can vanish in MUL_MAT's Q8 quantization of its
    activation, the block's largest cannot).
    """
    pdir, out = Path(partition_dir), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta, prows = load_partition(pdir)
    arms = {a["name"]: a for a in meta["arms"]}
    x, y = pair
    tasks, by = _pair_rows(prows, arms, pair, tasks)
    model_path = Path(meta["model_path"])
    model = Model(model_path, sha256=meta["model_sha256"], n_gpu_layers=int(meta.get("gpu_layers", 0)))
    pr = _Run(meta, out, Path(tool), model_path, layers, perturb, backend)
    comparisons: dict[str, dict] = {}
    t0 = time.time()
    try:
        for task in _tasks_from_ids(tasks):
            prompt = prompt_tokens(model, task)
            n = len(prompt)
            captured: dict[str, list[Call]] = {}
            for arm_name in pair:
                prow = by[(task.task_id, arm_name)]
                if prow["prompt_len"] != n:
                    raise ConfigError(f"{task.task_id}: prompt of {n} tokens, the partition had {prow['prompt_len']}")
                arm = PartitionArm(**arms[arm_name])
                cap, kv_sha = _capture_arm(model, meta, arm, prompt, layers, f"{task.task_id} {arm_name}")
                calls = _replay_arm(pr, task.task_id, arm_name, n, kv_sha, prow, cap)
                captured[arm_name] = calls
                if progress:
                    st = [r["status"] for r in pr.rows if r["task_id"] == task.task_id and r["arm"] == arm_name]
                    print(  # contract: --progress lines on stderr
                        f"[projection {time.time() - t0:6.0f}s] {task.task_id} {arm_name}: {len(calls)} calls, "
                        + ", ".join(f"{s} {st.count(s)}" for s in STATUSES if st.count(s)),
                        file=sys.stderr,
                        flush=True,
                    )
            comparisons[task.task_id] = compare_arms(captured[x], captured[y])
    finally:
        model.close()
    return _document(pr, pdir, pair, tasks, backend, comparisons, t0)


def _flip_operand(path: Path, cid: str) -> None:
    header, tensors = operands.read_container(path)
    name = next(n for n in tensors if n.startswith(f"{cid}."))
    t = tensors[name]
    blob = bytearray(t.blob)
    i0 = int(np.argmax(np.abs(t.array()[0, 0, 0].astype(np.float64))))
    blob[t.offset + i0 * t.nb[0] + t.dtype.itemsize - 1] ^= 0x80  # little-endian: the sign bit
    tensors[name] = operands.OperandTensor(t.type, t.ne, t.nb, t.offset, bytes(blob))
    header.pop("tensors", None)
    operands.write_container(path, header, tensors)


def _row(meta, task_id, arm, i, c: Call, cid, results, replayed, cap) -> dict:
    s0 = c.srcs[0] if c.srcs else None
    s1 = c.srcs[1] if len(c.srcs) > 1 else None
    row = {
        "family": meta["family"],
        "task_id": task_id,
        "arm": arm,
        "call": i,
        "node": c.node,
        "op": c.op,
        "layer": c.layer,
        "p0": c.p0,
        "p1": c.p1,
        "src0_name": s0.name if s0 else None,
        "src0_type": s0.type if s0 else None,
        "src0_ne": _ne(s0.ne) if s0 else [],
        "src0_buffer": s0.buffer_type if s0 else None,
        "src1_name": s1.name if s1 else None,
        "src1_type": s1.type if s1 else None,
        "src1_ne": _ne(s1.ne) if s1 else [],
        "out_ne": _ne(c.ne),
        "out_type": "f32",
        "weight_sha256": None,
        "captured_sha256": sha256_bytes(c.out),
        "row_sha256": row_digests(c),
        "replayed_sha256": None,
        "elements_differing": None,
        "first_differing": None,
        "status": "excluded",
        "reason": c.excluded,
    }
    if c.excluded:
        return row
    res = results.get(cid, {})
    if res.get("status") != "ok" or cid not in replayed:
        row.update(status="error", reason=res.get("error") or f"{TOOL} returned no output for {cid}")
        return row
    got = replayed[cid].blob
    row["replayed_sha256"] = sha256_bytes(got)
    if len(got) != len(c.out):
        row.update(status="mismatch", reason=f"replayed {len(got)} bytes, captured {len(c.out)}")
        return row
    cmp = bitwise.compare(_f32(c.out), _f32(got))
    row["elements_differing"] = int(cmp.n_diff)
    if cmp.bitwise_equal:
        row.update(status="qualified", reason=None)
    else:
        row.update(status="mismatch", reason=f"{cmp.n_diff} elements differ, max |difference| {cmp.max_abs_diff}")
        row["first_differing"] = int(cmp.first_diff[0]) if cmp.first_diff else None
    return row


def summary(doc: dict) -> str:
    c = doc["counts"]
    lines = [
        f"projection replay on {doc['backend']}, pair {','.join(doc['pair'])}, "
        f"layer{'s' if len(doc['layers']) > 1 else ''} {','.join(map(str, doc['layers']))} "
        f"({len(doc['tasks'])} input(s) whose states differ): qualified {c['qualified']}, "
        f"mismatch {c['mismatch']}, excluded {c['excluded']}, error {c['error']}"
    ]
    for node, k in doc["by_node"].items():
        lines.append(f"  {node:12s} " + "  ".join(f"{s} {k[s]}" for s in STATUSES))
    x, y = doc["pair"]
    for tid, comp in doc["arms"].items():
        parts = []
        for node, r in comp.items():
            if not r.get("compared"):
                parts.append(f"{node} not compared")
            elif r["equal"]:
                parts.append(f"{node} equal")
            else:
                parts.append(
                    f"{node} first differs at position {r['first_position']} feature {r['first_feature']} "
                    f"({r['positions_differing']}/{r['positions']} positions, max |d| {r['max_abs']:.3g})"
                )
        lines.append(f"  {tid} {x} vs {y}: " + "; ".join(parts))
    for p in doc["problems"]:
        lines.append(f"problem: {p}")
    return "\n".join(lines)


def exit_code(doc: dict) -> int:
    """0, or 1 when a control failed or a replay on fixed operands did not reproduce its call."""
    # contract: the study's documented exit status, kept beside the doc it reads (its tests call it here)
    return EXIT_FAILED if doc["problems"] or doc["counts"]["mismatch"] else EXIT_OK
