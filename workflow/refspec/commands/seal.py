"""``refspec seal``: seal a results folder into a signed, closed-world archive."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import UsageError
from ..provenance.seal import SealResult, seal
from ..provenance.statement import archive_reference_problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results", type=Path, help="results folder (manifest.json, plan.json, ledger.jsonl, tables, report)"
    )
    parser.add_argument("out", type=Path, help="archive folder to create (must not exist or be empty)")
    parser.add_argument("--campaign", default=None, help="campaign name (default: plan.json's 'campaign')")
    parser.add_argument(
        "--key", type=Path, default=None, help="private key (default $REFSPEC_KEY_DIR/refspec_ed25519.key)"
    )
    g = parser.add_mutually_exclusive_group()
    g.add_argument(
        "--previous",
        type=Path,
        default=None,
        metavar="ARCHIVE",
        help="the previous archive (folder, uncompressed tar or seal file) this one follows; "
        "it must verify under the signing key",
    )
    g.add_argument(
        "--previous-sha256", default=None, metavar="SHA", help="sha256 of the previous seal this one follows"
    )
    parser.add_argument("--archive-id", default=None, help="archive id (default: a random UUID)")
    parser.add_argument(
        "--tar", nargs="?", const=True, default=False, metavar="PATH", help="also write a tar (default OUT.tar)"
    )
    parser.add_argument(
        "--csv",
        default="all",
        metavar="all|none|T1,T2",
        help="which Parquet tables without a CSV copy get one written (default all)",
    )
    parser.add_argument(
        "--no-csv-check",
        action="store_true",
        help="carry existing CSV copies without checking them against their tables",
    )
    parser.add_argument(
        "--threads", "--jobs", dest="threads", type=int, default=None, help="hashing threads (--jobs: its old name)"
    )
    add_reproduces_arguments(parser)


def add_reproduces_arguments(parser: argparse.ArgumentParser) -> None:
    """``--reproduces-seal``, ``--reproduces-keyid`` and ``--reproduces-archive-id`` (shared with
    ``seal-data`` and ``seal-archive``)."""
    r = parser.add_argument_group(
        "reproduction", "the archive this one reproduces (predicate.reproduces; all three or none)"
    )
    r.add_argument("--reproduces-seal", default=None, metavar="SHA", help="seal sha256 of the archive reproduced")
    r.add_argument("--reproduces-keyid", default=None, metavar="SHA256:HEX", help="its signer's key id")
    r.add_argument("--reproduces-archive-id", default=None, metavar="ID", help="its archive id")


def reproduces_of(args: argparse.Namespace) -> dict[str, str] | None:
    """``{seal_sha256, keyid, archive_id}`` from the ``--reproduces-*`` options, or None."""
    given = {
        "seal_sha256": args.reproduces_seal,
        "keyid": args.reproduces_keyid,
        "archive_id": args.reproduces_archive_id,
    }
    if all(v is None for v in given.values()):
        return None
    if any(v is None for v in given.values()):
        raise UsageError("give --reproduces-seal, --reproduces-keyid and --reproduces-archive-id together")
    problems = archive_reference_problems("reproduces", given)
    if problems:
        raise UsageError("; ".join(problems))
    return given


def run(args: argparse.Namespace) -> int:
    csv_sel: str | list[str]
    csv_sel = args.csv if args.csv in ("all", "none") else [t for t in args.csv.split(",") if t]
    reproduces = reproduces_of(args)
    r = seal(
        args.results,
        args.out,
        key=args.key,
        campaign=args.campaign,
        previous=args.previous,
        previous_sha256=args.previous_sha256,
        archive_id=args.archive_id,
        tar=args.tar if args.tar is True or args.tar is False else Path(args.tar),
        csv_tables=csv_sel,
        check_csv=not args.no_csv_check,
        threads=args.threads,
        predicate_extra={"reproduces": reproduces} if reproduces is not None else None,
    )
    print_sealed(r, reproduces)
    return 0


def print_sealed(r: SealResult, reproduces: dict[str, str] | None) -> None:
    """What a seal command prints about the archive it sealed (shared with ``seal-data`` and
    ``seal-archive``)."""
    print(f"sealed {r.out}: {r.files} files, {r.total_bytes} bytes")
    print(f"archive id:  {r.archive_id}")
    print(f"campaign:    {r.campaign}")
    print(f"previous:    {r.previous_seal_sha256 or '(none: first in chain)'}")
    print(f"seal sha256: {r.seal_sha256}")
    print(f"key:         {r.keyid}")
    if reproduces is not None:
        print(f"reproduces:  {reproduces['seal_sha256']} (key {reproduces['keyid']})")
    if r.tar is not None:
        print(f"tar:         {r.tar}")
