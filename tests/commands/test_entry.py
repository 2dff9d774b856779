"""The entry script ``./run``: clones side by side, Snakemake's own options through ``./run main``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT

RUN = str(REPO_ROOT / "run")


def _run(args: list[str], cwd: Path = REPO_ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


# ----------------------------------------------------------------- Snakemake's options


def test_main_passes_config_and_dry_run_to_snakemake(tmp_path):
    # --config is snakemake's, not an abbreviation of refspec main's --configfile
    res = tmp_path / "other"
    r = _run([RUN, "main", "--config", f"results={res}", "--dry-run"])
    assert r.returncode == 0, r.stdout[-3000:]
    assert "no such file" not in r.stdout
    assert f"output: {res}/provenance/BUILD.json" in r.stdout, r.stdout[-3000:]
    assert f"{REPO_ROOT}/results/" not in r.stdout  # the configured default is replaced, not added to
    # --dry-run reached snakemake: jobs planned, nothing made, no archive announced
    assert "This was a dry-run" in r.stdout
    assert not res.exists()
    assert not any(line.startswith("archive: ") for line in r.stdout.splitlines())


def test_main_passes_profile_to_snakemake(tmp_path):
    # a copy of the local profile that also sets the results folder: its effect shows the profile was read
    res = tmp_path / "viaprofile"
    profile = tmp_path / "profile"
    profile.mkdir()
    text = (REPO_ROOT / "profiles" / "default" / "config.yaml").read_text()
    (profile / "config.yaml").write_text(f"{text}\nconfig:\n  - results={res}\n")
    r = _run([RUN, "main", "--profile", str(profile), "--dry-run"])
    assert r.returncode == 0, r.stdout[-3000:]
    assert f"output: {res}/provenance/BUILD.json" in r.stdout, r.stdout[-3000:]
    assert "refspec build --backend" in r.stdout  # the profile's printshellcmds
    assert "This was a dry-run" in r.stdout and not res.exists()


# ----------------------------------------------------------------- two clones


PROBE = (
    'python -c "import refspec; print(refspec.__file__)"; command -v refspec; '
    'refspec --help | grep -o "of clone [a-z]*"; echo "$REFSPEC_PYTHON"'
)


def _clone(base: Path, name: str) -> Path:
    dst = base / name
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(dst)], check=True, timeout=120)
    # The entry files as this tree has them (a fresh clone's are the same), and the files the
    # environment is keyed by, so that the clone shares the environment these tests run in.
    for rel in ("run", "workflow/bin/refspec", "envs/requirements.txt", "envs/python-version"):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, dst / rel)
    # a mark only this clone's package carries: the first line of the command's description
    cli = dst / "workflow" / "refspec" / "cli.py"
    src = cli.read_text()
    assert '"""The ``refspec`` command line.' in src
    cli.write_text(
        src.replace('"""The ``refspec`` command line.', f'"""The ``refspec`` command line of clone {name}.', 1)
    )
    return dst


def _check_probe(lines: list[str], clone: Path, name: str) -> None:
    assert len(lines) == 4, lines
    assert lines[0] == str(clone / "workflow" / "refspec" / "__init__.py")  # the package
    assert lines[1] == str(clone / "workflow" / "bin" / "refspec")  # the command the rules call
    assert lines[2] == f"of clone {name}"  # ... runs this clone's package
    assert lines[3] == os.environ["REFSPEC_PYTHON"]  # one shared environment


def test_two_clones_side_by_side(tmp_path):
    if "REFSPEC_PYTHON" not in os.environ:
        pytest.skip("runs under ./run test (the clones share its environment)")
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("needs a git checkout to clone")
    a, b = _clone(tmp_path, "a"), _clone(tmp_path, "b")
    go = tmp_path / "go"
    # clone a starts, probes, waits while clone b runs ./run, then probes again (as a test run
    # starts new processes long after it began)
    wait = f'for i in $(seq 1200); do [ -e "{go}" ] && break; sleep 0.1; done'
    pa = subprocess.Popen(
        ["./run", "shell", "-c", f"{PROBE}; {wait}; {PROBE}"],
        cwd=a,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        first = [pa.stdout.readline().rstrip("\n") for _ in range(4)]
        _check_probe(first, a, "a")
        rb = subprocess.run(
            ["./run", "shell", "-c", PROBE],
            cwd=b,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert rb.returncode == 0, rb.stderr[-2000:]
        _check_probe(rb.stdout.splitlines(), b, "b")
        go.touch()
        rest, err = pa.communicate(timeout=300)
    finally:
        if pa.poll() is None:
            pa.kill()
            pa.wait()
    assert pa.returncode == 0, err[-2000:]
    _check_probe(rest.splitlines(), a, "a")


# ----------------------------------------------------------------- the command table


def test_every_command_is_a_module_of_the_command_layer():
    import importlib

    from refspec.cli import SUBCOMMANDS

    for name, (modname, help_) in SUBCOMMANDS.items():
        assert modname == f"refspec.commands.{name.replace('-', '_')}", name
        mod = importlib.import_module(modname)
        assert callable(mod.add_arguments) and callable(mod.run), name
        assert help_
