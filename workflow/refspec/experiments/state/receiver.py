"""The common receiver of the crosses (paper §6.2, S5): a fresh context restores a sequence KV
payload, samples the recipient's stored initial logits and continues greedily; one crosses job
(a task and repeat: controls, then subsets, in both directions) runs here, in its own process
(:mod:`refspec.experiments.state.jobs`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ...core.endpoint import Endpoint
from ...core.errors import IntegrityError
from ...core.hashing import sha256_bytes
from ...native.runtime import Context, ContextSpec, Model
from . import kvstate as kv
from .partition import continue_greedy

CONTROL_SELECTORS = ("EMPTY", "ALL")
PANELS = {
    "L0": ("EMPTY", "L0_K", "L0_V", "L0_KV"),
    "KV": ("EMPTY", "K_ALL", "V_ALL", "ALL"),
    "POSITION": ("EMPTY", "PREFIX", "TAIL", "ALL"),
}


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


def _read_directions(job: dict, msha: str) -> list[tuple]:
    """Each direction's recipient KV, donor KV and the recipient's initial logits (validated)."""
    dirs = []
    for d in job["directions"]:
        rec_kv = kv.read_payload(d["recipient_kv"])
        don_kv = kv.read_payload(d["donor_kv"])
        rec_lg = kv.read_payload(d["recipient_logits"])
        if rec_lg.kind != "logits" or rec_lg.header["model_sha256"] != msha:
            raise IntegrityError(f"{d['recipient_logits']}: not logits of model {msha}")
        dirs.append((d, rec_kv, don_kv, rec_lg.logits()))
    return dirs


def _intervene(model, spec: ContextSpec, job: dict, direction: tuple, name: str, keep_rows: bool):
    """Splice selector ``name`` from the donor into the recipient's payload, receive it in a fresh
    context; returns the result record, the endpoint and the kept logits rows."""
    d, rec_kv, don_kv, logits = direction
    msha = job["model_sha256"]
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
            int(job["cap"]),
            model_sha256=msha,
            keep_rows=keep_rows,
            source=f"{name} payload",
        )
    finally:
        ctx.close()
    result = {
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
    return result, ep, rows


def run_job(job: dict) -> dict:
    """One (task, repeat): controls then subsets in both directions, in this process
    (the native library already loaded from the job's ``lib_dir``)."""
    model = Model(
        job["model_path"],
        sha256=job["model_sha256"],
        n_gpu_layers=int(job.get("gpu_layers", 0)),
        require_placement=True,
    )
    msha = job["model_sha256"]
    spec = ContextSpec(n_ctx=job["n_ctx"], n_batch=job["n_batch"], n_ubatch=job["ub"], threads=job["threads"])
    order = list(job["selectors"])
    panel_arms = {x for names in PANELS.values() for x in names} if job.get("frontier", True) else set()
    results, frontier = [], []
    dirs = _read_directions(job, msha)
    # controls first (both directions), then the subsets
    ctrl = [s for s in order if s in CONTROL_SELECTORS]
    subs = [s for s in order if s not in CONTROL_SELECTORS]
    kept: dict[tuple[str, str], tuple[Endpoint, list[np.ndarray]]] = {}
    for group in (ctrl, subs):
        for direction in dirs:
            for name in group:
                result, ep, rows = _intervene(model, spec, job, direction, name, name in panel_arms)
                if name in panel_arms:
                    kept[(direction[0]["direction"], name)] = (ep, rows)
                results.append(result)
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
