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
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..core.hashing import sha256_file
from ..core.paths import REPO_ROOT
from .seal_chain import Folders

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


#: the most pytest processes ``./run test`` runs side by side (the tests decode on one thread;
#: more processes than cores only queue, and each holds a loaded model)
MAX_TEST_PROCESSES = 4


def suite_processes() -> int:
    """The processes of a parallel test run: this machine's cores, at most :data:`MAX_TEST_PROCESSES`."""
    return max(1, min(MAX_TEST_PROCESSES, len(os.sched_getaffinity(0))))


def pytest_command(extra: list[str]) -> list[str]:
    """The pytest command of ``./run test`` with its other arguments ``extra`` (the opt-in tests are
    skipped by tests/conftest.py, as under a plain ``pytest``): the modules spread over
    :func:`suite_processes` processes (pytest-xdist, each module's tests in one process, the
    modules handed out in the order tests/conftest.py gives them, the longest first; ``-n 0`` in
    ``extra`` runs them in this one); tests/conftest.py lists the ten slowest tests and the time per
    test group at the end."""
    parallel = (
        []
        if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in extra)
        else [
            "-n",
            str(suite_processes()),
        ]
    )
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *parallel,
        "--dist",
        "loadfile",
        "--no-loadscope-reorder",  # the suite's order (the longest modules first), not by test count
        *extra,
    ]


def _snakemake_running_with(configfile: str) -> bool:
    """Whether a live Snakemake process works in the repository on ``configfile`` (the lock a run
    on that configuration holds is then not stale; runs on other configurations are left alone)."""
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if any(a.endswith("snakemake") for a in argv[:3]) and cwd == REPO_ROOT and configfile in argv:
            return True
    return False


LOCKS = REPO_ROOT / ".snakemake" / "locks"


def locks_on(results: Path, locks: Path = LOCKS) -> list[Path]:
    """Snakemake's lock files (``N.input.lock`` and ``N.output.lock`` in ``locks``) of every run
    whose output lock names a file under ``results`` (paths relative to the repository or absolute).
    Snakemake removes the whole lock folder when any run in the repository ends, so a killed run's
    locks last until the next run here ends."""
    if not locks.is_dir():
        return []
    root = results.resolve()
    found: list[Path] = []
    for out in sorted(locks.glob("*.output.lock")):
        try:
            named = [REPO_ROOT / line for line in out.read_text(encoding="utf-8").splitlines() if line]
        except OSError:
            continue
        if any(p.resolve().is_relative_to(root) for p in named):
            n = out.name.split(".", 1)[0]
            found += [f for f in (out, locks / f"{n}.input.lock") if f.exists()]
    return found


def release_stale_lock(base: list[str], results: Path, locks: Path = LOCKS) -> None:
    """A killed run leaves Snakemake's directory lock behind; release the locks on ``results`` when
    no run on the same configuration is alive. Only those lock files go: a live run on another
    study in the same repository keeps its own (``snakemake --unlock`` would remove every lock)."""
    stale = locks_on(results, locks)
    if not stale or _snakemake_running_with(base[base.index("--configfile") + 1]):
        return
    print("refspec main: releasing the lock an interrupted run left behind", file=sys.stderr)  # contract: progress
    for f in stale:
        f.unlink(missing_ok=True)


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
    numbers: Path | None  # numbers.json of the archive, else of the rendered folder; None when neither exists
    report_pdf: Path | None


def run_outputs(results: Path) -> RunOutputs:
    chain = Folders(results)
    archive = chain.archive
    check = results / "checked.txt"
    numbers = archive / "numbers.json"
    if not numbers.exists():
        numbers = chain.rendered / "numbers.json"
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


CONSOLE_WIDTH = 100  # no summary line is wider, whatever the terminal


def headline_text(numbers_json: Path, seal: Path | None = None, width: int | None = None) -> str:
    """The console's summary of a report: its findings (numbers.json ``findings``: report.html's
    first table, one speed per campaign and family), one a line, verdict first, wrapped to ``width`` (by default the
    terminal's, at most :data:`CONSOLE_WIDTH`) with continuation lines indented past the verdict, then the archive's own seal
    digest (the report cannot hold it: that seal covers the report). The headline table stays in
    report.html, whose first screen it is: at 130 to 370 characters a row it fits no terminal."""
    doc = json.loads(numbers_json.read_text(encoding="utf-8"))
    text = {n["id"]: n["text"] for n in doc.get("numbers", [])}

    def words(parts: list) -> str:
        return "".join(text.get(p["num"], "?") if isinstance(p, dict) else str(p) for p in parts)

    cols = min(CONSOLE_WIDTH, max(40, width or shutil.get_terminal_size((CONSOLE_WIDTH, 24)).columns))
    lines = findings_lines(doc.get("findings") or [], words, cols)
    if seal is not None and seal.is_file():
        lines += textwrap.wrap(
            f"archive seal (sha256 of {seal.name}): {sha256_file(seal)}",
            width=cols,
            subsequent_indent="  ",
            break_long_words=False,
        )
    return "\n".join(lines)


def findings_lines(found: list[dict], words, width: int) -> list[str]:
    """The findings as text: a title, then each finding as ``VERDICT  scope: words``, wrapped to
    ``width`` columns (at least forty), its continuation lines indented past the verdict."""
    if not found:
        return []
    w = max(len(f["verdict"]) for f in found)
    out = ["findings (report.html opens with the same; report/check.py recomputes each)"]
    for f in found:
        out += _wrapped(f"{f['verdict']:<{w}}  {f['scope']}: {words(f['parts'])}", width, w)
    return out


def _wrapped(line: str, width: int, verdict_width: int) -> list[str]:
    return textwrap.wrap(
        line,
        width=max(40, width),
        initial_indent="  ",
        subsequent_indent=" " * (verdict_width + 4),
        break_long_words=False,
        break_on_hyphens=False,
    )


def dry_run(extra: list[str]) -> bool:
    return any(a in ("-n", "--dry-run", "--dryrun") for a in extra)


def with_config(extra: list[str], values: dict[str, object]) -> list[str]:
    """``extra`` with ``KEY=VALUE`` of ``values`` (those not None) given to snakemake's ``--config``:
    after the first ``--config`` already there (snakemake keeps only the last ``--config`` list), else
    as a ``--config`` of their own."""
    pairs = [f"{k}={v}" for k, v in values.items() if v is not None]
    if not pairs:
        return list(extra)
    for i, a in enumerate(extra):
        if a in ("--config", "-C"):
            return [*extra[: i + 1], *pairs, *extra[i + 1 :]]
        if a.startswith("--config="):
            return [*extra[:i], "--config", a[len("--config=") :], *pairs, *extra[i + 1 :]]
    return [*extra, "--config", *pairs]


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
