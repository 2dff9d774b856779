"""Controlled stages and their claims: ``refspec claim``.

The numerical replay (E1), the representation audit, the prefill partition, the state
crosses, the backend admission and the projection replay (:data:`CLAIM_STAGES`) each run
controls before their results may be read as claims. A failed control is a result, not a
crash: the command writes its complete record and exits 1.
``refspec claim NAME --dir DIR --done FILE -- COMMAND ...`` runs the stage's command and then

* on exit 0 or 1, derives the stage's ``claims`` row from the tables the command wrote in
  ``DIR`` (``supported``; ``withheld`` with the failed controls as the reason; ``vacuous`` when the
  controls pass but no partition arm differs on any input, or for the crosses the pair's natural
  endpoints agree on every input crossed, see :mod:`refspec.core.vacuity`), writes it
  there (``claims.parquet/.csv``, ``claim.json``), appends a ``stage_claim`` record to the
  run's ledger and writes ``FILE`` (the workflow's completion marker); it exits 0, so the
  run goes on to seal and report the record with the claim withheld;
* on any other exit status (an error: no complete record), exits with that status and
  writes no marker.

The workflow declares only the marker as the rule's output, never ``DIR`` itself, so a
failed control can never make Snakemake delete the record (anc/workflow.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from refspec_check.contract import CLAIMS  # the claims' one owner: the checker requires their words

from ..core import tables as T
from ..core.errors import EXIT_OK, UsageError
from ..core.fsutil import atomic_write_text
from ..core.vacuity import VACUOUS, crosses_exposure, partition_exposure, vacuous_text
from .ledger import LEDGER_NAME, Ledger

# the pipeline stages whose claim `refspec claim` records
CLAIM_STAGES = ("replay", "audit", "partition", "crosses", "admission", "projection")


def _reason(parts: list[str], limit: int = 8) -> str | None:
    if not parts:
        return None
    more = f"; ... ({len(parts) - limit} more)" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def derive_replay(d: Path) -> tuple[int, list[str]]:
    rows = T.read_records("replay", d)
    ctx: dict[tuple, list[dict]] = {}
    for r in rows:
        ctx.setdefault((r["family"], r["layer"], r["phase"], r["q"]), []).append(r)
    failed = []
    for (fam, layer, phase, q), rs in sorted(ctx.items()):
        bad = [r for r in rs if not r["control_ok"]]
        if bad:
            reasons = sorted({r["reason"] or "no reason recorded" for r in bad})
            failed.append(f"{fam} layer {layer} {phase} q={q}: {', '.join(reasons)}")
    return len(ctx), failed


def derive_audit(d: Path) -> tuple[int, list[str]]:
    rows = T.read_records("audit", d)
    failed = []
    for r in rows:
        if r["fault"] is None and not r["oracle_ok"]:
            failed.append(f"{r['fixture']} {r['layout']} {r['stage']}: disagrees with the oracle")
        elif r["fault"] is not None and not r["detected"]:
            failed.append(f"{r['fixture']} {r['layout']} {r['stage']}: injected fault {r['fault']} not detected")
    return len(rows), failed


def natural_endpoints(prows: list[dict]) -> dict[tuple[str, str], str]:
    return {(r["task_id"], r["arm"]): r["endpoint_sha256"] for r in prows if r["repeat"] == 1}


def derive_partition(d: Path) -> tuple[int, list[str]]:
    rows = T.read_records("partition", d)
    first = {(r["task_id"], r["arm"]): r for r in rows if r["repeat"] == 1}
    n, failed = 0, []
    for r in rows:
        if r["repeat"] == 1:
            continue
        n += 1
        f = first.get((r["task_id"], r["arm"]))
        if f is None or any(r[k] != f[k] for k in ("endpoint_sha256", "kv_sha256", "logits_sha256")):
            failed.append(f"{r['task_id']} {r['arm']}: repeat {r['repeat']} differs from repeat 1")
    return n, failed


def crosses_controls(rows: list[dict], natural: dict[tuple[str, str], str]) -> tuple[int, list[str]]:
    """Own-path shams (EMPTY must give the recipient's natural endpoint, no byte changed) and
    repeat agreement of every subset coordinate; shared with the checker's definition."""
    n, failed = 0, []
    coords: dict[tuple, set] = {}
    for r in rows:
        if r["selector"] == "EMPTY":
            n += 1
            nat = natural.get((r["task_id"], r["recipient_arm"]))
            if nat is None or r["endpoint_sha256"] != nat or r["changed_bytes"] != 0:
                failed.append(f"{r['task_id']} {r['direction']} repeat {r['repeat']}: own-path sham failed")
        elif r["kind"] == "subset":
            coords.setdefault((r["task_id"], r["direction"], r["selector"]), set()).add(
                (r["endpoint_sha256"], r["spliced_kv_sha256"])
            )
    for (tid, direction, sel), seen in sorted(coords.items()):
        n += 1
        if len(seen) != 1:
            failed.append(f"{tid} {direction} {sel}: repeats disagree")
    return n, failed


def derive_crosses(d: Path) -> tuple[int, list[str]]:
    meta = json.loads((d / "crosses.json").read_text(encoding="utf-8"))
    prows = T.read_records("partition", meta["partition"])
    return crosses_controls(T.read_records("crosses", d), natural_endpoints(prows))


def derive_admission(d: Path) -> tuple[int, list[str]]:
    doc = json.loads((d / "admission.json").read_text(encoding="utf-8"))
    layouts = doc.get("layouts") or sorted({r["layout"] for r in doc["rows"]})
    n = len(doc["queries"]) * len(layouts)
    return n, list(doc.get("errors") or [])


def derive_projection(d: Path) -> tuple[int, list[str]]:
    """Controls: every captured prefill reproduced the partition's KV bytes and every replayed call
    reproduced its captured output (a mismatch on fixed operands is a failed control)."""
    doc = json.loads((d / "projection.json").read_text(encoding="utf-8"))
    rows = T.read_records("projection", d)
    failed = list(doc.get("problems") or [])
    failed += [
        f"{r['task_id']} {r['arm']} {r['node']} call {r['call']}: mismatch" for r in rows if r["status"] == "mismatch"
    ]
    return sum(r["status"] != "excluded" for r in rows), failed


def _partition_rows(stage: str, d: Path) -> list[dict] | None:
    """The partition rows a partition or crosses stage stands on (None for the other stages)."""
    if stage == "partition":
        return T.read_records("partition", d)
    if stage == "crosses":
        meta = json.loads((d / "crosses.json").read_text(encoding="utf-8"))
        return T.read_records("partition", meta["partition"])
    return None


DERIVE = {
    "replay": derive_replay,
    "audit": derive_audit,
    "partition": derive_partition,
    "crosses": derive_crosses,
    "admission": derive_admission,
    "projection": derive_projection,
}


def claim_row(stage: str, d: Path, exit_code: int, record: str | None = None) -> dict:
    if stage not in DERIVE:
        raise UsageError(f"unknown stage {stage!r} (known: {', '.join(CLAIM_STAGES)})")
    n, failed = DERIVE[stage](d)
    reason = _reason(failed)
    ok = exit_code == EXIT_OK and not failed  # contract: reads the exit status the stage's command recorded
    claim, status = CLAIMS[stage], "supported" if ok else "withheld"
    prows = _partition_rows(stage, d)
    if status == "supported" and prows is not None:
        # no partition arm differs on any input: the study had nothing to find (refspec.core.vacuity)
        ex = partition_exposure(prows)
        if not ex["vacuous"] and stage == "crosses":
            # the states differ, but the pair continues identically on every input crossed
            ex = crosses_exposure(T.read_records("crosses", d))
        if ex["vacuous"]:
            claim, status = vacuous_text(ex["screened"]), VACUOUS
    # contract: reads the exit status the stage's command recorded; computes none
    if exit_code != EXIT_OK and reason is None:
        reason = f"the stage's command exited {exit_code} (see its log)"
    return {
        "stage": stage,
        "record": record or d.name,
        "claim": claim,
        "status": status,
        "exit_code": exit_code,
        "controls": n,
        "controls_failed": len(failed),
        "reason": reason,
    }


def record_claim(stage: str, d: Path, exit_code: int, results: Path | None = None) -> dict:
    """Write the stage's ``claims`` table and ``claim.json`` into ``d``; note it in the run's ledger."""
    rel = None
    if results is not None and d.resolve().is_relative_to(results.resolve()):
        rel = d.resolve().relative_to(results.resolve()).as_posix()
    row = claim_row(stage, d, exit_code, rel)
    T.write_table([row], "claims", d)
    atomic_write_text(d / "claim.json", json.dumps(row, indent=2, sort_keys=True) + "\n")
    if results is not None:
        Ledger(results / LEDGER_NAME).append(
            {
                "kind": "stage_claim",
                "reason": f"stage {stage}: claim {row['status']}" + (f" ({row['reason']})" if row["reason"] else ""),
                "stage": stage,
                "status": row["status"],
                "exit_code": exit_code,
                "controls": row["controls"],
                "controls_failed": row["controls_failed"],
                "record": row["record"],
            }
        )
    return row
