"""``refspec report RESULTS_DIR [--out DIR] [--pubkey KEY.pub] [--no-pdf]``: render the report of a
results folder or archive (:func:`refspec.reporting.render.render`) and print the paths written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..reporting.render import render


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", type=Path, help="results folder or archive with the tables (and tables/)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: RESULTS_DIR)")
    parser.add_argument("--pubkey", type=Path, default=None, help="public key whose fingerprint the report shows")
    parser.add_argument("--no-pdf", action="store_true", help="do not run pdflatex even when present")


def run(args: argparse.Namespace) -> int:
    paths = render(args.results_dir, args.out, pdf=not args.no_pdf, pubkey=args.pubkey)
    for k in ("html", "tex", "pdf", "numbers"):
        if k in paths:
            print(paths[k])
    if "pdf" not in paths and not args.no_pdf:
        print("refspec report: pdflatex not found; report.pdf not written", file=sys.stderr)
    return 0
