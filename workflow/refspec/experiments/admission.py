"""Backend admission of the lifted attention shapes (paper section 6.3, S6.3).

For a family's attention shape (query heads, KV heads, head dimension, key extent) and
q = 1..4 occupied queries, the replay tool builds the MQ, PQ and QB subgraphs on synthetic
operands, asks every backend ``ggml_backend_supports_op`` / ``ggml_backend_dev_supports_op``
for each node, pins the nodes the chosen backend accepts, computes, and reports where each
node actually ran. Per layout, q and operator the verdict is

* ``false``: the chosen backend's supports_op refused at least one node of that operator, a
  proven violation of a necessary condition for running the layout on that backend;
* ``unknown``: otherwise. Acceptance is never a certificate of full support or of numerical
  correspondence; the observed placement and any fallback are reported beside it.

Writes ``admission.json`` (rows + environment) and ``admission.csv`` (rows); see
``anc/audit.md``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core import tables as T
from ..core.errors import UsageError
from ..core.fsutil import atomic_write_text
from ..core.layouts import REPLAYED_LAYOUTS
from . import operands, replay_runner

CSV_COLUMNS = (
    "backend",
    "device",
    "n_head",
    "n_head_kv",
    "head_dim",
    "n_kv",
    "layout",
    "q",
    "op",
    "nodes",
    "supports_main",
    "supports_cpu",
    "verdict",
    "observed",
    "fallback",
    "reason",
)
MAX_OPERAND_BYTES = 1 << 30
# fresh tool processes per query width when a process is killed by a signal (see run_admission)
TOOL_ATTEMPTS = 3


@dataclass(frozen=True)
class AttentionShape:
    n_head: int
    n_head_kv: int
    head_dim: int
    n_kv: int
    head_dim_v: int | None = None
    source: str = "cli"

    def check(self) -> None:
        if min(self.n_head, self.n_head_kv, self.head_dim, self.n_kv) < 1:
            raise UsageError(f"attention shape needs positive sizes: {self}")
        if self.n_head % self.n_head_kv:
            raise UsageError(f"{self.n_head} query heads are not a multiple of {self.n_head_kv} kv heads")
        dv = self.head_dim_v or self.head_dim
        size = 2 * 2 * self.n_kv * self.n_head_kv * max(self.head_dim, dv)
        if size > MAX_OPERAND_BYTES:
            raise UsageError(f"K/V operands of {size} bytes for n_kv={self.n_kv}; pass a smaller --n-kv")


def _field(reader: Any, key: str) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return None
    v = f.contents()
    if isinstance(v, list):
        vals = {int(x) for x in v}
        if len(vals) != 1:
            raise UsageError(f"{key} varies across layers ({sorted(vals)}); one attention shape is needed")
        return vals.pop()
    return v


def gguf_attention_shape(path: str | Path, n_kv: int | None = None) -> AttentionShape:
    """Head counts, head dims and context length from a GGUF file's metadata."""
    try:
        from gguf import GGUFReader
    except ImportError as e:  # pragma: no cover
        raise UsageError("reading a GGUF needs the 'gguf' package") from e
    r = GGUFReader(str(path))
    arch = _field(r, "general.architecture")
    if not arch:
        raise UsageError(f"{path}: no general.architecture")
    n_head = _field(r, f"{arch}.attention.head_count")
    n_head_kv = _field(r, f"{arch}.attention.head_count_kv") or n_head
    n_embd = _field(r, f"{arch}.embedding_length")
    if not n_head or not n_embd:
        raise UsageError(f"{path}: no {arch}.attention.head_count / {arch}.embedding_length")
    d = _field(r, f"{arch}.attention.key_length") or int(n_embd) // int(n_head)
    dv = _field(r, f"{arch}.attention.value_length") or d
    ctx = _field(r, f"{arch}.context_length")
    nk = int(n_kv if n_kv is not None else (ctx or 256))
    return AttentionShape(int(n_head), int(n_head_kv), int(d), nk, int(dv), f"gguf:{Path(path).name}:{arch}")


def admission_operands(shape: AttentionShape, q: int, seed: int = 0) -> operands.Operands:
    """Small random operands of the lifted shape with a causal continuation mask."""
    rng = np.random.default_rng(seed + q)
    dv = shape.head_dim_v or shape.head_dim
    qa = (rng.standard_normal((q, shape.n_head, shape.head_dim)) * 0.5).astype(np.float32)
    k = (rng.standard_normal((shape.n_kv, shape.n_head_kv, shape.head_dim)) * 0.5).astype(np.float16)
    v = (rng.standard_normal((shape.n_kv, shape.n_head_kv, dv)) * 0.5).astype(np.float16)
    mask = np.full((q, shape.n_kv), -np.inf, dtype=np.float32)
    for j in range(q):
        mask[j, : max(1, shape.n_kv - q + j + 1)] = 0
    return operands.make_operands(
        qa,
        k,
        v,
        mask,
        1.0 / np.sqrt(shape.head_dim),
        kv_size=shape.n_kv,
        meta={"purpose": "admission", "shape": shape.__dict__, "q": q},
    )


