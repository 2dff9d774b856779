"""``refspec reproduce ARCHIVE --expect-keyid K``: run a sealed archive's registered plan again
on this machine, seal the reproduction and compare it with the archive
(:mod:`refspec.pipeline.reproduce`, ``anc/reproduce.md``).

Exit 3 when the archive does not verify or a pinned input of this machine differs from its
manifest (the list of differences is printed; ``--allow NAME`` accepts one); the workflow's
exit status when the run fails; otherwise ``refspec compare``'s (0 every preservation finding
the same, 1 one differs), and 1 when the reproduction's registered plan differs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..compare import cleanup, compare_archives, load_verified
from ..compare.output import text_lines
from ..core.errors import EXIT_FAILED, UsageError
from ..core.paths import REPO_ROOT
from ..pipeline.main import release_stale_lock, snakemake_command, with_cores
from ..pipeline.reproduce import (
    RECORD_DIR,
    archived_config,
    check_inputs,
    default_out,
    plan_check,
    record_inputs,
    reproduces_ref,
    reproduction_config,
    write_config,
)
from ..pipeline.seal_chain import Folders
from ..provenance import keys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("archive", type=Path, metavar="ARCHIVE", help="the sealed archive (folder or tar) to reproduce")
    p.add_argument(
        "--expect-keyid",
        required=True,
        metavar="SHA256:HEX",
        help="the archive's signer's key id, taken from outside the archive",
    )
    p.add_argument(
        "--pubkey",
        type=Path,
        default=None,
        metavar="KEY.pub",
        help="the signer's public key (default: provenance/signer.pub beside the archive)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="the reproduction's results folder (default results/reproduce-<first 12 hex of the seal>)",
    )
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="NAME,...",
        help="accept a pinned input of this machine that differs from the archive's (its name as listed, "
        "or a pattern such as 'pkg:pypi/*'); recorded in the reproduction",
    )
    p.add_argument("--cores", type=int, default=None, help="local cores for Snakemake (default: all)")
    p.add_argument(
        "--dry-run",
        "-n",
        action="store_true",
        help="check the inputs, write the config and let Snakemake list the jobs without running them",
    )


def _results_value(out: Path) -> str:
    """The config's ``results``: relative to the repository when inside it (as the default's is)."""
    try:
        return str(out.relative_to(REPO_ROOT))
    except ValueError:
        return str(out)


def run(args: argparse.Namespace) -> int:
    pub = args.pubkey or args.archive.resolve().parent / "provenance" / "signer.pub"
    if not args.archive.exists():
        raise UsageError(f"{args.archive} not found")
    if not pub.is_file():
        raise UsageError(f"public key {pub} not found: give --pubkey")
    allow = tuple(a.strip() for v in args.allow for a in v.split(",") if a.strip())
    work = Path(tempfile.mkdtemp(prefix="refspec-reproduce-"))
    try:
        a = load_verified(args.archive, pub, "A", args.expect_keyid, work)
        print(f"verified: {args.archive} seal {a.seal_sha256} key {a.keyid} archive {a.archive_id}")
        check = check_inputs(a, archived_config(a.manifest), allow)
        for d in check.host:
            print(f"host differs (recorded): {d.line()}")
        for d in check.accepted:
            print(f"pinned input differs, accepted (--allow): {d.line()}")
        for name in check.unused_allow:
            print(f"note: --allow {name} names no difference")
        check.raise_if_refused()
        print(
            "pinned inputs: "
            + ("the same as the archive's" if not check.accepted else f"{len(check.accepted)} accepted difference(s)")
        )

        out = (args.out or REPO_ROOT / default_out(a.seal_sha256)).resolve()
        cfg = reproduction_config(
            a.manifest, _results_value(out), reproduces_ref(a), check.accepted, check.host, plan=a.plan
        )
        config_path = write_config(cfg, out / RECORD_DIR / "config.yaml")
        record_inputs(out, a, check)
        print(f"config: {config_path}")

        base = snakemake_command(str(config_path))
        release_stale_lock(base, out)
        r = subprocess.run(with_cores(base, args.cores, ["-n"] if args.dry_run else []), cwd=REPO_ROOT)
        if r.returncode != 0:
            print("refspec reproduce: the workflow failed (see the log tail above and DIR/logs/)", file=sys.stderr)
            return r.returncode
        if args.dry_run:
            print(f"dry run: the reproduction would write {out}")
            return 0

        new = Folders(out).archive  # the workflow's sealed archive (the seal chain's last folder)
        b = load_verified(new, out / "provenance" / "signer.pub", "B", keys.public_fingerprint(), work)
        pc = plan_check(a.plan, b.plan)
        print(f"\nreproduction archive: {new}")
        if pc.same:
            print(f"registered plan: the same as the archive's ({pc.archived[:16]})")
        else:
            print(f"registered plan: DIFFERS from the archive's ({pc.archived[:16]} vs {pc.reproduced[:16]})")
            for scope, lines in sorted(pc.differences.items()):
                for line in lines:
                    print(f"  {scope}: {line}")
        c = compare_archives(a, b)
        print()
        for line in text_lines(c):
            print(line)
        cleanup(a, b)
        return c.exit_code if pc.same else max(c.exit_code, EXIT_FAILED)
    finally:
        shutil.rmtree(work, ignore_errors=True)
