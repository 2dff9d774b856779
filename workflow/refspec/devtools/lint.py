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
  outside it on purpose: the checker recomputes the figures without importing the package;
* import contract: the package's layer order, no import cycles, no unmarked import of the
  package inside a function, no function over 80 lines, no printing, argparse or exit codes
  outside the command layer (:mod:`refspec.devtools.contract`); of these, the function length
  also over the checker's package ``report/refspec_check``;
* glossary: no public name of the package (module, top-level class, function or constant) uses a
  word that ``anc/glossary.md`` lists as not to use for one of its terms
  (:mod:`refspec.devtools.glossary`).

:func:`run_checks` runs them and yields each result; ``refspec lint``
(:mod:`refspec.commands.lint`) prints them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.paths import REPO_ROOT
from . import contract, glossary

PYTHON_TREES = ["workflow/refspec", "tests", "report", "bench"]
MIN_SIMILAR_LINES = 8
PACKAGE_DIR = REPO_ROOT / "workflow" / "refspec"
CHECKER_DIR = REPO_ROOT / "report" / "refspec_check"  # the function-length rule only
CONTRACT_CHECK = "import contract"
GLOSSARY_CHECK = "glossary"


@dataclass(frozen=True)
class CheckResult:
    name: str
    returncode: int
    output: str  # stdout and stderr together
    seconds: float


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


def run_checks(python: str = sys.executable) -> Iterator[CheckResult]:
    """Run every check (:func:`checks`, then the import contract and the glossary), yielding each
    result as it ends."""
    for name, cmd in checks(python):
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        yield CheckResult(name, r.returncode, r.stdout, time.monotonic() - t0)
    t0 = time.monotonic()
    problems = contract_problems()
    yield CheckResult(CONTRACT_CHECK, 1 if problems else 0, "".join(p + "\n" for p in problems), time.monotonic() - t0)
    t0 = time.monotonic()
    problems = glossary.check(PACKAGE_DIR, show_from=REPO_ROOT)
    yield CheckResult(GLOSSARY_CHECK, 1 if problems else 0, "".join(p + "\n" for p in problems), time.monotonic() - t0)


def contract_problems() -> list[str]:
    """The import contract's problems in the package, then the function-length problems in the checker's
    package (the only rule of the contract that applies to it)."""
    return contract.check(PACKAGE_DIR, show_from=REPO_ROOT) + contract.check_function_lengths(
        CHECKER_DIR, show_from=REPO_ROOT
    )
