"""``refspec seal-data``: seal the assembled results, the first seal of the seal chain
(:func:`refspec.pipeline.seal_chain.seal_data`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..pipeline.seal_chain import seal_data
from .seal import add_reproduces_arguments, print_sealed, reproduces_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--assembled", required=True, help="the assembled results (refspec assemble)")
    p.add_argument("--out", required=True, help="the sealed data archive to create (must not exist or be empty)")
    p.add_argument("--campaign", required=True, help="the campaign name the seal records")
    add_reproduces_arguments(p)


def run(a: argparse.Namespace) -> int:
    reproduces = reproduces_of(a)
    r = seal_data(Path(a.assembled), Path(a.out), campaign=a.campaign, reproduces=reproduces)
    print_sealed(r, reproduces)
    return 0
