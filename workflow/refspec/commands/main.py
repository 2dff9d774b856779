"""``refspec main`` (``./run main``): run the workflow on the embedded default, then print the
findings, then the archive, the report and its check (:mod:`refspec.pipeline.main`)."""

from __future__ import annotations

import argparse
import subprocess
import sys

from ..campaigns.sizing import goal_text
from ..core.config import load_config
from ..core.paths import REPO_ROOT
from ..pipeline.main import (
    TEX_PACKAGES,
    config_override,
    dry_run,
    headline_text,
    release_stale_lock,
    rerun_report_args,
    run_outputs,
    snakemake_command,
    with_config,
    with_cores,
)

# unknown options go to snakemake
PASSTHROUGH = ("main",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run the workflow (other arguments go to snakemake, e.g. --profile profiles/slurm); "
        "print the archive, its verification and the headline figures."
    )
    p.add_argument("--configfile", default="config/config.yaml")
    p.add_argument("--cores", type=int, help="local cores (default: all; not passed with a --profile)")
    p.add_argument(
        "--target",
        type=float,
        help="the detectable ratio every sized campaign aims at (config target; default: each definition's)",
    )
    p.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="seconds the sized campaigns of a family may spend in all, dealt out in proportion to their "
        "definitions' budgets (config budget; default: each definition's)",
    )


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.configfile)
    extra = with_config(args.extra, {"target": args.target, "budget": args.budget})
    goal = {k: config_override(extra, k, getattr(cfg, k)) for k in ("target", "budget")}
    cfg = cfg.replace(**{k: None if v in (None, "null", "None") else float(v) for k, v in goal.items()})
    base = snakemake_command(args.configfile)
    results = REPO_ROOT / config_override(args.extra, "results", cfg.results)
    release_stale_lock(base, results)
    cost = goal_text(cfg)
    if cost and not dry_run(extra):  # what the timed campaigns will cost, before they start
        print(cost, end="", flush=True)
    r = subprocess.run(with_cores(base, args.cores, extra), cwd=REPO_ROOT)
    if r.returncode != 0:
        print("refspec main: the workflow failed (see the log tail above and results/*/logs/)", file=sys.stderr)
        return r.returncode
    if dry_run(extra):
        return 0
    out = run_outputs(results)
    # the findings first; the archive, the report and the check line last, where the eye lands
    if out.numbers is not None:
        print()
        print(headline_text(out.numbers, out.archive / "SEAL.dsse.json"))
    print(f"\narchive: {out.archive}")
    if out.numbers is not None:
        print(f"report: {out.archive / 'report.html'}")
        if out.report_pdf is not None:
            print(f"report: {out.report_pdf}")
        else:
            print(
                "report.pdf: not made: pdflatex was not found (Debian: apt-get install --no-install-recommends "
                f"{TEX_PACKAGES}, then run `./run main {rerun_report_args(args.configfile)}`: Snakemake reruns "
                "the report and everything after it, the archive's seal and the check)"
            )
    if out.check is not None:
        print(out.check)
    return 0
