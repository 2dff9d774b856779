"""The aggregates the report shows of the result tables (one owner; the pipeline's
``refspec.campaigns.derived`` re-exports :func:`qualification_counts` for the campaigns' console lines):
Table 3's matching endpoints per arm, the request status counts of the ledger section and the draft
acceptance. Each takes the table's rows (mappings); ``report/check.py`` recomputes every number they give.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from refspec_check.names import arm_sort_key


def qualification_counts(qualification: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Paper Table 3 shape: per campaign, family and arm, matching endpoints out of required.

    Columns: campaign, family, arm, matching (sum of n_matching), required
    (sum of n_required), tasks, tasks_qualified.
    """
    acc: dict[tuple, dict] = {}
    for q in qualification:
        k = (q["campaign"], q["family"], q["arm"])
        a = acc.setdefault(
            k, dict(campaign=k[0], family=k[1], arm=k[2], matching=0, required=0, tasks=0, tasks_qualified=0)
        )
        a["matching"] += int(q["n_matching"])
        a["required"] += int(q["n_required"])
        a["tasks"] += 1
        a["tasks_qualified"] += 1 if q["qualified"] else 0
    return [acc[k] for k in sorted(acc, key=lambda k: (k[0], k[1], arm_sort_key(k[2])))]


def status_counts(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Ledger summary from ``requests``: rows per campaign and status, with the distinct reasons."""
    acc: dict[tuple[str, str], dict] = {}
    for r in requests:
        a = acc.setdefault(
            (r["campaign"], r["status"]), dict(campaign=r["campaign"], status=r["status"], count=0, reasons={})
        )
        a["count"] += 1
        if r["reason"]:
            a["reasons"][r["reason"]] = a["reasons"].get(r["reason"], 0) + 1
    order = {"ok": 0, "failed": 1, "disqualified": 2, "excluded_warmup": 3}
    return [acc[k] for k in sorted(acc, key=lambda k: (k[0], order.get(k[1], 9)))]


def acceptance(requests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Draft acceptance per family and draft: sum(accepted) / sum(proposals) over ok spec rows."""
    acc: dict[tuple[str, str], list[int]] = {}
    for r in requests:
        if r["status"] != "ok" or r["mode"] != "spec" or r["draft"] is None or r["proposals"] is None:
            continue
        a = acc.setdefault((r["family"], r["draft"]), [0, 0, 0])
        a[0] += int(r["proposals"])
        a[1] += int(r["accepted"] or 0)
        a[2] += 1
    out = []
    for (fam, draft), (p, a, n) in sorted(acc.items()):
        out.append(
            dict(family=fam, draft=draft, proposals=p, accepted=a, requests=n, acceptance=(a / p) if p else None)
        )
    return out
