"""``refspec verify``: verify a sealed archive (folder or tar) against a public key.

Prints ``OK: PATH (N files) key K archive A created T seal S previous P`` (and a
``NOTE:`` line per table without a CSV copy) or one ``FAIL:`` line per problem;
exits 0 when verified, 1 when not, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import EXIT_FAILED, EXIT_OK, UsageError
from ..provenance.verify import VerifyResult, verify_archive


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archive", type=Path, metavar="DIR|TAR", help="archive folder or tar")
    add_trust_arguments(parser)
    parser.add_argument(
        "--threads", "--jobs", dest="threads", type=int, default=None, help="hashing threads (--jobs: its old name)"
    )


def add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pubkey``, ``--expect-keyid`` and ``--expect-previous`` (shared with ``restore``)."""
    parser.add_argument("--pubkey", type=Path, required=True, metavar="KEY", help="the signer's public key (PEM)")
    parser.add_argument(
        "--expect-keyid",
        default=None,
        metavar="SHA256:HEX",
        help="the signer's key id, taken from outside the archive: the public key must have it",
    )
    parser.add_argument(
        "--expect-previous",
        default=None,
        metavar="SHA",
        help="sha256 of the seal this archive must follow ('none' for the first)",
    )


def report(res: VerifyResult, shown: str | Path | None = None, out: Callable[[str], Any] | None = None) -> int:
    emit = out or (lambda s: print(s, file=sys.stdout))
    for line in res.lines(shown):
        emit(line)
    return EXIT_OK if res.ok else EXIT_FAILED


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    res = verify_archive(
        args.archive,
        args.pubkey,
        expect_previous=args.expect_previous,
        threads=args.threads,
        expect_keyid=args.expect_keyid,
    )
    return report(res, args.archive)
