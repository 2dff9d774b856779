"""``refspec keygen``: write an Ed25519 key pair for sealing (outside the repository)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..provenance.keys import DEFAULT_NAME, generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="key directory (default $REFSPEC_KEY_DIR or ~/.config/refspec/keys)",
    )
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"key file stem (default {DEFAULT_NAME})")
    parser.add_argument("--force", action="store_true", help="replace an existing key pair")
    parser.add_argument(
        "--results",
        type=Path,
        action="append",
        default=[],
        help="a results folder the key must stay out of (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    kp = generate(args.dir, name=args.name, force=args.force, extra_forbidden=args.results)
    print(f"private key: {kp.private_path} (mode 0600; never share, archive or commit it)")
    print(f"public key:  {kp.public_path}")
    print(f"fingerprint: {kp.fingerprint}")
    return 0
