"""``refspec key-id``: print the key id (fingerprint) that ``verify --expect-keyid`` pins."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..provenance.keys import public_fingerprint


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pubkey", type=Path, default=None, help="a public key file (default: the key directory's public key)"
    )


def run(args: argparse.Namespace) -> int:
    print(public_fingerprint(args.pubkey))
    return 0
