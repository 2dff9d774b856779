"""``refspec claim``: run a controlled stage's command and record its claim (supported or withheld)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from ..core.errors import EXIT_FAILED, EXIT_OK, UsageError
from ..core.fsutil import atomic_write_text
from ..provenance.claims import CLAIM_STAGES, record_claim

# everything after `--` is the stage's own command line (refspec.cli hands it over as args.extra)
PASSTHROUGH = ("claim",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("stage", choices=CLAIM_STAGES)
    p.add_argument("--dir", required=True, help="the folder the stage's command writes its tables to")
    p.add_argument("--done", required=True, help="completion marker to write (the claim as JSON)")
    p.add_argument("--results", help="the run's results folder (its ledger.jsonl records the claim)")
    p.epilog = "After --: the refspec command of the stage and its arguments."


def run(args: argparse.Namespace) -> int:
    cmd = list(getattr(args, "extra", []))
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("give the stage's refspec command after --")
    done = Path(args.done)
    if done.exists():
        done.unlink()
    rc = subprocess.run([sys.executable, "-m", "refspec.cli", *cmd]).returncode
    if rc not in (EXIT_OK, EXIT_FAILED):
        print(
            f"refspec claim {args.stage}: the command failed with exit status {rc}; no claim recorded", file=sys.stderr
        )
        return rc
    d = Path(args.dir)
    row = record_claim(args.stage, d, rc, Path(args.results) if args.results else None)
    atomic_write_text(done, json.dumps(row, indent=2, sort_keys=True) + "\n")
    word = {"supported": "supported", "vacuous": row["claim"]}.get(row["status"], "WITHHELD")
    print(
        f"refspec claim {args.stage}: claim {word}; {row['controls_failed']} of {row['controls']} controls failed"
        + (f": {row['reason']}" if row["reason"] else ""),
        file=sys.stderr,
    )
    return EXIT_OK
