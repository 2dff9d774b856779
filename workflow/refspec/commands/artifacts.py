"""``refspec artifacts``: list the run's artifacts for the source manifest
(:func:`refspec.pipeline.provenance_inputs.artifacts`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..core.config import load_config
from ..core.fsutil import atomic_write_text
from ..pipeline.provenance_inputs import artifacts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config")
    p.add_argument("--build", required=True, help="BUILD.json of the run")
    p.add_argument("--panel", action="append", default=[])
    p.add_argument("--out", required=True)


def run(a: argparse.Namespace) -> int:
    items = artifacts(load_config(a.config), Path(a.build), [Path(p) for p in a.panel])
    atomic_write_text(a.out, json.dumps({"artifacts": items}, indent=2) + "\n")
    print(f"{len(items)} artifacts -> {a.out}")
    return 0