def _op_groups(ev: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    nodes = {n["id"]: n for n in ev["nodes"]}
    roles = ev["roles"]
    groups: dict[str, list[dict[str, Any]]] = {
        "qk_mul_mat": [nodes[i] for i in roles["kq"]],
        "soft_max": [nodes[i] for i in roles["kq_soft_max"]],
        "av_mul_mat": [nodes[i] for i in roles["kqv"]],
        "concat": [n for n in ev["nodes"] if n["op"] == "CONCAT"],
        "cont": [n for n in ev["nodes"] if n["op"] == "CONT"],
    }
    known = {n["id"] for g in groups.values() for n in g}
    for n in ev["nodes"]:
        if n["id"] not in known and n["op"] not in ("NONE", "VIEW", "PERMUTE", "RESHAPE", "TRANSPOSE"):
            groups.setdefault(f"other:{n['op']}", []).append(n)
    return {k: v for k, v in groups.items() if v}


def _reason(n: dict[str, Any], nodes: dict[int, dict[str, Any]], backend: str) -> str:
    srcs = [nodes[s] for s in n["src"] if s is not None]
    shapes = "; ".join(f"src{i} ne={s['ne']} {s['type']}" for i, s in enumerate(srcs))
    return f"supports_op({backend}) = false for {n['name']} ({n['op']}, ne={n['ne']}; {shapes})"


def evaluation_rows(report: dict[str, Any], shape: AttentionShape, q: int, ev: dict[str, Any]) -> list[dict[str, Any]]:
    main = report["backend"]["name"]
    device = report["backend"]["device"]
    cpu = report["sched_backends"][-1]
    nodes = {n["id"]: n for n in ev["nodes"]}
    rows = []
    for op, members in _op_groups(ev).items():
        sup_main = all(n["supports_op"].get(main, False) for n in members)
        sup_cpu = all(n["supports_op"].get(cpu, False) for n in members)
        observed = sorted({n["backend"] or "unassigned" for n in members})
        refused = [n for n in members if not n["supports_op"].get(main, False)]
        rows.append(
            {
                "backend": report["backend"]["requested"],
                "device": device,
                "n_head": shape.n_head,
                "n_head_kv": shape.n_head_kv,
                "head_dim": shape.head_dim,
                "n_kv": shape.n_kv,
                "layout": ev["layout"],
                "q": q,
                "op": op,
                "nodes": len(members),
                "supports_main": sup_main,
                "supports_cpu": sup_cpu,
                "verdict": "unknown" if sup_main else "false",
                "observed": ",".join(observed),
                "fallback": any(b != main for b in observed),
                "reason": _reason(refused[0], nodes, main) if refused else "",
            }
        )
    return rows


def run_admission(
    tool: str | Path,
    backend: str,
    shape: AttentionShape,
    *,
    queries: Sequence[int] = (1, 2, 3, 4),
    layouts: Sequence[str] = REPLAYED_LAYOUTS,
    threads: int = 1,
) -> dict[str, Any]:
    shape.check()
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    # one fresh tool process per query width: on Mesa's lavapipe a process that has run the q = 1
    # graphs and then q = 2 and 3 (with qb's refused nodes on the CPU) crashes inside the driver's
    # queue thread; a process per shape keeps every observation independent of the ones before it.
    # Even one width's process is, rarely, killed there (a heap corruption, SIGABRT): a process
    # killed by a signal observed nothing, so the width is run again in a fresh process, at most
    # TOOL_ATTEMPTS times, and every killed attempt is recorded in ``tool_crashes``.
    reports = []
    with tempfile.TemporaryDirectory(prefix="refspec-admission-") as td:
        for q in queries:
            p = Path(td) / f"q{q}.rsop"
            operands.write_operands(p, admission_operands(shape, q))
            job = replay_runner.ReplayRun(p, tuple(layouts), "none", Path(td) / f"q{q}", write_stages=False)
            reports.append(
                replay_runner.run_replay(
                    tool, [job], backend=backend, threads=threads, workdir=Path(td) / f"w{q}", attempts=TOOL_ATTEMPTS
                )
            )
    report = {**reports[0], "jobs": [j for r in reports for j in r["jobs"]]}
    for q, job in zip(queries, report["jobs"]):
        if job.get("error"):
            errors.append(f"q={q}: {job['error']}")
        for ev in job.get("evaluations", []):
            if ev["status"] != "ok":
                errors.append(f"q={q} {ev['layout']}: {ev.get('error')}")
                continue
            rows.extend(evaluation_rows(report, shape, q, ev))
    return {
        "layouts": list(layouts),
        "backend": report["backend"],
        "sched_backends": report["sched_backends"],
        "devices": report["devices"],
        "ggml_version": report.get("ggml_version"),
        "ggml_commit": report.get("ggml_commit"),
        "modules": report.get("modules"),
        "shape": shape.__dict__,
        "queries": list(queries),
        "rows": rows,
        "errors": errors,
        "tool_crashes": [{"q": q, **c} for q, r in zip(queries, reports) for c in r["tool_crashes"]],
    }


def write_results(result: dict[str, Any], out_dir: str | Path, family: str | None = None) -> dict[str, Path]:
    """``admission.json`` (rows + environment) and the ``admission`` table (Parquet + CSV, anc/tables.md)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fam = family or result.get("family") or str(result.get("shape", {}).get("source", "cli"))
    result = {**result, "family": fam}
    jpath = out / "admission.json"
    atomic_write_text(jpath, json.dumps(result, indent=2, sort_keys=True) + "\n")
    paths = T.write_table([{"family": fam, **{c: r[c] for c in CSV_COLUMNS}} for r in result["rows"]], "admission", out)
    return {"json": jpath, **paths}
