"""Capture of the attention stage outputs of one micrograph, in a layout-independent form.

Used by the layout tests on the embedded family and on the synthetic paper geometries:
:func:`run_layout` decodes q rows with one layout (in the prefill phase, or in the
continuation phase after a common prefix prefilled with ``qb``) and returns the captured
``kq``, ``kq_soft_max`` and ``kqv`` outputs as float32 arrays of shape (q, heads, n).
"""

from __future__ import annotations

import numpy as np

from refspec.native.runtime import Capture, Context, ContextSpec

STAGES = ("kq", "kq_soft_max", "kqv")


def spec(layout: str, mask: int = 3, ub: int = 4) -> ContextSpec:
    return ContextSpec(n_ctx=256, n_batch=64, n_ubatch=ub, threads=1, layout=layout, mask=mask)


def canonical(items, layout: str, q: int) -> dict[tuple[str, int], np.ndarray]:
    """Stage outputs as float32 arrays of shape (q, h, n) whatever the layout's node shapes."""
    out: dict[tuple[str, int], list] = {}
    for it in items:
        ne0, ne1, ne2, ne3 = it.ne
        a = it.data.astype(np.float32, copy=False).reshape(ne3, ne2, ne1, ne0)
        base = it.name.split("_pq")[0]
        if layout == "mq":
            assert ne3 == 1 and ne1 == q
            arr = a[0].transpose(1, 0, 2)  # (h, q, n) -> (q, h, n)
            out.setdefault((base, it.layer), []).append(arr)
        elif layout == "qb":
            assert ne1 == 1 and ne3 == q
            out.setdefault((base, it.layer), []).append(a[:, :, 0, :])
        elif layout == "qh":  # batch j = head*q + query
            assert ne1 == 1 and ne3 == 1 and ne2 % q == 0
            arr = a[0, :, 0, :].reshape(ne2 // q, q, ne0).transpose(1, 0, 2)
            out.setdefault((base, it.layer), []).append(arr)
        else:  # pq: one node per query, in query order
            assert ne1 == 1 and ne3 == 1
            out.setdefault((base, it.layer), []).append(a[:, :, 0, :])
    return {k: np.concatenate(v, axis=0) for k, v in out.items()}


def run_layout(target, tokens, layout: str, q: int, phase: str, layers, prefix: int, capture: bool = True):
    """(stages, logits of the q rows, context counters) of one q-row micrograph with ``layout``."""
    cap = Capture(STAGES, layers) if capture else None
    with Context(target, spec(layout), capture=cap) as ctx:
        ctx.begin_request()
        if cap:
            cap.enabled = False
        if phase == "prefill":
            rows, pos0 = tokens[:q], 0
        else:
            # one common history for every layout: the prefix is prefilled with qb
            ctx.set_layout("qb")
            ctx.decode(tokens[:prefix], 0)
            ctx.set_layout(layout)
            ctx.set_phase("continuation")
            rows, pos0 = tokens[prefix : prefix + q], prefix
        if cap:
            cap.enabled = True
        assert ctx.active_layout() == layout
        logits = ctx.decode(rows, pos0, outputs="all")
        counters = ctx.counters()
    stages = canonical(cap.items, layout, q) if cap else None
    return stages, logits, counters


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)
