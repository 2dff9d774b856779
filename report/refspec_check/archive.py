"""The check of one archive: every section of its report recomputed from its tables, in order, then its seal."""

from __future__ import annotations

import os

from refspec_check.arms import check_arms
from refspec_check.comparison import check_comparison
from refspec_check.context import Context
from refspec_check.contract import COMPARISON_FORMAT, posix_rel, read_plan, read_tables
from refspec_check.device import check_device
from refspec_check.figures import check_figures
from refspec_check.files import check_archive_files
from refspec_check.findings import check_findings, expect_findings
from refspec_check.headline import check_headline
from refspec_check.intervals import AARules
from refspec_check.numbers import check_markup, check_numbers
from refspec_check.pdf import check_pdf
from refspec_check.problems import EXIT_UNREADABLE, Checker
from refspec_check.provenance import check_data_seal, check_host, check_provenance, read_manifest
from refspec_check.qualification import arm_facts, reference_arms
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
    if comparison:
        return check_comparison(c, rep, unsealed, trust)  # a comparison archive (refspec compare)
    tables = read_tables(c)
    plan = read_plan(c)

    def src(name: str) -> str:
        return posix_rel(tables[name].path, rep.dir)

    ctx = Context(c, tables, src)
    E = ctx.E
    reqs = tables["requests"].rows if "requests" in tables else []
    facts = arm_facts(reqs)
    check_endpoints(ctx)
    qual = check_qualification(ctx, reference_arms(plan))
    check_screen(ctx, plan)
    check_exposed_repairs(ctx, qual)
    rules = AARules(c, plan)  # (campaign, family) -> the A/A rule its plan froze
    check_ratios(ctx, qual, facts, rules)
    check_diagnostics(ctx, qual, facts)
    check_qualified_ratios(ctx)
    noise = check_noise(ctx, qual, bootstrap_parameters(plan), rules)
    est_dec = check_replication(ctx, qual, facts, bootstrap_parameters(plan), noise)
    check_variance(ctx)
    check_sizing(ctx, plan)
    check_loads(ctx)
    check_sessions(ctx)
    check_phase_masks(ctx, qual)
    check_prediction(ctx, plan)
    check_replay(ctx)
    check_audit(ctx)
    check_requests(ctx)
    check_arms(ctx, rep, plan)
    check_ledger(c, E, rep)
    check_state(ctx)  # partition, KV, crosses, frontier, admission, claims
    found = expect_findings(ctx, qual, facts, plan)
    stated = check_numbers(c, E, rep)
    check_markup(c, rep)
    check_pdf(c, rep.dir, rep.tex is not None and not rep.tex.problems)
    check_figures(c, tables, src, rep)
    prov = check_provenance(c, rep)
    head = check_headline(c, E, rep, stated, est_dec)
    check_findings(c, rep, stated, found)
    manifest = read_manifest(c)
    check_device(c, rep, prov, head, manifest)
    check_host(c, rep, prov, manifest)
    check_data_seal(c, rep, prov, head)
    check_rendering(c, rep.dir, prov)
    return check_sealed(c, unsealed, trust)
