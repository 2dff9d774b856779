"""Evidence about a campaign's requests, one owner for every campaign and ``refspec qualify``.

* :func:`nonvacuity`: did an arm's qualification exercise what it claims? A speculative arm
  must show multi-row verification (verification rows per verification caller above 1),
  partial accepts (a cycle that accepted some but not all proposals), rollbacks and its
  layout active (``micrographs_<layout>`` > 0); a target-only arm multi-row micrographs and
  its layout active. Without that evidence its qualification is vacuous.
* :func:`timed_audit`: every completed request compared with its reference endpoint, the
  failures, and (:func:`compare_counters`) whether paired arms' recorded counters agree.
"""

from __future__ import annotations

import statistics

from ..core.arms import REFERENCE_ARM, Arm
from ..core.endpoint import first_divergence

# recorded per-request counters two arms of a pair must agree on (timed_audit.json)
COMPARED_COUNTERS = ("proposals", "accepted", "rollbacks", "cycles", "callers", "rows", "micrographs")
# the same without micrographs: what a physical micro-batch-1 path shares with a batched one
LOGICAL_COUNTERS = ("proposals", "accepted", "rollbacks", "cycles", "callers", "rows")


def _sum(vals):
    return sum(v for v in vals if v is not None)


def nonvacuity(arm: Arm, recs: list[dict]) -> dict:
    """Evidence that an arm's qualification exercised what it claims (see the module docstring)."""
    lay = f"micrographs_{arm.layout}"
    ctr = [r["counters"] or {} for r in recs]
    ev = [r.get("evidence") for r in recs]
    out = {"requests": len(recs), lay: _sum(c.get(lay) for c in ctr)}
    if arm.speculative:
        known = [e for e in ev if e is not None]
        vc = _sum(e["verify_callers"] for e in known)
        vr = _sum(e["verify_rows"] for e in known)
        out.update(
            {
                "verify_callers": vc,
                "verify_rows": vr,
                "rows_per_verify_caller": (vr / vc) if vc else None,
                "partial_accepts": _sum(e["partial_accepts"] for e in known),
                "rollbacks": _sum(c.get("rollbacks") for c in ctr),
                "cycle_trace_missing": len(ev) - len(known),
            }
        )
        checks = {
            "multi_row_verification": bool(vc) and vr / vc > 1,
            "partial_accepts": out["partial_accepts"] > 0,
            "rollbacks": out["rollbacks"] > 0,
            "layout_active": out[lay] > 0,
        }
    else:
        rows = _sum(c.get("rows") for c in ctr)
        mg = _sum(c.get("micrographs") for c in ctr)
        out.update({"rows": rows, "micrographs": mg, "rows_per_micrograph": (rows / mg) if mg else None})
        checks = {"multi_row_micrographs": bool(mg) and rows > mg, "layout_active": out[lay] > 0}
    out["checks"] = checks
    out["nonvacuous"] = all(checks.values()) if recs else None
    return out


def compare_counters(requests: list[dict], pairs: list[tuple], keys=COMPARED_COUNTERS) -> list[dict]:
    """Per (label, task, cap, session): do the two arms' recorded counters agree?

    ``pairs`` holds (label, arm_a, arm_b) or (label, arm_a, arm_b, keys). The ok
    rows of each arm on a task and session give a sorted list of counter tuples
    (one per repeat); the pair agrees when both lists are equal.
    """
    out = []
    for pair in pairs:
        label, a, b = pair[:3]
        pkeys = tuple(pair[3]) if len(pair) > 3 else tuple(keys)
        by: dict[tuple, list] = {}
        for r in requests:
            if r["status"] == "ok" and r["arm"] in (a, b):
                by.setdefault((r["arm"], r["task_id"], r["cap"], r["session"]), []).append(tuple(r[k] for k in pkeys))
        keys_ = pkeys
        cells = sorted({(t, c, s) for (arm, t, c, s) in by if arm in (a, b)})
        for t, c, s in cells:
            va = sorted(by.get((a, t, c, s), []))
            vb = sorted(by.get((b, t, c, s), []))
            diff = [k for i, k in enumerate(keys_) if [x[i] for x in va] != [x[i] for x in vb]]
            out.append(
                {
                    "comparison": label,
                    "arms": [a, b],
                    "keys": list(keys_),
                    "task_id": t,
                    "cap": c,
                    "session": s,
                    "agree": bool(va) and bool(vb) and not diff,
                    "differing": diff,
                    "a": [dict(zip(keys_, x)) for x in va],
                    "b": [dict(zip(keys_, x)) for x in vb],
                }
            )
    return out


