"""One registered plan: the plan a report states is the one each campaign registered before it ran.

A campaign registers its plan in its own hash-chained ledger (``campaigns/<name>/ledger.jsonl``): a
``plan_frozen`` record carrying the whole ``plan``, then ``plan_amendment`` records, each setting one
``field`` to its ``value`` (the prediction's predictor selection and frozen predictions), in ledger
order. The registered plan is the frozen plan with the amendments applied. Where an archive carries
that record, the top-level ``plan.json`` (``campaigns.<name>``, which the report states: references,
thresholds, panels) and the campaign's own ``campaigns/<name>/plan.json`` must both equal it; where
it carries no record, the two files must equal each other. Every campaign's ``plan.json`` must be in
the top-level one. A plan rewritten after the run (the reference R made C0, the threshold 1.02 made
1.0) in one place but not the others is a mismatch naming the keys that differ.
"""

from __future__ import annotations

import os

from refspec_check import jsonio
from refspec_check.problems import Checker


def registered(path: str) -> dict | None:
    """The plan a campaign ledger registers (plan_frozen with its amendments applied), None without one;
    ValueError on a ledger line that is not a JSON object."""
    plan = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = jsonio.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("a ledger line that is not a JSON object")
            if rec.get("kind") == "plan_frozen" and isinstance(rec.get("plan"), dict) and plan is None:
                plan = dict(rec["plan"])
            elif rec.get("kind") == "plan_amendment" and plan is not None and isinstance(rec.get("field"), str):
                plan[rec["field"]] = rec.get("value")
    return plan


def _differs(a, b) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) or (k in a) != (k in b))
        return ", ".join(keys[:6]) + (" ..." if len(keys) > 6 else "")
    return "its value"


def check_registered_plan(c: Checker, plan) -> None:
    """The top-level plan.json, each campaign's plan.json and each campaign's registration agree."""
    if plan is None:
        return
    top = plan.get("campaigns") if isinstance(plan, dict) else None
    if not isinstance(top, dict):
        c.bad("plan.json", "campaigns is not an object of campaign plans")
        return
    root = os.path.join(c.archive, "campaigns")
    names = sorted(set(top) | (set(os.listdir(root)) if os.path.isdir(root) else set()))
    for name in names:
        folder = os.path.join(root, name)
        own_path, ledger = os.path.join(folder, "plan.json"), os.path.join(folder, "ledger.jsonl")
        own = reg = None
        if os.path.isfile(own_path):
            with open(own_path, encoding="utf-8") as f:
                own = jsonio.load(f)
        if os.path.isfile(ledger):
            reg = registered(ledger)
        c.identities += 1
        if own is not None and name not in top:
            c.bad(
                "plan.json", f"campaigns.{name} missing: campaigns/{name}/plan.json registers a plan the report omits"
            )
            continue
        want, where = (
            (reg, f"campaigns/{name}/ledger.jsonl (plan_frozen and amendments)")
            if reg is not None
            else (
                own,
                f"campaigns/{name}/plan.json",
            )
        )
        if want is None:
            continue
        if name in top and top[name] != want:
            c.bad(
                "plan.json",
                f"campaigns.{name} is not the plan registered in {where}: {_differs(top[name], want)} differ",
            )
        if reg is not None and own is not None and own != reg:
            c.bad(f"campaigns/{name}/plan.json", f"not the plan registered in {where}: {_differs(own, reg)} differ")
