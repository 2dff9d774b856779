"""``refspec assemble``: merge the run's campaign tables, plans and ledger into one folder, the
first step of the seal chain (:func:`refspec.pipeline.seal_chain.assemble`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..pipeline.seal_chain import assemble


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", required=True)
    p.add_argument("--manifest", required=True)
    p.add_argument("--campaign", action="append", default=[], help="a campaign output folder (repeatable)")
    p.add_argument("--out", required=True)


def run(a: argparse.Namespace) -> int:
    counts = assemble(Path(a.results), Path(a.manifest), [Path(c) for c in a.campaign], Path(a.out))
    for name, n in sorted(counts.items()):
        print(f"{name:14s} {n:6d} rows")
    return 0
