"""``refspec models``: extract and derive a family's model files, or pin user-placed ones
(:mod:`refspec.native.models`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..core.config import load_config
from ..core.errors import UsageError
from ..native import build as native
from ..native.models import config_families_file, ensure_family, is_derived, pin_family


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="workflow config (default config/config.yaml)")
    p.add_argument("--family", help="family (default: the config's family)")
    p.add_argument("--models-dir", help="where user-placed files live (default: the config's models_dir)")
    p.add_argument("--families-file", help="families file (default: the config's families_file)")
    p.add_argument(
        "--pin",
        action="store_true",
        help="check and hash the family's user-placed files and write a pinned families file to --out",
    )
    p.add_argument("--out", help="with --pin: the pinned families file to write")
    p.add_argument("--force", action="store_true", help="with --pin: replace a different existing pin in --out")


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    ffile = Path(args.families_file) if args.families_file else config_families_file(cfg)
    if args.pin:
        if not (args.family and args.models_dir and args.out):
            raise UsageError("--pin needs --family, --models-dir and --out")
        # pinning reads and hashes files only: it needs no native build
        pins = pin_family(args.family, args.models_dir, args.out, families_path=ffile, force=args.force)
        for key, digest in pins.items():
            print(f"{key:12s} {digest}")
        print(f"refspec models: pinned family {args.family} in {args.out}")
        return 0
    if args.out or args.force:
        raise UsageError("--out and --force go with --pin")
    name = args.family or cfg.family
    if is_derived(name, ffile):
        # derive with the configured build's library (a CUDA host builds no CPU copy); placed files need none
        os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(native.current(cfg).lib_dir))
    fam = ensure_family(name, models_dir=args.models_dir or cfg.models_dir, families_file=ffile)
    for f in fam.all():
        print(f"{f.role:6s} {f.name:10s} {f.sha256}  {f.path}")
    return 0
