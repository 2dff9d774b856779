"""``refspec render``: copy a sealed data archive, once it verifies, and render the report into the
copy (:func:`refspec.pipeline.seal_chain.render`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..pipeline.seal_chain import render


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sealed-data", required=True, help="the sealed data archive (refspec seal-data)")
    p.add_argument("--pubkey", required=True)
    p.add_argument("--out", required=True)


def run(a: argparse.Namespace) -> int:
    paths = render(Path(a.sealed_data), Path(a.out), Path(a.pubkey))
    for k, v in paths.items():
        print(f"{k}: {v}")
    return 0
