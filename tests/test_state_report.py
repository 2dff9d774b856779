"""The state studies and the backend admission as stages: real runs, their claims, the report
sections in the shapes of Tables S10-S13 and the admission table, and the independent checker
recomputing their classes and counts (and catching a changed outcome class).

Small real runs on the embedded family: HumanEval/2 (where physical micro-batch 1 leaves A's
endpoint at index 32) with cap 34, the crosses of A and U1 with the L0 and KV panels' selectors
in two processes, and the admission of the target's shape at n_kv = 64, q = 1..2.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT

CHECK = REPO_ROOT / "report" / "check.py"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    r = subprocess.run(
        [sys.executable, "-m", "refspec.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return r


def _stage(res: Path, name: str, *cmd: str) -> dict:
    d = res / "campaigns" / name
    _cli("stage", name, "--dir", str(d), "--done", str(d) + ".done", "--results", str(res), "--", *cmd, "--out", str(d))
    return json.loads((res / "campaigns" / f"{name}.done").read_text())


@pytest.fixture(scope="module")
def archive(tmp_path_factory, native_build, family_files, replay_tool) -> Path:
    tmp = tmp_path_factory.mktemp("state")
    res = tmp / "res"
    claims = [
        _stage(res, "partition", "state", "partition", "--tasks", "2", "--cap", "34", "--splits=-1", "--ub-sweep", "1"),
        _stage(
            res,
            "crosses",
            "state",
            "crosses",
            "--partition",
            str(res / "campaigns" / "partition"),
            "--pair",
            "A,U1",
            "--tasks",
            "2",
            "--selectors",
            "L0_K,L0_V,L0_KV,K_ALL,V_ALL",
            "--repeats",
            "2",
        ),
        _stage(
            res,
            "admission",
            "admission",
            "--family",
            "smollm2-135m",
            "--backend",
            "CPU",
            "--n-kv",
            "64",
            "--queries",
            "1-2",
        ),
    ]
    assert [c["status"] for c in claims] == ["supported"] * 3, claims
    manifest = tmp / "manifest.json"
    manifest.write_text("{}\n")
    stage = tmp / "stage"
    _cli(
        "assemble",
        "--results",
        str(res),
        "--manifest",
        str(manifest),
        "--out",
        str(stage),
        *[x for n in ("partition", "crosses", "admission") for x in ("--campaign", str(res / "campaigns" / n))],
    )
    _cli("report", str(stage), "--no-pdf")
    return stage


def _csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_tables_and_claims_are_assembled(archive):
    t = archive / "tables"
    part = _csv(t / "partition.csv")
    assert {r["arm"] for r in part} == {"A", "B", "C", "Sn-1", "U1"}
    u1 = next(r for r in part if r["arm"] == "U1")
    assert u1["first_diff_vs_A"] == "32" and u1["kv_class"] != "0"  # the embedded family's state difference
    assert any(r["arm_b"] == "U1" for r in _csv(t / "kv_diff.csv"))
    cr = _csv(t / "crosses.csv")
    shams = [r for r in cr if r["selector"] == "EMPTY"]
    assert len(shams) == 4 and all(r["outcome"] == "recipient" for r in shams)
    assert {r["panel"] for r in _csv(t / "frontier.csv")} == {"L0", "KV"}
    assert {r["verdict"] for r in _csv(t / "admission.csv")} == {"unknown"}  # CPU admits every lifted shape
    claims = {r["stage"]: r for r in _csv(t / "claims.csv")}
    assert set(claims) == {"partition", "crosses", "admission"}
    assert all(r["status"] == "supported" for r in claims.values())
    assert (archive / "campaigns" / "crosses" / "claim.json").is_file()


def test_report_shows_the_state_sections(archive):
    html = (archive / "report.html").read_text()
    for title in (
        "Partition classes per input",
        "First-layer K/V differences from A (Table S10 shape)",
        "Subset matrix (Table S11 shape)",
        "Full-KV differences from A and the natural endpoint (Table S12 shape)",
        "Frontier contrasts (Table S13 shape)",
        "Admission of the lifted shapes",
        "Claims of the controlled stages",
    ):
        assert title in html, title
    nums = {n["id"]: n for n in json.loads((archive / "numbers.json").read_text())["numbers"]}
    assert nums["partition|HumanEval/2|U1|first_diff_vs_A"]["value"] == 32
    assert nums["crosses|shams"]["value"] == 4 and nums["crosses|shams_ok"]["value"] == 4
    assert nums["claim|crosses|campaigns/crosses|controls_failed"]["value"] == 0


def test_checker_recomputes_the_state_sections(archive):
    r = subprocess.run(["python3", "-I", "-S", str(CHECK), str(archive), "--unsealed"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_checker_catches_a_changed_outcome_class(archive, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    p = bad / "tables" / "crosses.csv"
    rows = _csv(p)
    i = next(i for i, r in enumerate(rows) if r["selector"] == "K_ALL")
    rows[i]["outcome"] = "donor" if rows[i]["outcome"] != "donor" else "third"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    r = subprocess.run(["python3", "-I", "-S", str(CHECK), str(bad), "--unsealed"], capture_output=True, text=True)
    assert r.returncode == 1 and "outcome" in r.stdout + r.stderr, r.stdout + r.stderr


def test_checker_catches_a_failed_control_marked_supported(archive, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    p = bad / "tables" / "crosses.csv"
    rows = _csv(p)
    sham = next(r for r in rows if r["selector"] == "EMPTY")
    sham["changed_bytes"], sham["bytes_changed"] = "1", "true"  # a sham that changed a byte failed its control
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    r = subprocess.run(["python3", "-I", "-S", str(CHECK), str(bad), "--unsealed"], capture_output=True, text=True)
    assert r.returncode == 1 and "controls_failed" in r.stdout + r.stderr, r.stdout + r.stderr
