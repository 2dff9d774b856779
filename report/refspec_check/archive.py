"""The check of one archive: every section of its report recomputed from its tables, in order, then its seal."""

from __future__ import annotations

import os

from refspec_check.arms import check_arms
from refspec_check.comparison import check_comparison
from refspec_check.completeness import check_completeness
from refspec_check.context import Context
from refspec_check.contract import COMPARISON_FORMAT, posix_rel, read_plan, read_tables
from refspec_check.device import check_device
from refspec_check.figures import check_figures
from refspec_check.files import check_archive_files
from refspec_check.findings import check_findings, expect_findings
from refspec_check.headline import check_headline
from refspec_check.intervals import AARules
from refspec_check.numbers import check_markup, check_numbers
from refspec_check.parquet_copies import check_parquet_copies
from refspec_check.pdf import check_pdf
from refspec_check.problems import EXIT_UNREADABLE, MALFORMED, Checker
from refspec_check.provenance import check_data_seal, check_host, check_provenance, read_manifest
from refspec_check.qualification import arm_facts, reference_arms
from refspec_check.registered_plan import check_registered_plan
from refspec_check.rendering import check_rendering
from refspec_check.replication import bootstrap_parameters, check_loads, check_noise, check_replication, check_sessions
from refspec_check.report import read_report
from refspec_check.results import (
    check_diagnostics,
    check_endpoints,
    check_qualification,
    check_qualified_ratios,
    check_ratios,
)
from refspec_check.screen import check_exposed_repairs, check_screen
from refspec_check.seal import Trust, check_sealed, check_tree
from refspec_check.sizing import check_sizing
from refspec_check.state import check_state
from refspec_check.summaries import (
    check_audit,
    check_ledger,
    check_phase_masks,
    check_prediction,
    check_replay,
    check_requests,
)
from refspec_check.variance import check_variance


class Steps:
    """Runs the checks one step at a time: a step that a malformed sealed input makes fail records a
    mismatch naming the step and the error, and the check goes on with ``default`` for its result."""

    def __init__(self, c: Checker):
        self.c = c

    def __call__(self, name: str, fn, default, *args):
        try:
            return fn(*args)
        except MALFORMED as e:
            self.c.bad(name, f"malformed sealed input: {type(e).__name__}: {str(e)[:200]}")
            return default


def check(archive: str, quiet: bool = False, unsealed: bool = False, trust: Trust | None = None) -> tuple[int, Checker]:
    """Recompute every section of the archive's report from its tables; (exit status, Checker)."""
    c = Checker(archive, quiet)
    trust = trust or Trust()
    if not os.path.isdir(archive):
        c.unread(archive, "not a directory")
        return EXIT_UNREADABLE, c
    check_tree(c)
    rep = read_report(c)
    if rep is None:
        return EXIT_UNREADABLE, c
    comparison = rep.numbers_doc.get("format") == COMPARISON_FORMAT
    check_archive_files(c, rep.dir, comparison=comparison)
    check_parquet_copies(c)  # each Parquet table holds the text of its CSV copy, which the checks below read
    if comparison:
        return check_comparison(c, rep, unsealed, trust)  # a comparison archive (refspec compare)
    tables = read_tables(c)
    plan = read_plan(c)

    def src(name: str) -> str:
        return posix_rel(tables[name].path, rep.dir)

    ctx = Context(c, tables, src)
    E = ctx.E
    step = Steps(c)  # a malformed sealed input is a mismatch named by its step, never a crash
    reqs = tables["requests"].rows if "requests" in tables else []
    facts = step("requests", arm_facts, {}, reqs)
    step("endpoints", check_endpoints, None, ctx)
    qual = step("qualification", check_qualification, {}, ctx, step("plan", reference_arms, {}, plan))
    step("plan", check_registered_plan, None, c, plan)  # one registered plan (refspec_check.registered_plan)
    step("screen", check_screen, None, ctx, plan)
    step("exposed repairs", check_exposed_repairs, None, ctx, qual)
    rules = step("plan", AARules, None, c, plan)  # (campaign, family) -> the A/A rule its plan froze
    step("ratios", check_ratios, None, ctx, qual, facts, rules)
    step("diagnostics", check_diagnostics, None, ctx, qual, facts)
    step("completeness", check_completeness, None, ctx, qual, facts)  # every derived row that must exist
    step("qualified ratios", check_qualified_ratios, None, ctx)
    boot = step("plan", bootstrap_parameters, {}, plan)
    noise = step("noise", check_noise, {}, ctx, qual, boot, rules)
    est_dec = step("replication", check_replication, {}, ctx, qual, facts, boot, noise)
    step("variance", check_variance, None, ctx)
    step("sizing", check_sizing, None, ctx, plan)
    step("loads", check_loads, None, ctx)
    step("sessions", check_sessions, None, ctx)
    step("phase masks", check_phase_masks, None, ctx, qual)
    step("prediction", check_prediction, None, ctx, plan)
    step("replay", check_replay, None, ctx)
    step("audit", check_audit, None, ctx)
    step("requests", check_requests, None, ctx)
    step("arms", check_arms, None, ctx, rep, plan)
    step("ledger", check_ledger, None, c, E, rep)
    step("state studies", check_state, None, ctx)  # partition, KV, crosses, frontier, admission, claims
    found = step("findings", expect_findings, {}, ctx, qual, facts, plan)
    stated = step("numbers", check_numbers, {}, c, E, rep)
    step("markup", check_markup, None, c, rep)
    step("pdf", check_pdf, None, c, rep.dir, rep.tex is not None and not rep.tex.problems)
    step("figures", check_figures, None, c, tables, src, rep)
    prov = step("provenance", check_provenance, {}, c, rep)
    head = step("headline", check_headline, [], c, E, rep, stated, est_dec)
    step("findings", check_findings, None, c, rep, stated, found)
    manifest = step("manifest", read_manifest, None, c)
    step("device", check_device, None, c, rep, prov, head, manifest)
    step("host", check_host, None, c, rep, prov, manifest)
    step("data seal", check_data_seal, None, c, rep, prov, head)
    step("rendering", check_rendering, None, c, rep.dir, prov)
    return check_sealed(c, unsealed, trust)
