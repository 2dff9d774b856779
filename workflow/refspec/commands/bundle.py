"""``refspec bundle``: collect wheels, the pinned sdist, family files and the source into an
offline bundle (:func:`refspec.pipeline.bundle.make_bundle`)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..core.config import load_config
from ..core.errors import UsageError
from ..core.paths import REPO_ROOT
from ..pipeline.bundle import DEFAULT_CHUNK_MIB, INSTALLER, make_bundle


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="bundle folder (must not exist or be empty)")
    p.add_argument("--python", default=None, help="target interpreter X.Y (default: envs/python-version)")
    p.add_argument(
        "--chunk-mib",
        type=int,
        default=DEFAULT_CHUNK_MIB,
        help=f"split files larger than this many MiB (default {DEFAULT_CHUNK_MIB})",
    )
    p.add_argument("--omit", default="", help="comma-separated requirements the target host provides")
    p.add_argument("--family", help="model family (default: the config's family)")
    p.add_argument("--config", help="workflow config (default config/config.yaml): family, models_dir")
    p.add_argument("--with-build", choices=["cpu", "cuda"], help="also carry this cached native build")


def run(args: argparse.Namespace) -> int:
    python = args.python or (REPO_ROOT / "envs" / "python-version").read_text().strip()
    if not re.fullmatch(r"3\.\d{1,2}", python):
        raise UsageError(f"--python {python!r}: give the target interpreter as X.Y, e.g. 3.12")
    if args.chunk_mib < 1:
        raise UsageError("--chunk-mib must be at least 1")
    cfg = load_config(args.config)
    omit = [o.strip() for o in args.omit.split(",") if o.strip()]
    m = make_bundle(
        Path(args.out).resolve(),
        python=python,
        chunk_mib=args.chunk_mib,
        omit=omit,
        family=args.family or cfg.family,
        config=cfg,
        with_build=args.with_build,
    )
    nparts = sum(len(f.get("parts", [])) for f in m["files"])
    print(
        f"refspec bundle: {args.out}: {len(m['files'])} files ({nparts} parts), "
        f"{m['_size'] / (1 << 20):.1f} MiB, CPython {python}, family {m['family']['name']}"
        f"{', native ' + m['native']['backend'] if m['native'] else ''}; {m['_seconds']:.1f} s"
    )
    print(f"install on the target with: bash {Path(args.out) / INSTALLER} [--prefix DIR]")
    return 0
