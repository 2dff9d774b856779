"""Capture plumbing of numerical replay E1: the ctypes eval callback that copies the
attention stage nodes of one layer together with the operands they were computed from
(:class:`OperandCapture`), and their conversion into an operand file's tensors
(:func:`operands_from_capture`)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import RefspecError, UsageError
from ..native.runtime import GGML_TYPE_F16, GGML_TYPE_F32, Capture, GGMLTensor
from . import operands

# the native graph's stages a live capture freezes (the stage file adds "out": operands.STAGES)
CAPTURED_STAGES = ("kq", "kq_soft_max", "kqv")

_ELEM = {"f32": 4, "f16": 2}
_GGML_TYPES = {GGML_TYPE_F32: "f32", GGML_TYPE_F16: "f16"}
_STAGE_AXES = {
    ("mq", "kq"): ("key", "query", "head", "one"),
    ("mq", "kq_soft_max"): ("key", "query", "head", "one"),
    ("mq", "kqv"): ("chan", "query", "head", "one"),
    ("rows", "kq"): ("key", "one", "head", "query"),
    ("rows", "kq_soft_max"): ("key", "one", "head", "query"),
    ("rows", "kqv"): ("chan", "one", "head", "query"),
}


class CaptureError(RefspecError):
    """A capture that cannot be turned into an operand file (missing node, inconsistent views)."""


@dataclass
class SourceView:
    """One source of a captured node: its view and the bytes of the tensor it views."""

    name: str
    type: int
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    root: int  # address of the viewed tensor (the node itself when it is not a view)
    root_name: str
    offs: int  # byte offset of the view's element (0,0,0,0) inside the root
    raw: bytes  # root bytes [offs, end of root)


@dataclass
class NodeExtra:
    op_params: tuple[int, ...]
    srcs: tuple[SourceView | None, SourceView | None]


class OperandCapture(Capture):
    """:class:`runtime.Capture` of the stage nodes that also freezes their operands.

    For every matched node it keeps, besides the node's output, its ``src[0]`` and ``src[1]``
    (``kq``: K view and permuted Q; ``kq_soft_max``: its input and the mask; ``kqv``: the V view
    and the probabilities) with ``ne``/``nb``, the view offset and the bytes of the viewed tensor
    from the view's first byte to its end (read with ``ggml_backend_tensor_get``, any backend),
    and the node's ``op_params`` (softmax scale and ALiBi bias).
    """

    def __init__(self, layers: Iterable[int]):
        super().__init__(CAPTURED_STAGES, layers)
        self.extras: dict[int, NodeExtra] = {}

    def _source(self, ptr: int | None) -> SourceView | None:
        if not ptr:
            return None
        s = GGMLTensor.from_address(ptr)
        root_ptr = int(s.view_src) if s.view_src else int(ptr)
        offs = int(s.view_offs) if s.view_src else 0
        root = GGMLTensor.from_address(root_ptr)
        total = int(self._ggml.ggml_nbytes(root_ptr))
        size = max(0, total - offs)
        buf = ctypes.create_string_buffer(size) if size else None
        if size:
            self._ggml.ggml_backend_tensor_get(root_ptr, buf, offs, size)
        return SourceView(
            s.name.decode("utf-8", "replace"),
            int(s.type),
            tuple(int(x) for x in s.ne),
            tuple(int(x) for x in s.nb),
            root_ptr,
            root.name.decode("utf-8", "replace"),
            offs,
            buf.raw if size else b"",
        )

    def _on_node(self, tptr, ask: bool) -> bool:
        n = len(self.items)
        ret = super()._on_node(tptr, ask)
        if not ask and len(self.items) > n:
            try:
                t = GGMLTensor.from_address(tptr)
                self.extras[n] = NodeExtra(
                    tuple(int(x) for x in t.op_params), (self._source(t.src[0]), self._source(t.src[1]))
                )
            except Exception as e:  # recorded, reported by the observation control
                self.errors.append(f"{self.items[n].name}-{self.items[n].layer}: {type(e).__name__}: {e}")
        return ret

    def clear(self) -> None:
        super().clear()
        self.extras.clear()
        self.errors.clear()


def _contiguous_nb(ne: Sequence[int], esize: int) -> tuple[int, int, int, int]:
    nb = [esize]
    for n in ne[:3]:
        nb.append(nb[-1] * int(n))
    return tuple(nb)  # type: ignore[return-value]


def _view(src: SourceView, ne: Sequence[int], nb: Sequence[int], what: str) -> operands.OperandTensor:
    """An operand tensor of ``ne``/``nb`` starting at ``src``'s first element; blob = bytes it touches."""
    if src.type not in _GGML_TYPES:
        raise CaptureError(f"{what}: unsupported ggml type {src.type}")
    type_ = _GGML_TYPES[src.type]
    extent = sum((int(n) - 1) * int(s) for n, s in zip(ne, nb)) + _ELEM[type_]
    if extent > len(src.raw):
        raise CaptureError(f"{what}: the view reaches {extent} bytes past its start, {len(src.raw)} captured")
    t = operands.OperandTensor(type_, tuple(int(x) for x in ne), tuple(int(x) for x in nb), 0, src.raw[:extent])
    t.check(what)
    return t


