"""``refspec manifest``: write the source manifest, or freeze-check against a stored one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.config import read_config_file
from ..core.errors import EXIT_FAILED, EXIT_OK, UsageError
from ..provenance.manifest import (
    ROLES,
    Artifact,
    FreezeCheckError,
    build_manifest,
    freeze_check,
    load_listing,
    load_manifest,
    write_manifest,
)


def parse_artifact_flag(text: str) -> Artifact:
    parts = text.split("=", 2)
    if len(parts) != 3 or not all(parts):
        raise UsageError(f"--artifact {text!r}: expected ROLE=NAME=PATH")
    role, name, path = parts
    return Artifact(name, role, Path(path))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--artifacts",
        type=Path,
        action="append",
        default=[],
        metavar="LISTING",
        help="JSON/YAML listing of artifacts (repeatable)",
    )
    parser.add_argument(
        "--artifact",
        action="append",
        default=[],
        metavar="ROLE=NAME=PATH",
        help=f"one artifact; ROLE is one of {', '.join(ROLES)} (repeatable)",
    )
    parser.add_argument("--config", type=Path, default=None, help="the run's config file (YAML or JSON)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="write the manifest here (default stdout)")
    parser.add_argument(
        "--check",
        type=Path,
        default=None,
        metavar="STORED",
        help="freeze check: recompute and compare with STORED; exit 1 on any difference",
    )
    parser.add_argument("--no-gpu", action="store_true", help="do not query nvidia-smi")


def run(args: argparse.Namespace) -> int:
    arts: list[Artifact] = []
    for listing in args.artifacts:
        arts.extend(load_listing(listing))
    arts.extend(parse_artifact_flag(t) for t in args.artifact)
    config = read_config_file(args.config) if args.config is not None else None
    if args.check is not None:
        stored = load_manifest(args.check)
        try:
            current = freeze_check(stored, config=config, artifacts=arts or None, config_path=args.config)
        except FreezeCheckError as e:
            for d in e.differences:
                print(f"DIFF: {d}")
            print(f"FAIL: {len(e.differences)} difference(s) from {args.check}", file=sys.stderr)
            return EXIT_FAILED
        n = len(current["buildDefinition"]["resolvedDependencies"])
        print(f"OK: {args.check} ({n} dependencies unchanged)")
        return EXIT_OK
    m = build_manifest(arts, config or {}, config_path=args.config, include_gpu=not args.no_gpu)
    if args.output is not None:
        digest = write_manifest(m, args.output)
        n = len(m["buildDefinition"]["resolvedDependencies"])
        print(f"wrote {args.output}: {n} dependencies, sha256 {digest}")
    else:
        sys.stdout.write(json.dumps(m, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return EXIT_OK
