"""``refspec test`` (``./run test``): the code checks, the native build and models the tests need,
then pytest (:mod:`refspec.pipeline.main`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from ..core.config import load_config
from ..core.paths import REPO_ROOT
from ..native import build as native
from ..native import vulkan
from ..native.models import config_families_file, ensure_family
from ..pipeline.main import DEBIAN_TEST_PACKAGES, apt_install, pytest_command
from .lint import lint

# unknown options go to pytest
PASSTHROUGH = ("test",)


def _prepare(config: str | None) -> None:
    cfg = load_config(config)
    native.current(cfg)
    ensure_family(cfg.family, models_dir=cfg.models_dir, families_file=config_families_file(cfg))
    # the Vulkan backend (lavapipe on a machine without a GPU) for the `vulkan` tests, where this
    # machine can have it; elsewhere those tests skip and say why
    why = vulkan.unavailable()
    if why is None:
        native.build(native.BuildOptions(backend="vulkan"))
    else:
        print(f"refspec test: the Vulkan tests will skip: {why}", file=sys.stderr)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run the code checks (refspec lint), prepare the native build and models, then run pytest "
        "(other arguments go to pytest). Fails when either fails; both always run."
    )


def run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    lint_rc = lint()
    apt_install(DEBIAN_TEST_PACKAGES)
    _prepare(None)
    t_suite = time.monotonic()
    r = subprocess.run(pytest_command(list(args.extra)), cwd=REPO_ROOT)
    t_end = time.monotonic()
    if lint_rc != 0:
        print("refspec test: the code checks failed (see 'refspec lint' above)", file=sys.stderr)
    print(
        f"refspec test: {t_end - t0:.0f} s in all: {t_suite - t0:.0f} s of checks, packages, builds and models, "
        f"{t_end - t_suite:.0f} s of pytest"
    )
    return r.returncode or lint_rc
