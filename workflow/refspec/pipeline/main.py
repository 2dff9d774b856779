"""What the two commands a new user types, ``./run main`` and ``./run test``, run.

``main`` (:mod:`refspec.commands.main`) runs the Snakemake workflow on the embedded default
(native build, models, campaigns, seal, report, check) and ends by printing the archive path,
the verification result and the headline figures: :func:`snakemake_command`,
:func:`release_stale_lock`, :func:`run_outputs` and :func:`headline_text`. ``test``
(:mod:`refspec.commands.test`) prepares what the tests need (the native build, the model files,
Debian's chromium for the browser test when this machine can install it, :func:`apt_install`)
and runs the suite (:func:`pytest_command`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.hashing import sha256_file
from ..core.paths import REPO_ROOT

# Debian packages the tests use, installed when this machine can (root with apt-get):
# chromium for the browser test; LaTeX (latex-base: geometry, longtable, array, url;
# latex-recommended: booktabs, xcolor; pictures: TikZ) for report.pdf, and poppler-utils
# (pdftoppm, pdftotext) to render and read its pages.
DEBIAN_TEST_PACKAGES = [
    "chromium",
    "texlive-latex-base",
    "texlive-latex-recommended",
    "texlive-pictures",
    "poppler-utils",
]
# what report.tex needs, for the message when report.pdf cannot be made
TEX_PACKAGES = "texlive-latex-base texlive-latex-recommended texlive-pictures"


def _dpkg_installed(package: str) -> bool:
    r = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        check=False,
    )
    return r.returncode == 0 and r.stdout.strip().endswith(" installed")


def apt_install(packages: list[str]) -> None:
    """Install missing Debian packages when running as root with apt (tests skip otherwise)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        return
    missing = [p for p in packages if not _dpkg_installed(p)]
    if not missing:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"refspec test: installing {' '.join(missing)} from Debian", file=sys.stderr)  # contract: progress
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, stdout=subprocess.DEVNULL)
    r = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        env=env,
        check=False,
        stdout=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        # contract: a notice on stderr, the run goes on without them
        print(f"refspec test: could not install {missing}; the tests that need them will skip", file=sys.stderr)


def pytest_command(extra: list[str]) -> list[str]:
    """The pytest command of ``./run test`` with its other arguments ``extra`` (the opt-in tests are
    skipped by tests/conftest.py, as under a plain ``pytest``)."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]


def _snakemake_running_here() -> bool:
    """Whether a live Snakemake process works in the repository (its lock is then not stale)."""
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if any(a.endswith(b"snakemake") for a in argv[:3]) and cwd == REPO_ROOT:
            return True
    return False


def release_stale_lock(base: list[str]) -> None:
    """A killed run leaves Snakemake's directory lock behind; release it when no run is alive."""
    locks = REPO_ROOT / ".snakemake" / "locks"
    if not locks.is_dir() or not any(locks.iterdir()) or _snakemake_running_here():
        return
    print("refspec main: releasing the lock an interrupted run left behind", file=sys.stderr)  # contract: progress
    subprocess.run([*base, "--unlock"], cwd=REPO_ROOT, check=False, stdout=subprocess.DEVNULL)


def snakemake_command(configfile: str) -> list[str]:
    """The Snakemake command of ``./run main`` before its cores and other arguments
    (:func:`with_cores` adds them): the base a stale lock is released with."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO_ROOT / "Snakefile"),
        "--configfile",
        configfile,
        "--show-failed-logs",
    ]


def with_cores(base: list[str], cores: int | None, extra: list[str]) -> list[str]:
    """``base`` with the local cores (all by default; none with a ``--profile`` unless asked) and ``extra``."""
    cmd = list(base)
    if cores or not any(a.startswith("--profile") for a in extra):
        cmd += ["--cores", str(cores or os.cpu_count() or 2)]
    return cmd + extra


@dataclass(frozen=True)
class RunOutputs:
    """What a finished run left for its closing lines."""

    archive: Path
    check: str | None  # results/checked.txt, stripped
    numbers: Path | None  # numbers.json of the archive, else of the report stage; None when neither exists
    report_pdf: Path | None


def run_outputs(results: Path) -> RunOutputs:
    archive = results / "archive"
    check = results / "checked.txt"
    numbers = archive / "numbers.json"
    if not numbers.exists():
        numbers = results / "report-stage" / "numbers.json"
    pdf = archive / "report.pdf"
    return RunOutputs(
        archive=archive,
        check=check.read_text().strip() if check.exists() else None,
        numbers=numbers if numbers.exists() else None,
        report_pdf=pdf if pdf.exists() else None,
    )


def rerun_report_args(configfile: str) -> str:
    """The arguments of ``./run main`` that render the report again (with report.pdf once TeX is
    installed), seal the archive again and check it, without rerunning any campaign
    (tests/workflow/test_workflow_run.py follows this advice)."""
    conf = "" if configfile == "config/config.yaml" else f"--configfile {shlex.quote(configfile)} "
    return conf + "--forcerun report"


def headline_text(numbers_json: Path, seal: Path | None = None) -> str:
    """The headline block: the report's summary table (numbers.json ``headline``) as text, with the
    archive's own seal digest (the report cannot hold it: that seal covers the report)."""
    doc = json.loads(numbers_json.read_text(encoding="utf-8"))
    text = {n["id"]: n["text"] for n in doc.get("numbers", [])}
    rows = []
    for h in doc.get("headline") or []:
        value = "".join(text.get(p["num"], "?") if isinstance(p, dict) else str(p) for p in h["parts"])
        rows.append((h["finding"], h["scope"], value))
    if seal is not None and seal.is_file():
        rows.append(("archive seal (sha256 of SEAL.dsse.json)", str(seal.parent), sha256_file(seal)))
    w1 = max((len(r[0]) for r in rows), default=0)
    w2 = max((len(r[1]) for r in rows), default=0)
    lines = ["headline (report.html opens with the same table; report/check.py recomputes every number)"]
    lines += [f"  {f:<{w1}}  {s:<{w2}}  {v}" for f, s, v in rows]
    return "\n".join(lines)


def dry_run(extra: list[str]) -> bool:
    return any(a in ("-n", "--dry-run", "--dryrun") for a in extra)


def config_override(extra: list[str], key: str, default: str) -> str:
    """The value snakemake's ``--config KEY=VALUE ...`` (or ``-C``) gives ``key``, else ``default``."""
    value, in_config = default, False
    for a in extra:
        if a in ("--config", "-C"):
            in_config = True
            continue
        if a.startswith("--config="):
            in_config, a = True, a[len("--config=") :]
        elif a.startswith("-"):
            in_config = False
        if in_config and a.partition("=")[0] == key:
            value = a.partition("=")[2]
    return value
