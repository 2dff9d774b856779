"""The two commands a new user types: ``./run main`` and ``./run test``.

``main`` runs the Snakemake workflow on the embedded default (native build,
models, campaigns, seal, report, check) and ends by printing the archive path,
the verification result and the headline figures. ``test`` prepares what the
tests need (the native build, the model files, Debian's chromium for the
browser test when this machine can install it) and runs the suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

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


def _apt_install(packages: list[str]) -> None:
    """Install missing Debian packages when running as root with apt (tests skip otherwise)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        return
    missing = [p for p in packages if not _dpkg_installed(p)]
    if not missing:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"refspec test: installing {' '.join(missing)} from Debian", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, stdout=subprocess.DEVNULL)
    r = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        env=env,
        check=False,
        stdout=subprocess.DEVNULL,
    )
    if r.returncode != 0:
        print(f"refspec test: could not install {missing}; the tests that need them will skip", file=sys.stderr)


def _prepare(config: str | None) -> None:
    from ..core.config import load_config
    from ..native import build as native
    from ..native import vulkan
    from ..native.models import config_families_file, ensure_family

    cfg = load_config(config)
    native.current(cfg)
    ensure_family(cfg["family"], models_dir=cfg.get("models_dir"), families_file=config_families_file(cfg))
    # the Vulkan backend (lavapipe on a machine without a GPU) for the `vulkan` tests, where this
    # machine can have it; elsewhere those tests skip and say why
    why = vulkan.unavailable()
    if why is None:
        native.build(native.BuildOptions(backend="vulkan"))
    else:
        print(f"refspec test: the Vulkan tests will skip: {why}", file=sys.stderr)


def _add_test(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run the code checks (refspec lint), prepare the native build and models, then run pytest "
        "(other arguments go to pytest). Fails when either fails; both always run."
    )


def _run_test(args: argparse.Namespace) -> int:
    from .lint import lint

    lint_rc = lint()
    _apt_install(DEBIAN_TEST_PACKAGES)
    _prepare(None)
    extra = list(args.extra)
    if not any(a == "-m" or a.startswith("-m") for a in extra):
        # opt-in: the two extra full builds of llama-server and the offline bundle's round trip
        # (`./run test -m server_build`, `./run test -m bundle_round_trip`)
        extra = ["-m", "not server_build and not bundle_round_trip", *extra]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]
    r = subprocess.run(cmd, cwd=REPO_ROOT)
    if lint_rc != 0:
        print("refspec test: the code checks failed (see 'refspec lint' above)", file=sys.stderr)
    return r.returncode or lint_rc


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


def _release_stale_lock(base: list[str]) -> None:
    """A killed run leaves Snakemake's directory lock behind; release it when no run is alive."""
    locks = REPO_ROOT / ".snakemake" / "locks"
    if not locks.is_dir() or not any(locks.iterdir()) or _snakemake_running_here():
        return
    print("refspec main: releasing the lock an interrupted run left behind", file=sys.stderr)
    subprocess.run([*base, "--unlock"], cwd=REPO_ROOT, check=False, stdout=subprocess.DEVNULL)


def _add_main(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Run the workflow (other arguments go to snakemake, e.g. --profile profiles/slurm); "
        "print the archive, its verification and the headline figures."
    )
    p.add_argument("--configfile", default="config/config.yaml")
    p.add_argument("--cores", type=int, help="local cores (default: all; not passed with a --profile)")


def _run_main(args: argparse.Namespace) -> int:
    from ..core.config import load_config

    cfg = load_config(args.configfile)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO_ROOT / "Snakefile"),
        "--configfile",
        args.configfile,
        "--show-failed-logs",
    ]
    _release_stale_lock(cmd)
    if args.cores or not any(a.startswith("--profile") for a in args.extra):
        cmd += ["--cores", str(args.cores or os.cpu_count() or 2)]
    cmd += args.extra
    r = subprocess.run(cmd, cwd=REPO_ROOT)
    if r.returncode != 0:
        print("refspec main: the workflow failed (see the log tail above and results/*/logs/)", file=sys.stderr)
        return r.returncode
    if _dry_run(args.extra):
        return 0
    results = REPO_ROOT / _config_override(args.extra, "results", cfg["results"])
    archive = results / "archive"
    print(f"\narchive: {archive}")
    check = results / "checked.txt"
    if check.exists():
        print(check.read_text().strip())
    numbers = archive / "numbers.json"
    if not numbers.exists():
        numbers = results / "report-stage" / "numbers.json"
    if numbers.exists():
        print(f"report: {archive / 'report.html'}")
        if (archive / "report.pdf").exists():
            print(f"report: {archive / 'report.pdf'}")
        else:
            print(
                "report.pdf: not made: pdflatex was not found (Debian: apt-get install --no-install-recommends "
                f"{TEX_PACKAGES}, then run `./run main {rerun_report_args(args.configfile)}`: Snakemake reruns "
                "the report and everything after it, the archive's seal and the check)"
            )
        print()
        print(headline_text(numbers, archive / "SEAL.dsse.json"))
    return 0


def rerun_report_args(configfile: str) -> str:
    """The arguments of ``./run main`` that render the report again (with report.pdf once TeX is
    installed), seal the archive again and check it, without rerunning any campaign
    (tests/test_workflow_run.py follows this advice)."""
    import shlex

    conf = "" if configfile == "config/config.yaml" else f"--configfile {shlex.quote(configfile)} "
    return conf + "--forcerun report"


def headline_text(numbers_json: Path, seal: Path | None = None) -> str:
    """The headline block: the report's summary table (numbers.json ``headline``) as text, with the
    archive's own seal digest (the report cannot hold it: that seal covers the report)."""
    import json

    from ..core.hashing import sha256_file

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


def _dry_run(extra: list[str]) -> bool:
    return any(a in ("-n", "--dry-run", "--dryrun") for a in extra)


def _config_override(extra: list[str], key: str, default: str) -> str:
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


COMMANDS = {"main": (_add_main, _run_main), "test": (_add_test, _run_test)}
PASSTHROUGH = ("main", "test")