def _rows_of_one_tensor(views: list[SourceView], ne: Sequence[int], what: str) -> operands.OperandTensor | None:
    """PQ's per-query views as one operand when view j is row j of one tensor (else None)."""
    v0 = views[0]
    step = v0.nb[1]
    for j, vj in enumerate(views):
        if vj.root != v0.root or vj.offs != v0.offs + j * step:
            return None
    n_q = len(views)
    nb = (v0.nb[0], step, v0.nb[2], max(step * n_q, v0.nb[2] * v0.ne[2]))
    if what == "mask":
        nb = (v0.nb[0], step, step * n_q, step * n_q)
    return _view(v0, ne, nb, what)


def _gathered(views: list[SourceView], what: str) -> operands.OperandTensor:
    """PQ's per-query views copied element by element into one contiguous operand.

    ``q`` views (d, 1, h, 1) become the compact (d, q, h, 1) permute of a (d, h, q) projection,
    ``mask`` rows (n_kv, 1, 1, 1) a contiguous (n_kv, q, 1, 1) mask.
    """
    parts = []
    for vj in views:
        if vj.type not in _GGML_TYPES:
            raise CaptureError(f"{what}: unsupported ggml type {vj.type}")
        dt = np.dtype("<f4") if _GGML_TYPES[vj.type] == "f32" else np.dtype("<f2")
        t = _view(vj, vj.ne, vj.nb, what)
        parts.append(np.ndarray(tuple(reversed(t.ne)), dtype=dt, buffer=t.blob, strides=tuple(reversed(t.nb))))
    if what == "q":
        arr = np.stack([p[0, :, 0, :] for p in parts])  # (q, h, d)
        n_q, h, d = arr.shape
        return operands.OperandTensor(
            "f32",
            (d, n_q, h, 1),
            (4, 4 * d * h, 4 * d, 4 * d * h * n_q),
            0,
            np.ascontiguousarray(arr, dtype="<f4").tobytes(),
        )
    arr = np.stack([p[0, 0, 0, :] for p in parts])  # (q, n_kv)
    n_q, n_kv = arr.shape
    return operands.OperandTensor(
        "f32",
        (n_kv, n_q, 1, 1),
        (4, 4 * n_kv, 4 * n_kv * n_q, 4 * n_kv * n_q),
        0,
        np.ascontiguousarray(arr, dtype="<f4").tobytes(),
    )


def _stage_ref(items, layout: str, stage: str) -> operands.OperandTensor:
    arrays = []
    for it in items:
        esize = 4 if it.type == GGML_TYPE_F32 else 2
        if it.type != GGML_TYPE_F32:
            raise CaptureError(f"{stage}: stage output of type {it.type}, expected f32")
        if tuple(it.nb) != _contiguous_nb(it.ne, esize):
            raise CaptureError(f"{stage}: stage output is not contiguous (ne {it.ne}, nb {it.nb})")
        arrays.append(np.asarray(it.data, dtype=np.float32).reshape(tuple(reversed(it.ne))))
    if layout == "pq":
        for a in arrays:
            if a.shape[0] != 1 or a.shape[2] != 1:
                raise CaptureError(f"{stage}: pq node of shape {a.shape[::-1]}, expected one query")
        arr = np.concatenate(arrays, axis=0)  # stack the per-query nodes along dim 3 in query order
    else:
        if len(arrays) != 1:
            raise CaptureError(f"{stage}: {len(arrays)} nodes for one {layout} micrograph")
        arr = arrays[0]
    t = operands.contiguous_tensor(arr, "f32")
    t.axes = _STAGE_AXES[("mq" if layout == "mq" else "rows", stage)]
    return t


