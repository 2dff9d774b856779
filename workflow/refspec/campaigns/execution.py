"""A prepared campaign run and analysed: freeze or check the plan, run the sessions left,
pin the campaign ledger in the run's ledger, write the tables, ``timed_audit.json`` and
``summary.txt``."""

from __future__ import annotations

import json
import logging
import signal

from ..core.arms import is_twin, reference_of
from ..core.errors import IntegrityError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file
from ..core.stats import aa_rule_of
from ..core.tables import spec, write_table
from ..provenance import plan as planmod
from ..provenance.ledger import Ledger
from .context import PreparedCampaign
from .definitions import module_for
from .evidence import COMPARED_COUNTERS, arm_evidence, audit_text, timed_audit
from .noise import busy_text, loads_table, noise_table, noise_text
from .sizing import sizing_table
from .variance import variance_table

# warnings on stderr (the text alone, where logging is not configured)
_log = logging.getLogger(__name__)


def execute(ctx: PreparedCampaign, run, computed: dict, *, analyze_only: bool = False) -> dict:
    """Freeze or check the plan, run what is left, analyse; return the analysis."""
    mod = module_for(ctx.name)
    ctx.plan = run.freeze_or_check(computed, analyze_only=analyze_only)
    if ctx.materialize is not None and not analyze_only:
        ctx.materialize()
    complete = True
    if not analyze_only:
        complete = _run_sessions(ctx, run, mod)
        ctx.plan = planmod.check(run.out, run.ledger, computed)
    result = analyze(ctx)
    result["complete"] = complete if not analyze_only else run.remaining(ctx.sessions) == 0
    return result


def _run_sessions(ctx: PreparedCampaign, run, mod) -> bool:
    """Run the planned requests left (SIGTERM ends the run as an interruption); True when none is left."""
    remaining = run.remaining(ctx.sessions)
    run.begin_run(remaining)

    def _term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, _term)
    run.open_progress(run.remaining(ctx.sessions))
    try:
        getattr(mod, "execute", default_execute)(ctx)
    except BaseException as e:
        run.close_progress()
        what = "interrupted" if isinstance(e, KeyboardInterrupt) else f"stopped by {type(e).__name__}: {e}"
        run.note(
            "interruption" if isinstance(e, KeyboardInterrupt) else "failure",
            f"campaign run {run.run_no} {what}; resume with --resume",
            run=run.run_no,
        )
        run.end_run(f"ended early ({what})")
        link_run_ledger(ctx, "ended early", failing=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, old)
        run.close_progress()
    left = run.remaining(ctx.sessions)
    complete = left == 0
    run.end_run("all sessions run" if complete else f"{left} planned request(s) without a final attempt")
    link_run_ledger(ctx, "complete" if complete else "incomplete")
    return complete


def link_run_ledger(ctx: PreparedCampaign, outcome: str, *, failing: bool = False) -> None:
    """One line in the run's ledger (``<results>/ledger.jsonl``) pinning the campaign ledger's head.

    A failure to append is recorded in the campaign's own ledger and raised, unless the
    campaign is already failing (``failing``): then its own error is the one that propagates."""
    run = ctx.run
    count, head = run.ledger.head()
    try:
        root = ctx.results or ctx.out.parent.parent
        Ledger(root / "ledger.jsonl").append(
            {
                "kind": "campaign_run",
                "reason": f"campaign {ctx.name} run {run.run_no}: {outcome}",
                "campaign": ctx.name,
                "family": ctx.family,
                "outcome": outcome,
                "run": run.run_no,
                "ledger": (ctx.out / "ledger.jsonl").relative_to(root).as_posix(),
                "ledger_records": count,
                "ledger_head_sha256": head,
                "plan_sha256": sha256_file(run.out / planmod.PLAN_NAME),
            }
        )
    except Exception as e:
        run.note("failure", f"could not append to the run ledger: {type(e).__name__}: {e}", run=run.run_no)
        _log.warning("refspec campaign %s: could not append to the run ledger: %s", ctx.name, e)
        if not failing:
            raise


