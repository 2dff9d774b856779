"""``refspec panel``: build a task panel file (HumanEval from the pinned wheel)."""

from __future__ import annotations

import argparse

from ..core.panels import humaneval_tasks, parse_range, write_panel


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", choices=["humaneval"], default="humaneval")
    p.add_argument("--tasks", default="0-11", help="task indices, e.g. 0-11 or 0,4,7-9")
    p.add_argument("--out", required=True)


def run(args: argparse.Namespace) -> int:
    tasks = humaneval_tasks(parse_range(args.tasks))
    digest = write_panel(tasks, args.out)
    print(f"refspec panel: {len(tasks)} tasks -> {args.out} (sha256 {digest})")
    return 0
