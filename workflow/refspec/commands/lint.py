"""``refspec lint``: run the code checks (:mod:`refspec.devtools.lint`), print those that fail."""

from __future__ import annotations

import argparse
import sys

from ..devtools.lint import run_checks


def lint(quiet: bool = False) -> int:
    """Run every check; print the output of those that fail; 0 when all pass, else 1."""
    failed = []
    for r in run_checks():
        if r.returncode != 0:
            failed.append(r.name)
            print(
                f"refspec lint: {r.name}: FAILED (exit {r.returncode}, {r.seconds:.1f} s)\n{r.output.rstrip()}\n",
                file=sys.stderr,
            )
        elif not quiet:
            print(f"refspec lint: {r.name}: ok ({r.seconds:.1f} s)", file=sys.stderr)
    if failed:
        print(f"refspec lint: {len(failed)} check(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="print only the checks that fail")


def run(args: argparse.Namespace) -> int:
    return lint(quiet=args.quiet)
