"""``refspec main`` (``./run main``): run the workflow on the embedded default, then print the
findings, then the archive, the report and its check (:mod:`refspec.pipeline.main`)."""

from __future__ import annotations

import argparse
import subprocess
import sys

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


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.configfile)
    base = snakemake_command(args.configfile)
    results = REPO_ROOT / config_override(args.extra, "results", cfg.results)
    release_stale_lock(base, results)
    r = subprocess.run(with_cores(base, args.cores, args.extra), cwd=REPO_ROOT)
    if r.returncode != 0:
        print("refspec main: the workflow failed (see the log tail above and results/*/logs/)", file=sys.stderr)
        return r.returncode
    if dry_run(args.extra):
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
