"""``refspec restore``: safely extract an archive tar into a fresh folder and verify it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.errors import EXIT_FAILED, EXIT_OK
from ..provenance.restore import restore
from ..provenance.verify import printable
from .verify import add_trust_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tar", type=Path, metavar="TAR", help="archive tar (uncompressed, as `seal --tar` writes it)")
    parser.add_argument("dest", type=Path, metavar="DEST", help="folder to create (must not exist or be empty)")
    add_trust_arguments(parser)
    parser.add_argument(
        "--threads", "--jobs", dest="threads", type=int, default=None, help="hashing threads (--jobs: its old name)"
    )


def run(args: argparse.Namespace) -> int:
    r = restore(
        args.tar,
        args.dest,
        args.pubkey,
        expect_previous=args.expect_previous,
        threads=args.threads,
        expect_keyid=args.expect_keyid,
    )
    for line in r.verify.lines(args.dest if r.ok else args.tar):
        print(line, file=sys.stdout)
    if r.ok:
        print(printable(f"restored {r.members} members into {args.dest}"))
        return EXIT_OK
    print(printable(f"refused: {args.tar} was not restored ({r.members} members)"), file=sys.stderr)
    return EXIT_FAILED
