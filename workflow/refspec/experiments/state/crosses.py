"""The crosses study (paper §6.2, S5): ``refspec state crosses``.

For a donor pair of partition arms, each (task, repeat) runs the controls and the subset
interventions in a fresh process (:mod:`refspec.experiments.state.jobs`); the results are
assembled into the ``crosses`` and ``frontier`` tables and ``crosses.json``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...core import tables as T
from ...core.endpoint import Endpoint, first_difference
from ...core.errors import UsageError
from ...core.fsutil import atomic_write_text
from . import kvstate as kv
from .jobs import spawn_job
from .partition import load_partition, task_slug
from .receiver import CONTROL_SELECTORS


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


def _selectors(selectors: Sequence[str] | None) -> list[str]:
    """The requested selectors with the controls first (added where missing), each one known."""
    sels = list(selectors or kv.SELECTOR_NAMES)
    for s in CONTROL_SELECTORS:
        if s not in sels:
            sels.insert(CONTROL_SELECTORS.index(s), s)
    for s in sels:
        if s not in kv.SELECTOR_NAMES:
            raise UsageError(f"unknown selector {s!r} (known: {', '.join(kv.SELECTOR_NAMES)})")
    return sels


def _check_pair(arms: dict, x: str, y: str) -> None:
    for a in (x, y):
        if a not in arms:
            raise UsageError(f"arm {a!r} is not in the partition campaign (arms: {', '.join(arms)})")
    if x == y:
        raise UsageError("the donor pair needs two different arms")


def _directions(pdir: Path, rx: dict, ry: dict) -> list[dict]:
    """Both directions of the pair on one input: donor, recipient and their payload files."""
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
    return dirs


def _plan_jobs(
    pdir: Path,
    meta: dict,
    by: dict,
    pair: tuple[str, str],
    tasks: Sequence[str],
    sels: list[str],
    repeats: int,
    boundary: int | None,
) -> list[dict]:
    """One job per (task, repeat), in task then repeat order."""
    x, y = pair
    arms = {a["name"]: a for a in meta["arms"]}
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
        dirs = _directions(pdir, rx, ry)
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
    return jobs_list


def _run_jobs(work: list[dict], workdir: Path, *, parallel: int, progress: bool) -> list[tuple[dict, dict]]:
    """Each job in its own fresh process, up to ``parallel`` at a time; (job, result) in job order."""
    t0 = time.time()

    def one(i: int, job: dict) -> tuple[dict, dict]:
        tag = f"{task_slug(job['task_id'])}.r{job['repeat']}"
        if progress:
            print(  # contract: --progress lines on stderr
                f"[crosses {time.time() - t0:6.0f}s] process {i + 1}/{len(work)}: {job['task_id']} repeat "
                f"{job['repeat']}",
                file=sys.stderr,
                flush=True,
            )
        return job, spawn_job(job, workdir, tag)

    if parallel > 1:  # independent fresh processes, up to `parallel` at a time; results in job order
        with ThreadPoolExecutor(max_workers=parallel) as ex:
            return list(ex.map(lambda a: one(*a), enumerate(work)))
    return [one(i, job) for i, job in enumerate(work)]


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
    pdir = Path(partition_dir)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta, prows = load_partition(pdir)
    x, y = pair
    _check_pair({a["name"]: a for a in meta["arms"]}, x, y)
    if tasks is None:
        tasks = choose_tasks(prows, x, y, n_div=n_div, n_stable=n_stable)
        if not tasks:
            raise UsageError(f"no input of the partition campaign has rows for both {x} and {y}")
    sels = _selectors(selectors)
    by = {(r["task_id"], r["arm"]): r for r in prows if r["repeat"] == 1}
    jobs_list = _plan_jobs(pdir, meta, by, (x, y), tasks, sels, repeats, boundary)
    results = _run_jobs(jobs_list, out / "work", parallel=parallel, progress=progress)
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
    seen, fseen = _repeat_outcomes(results)
    ctrl_ok = _controls_ok(results, by)
    rows, frows = [], []
    for job, res in results:
        for r in res["results"]:
            rows.append(_cross_row(meta, job, res, r, by, seen, ctrl_ok))
        for f in res["frontier"]:
            frows.append(_frontier_row(meta, job, f, fseen))
    return rows, frows


def _repeat_outcomes(results) -> tuple[dict[tuple, set], dict[tuple, set]]:
    """The distinct outcomes over the repeats of each coordinate, for repeat agreement: per
    (task, direction, selector) the (endpoint, spliced KV) digests, per (task, direction, panel)
    the frontier records."""
    seen: dict[tuple, set] = {}
    fseen: dict[tuple, set] = {}
    for job, res in results:
        for r in res["results"]:
            seen.setdefault((job["task_id"], r["direction"], r["selector"]), set()).add(
                (r["endpoint_sha256"], r["spliced_kv_sha256"])
            )
        for f in res["frontier"]:
            fseen.setdefault((job["task_id"], f["direction"], f["panel"]), set()).add(json.dumps(f, sort_keys=True))
    return seen, fseen


def _controls_ok(results, by: dict) -> dict[tuple, bool]:
    """The sham controls per (task, repeat): EMPTY must reproduce the recipient's natural endpoint."""
    ctrl_ok: dict[tuple, bool] = {}
    for job, res in results:
        ok = True
        for r in res["results"]:
            if r["selector"] == "EMPTY":
                nat = by[(job["task_id"], r["recipient"])]["endpoint_sha256"]
                ok = ok and r["endpoint_sha256"] == nat and r["changed_bytes"] == 0
        ctrl_ok[(job["task_id"], job["repeat"])] = ok
    return ctrl_ok


def _cross_row(meta: dict, job: dict, res: dict, r: dict, by: dict, seen: dict, ctrl_ok: dict) -> dict:
    """The ``crosses`` row of one intervention ``r`` of a job's process."""
    tid = job["task_id"]
    nat_r = by[(tid, r["recipient"])]
    nat_d = by[(tid, r["donor"])]
    ep = Endpoint.from_record(r["endpoint"])
    ep_r = Endpoint.from_record({k: nat_r[k] for k in ("tokens", "eog", "stop_reason")})
    ep_d = Endpoint.from_record({k: nat_d[k] for k in ("tokens", "eog", "stop_reason")})
    sel = r["selector_record"]
    rec = ep.record()
    return {
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


def _frontier_row(meta: dict, job: dict, f: dict, fseen: dict) -> dict:
    """The ``frontier`` row of one frontier record ``f`` of a job's process."""
    return {
        "family": meta["family"],
        "task_id": job["task_id"],
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
        "repeats_agree": len(fseen[(job["task_id"], f["direction"], f["panel"])]) == 1,
    }
