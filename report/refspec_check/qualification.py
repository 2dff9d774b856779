"""Qualification recomputed from the requests and endpoints: the reference of each campaign, each arm's
verdict per task, the qualified panels, the first divergence."""

from __future__ import annotations

from collections import defaultdict

from refspec_check.contract import REFERENCE_ARM


def diagnostic_label(num_ok: bool, den_ok: bool) -> str:
    if not num_ok and not den_ok:
        return "diagnostic: numerator and denominator not qualified"
    return "diagnostic: numerator not qualified" if not num_ok else "diagnostic: denominator not qualified"


def first_difference(a, a_eog, a_stop, b, b_eog, b_stop):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    if len(a) != len(b) or bool(a_eog) != bool(b_eog) or a_stop != b_stop:
        return n
    return None


def reference_arms(plan) -> dict:
    """campaign -> its reference arm, as frozen in plan.json (a campaign plan's ``definition.reference``;
    refspec's R when the campaign names none or the plan is absent)."""
    out = {}
    camps = plan.get("campaigns") if isinstance(plan, dict) and isinstance(plan.get("campaigns"), dict) else {}
    for p in list(camps.values()) + ([plan] if isinstance(plan, dict) else []):
        if isinstance(p, dict) and isinstance(p.get("campaign"), str):
            defn = p.get("definition") if isinstance(p.get("definition"), dict) else {}
            ref = defn.get("reference")
            out.setdefault(p["campaign"], ref if isinstance(ref, str) and ref else REFERENCE_ARM)
    return out


def qualification_reason(
    qualified: bool, has_ref: bool, n_ref_endpoints: int, n_need: int, n_req: int, n_match: int, fd
) -> str | None:
    """Why an arm does not qualify on a task, as the qualification table says it (None when it does): no
    completed reference request; a reference with more than one endpoint; no required request; else the
    required requests not completed and the endpoints that differ, with the first divergence's index."""
    if qualified:
        return None
    if not has_ref:
        return "no completed reference request"
    if n_ref_endpoints != 1:
        return f"reference unstable: {n_ref_endpoints} distinct R endpoints"
    if n_need == 0:
        return "no required request"
    parts = []
    if n_need - n_req:
        parts.append(f"{n_need - n_req} of {n_need} required requests not completed")
    if n_req - n_match:
        parts.append(f"{n_req - n_match} of {n_req} endpoints differ, first at index {fd}")
    return "; ".join(parts) or "not qualified"


def recompute_qualification(requests: list, endpoints: list, references: dict | None = None) -> dict:
    """(campaign, family, task, cap, arm) -> recomputed qualification facts; ``references`` maps a
    campaign to its reference arm (:func:`reference_arms`; R when absent)."""
    references = references or {}
    required = defaultdict(set)
    for r in requests:
        if r["status"] != "excluded_warmup":
            required[(r["campaign"], r["family"], r["task_id"], r["cap"], r["arm"])].add((r["session"], r["repeat"]))
    by_arm = defaultdict(list)
    for e in endpoints:
        by_arm[(e["campaign"], e["family"], e["task_id"], e["cap"], e["arm"])].append(e)
    for v in by_arm.values():
        v.sort(key=lambda e: (e["session"], e["repeat"]))
    keys = set(required) | set(by_arm)
    out = {}
    for k in keys:
        g = k[:4]
        refs = by_arm.get(g + (references.get(g[0], REFERENCE_ARM),), [])
        ref = refs[0] if refs else None
        ref_sha = ref["endpoint_sha256"] if ref else None
        stable = len({e["endpoint_sha256"] for e in refs}) == 1
        eps = by_arm.get(k, [])
        need = required.get(k, set()) | {(e["session"], e["repeat"]) for e in eps}
        n_match = sum(1 for e in eps if ref_sha is not None and e["endpoint_sha256"] == ref_sha)
        fd = rt = at = None
        if ref is not None:
            best = None
            for e in eps:
                if e["endpoint_sha256"] == ref_sha:
                    continue
                i = first_difference(
                    ref["tokens"], ref["eog"], ref["stop_reason"], e["tokens"], e["eog"], e["stop_reason"]
                )
                if i is None:
                    i = len(ref["tokens"])
                if best is None or i < best[0]:
                    best = (i, e)
            if best is not None:
                fd = best[0]
                rt = ref["tokens"][fd] if fd < len(ref["tokens"]) else None
                at = best[1]["tokens"][fd] if fd < len(best[1]["tokens"]) else None
        qualified = stable and len(need) > 0 and n_match == len(need)
        out[k] = dict(
            n_required=len(need),
            n_requests=len(eps),
            n_matching=n_match,
            qualified=qualified,
            reason=qualification_reason(
                qualified, ref is not None, len({e["endpoint_sha256"] for e in refs}), len(need), len(eps), n_match, fd
            ),
            ref_endpoint_sha256=ref_sha,
            first_diff_index=fd,
            ref_token=rt,
            arm_token=at,
            ref_stable=stable,
        )
    return out


def panels(qual: dict, campaign: str) -> dict:
    """(family, cap) -> task -> arm -> qualified."""
    out = defaultdict(lambda: defaultdict(dict))
    for (camp, fam, task, cap, arm), q in qual.items():
        if camp == campaign:
            out[(fam, cap)][task][arm] = q["qualified"]
    return out


def all_qualified(panel: dict, arms) -> bool:
    return all(panel[t].get(a, False) for a in arms for t in panel)


def arm_facts(reqs: list) -> dict:
    """(campaign, family, arm) -> (mode, layout) of the arm's first row in requests.csv."""
    facts = {}
    for r in reqs:
        facts.setdefault((r["campaign"], r["family"], r["arm"]), (r["mode"], r["layout"]))
    return facts
