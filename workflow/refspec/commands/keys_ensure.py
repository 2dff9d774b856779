"""``refspec keys-ensure``: create the signing key once and copy its public half
(:func:`refspec.pipeline.provenance_inputs.ensure_keys`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..pipeline.provenance_inputs import ensure_keys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pub-out", required=True, help="copy the public key here")


def run(a: argparse.Namespace) -> int:
    res = ensure_keys(Path(a.pub_out))
    if res.generated is not None:
        print(f"generated {res.generated.public_path} ({res.generated.fingerprint})")
    print(f"public key {res.fingerprint} -> {a.pub_out}")
    return 0