def operands_from_capture(
    cap: OperandCapture, layer: int, layout: str, n_q: int, meta: dict[str, Any] | None = None
) -> operands.Operands:
    """The operand file content of one layer's captured micrograph (raises :class:`CaptureError`)."""
    if cap.errors:
        raise CaptureError("; ".join(cap.errors))
    idx = [i for i, it in enumerate(cap.items) if it.layer == layer]
    by_stage: dict[str, list[int]] = {s: [] for s in CAPTURED_STAGES}
    for i in idx:
        base = cap.items[i].name.split("_pq")[0]
        by_stage[base].append(i)
    want = n_q if layout == "pq" else 1
    for s in CAPTURED_STAGES:
        if len(by_stage[s]) != want:
            raise CaptureError(f"layer {layer} {layout}: {len(by_stage[s])} {s} node(s) captured, expected {want}")
        for i in by_stage[s]:
            if i not in cap.extras:
                raise CaptureError(f"layer {layer} {layout}: no operands captured for {cap.items[i].name}")
    if layout == "pq":
        names = [cap.items[i].name for i in by_stage["kq"]]
        if names != [f"kq_pq{j}" for j in range(n_q)]:
            raise CaptureError(f"layer {layer} pq: per-query nodes out of order: {names}")

    kq0 = cap.extras[by_stage["kq"][0]]
    sm0 = cap.extras[by_stage["kq_soft_max"][0]]
    kqv0 = cap.extras[by_stage["kqv"][0]]
    ksrc, qsrc = kq0.srcs
    msrc = sm0.srcs[1]
    vsrc = kqv0.srcs[0]
    if ksrc is None or qsrc is None or msrc is None or vsrc is None:
        raise CaptureError(f"layer {layer} {layout}: an operand source is missing")
    # every node of the micrograph sees the same K, V (and, for pq, views of one Q and one mask)
    for key, pos, ref in (("kq", 0, ksrc), ("kqv", 0, vsrc)):
        for i in by_stage[key]:
            s = cap.extras[i].srcs[pos]
            if s is None or (s.root, s.offs, s.ne, s.nb) != (ref.root, ref.offs, ref.ne, ref.nb):
                raise CaptureError(f"layer {layer} {layout}: {key} nodes do not share one operand view")

    k = _view(ksrc, ksrc.ne, ksrc.nb, "k")
    v = _view(vsrc, vsrc.ne, vsrc.nb, "v")
    qd, qn1, qn2, qn3 = qsrc.ne
    mne0 = msrc.ne[0]
    if layout == "mq":
        if qn1 != n_q or qn3 != 1:
            raise CaptureError(f"layer {layer} mq: q has shape {qsrc.ne}, expected {n_q} queries")
        q = _view(qsrc, qsrc.ne, qsrc.nb, "q")
        mask = _view(msrc, msrc.ne, msrc.nb, "mask")
    elif layout == "qb":
        # q (d, 1, h, n_q) with the query-column stride as nb3; mask (n_kv, 1, 1, n_q)
        if qn1 != 1 or qn3 != n_q or msrc.ne[1] != 1 or msrc.ne[3] != n_q:
            raise CaptureError(f"layer {layer} qb: unexpected q {qsrc.ne} / mask {msrc.ne} views")
        qs1 = qsrc.nb[3]
        q = _view(qsrc, (qd, n_q, qn2, 1), (qsrc.nb[0], qs1, qsrc.nb[2], max(qs1 * n_q, qsrc.nb[2] * qn2)), "q")
        ms1 = msrc.nb[3]
        mask = _view(msrc, (mne0, n_q, 1, 1), (msrc.nb[0], ms1, ms1 * n_q, ms1 * n_q), "mask")
    elif layout == "pq":
        qviews = [cap.extras[i].srcs[1] for i in by_stage["kq"]]
        mviews = [cap.extras[i].srcs[1] for i in by_stage["kq_soft_max"]]
        for j, (qj, mj) in enumerate(zip(qviews, mviews)):
            if qj is None or mj is None or qj.ne != qsrc.ne or qj.nb != qsrc.nb or mj.ne != msrc.ne or mj.nb != msrc.nb:
                raise CaptureError(f"layer {layer} pq: query {j} has an unexpected q or mask view")
        if qn1 != 1 or qn3 != 1 or msrc.ne[1:] != (1, 1, 1):
            raise CaptureError(f"layer {layer} pq: unexpected q {qsrc.ne} / mask {msrc.ne} views")
        q = _rows_of_one_tensor(qviews, (qd, n_q, qn2, 1), "q")
        mask = _rows_of_one_tensor(mviews, (mne0, n_q, 1, 1), "mask")
        gathered = [name for name, t in (("q", q), ("mask", mask)) if t is None]
        if q is None:  # the per-query views are separate tensors (e.g. split-input copies on a GPU)
            q = _gathered(qviews, "q")
        if mask is None:
            mask = _gathered(mviews, "mask")
        if gathered:
            meta = {**(meta or {}), "gathered": gathered}
    else:
        raise UsageError(f"unknown layout {layout!r}")

    params = np.array(sm0.op_params[:2], dtype=np.int32).view(np.float32)
    ops = operands.Operands(q, k, v, mask, float(params[0]), float(params[1]), dict(meta or {}))
    for s in CAPTURED_STAGES:
        ops.refs[s] = _stage_ref([cap.items[i] for i in by_stage[s]], layout, s)
    return ops
