"""Completeness: every derived row and table the sealed raw records say must exist, does.

A row cut from a derived table (and from everything the report shows of it), with the report rendered
again and the archive re-sealed, leaves a report that is consistent with itself; only the raw records
can say it is missing. From the run's ledger (``ledger.jsonl``: a ``campaign_run`` line per campaign
and family, a ``stage_claim`` line per controlled stage) and ``requests.csv``, each check below derives
what must exist and refuses an archive that lacks it, naming it:

* **campaigns and stages that ran**: a campaign whose ``campaign_run`` line says ``complete`` has its rows in the table
  it is read from (``requests`` for a timed campaign, its own table for the others); a stage claimed
  ``supported`` has rows in its table;
* **ratios**: for a campaign of :data:`ALL_PAIRS`, family and cap with qualification rows, each
  unordered pair of the arms requests.csv holds there (twins aside), qualified or not;
* **diagnostics**: in a campaign of :data:`DIAGNOSTIC_CAMPAIGNS`, each registered pair
  (``DIAGNOSTIC_PAIRS``) whose two arms ran at a family and cap and of which one is not qualified there;
* **estimates**: in the replication, each family, path (target, spec) and comparison PQ/QB whose two
  arms ran, qualified or not (its session contrasts are required by ``replication.check_contrasts``);
* **sessions**: each (campaign, family, session) of requests.csv.
"""

from __future__ import annotations

import os
from collections import defaultdict

from refspec_check import jsonio
from refspec_check.context import Context
from refspec_check.contract import DIAGNOSTIC_PAIRS, TWIN_SUFFIX
from refspec_check.names import arm_sort_key
from refspec_check.qualification import all_qualified, panels

# the campaigns whose ratios hold every pair of their arms (refspec.campaigns.derived.ratios_table's
# default); the confirmation's do too in the pipeline, but an archive may register its own pairs there
# (the synthetic test archive does): until the plan records the pairs, they are not required
ALL_PAIRS = ("implementation",)
# the campaigns that time the registered diagnostic pairs (the pipeline's diagnostics_table callers)
DIAGNOSTIC_CAMPAIGNS = ("confirmation", "servers")
# where a campaign's rows are, when it ran: the timed campaigns in requests, the others in their own table
CAMPAIGN_TABLE = {"prediction": "prediction", "phase_mask": "phase_masks"}
# the table a supported controlled stage writes
STAGE_TABLE = {
    "audit": "audit",
    "admission": "admission",
    "replay": "replay",
    "partition": "partition",
    "crosses": "crosses",
}
REPLICATION_LAYOUTS = ("pq", "qb")
REPLICATION_PATHS = ("target", "spec")


