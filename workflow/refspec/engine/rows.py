"""The rows an attempt leaves: its ``requests`` row, its ``endpoints`` row, and its journal record."""

from __future__ import annotations

from typing import Any

from ..core.arms import Arm
from ..core.endpoint import Endpoint

COUNTER_COLUMNS = (
    "proposals",
    "accepted",
    "rollbacks",
    "cycles",
    "callers",
    "micrographs",
    "rows",
    "graph_rebuilds",
    "graph_reuses",
)


def placement_columns(placement: dict | None) -> dict:
    """The ``requests`` columns that say where the arm ran (from the worker's ready record)."""
    p = placement or {}
    t, d = p.get("target") or {}, p.get("draft") or {}
    return {
        "device": t.get("device"),
        "device_description": t.get("device_description"),
        "gpu_layers": t.get("offloaded"),
        "draft_gpu_layers": d.get("offloaded") if d else None,
    }


def request_row(
    ctx: Any,
    arm: Arm,
    *,
    block: int,
    worker: str,
    task_id: str,
    cap: int,
    repeat: int,
    order_index: int,
    attempt: int,
    status: str,
    reason: str | None,
    t_ns: int | None = None,
    cpu_ns: int | None = None,
    endpoint: Endpoint | None = None,
    counters: dict | None = None,
    placement: dict | None = None,
) -> dict:
    """One row of the ``requests`` table (anc/tables.md); ``ctx`` gives campaign, session, family and draft."""
    c = counters or {}
    spec = arm.speculative
    return {
        "campaign": ctx.campaign,
        "session": ctx.session,
        "block": block,
        "worker": worker,
        "family": ctx.family,
        "task_id": task_id,
        "arm": arm.name,
        "mode": arm.mode,
        "layout": arm.layout,
        "draft": ctx.draft if spec else None,
        "k": arm.k if spec else 0,
        "ub": arm.ub,
        "mask": arm.mask,
        "cap": cap,
        "repeat": repeat,
        "order_index": order_index,
        "attempt": attempt,
        "status": status,
        "reason": reason,
        "t_ns": t_ns,
        "cpu_ns": cpu_ns,
        "n_generated": endpoint.n if endpoint else None,
        "stop_reason": endpoint.stop_reason if endpoint else None,
        "eog": endpoint.eog if endpoint else None,
        "last_token": endpoint.last_token if endpoint else None,
        "endpoint_sha256": endpoint.sha256 if endpoint else None,
        **{k: (c.get(k) if counters is not None else None) for k in COUNTER_COLUMNS},
        **placement_columns(placement),
    }


def endpoint_row(row: dict, ep: Endpoint) -> dict:
    """The ``endpoints`` row of an ok ``requests`` row."""
    return {k: row[k] for k in ("campaign", "family", "task_id", "arm", "cap", "session", "repeat")} | {
        "endpoint_sha256": ep.sha256,
        "tokens": list(ep.tokens),
        "n": ep.n,
        "eog": ep.eog,
        "last_token": ep.last_token,
        "stop_reason": ep.stop_reason,
    }


def warmup_record(row: dict, counters: dict, prompt_sha256: str) -> dict:
    """The journal record of a registered warmup (an excluded row, no endpoint kept)."""
    return {
        "type": "request",
        "row": row,
        "endpoint": None,
        "margins": None,
        "evidence": None,
        "counters": counters,
        "prompt_sha256": prompt_sha256,
    }


def failed_record(row: dict, ledger_seq: int, prompt_sha256: str | None = None) -> dict:
    """The journal record of a failed attempt."""
    return {
        "type": "request",
        "row": row,
        "endpoint": None,
        "margins": None,
        "evidence": None,
        "counters": None,
        "prompt_sha256": prompt_sha256,
        "ledger_seq": ledger_seq,
    }
