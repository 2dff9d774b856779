"""Graph size per layout and occupied queries: what a layout costs apart from any timing.

For a family's target on the run's device, every layout (``LAYOUTS``) and ``q`` occupied
queries: one context with micro-batch 4 prefills a fixed prefix once with the stock layout, then
runs one caller of ``q`` rows per layout and ``q`` in the continuation phase with the layout
active (phase mask 2, the target's continuation, where a verification caller runs), removing its
rows from the KV cache after each. The patched library's counters
(``anc/native.md``) give, for that caller,

* ``micrographs``: physical graph executions (GS: ``q``, one token each; every other layout: 1);
* ``nodes``: the nodes of each micrograph's graph (``ggml_graph_n_nodes``), summed;
* ``dispatches``: of those, the nodes a backend computes (every node but views, reshapes,
  permutes and transposes; on a GPU without kernel fusion, one launch each), summed;
* ``splits``: the scheduler's backend splits of each micrograph, summed.

On a GPU a small model's decoding is bound by launches rather than arithmetic, so
``dispatches`` is the backend-independent part of a layout's price: per layer, PQ adds a QK
product, a softmax and an AV product per query and a concat per query after the first, QB
nothing that grows with ``q``, QH one copy of Q. A layout the device refuses at graph build
(QB on ggml-vulkan at ``q >= 2``) is recorded ``refused at build`` with the library's reason; it is
never run elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import tables as T
from ..core.errors import AdmissionError, UsageError
from ..core.layouts import LAYOUT_ORDER
from ..native import runtime
from ..native.runtime import Context, ContextSpec

TABLE = "graph_size"
PREFIX_TEXT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
CONTINUATION_MASK = 2  # target continuation: the phase a verification caller runs in
REFUSED = "refused at build"  # a status word of its own: "refused" alone is the report's fixed text
SIZE_COUNTERS = ("micrographs", "graph_nodes", "graph_dispatches", "graph_splits")


def caller_size(ctx: Context, layout: str, tokens: Sequence[int], n: int) -> dict[str, Any]:
    """The counters of one continuation caller of ``tokens[n:]`` with ``layout`` active, on a context
    whose KV holds ``tokens[:n]``; the rows are removed again afterwards. ``status`` ``refused at
    build`` (with the library's reason) where the library or the device refuses the layout."""
    if len(tokens) <= n:
        raise UsageError(f"no rows after a history of {n} tokens")
    try:
        ctx.set_layout(layout, mask=CONTINUATION_MASK)
        ctx.seq_rm(n)
        ctx.reset_counters()
        ctx.decode(list(tokens[n:]), n, outputs="all")
    except AdmissionError as e:
        return {"status": REFUSED, "reason": str(e), **dict.fromkeys(SIZE_COUNTERS)}
    finally:
        ctx.seq_rm(n)
    c = ctx.counters()
    if c[f"micrographs_{layout}"] != c["micrographs"]:
        raise AdmissionError(
            f"{layout} q={len(tokens) - n}: {c['micrographs_' + layout]} of {c['micrographs']} micrographs ran it"
        )
    return {"status": "ok", "reason": None, **{k: c[k] for k in SIZE_COUNTERS}}


def run_graph_size(
    model: runtime.Model,
    family: str,
    *,
    layouts: Sequence[str] = LAYOUT_ORDER,
    queries: Sequence[int] = (1, 2, 3, 4),
    threads: int = 1,
) -> list[dict[str, Any]]:
    """One ``graph_size`` row per (layout, q). One context: the prefix (all but the last
    ``max(queries)`` tokens) is prefilled once with the stock layout, then every (layout, q) caller
    runs on it in the continuation phase and its rows are removed again."""
    tokens = model.tokenize(PREFIX_TEXT, add_special=True)
    n = len(tokens) - max(queries)
    if n < 1:
        raise UsageError(f"a prefix of {len(tokens)} tokens leaves no history before {max(queries)} rows")
    device = model.placement.get("device") or "CPU"
    spec = ContextSpec(n_ctx=256, n_batch=64, n_ubatch=4, threads=threads, layout="mq", mask=CONTINUATION_MASK)
    rows = []
    with Context(model, spec) as ctx:
        ctx.begin_request()
        ctx.decode(list(tokens[:n]), 0)
        ctx.set_phase("continuation")
        for layout in layouts:
            for q in queries:
                size = caller_size(ctx, layout, tokens[: n + q], n)
                rows.append(
                    {
                        "family": family,
                        "device": device,
                        "layout": layout,
                        "q": q,
                        "status": size["status"],
                        "micrographs": size["micrographs"],
                        "nodes": size["graph_nodes"],
                        "dispatches": size["graph_dispatches"],
                        "splits": size["graph_splits"],
                        "reason": size["reason"],
                    }
                )
    return rows


def write_graph_size(rows: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    return T.write_table(rows, TABLE, Path(out_dir))
