"""``refspec lint``: the code habits CI enforces, run first by ``./run test``.

Every check runs, and each problem is printed, before the command fails (exit 1):

* ``ruff check``: pyflakes, pycodestyle, import order, pyupgrade and bugbear rules
  (``[tool.ruff]`` in ``pyproject.toml``) over the package, the tests, the checker and the
  benchmarks;
* ``ruff format --check``: one formatting of all of them;
* ``snakefmt --check``: the Snakefile and ``workflow/rules/*.smk``;
* ``snakemake --lint``: Snakemake's own rules for workflows (logs, conda, params ...);
* duplicate code: pylint's similarity checker over the package (``MIN_SIMILAR_LINES``
  identical lines, comments, docstrings and imports ignored). ``report/check.py`` stays
  outside it on purpose: the checker recomputes the figures without importing the package.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from ..core.paths import REPO_ROOT

PYTHON_TREES = ["workflow/refspec", "tests", "report", "bench"]
MIN_SIMILAR_LINES = 8


def checks(python: str = sys.executable) -> list[tuple[str, list[str]]]:
    """(name, command) of every check, run from the repository root."""
    bindir = Path(python).parent
    return [
        ("ruff check", [str(bindir / "ruff"), "check", "--no-cache", *PYTHON_TREES]),
        ("ruff format", [str(bindir / "ruff"), "format", "--check", "--no-cache", *PYTHON_TREES]),
        ("snakefmt", [str(bindir / "snakefmt"), "--check", "Snakefile", "workflow/rules"]),
        ("snakemake --lint", [python, "-m", "snakemake", "--lint", "--cores", "1", "--snakefile", "Snakefile"]),
        (
            "duplicate code",
            [
                python,
                "-m",
                "pylint",
                "--disable=all",
                "--enable=duplicate-code",
                f"--min-similarity-lines={MIN_SIMILAR_LINES}",
                "--ignore-imports=y",
                "--ignore-docstrings=y",
                "--ignore-comments=y",
                "--score=n",
                "workflow/refspec",
            ],
        ),
    ]


def lint(quiet: bool = False) -> int:
    """Run every check; print the output of those that fail; 0 when all pass, else 1."""
    failed = []
    for name, cmd in checks():
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        dt = time.monotonic() - t0
        if r.returncode != 0:
            failed.append(name)
            print(
                f"refspec lint: {name}: FAILED (exit {r.returncode}, {dt:.1f} s)\n{r.stdout.rstrip()}\n",
                file=sys.stderr,
            )
        elif not quiet:
            print(f"refspec lint: {name}: ok ({dt:.1f} s)", file=sys.stderr)
    if failed:
        print(f"refspec lint: {len(failed)} check(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="print only the checks that fail")


def run(args: argparse.Namespace) -> int:
    return lint(quiet=args.quiet)
