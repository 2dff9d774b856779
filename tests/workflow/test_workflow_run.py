"""A small real workflow, end to end under Snakemake: tiny panel, one campaign, seal,
report, verification and the standard-library checker; then a killed run resumed.

The native build and the model files come from the shared cache (prepared by
``./run test``); the campaign runs real workers on the real SmolLM2 files.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from refspec.core.paths import REPO_ROOT
from refspec.pipeline.main import locks_on
from support.small_study import run_main, sized_to, study_env

_env = study_env


def _tiny(tmp: Path, name: str = "confirmation") -> Path:
    defs = tmp / "defs"
    defs.mkdir(parents=True, exist_ok=True)
    d = yaml.safe_load((REPO_ROOT / "config" / "campaigns" / f"{name}.yaml").read_text())
    d.update(
        {
            "arms": ["R", "M3", "C3"],
            "panel": {"source": "humaneval", "tasks": "0-1"},
            "cap": 12,
            "repeats": 1,
            "sessions": 1,
            "warmup_cap": 2,
        }
    )
    sized_to(d, 20)  # the smallest paired design (2 processes x 1 pass), not the default budget's
    (defs / f"{name}.yaml").write_text(yaml.safe_dump(d))
    cfg = {
        "family": "smollm2-135m",
        "threads": 1,
        "results": str(tmp / "res"),
        "panel": {"source": "humaneval", "tasks": "0-1"},
        "campaigns": {"run": [name], "preset": "default", "definitions": str(defs)},
        "stages": {
            "audit": False,
            "replay": False,
            "partition": False,
            "crosses": False,
            "admission": False,
            "screen": False,
        },
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _smk_cmd(cfg: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO_ROOT / "Snakefile"),
        "--configfile",
        str(cfg),
        "--cores",
        "2",
        "--rerun-incomplete",
        *extra,
    ]


def _run(cfg: Path, tmp: Path, *extra: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        _smk_cmd(cfg, *extra), cwd=REPO_ROOT, env=_env(tmp), capture_output=True, text=True, timeout=timeout
    )


def _check_archive(res: Path, tmp: Path, arm: str = "C3", pdf: bool | None = None) -> float:
    """Verify the archive and check it with check.py; returns check.py's wall time (s)."""
    archive = res / "archive"
    pub = res / "provenance" / "signer.pub"
    v = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "verify", str(archive), "--pubkey", str(pub)],
        cwd=REPO_ROOT,
        env=_env(tmp),
        capture_output=True,
        text=True,
    )
    assert v.returncode == 0 and v.stdout.startswith("OK: "), v.stdout + v.stderr
    t0 = time.perf_counter()
    c = subprocess.run(
        ["python3", "-I", "-S", str(REPO_ROOT / "report" / "check.py"), str(archive), "--pubkey", str(pub)],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t0
    assert c.returncode == 0, c.stdout + c.stderr
    assert (archive / "report.html").is_file() and (archive / "numbers.json").is_file()
    # check.py also read report.tex (the LaTeX subset) and its checked numbers
    assert (archive / "report.tex").is_file()
    # the report stage makes report.pdf wherever pdflatex is (./run test installs it as root)
    if pdf is None:
        pdf = shutil.which("pdflatex") is not None
    assert (archive / "report.pdf").is_file() == pdf
    q = (archive / "tables" / "qualification.csv").read_text()
    assert "confirmation" in q and arm in q
    return elapsed


_main = run_main


def test_small_workflow_end_to_end_and_rerun_is_a_no_op(tmp_path):
    """The run as ``./run main`` makes it, first on a machine without TeX; then the advice it prints
    (install TeX, run ``./run main ...``) is followed as printed and gives report.pdf in a newly
    sealed, checked archive without rerunning the campaign."""
    cfg = _tiny(tmp_path)
    tex = shutil.which("pdflatex") is not None
    r = _main(["--configfile", str(cfg)], tmp_path, without_tex=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = tmp_path / "res"
    _check_archive(res, tmp_path, pdf=False)
    assert "OK:" in (res / "checked.txt").read_text()
    advice = re.search(r"report\.pdf: not made: pdflatex was not found .*run `\./run main ([^`]*)`", r.stdout)
    assert advice, r.stdout[-3000:]
    if tex:
        journal = res / "campaigns" / "confirmation" / "journal.jsonl"
        before = journal.read_bytes()
        again = _main(shlex.split(advice.group(1)), tmp_path)
        assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
        pdf = res / "archive" / "report.pdf"
        assert f"report: {pdf}" in again.stdout and "not made" not in again.stdout, again.stdout[-3000:]
        assert journal.read_bytes() == before  # the campaign did not run again
        elapsed = _check_archive(res, tmp_path, pdf=True)
        print(f"check.py on the workflow's archive (with report.tex and report.pdf): {elapsed:.2f} s")
        assert elapsed < 10  # check.py compiles report.tex again (two pdflatex passes) and compares report.pdf
    # every rule kept a log
    for rule in (
        "native_build",
        "models",
        "manifest",
        "campaign_confirmation",
        "assemble",
        "seal_data",
        "report",
        "seal_archive",
        "check",
    ):
        assert (res / "logs" / f"{rule}.log").is_file(), rule
    # a repeated run executes nothing
    again = _run(cfg, tmp_path, "-n")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-2000:]


def test_killed_run_resumes_without_recomputing(tmp_path):
    cfg = _tiny(tmp_path)
    res = tmp_path / "res"
    journal = res / "campaigns" / "confirmation" / "journal.jsonl"
    proc = subprocess.Popen(
        _smk_cmd(cfg),
        cwd=REPO_ROOT,
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    try:
        # kill the whole run (snakemake, the campaign, its workers) once a request has completed
        while time.monotonic() < deadline:
            if journal.is_file() and any('"status":"ok"' in line for line in journal.read_text().splitlines()):
                break
            if proc.poll() is not None:
                pytest.fail("the run ended before it could be interrupted")
            time.sleep(0.5)
        else:
            pytest.fail("no request completed within 600 s")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = journal.read_bytes()
    completed = [json.loads(line) for line in before.decode().splitlines() if line.strip()]
    time.sleep(1)
    # rerun as a user would: the main command releases the lock the killed run left behind, where
    # it is still there (Snakemake removes the whole lock folder when any run in the repository
    # ends, as another test's run may meanwhile have done)
    stale = locks_on(res)
    r = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "main", "--configfile", str(cfg), "--cores", "2"],
        cwd=REPO_ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert ("releasing the lock an interrupted run left behind" in r.stderr) == bool(stale), (stale, r.stderr[-2000:])
    pdf = res / "archive" / "report.pdf"
    assert (
        f"report: {pdf}" if shutil.which("pdflatex") else "report.pdf: not made: pdflatex was not found"
    ) in r.stdout
    after = journal.read_bytes()
    assert after.startswith(before), "completed journal lines were rewritten"
    _check_archive(res, tmp_path)
    ledger = (res / "campaigns" / "confirmation" / "ledger.jsonl").read_text()
    assert "interrupt" in ledger

    # nothing that had completed ran again
    def key(rec: dict) -> tuple:
        row = rec.get("row") or {}
        return row.get("arm"), row.get("task_id"), row.get("repeat"), row.get("session")

    done_before = {key(c) for c in completed if (c.get("row") or {}).get("status") == "ok"}
    rerun = [json.loads(line) for line in after[len(before) :].decode().splitlines() if line.strip()]
    again = {key(c) for c in rerun if (c.get("row") or {}).get("status") == "ok"}
    assert done_before and not (done_before & again)


def test_two_families_in_one_study(tmp_path):
    """``families``: each campaign per family, one archive, one report with a column per family."""
    fams = yaml.safe_load((REPO_ROOT / "config" / "families.yaml").read_text())
    twin = json.loads(json.dumps(fams["families"]["smollm2-135m"]))
    twin["description"] = "the embedded family again, under a second name (a second family of the study)"
    twin["drafts"] = {"q4_1": twin["drafts"]["q4_1"]}
    fams["families"]["smollm2-135m-twin"] = twin
    ffile = tmp_path / "families.yaml"
    ffile.write_text(yaml.safe_dump(fams))
    cfg_path = _tiny(tmp_path)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg.update({"families": ["smollm2-135m", "smollm2-135m-twin"], "families_file": str(ffile)})
    defs = Path(cfg["campaigns"]["definitions"])
    d = yaml.safe_load((defs / "confirmation.yaml").read_text())
    d["arms"] = ["R", "M3"]
    (defs / "confirmation.yaml").write_text(yaml.safe_dump(d))
    cfg_path.write_text(yaml.safe_dump(cfg))
    dry = _run(cfg_path, tmp_path, "-n")
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    assert "--family smollm2-135m-twin" in dry.stdout + dry.stderr or "smollm2-135m-twin/confirmation" in dry.stdout
    r = _run(cfg_path, tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = tmp_path / "res"
    _check_archive(res, tmp_path, arm="M3")
    archive = res / "archive"
    for fam in cfg["families"]:
        assert (archive / "campaigns" / fam / "confirmation" / "plan.json").is_file(), fam
        plan = json.loads((archive / "campaigns" / fam / "confirmation" / "plan.json").read_text())
        assert plan["family"] == fam
    q = (archive / "tables" / "qualification.csv").read_text().splitlines()
    header = q[0].split(",")
    fam_col = header.index("family")
    assert {line.split(",")[fam_col] for line in q[1:]} == set(cfg["families"])
    html = (archive / "report.html").read_text()
    assert "smollm2-135m-twin" in html
    runlog = [json.loads(line) for line in (res / "ledger.jsonl").read_text().splitlines() if line.strip()]
    pinned = {r["ledger"] for r in runlog if r.get("kind") == "campaign_run"}
    assert pinned == {f"campaigns/{f}/confirmation/ledger.jsonl" for f in cfg["families"]}
