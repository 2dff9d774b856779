"""``refspec report-stage``: copy a sealed data archive and render the report into it
(:func:`refspec.pipeline.stages.report_stage`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..pipeline.stages import report_stage


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sealed", required=True)
    p.add_argument("--pubkey", required=True)
    p.add_argument("--out", required=True)


def run(a: argparse.Namespace) -> int:
    paths = report_stage(Path(a.sealed), Path(a.out), Path(a.pubkey))
    for k, v in paths.items():
        print(f"{k}: {v}")
    return 0
