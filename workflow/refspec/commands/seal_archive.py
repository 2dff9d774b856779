"""``refspec seal-archive``: seal the rendered folder again, chained to the data seal
(:func:`refspec.pipeline.seal_chain.seal_archive`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..pipeline.seal_chain import seal_archive
from .seal import add_reproduces_arguments, print_sealed, reproduces_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rendered", required=True, help="the sealed data with its report (refspec render)")
    p.add_argument("--sealed-data", required=True, help="the sealed data archive this seal follows")
    p.add_argument("--out", required=True, help="the archive to create (must not exist or be empty)")
    p.add_argument("--campaign", required=True, help="the campaign name the seal records")
    p.add_argument("--tar", action="store_true", help="also write OUT.tar")
    add_reproduces_arguments(p)


def run(a: argparse.Namespace) -> int:
    reproduces = reproduces_of(a)
    r = seal_archive(
        Path(a.rendered),
        Path(a.out),
        sealed_data=Path(a.sealed_data),
        campaign=a.campaign,
        tar=a.tar,
        reproduces=reproduces,
    )
    print_sealed(r, reproduces)
    return 0