def timed_audit(
    base: dict, counter_pairs: list[tuple] | None = None, keys=COMPARED_COUNTERS, reference: str = REFERENCE_ARM
) -> dict:
    """Every completed request compared with its reference; failures; counter agreement."""
    records = base["_records"]
    refs: dict[tuple[str, int], dict] = {}
    for r in sorted(
        (r for r in records if r["row"]["arm"] == reference and r["endpoint"] is not None),
        key=lambda r: (r["row"]["session"], r["row"]["repeat"]),
    ):
        refs.setdefault((r["row"]["task_id"], r["row"]["cap"]), r["endpoint"])
    compared = 0
    mismatches = []
    for r in records:
        row, ep = r["row"], r["endpoint"]
        if ep is None:
            continue
        ref = refs.get((row["task_id"], row["cap"]))
        if ref is None:
            continue
        compared += 1
        if ep["endpoint_sha256"] != ref["endpoint_sha256"]:
            i = first_divergence(
                ref["tokens"], ref["eog"], ref["stop_reason"], ep["tokens"], ep["eog"], ep["stop_reason"]
            )
            mismatches.append(
                {
                    k: row[k]
                    for k in ("session", "block", "worker", "arm", "task_id", "cap", "repeat", "order_index", "attempt")
                }
                | {"first_diff_index": i}
            )
    status: dict[str, int] = {}
    for row in base["requests"]:
        status[row["status"]] = status.get(row["status"], 0) + 1
    failures = [
        {k: row[k] for k in ("session", "worker", "arm", "task_id", "repeat", "attempt", "reason")}
        for row in base["requests"]
        if row["status"] == "failed"
    ]
    disq = sorted({(q["arm"], q["task_id"], q["cap"]) for q in base["qualification"] if not q["qualified"]})
    out = {
        "requests_compared": compared,
        "mismatches": mismatches,
        "status_counts": status,
        "failures": failures,
        "disqualified_pairs": [{"arm": a, "task_id": t, "cap": c} for a, t, c in disq],
    }
    if counter_pairs:
        cmp = compare_counters(base["requests"], counter_pairs, keys)
        summary = {}
        for c in cmp:
            s = summary.setdefault(c["comparison"], {"pairs": 0, "agree": 0, "keys": c["keys"]})
            s["pairs"] += 1
            s["agree"] += 1 if c["agree"] else 0
        out["counters"] = summary
        out["counter_pairs"] = cmp
    return out


def arm_evidence(arms: dict[str, Arm], base: dict, reference: str = REFERENCE_ARM) -> str:
    """Per arm: acceptance, median request time and the non-vacuity checks (:func:`nonvacuity`)."""
    lines = []
    ok = [r for r in base["_records"] if r["row"]["status"] == "ok"]
    for name, arm in arms.items():
        mine = [r for r in ok if r["row"]["arm"] == name]
        if not mine:
            continue
        parts = [f"median {statistics.median(r['row']['t_ns'] for r in mine) / 1e6:.1f} ms"]
        prop = sum(r["row"]["proposals"] or 0 for r in mine)
        if arm.speculative and prop:
            parts.append(f"acceptance {sum(r['row']['accepted'] or 0 for r in mine) / prop:.3f}")
        if name != reference and getattr(arm, "kind", "worker") == "worker":
            checks = nonvacuity(arm, mine)["checks"]
            parts.append(
                "non-vacuity: " + ", ".join(f"{k.replace('_', ' ')} {'yes' if v else 'NO'}" for k, v in checks.items())
            )
        if getattr(arm, "kind", "worker") != "worker":  # a black box: no engine counters to check
            parts.append(f"{arm.kind}: draft counts only (no engine counters)")
        lines.append(f"  {name:8s} " + "; ".join(parts))
    return "per arm (completed requests):\n" + "\n".join(lines)


def audit_text(audit: dict) -> str:
    lines = [
        f"audit: {audit['requests_compared']} completed requests compared with the reference endpoint; "
        f"{len(audit['mismatches'])} mismatch(es)"
    ]
    for m in audit["mismatches"][:20]:
        lines.append(
            f"  mismatch: {m['session']} {m['arm']} {m['task_id']} repeat {m['repeat']} "
            f"(worker {m['worker']}): first difference at index {m['first_diff_index']}"
        )
    if len(audit["mismatches"]) > 20:
        lines.append(f"  ... {len(audit['mismatches']) - 20} more in timed_audit.json")
    st = audit["status_counts"]
    lines.append("requests by status: " + ", ".join(f"{k} {v}" for k, v in sorted(st.items())))
    for f in audit["failures"][:10]:
        lines.append(
            f"  failed: {f['session']} {f['arm']} {f['task_id']} repeat {f['repeat']} attempt "
            f"{f['attempt']}: {f['reason']}"
        )
    for label, s in (audit.get("counters") or {}).items():
        lines.append(
            f"recorded counters ({', '.join(s['keys'])}) {label}: {s['agree']}/{s['pairs']} task/session pairs agree"
        )
    return "\n".join(lines)