def default_execute(ctx: PreparedCampaign) -> None:
    prev = None
    for sp in ctx.sessions:
        ctx.run.run_session(sp, prev)
        prev = sp.id


def analyze(ctx: PreparedCampaign) -> dict:
    """Write every table, timed_audit.json and summary.txt; return them."""
    run = ctx.run
    mod = module_for(ctx.name)
    base = run.base_tables()
    res = mod.analyze(ctx, base)
    tables = {k: base[k] for k in ("requests", "endpoints", "qualification", "sessions")}
    tables.update(res.get("tables", {}))
    texts = aa_and_load(ctx, run, base, tables)
    if "variance" not in tables:
        variance = variance_table(base["requests"], ctx.name)
        if variance:
            tables["variance"] = variance
    sized = sizing_table(ctx.plan.get("definition") or ctx.defn, ctx.family, tables)
    if sized:
        tables["sizing"] = sized
    refused = [t for t in tables if not t.startswith("_") and not table_accepts_campaign(t, ctx.name)]
    if refused:
        raise IntegrityError(
            f"campaign {ctx.name}: the contract of table(s) {', '.join(refused)} does not list "
            f"this campaign in its campaign column (anc/tables.md); nothing was written"
        )
    written = {}
    for tname, rows in tables.items():
        if not tname.startswith("_"):
            written[tname] = sha256_file(write_table(rows, tname, run.out)["parquet"])
    audit = timed_audit(
        base, res.get("counter_pairs"), res.get("counter_keys", COMPARED_COUNTERS), reference_of(ctx.defn)
    )
    atomic_write_text(
        run.out / "timed_audit.json", json.dumps(audit, indent=1, sort_keys=True, allow_nan=False) + "\n", mode=0o644
    )
    extra = res.get("json") or {}
    for fname, doc in extra.items():
        atomic_write_text(
            run.out / fname, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n", mode=0o644
        )
    header = (
        f"campaign {ctx.name} (preset {ctx.preset}), family {ctx.family}, {ctx.threads} thread(s); "
        f"plan sha256 {sha256_file(run.out / planmod.PLAN_NAME)[:16]}"
    )
    parts = [header, res["text"], *texts, arm_evidence(ctx.arms, base, reference_of(ctx.defn)), audit_text(audit)]
    text = "\n\n".join(parts) + "\n"
    atomic_write_text(run.out / "summary.txt", text, mode=0o644)
    run.note(
        "analysis",
        "tables written from the journal under the frozen plan",
        tables=written,
        mismatches=len(audit["mismatches"]),
        requests_compared=audit["requests_compared"],
    )
    return {"tables": tables, "audit": audit, "text": text, "extra": res}


def aa_and_load(ctx: PreparedCampaign, run, base: dict, tables: dict) -> list[str]:
    """Add the A/A control (``noise``, unless the campaign wrote it) and the block loads (``loads``)
    to ``tables``; return their summary lines."""
    texts = []
    if any(is_twin(n) for n in ctx.arms) and "noise" not in tables:
        boot = ctx.plan.get("bootstrap") or ctx.defn["bootstrap"]
        tables["noise"] = noise_table(
            base["requests"],
            base["qualification"],
            ctx.name,
            threshold=float(boot["threshold"]),
            aa_rule=aa_rule_of(ctx.plan),
        )
        texts.append(noise_text(tables["noise"]))
    loads = loads_table(run.ledger_records(), ctx.name, ctx.family)
    if loads:
        tables["loads"] = loads
        texts.append(busy_text(loads))
    return texts


def table_accepts_campaign(table: str, campaign: str) -> bool:
    sp = spec(table)
    if "campaign" not in sp.names:
        return True
    enum = sp.column("campaign").enum
    return enum is None or campaign in enum