def ledger_records(archive: str) -> list[dict]:
    """The run ledger's records (``ledger.jsonl``), those that are objects; [] without one."""
    path = os.path.join(archive, "ledger.jsonl")
    if not os.path.isfile(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = jsonio.loads(line)
                if isinstance(rec, dict):
                    out.append(rec)
    return out


def _rows(tables: dict, name: str) -> list[dict]:
    return tables[name].rows if name in tables else []


def check_completeness(ctx: Context, qual: dict, facts: dict) -> None:
    """Every check of the module docstring."""
    check_ran(ctx)
    check_ratio_rows_complete(ctx, qual, facts)
    check_diagnostic_rows_complete(ctx, qual)
    check_estimate_rows_complete(ctx, facts)
    check_session_rows_complete(ctx)


def check_ran(ctx: Context) -> None:
    """Each campaign with a ``campaign_run`` line has rows (of its family) where it is read from; each
    stage claimed ``supported`` has rows in its table."""
    c, tables = ctx.c, ctx.tables
    for rec in ledger_records(c.archive):
        kind = rec.get("kind")
        if kind == "campaign_run" and rec.get("outcome") == "complete":
            camp, fam = str(rec.get("campaign")), rec.get("family")
            table = CAMPAIGN_TABLE.get(camp, "requests")
            rows = [r for r in _rows(tables, table) if r.get("campaign", camp) == camp]
            c.identities += 1
            if not any(fam is None or r.get("family", fam) == fam for r in rows):
                c.bad(f"tables/{table}.csv", f"no row of campaign {camp} ({fam}), which the run ledger says ran")
        elif kind == "stage_claim" and rec.get("status") == "supported" and rec.get("stage") in STAGE_TABLE:
            table = STAGE_TABLE[rec["stage"]]
            c.identities += 1
            if not _rows(tables, table):
                c.bad(f"tables/{table}.csv", f"no row of stage {rec['stage']}, claimed supported in the run ledger")


def _arms_at(tables: dict, campaigns) -> dict:
    out: dict = defaultdict(set)
    for r in _rows(tables, "requests"):
        if r["campaign"] in campaigns:
            out[(r["campaign"], r["family"], r["cap"])].add(r["arm"])
    return out


def check_ratio_rows_complete(ctx: Context, qual: dict, facts: dict) -> None:
    """The ratios of :data:`ALL_PAIRS` (the earlier arm in arm order the numerator)."""
    c, tables = ctx.c, ctx.tables
    arms_at = _arms_at(tables, ALL_PAIRS)
    if arms_at and "ratios" not in tables:
        ran = ", ".join(sorted({k[0] for k in arms_at}))
        c.bad("tables/ratios.csv", f"missing, but requests.csv holds the {ran} campaign(s)")
        return
    stated = {(r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"]) for r in _rows(tables, "ratios")}
    for (camp, fam, cap), arms in sorted(arms_at.items(), key=str):
        if panels(qual, camp).get((fam, cap)) is None:
            continue
        plain = sorted(
            (a for a in arms if not a.endswith(TWIN_SUFFIX)), key=lambda a: arm_sort_key(a, *facts[(camp, fam, a)])
        )
        c.identities += 1
        for i, a in enumerate(plain):
            for b in plain[i + 1 :]:
                if (camp, fam, cap, a, b) not in stated:
                    c.bad(
                        "tables/ratios.csv",
                        f"no row for {a}/{b} of {camp} {fam} cap {cap}: every pair of its arms has one",
                    )


def check_diagnostic_rows_complete(ctx: Context, qual: dict) -> None:
    """The registered diagnostic pairs with an unqualified side, even where the table is gone."""
    c, tables = ctx.c, ctx.tables
    stated = {
        (r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"]) for r in _rows(tables, "diagnostics")
    }
    for (camp, fam, cap), arms in sorted(_arms_at(tables, DIAGNOSTIC_CAMPAIGNS).items(), key=str):
        panel = panels(qual, camp).get((fam, cap))
        if panel is None:
            continue
        for a, b in DIAGNOSTIC_PAIRS:
            if a in arms and b in arms and not all_qualified(panel, (a, b)):
                c.identities += 1
                if (camp, fam, cap, a, b) not in stated:
                    c.bad(
                        "tables/diagnostics.csv",
                        f"no diagnostic row for {camp} {fam} cap {cap} {a}/{b} (an arm is not qualified)",
                    )


def check_estimate_rows_complete(ctx: Context, facts: dict) -> None:
    """Each replication comparison whose arms ran has its estimate, qualified or not."""
    c, tables = ctx.c, ctx.tables
    stated = {(r["family"], r["path"], r["comparison"]) for r in _rows(tables, "estimates")}
    x, y = REPLICATION_LAYOUTS
    comparison = f"{x.upper()}/{y.upper()}"
    fams = sorted({f for (camp, f, _a) in facts if camp == "replication"})
    for fam in fams:
        for path in REPLICATION_PATHS:
            have = {
                lay
                for (camp, f, a), (mode, lay) in facts.items()
                if camp == "replication" and f == fam and mode == path and not a.endswith(TWIN_SUFFIX)
            }
            if x in have and y in have:
                c.identities += 1
                if (fam, path, comparison) not in stated:
                    c.bad("tables/estimates.csv", f"no estimate for replication {fam} {path} {comparison}")


def check_session_rows_complete(ctx: Context) -> None:
    """Each session of requests.csv has its sessions row."""
    c, tables = ctx.c, ctx.tables
    reqs = _rows(tables, "requests")
    if not reqs:
        return
    stated = {(r["campaign"], r["family"], r["session"]) for r in _rows(tables, "sessions")}
    for key in sorted({(r["campaign"], r["family"], r["session"]) for r in reqs}):
        c.identities += 1
        if key not in stated:
            c.bad("tables/sessions.csv", f"no row for session {key[2]} of {key[0]} {key[1]}")
