"""``refspec compare A B``: compare two sealed archives finding by finding (``anc/compare.md``).

Each archive (folder or tar) is verified against its own pinned key first. Prints the
comparison as a table (or ``--json``) and, with ``--out DIR``, writes it as a sealed
comparison archive with its report. Exit 0 when every preservation finding is the same,
1 when one differs, 2 usage, 3 an archive fails verification.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from ..compare import cleanup, compare_archives, load_verified
from ..compare.archive import write_archive
from ..compare.output import json_text, text_lines
from ..core.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, metavar="A", help="the first archive (folder or tar): the reference")
    parser.add_argument("b", type=Path, metavar="B", help="the second archive (folder or tar): the reproduction")
    parser.add_argument("--pubkey", type=Path, default=None, metavar="KEY", help="public key of both signers")
    parser.add_argument("--pubkey-a", type=Path, default=None, metavar="KEY", help="A's signer's public key")
    parser.add_argument("--pubkey-b", type=Path, default=None, metavar="KEY", help="B's signer's public key")
    parser.add_argument("--expect-keyid", default=None, metavar="SHA256:HEX", help="key id both signers must have")
    parser.add_argument("--expect-keyid-a", default=None, metavar="SHA256:HEX", help="A's signer's key id (pinned)")
    parser.add_argument("--expect-keyid-b", default=None, metavar="SHA256:HEX", help="B's signer's key id (pinned)")
    parser.add_argument(
        "--noise-floor",
        type=float,
        default=None,
        metavar="RATIO",
        help="A/A noise floor (a ratio >= 1) to use instead of the archives' own A/A controls",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON instead of a table")
    parser.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="write the sealed comparison archive here"
    )
    parser.add_argument(
        "--key", type=Path, default=None, metavar="KEY", help="private key sealing --out (default: the key directory's)"
    )


def run(args: argparse.Namespace) -> int:
    pub_a = args.pubkey_a or args.pubkey
    pub_b = args.pubkey_b or args.pubkey
    if pub_a is None or pub_b is None:
        raise UsageError("give --pubkey for both archives, or --pubkey-a and --pubkey-b")
    for p in (args.a, args.b, pub_a, pub_b):
        if not p.exists():
            raise UsageError(f"{p} not found")
    if args.noise_floor is not None and not args.noise_floor >= 1.0:
        raise UsageError("--noise-floor is a ratio >= 1")
    if args.out is not None and args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise UsageError(f"{args.out} exists and is not an empty folder")
    work = Path(tempfile.mkdtemp(prefix="refspec-compare-"))
    try:
        a = load_verified(args.a, pub_a, "A", args.expect_keyid_a or args.expect_keyid, work)
        b = load_verified(args.b, pub_b, "B", args.expect_keyid_b or args.expect_keyid, work)
        c = compare_archives(a, b, noise_floor=args.noise_floor)
        if args.json:
            sys.stdout.write(json_text(c))
        else:
            for line in text_lines(c):
                print(line)
        if args.out is not None:
            r = write_archive(c, args.out, key=args.key)
            print(
                f"comparison archive: {r.out} seal {r.seal_sha256} key {r.keyid}",
                file=sys.stderr if args.json else sys.stdout,
            )
        cleanup(a, b)
        return c.exit_code
    finally:
        shutil.rmtree(work, ignore_errors=True)
