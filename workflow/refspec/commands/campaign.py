"""``refspec campaign NAME``: the timing and qualification campaigns of the paper.

    refspec campaign NAME [--preset default|paper] [--config F] [--definition F]
                          [--out DIR] [--threads N] [--family F] [--manifest M]
                          [--resume] [--analyze]

NAME is one of ``phase_mask``, ``confirmation``, ``implementation``,
``replication``, ``width``, ``prediction`` (hyphens are accepted). The campaign
is defined in ``config/campaigns/NAME.yaml`` (``--definition`` points at another
file), validated against ``workflow/schemas/campaign.schema.yaml``; its top
level is the embedded-default size (minutes on a 2-core CPU), ``--preset
paper`` applies the paper's sizes. ``--config`` is the workflow config (family,
threads, results folder, models_dir).

Everything goes into ``DIR/campaigns/NAME/`` (DIR: ``--out``, default the
config's ``results``): ``plan.json`` (frozen before the first session,
:mod:`refspec.provenance.plan`), ``ledger.jsonl`` (every attempt, hash-chained),
``journal.jsonl`` (one line per attempt with its endpoint), ``arms.yaml`` (the
arms the workers load), ``panel-*.jsonl``, ``workers/`` (ready files and logs),
the result tables (Parquet + CSV, ``anc/tables.md``), ``timed_audit.json`` and
``summary.txt`` (the paper-shaped summary, also printed). A killed campaign is
continued with ``--resume`` (only requests without a final attempt run);
``--analyze`` only re-checks the plan and rewrites the tables. The campaigns
and their outputs are documented in ``anc/campaigns.md``.

Exit status: 0 when every planned request has a final attempt (completed,
whether or not the arms qualify, or failed as often as the retry rule allows;
failures are listed in the summary), 5 when some are left to run (resume),
1 when the plan differs from the frozen one, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import sys

from ..campaigns.context import prepare
from ..campaigns.definitions import normalize_name
from ..campaigns.execution import execute
from ..campaigns.sizing import size_text
from ..core.campaign_names import CAMPAIGNS
from ..core.config import load_config
from ..core.errors import EXIT_OK, EXIT_RUNTIME


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help=f"campaign: {', '.join(CAMPAIGNS)}")
    p.add_argument("--preset", default="default", help="default (embedded size) or paper (the paper's sizes)")
    p.add_argument("--config", help="workflow config (default config/config.yaml)")
    p.add_argument("--definition", help="campaign definition file (default config/campaigns/NAME.yaml)")
    p.add_argument(
        "--out", help="results folder (default: the config's results); the campaign writes DIR/campaigns/NAME"
    )
    p.add_argument("--threads", type=int, help="threads per worker (default: the config's threads)")
    p.add_argument("--family", help="model family (default: the definition's, else the config's)")
    p.add_argument("--manifest", help="source manifest: freeze-checked before every session")
    p.add_argument("--resume", action="store_true", help="continue a campaign from its ledger and journal")
    p.add_argument("--analyze", action="store_true", help="only check the plan and rewrite the tables")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--target",
        type=float,
        help="the detectable ratio a sized (paired) campaign aims at (default: its definition's sizing.target)",
    )
    p.add_argument(
        "--budget", type=float, metavar="SECONDS", help="the seconds it may spend (default: its sizing.budget_s)"
    )


def run(args: argparse.Namespace) -> int:
    name = normalize_name(args.name)
    ctx, crun, computed = prepare(
        name,
        load_config(args.config),
        preset=args.preset,
        definition=args.definition,
        out=args.out,
        threads=args.threads,
        family=args.family,
        manifest=args.manifest,
        resume=args.resume or args.analyze,
        progress=not args.no_progress,
        target=args.target,
        budget_s=args.budget,
    )
    sized = size_text(ctx.defn)
    if sized and not args.analyze:  # what the campaign can resolve, said before it starts
        print(f"refspec campaign {ctx.name}: {sized}", file=sys.stderr, flush=True)
    result = execute(ctx, crun, computed, analyze_only=args.analyze)
    sys.stdout.write(result["text"])
    sys.stdout.flush()
    if not result["complete"]:
        print(
            f"refspec campaign {ctx.name}: some planned requests are left to run; continue with --resume "
            "(see timed_audit.json and the ledger)",
            file=sys.stderr,
        )
        return EXIT_RUNTIME
    return EXIT_OK
