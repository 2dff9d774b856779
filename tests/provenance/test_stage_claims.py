"""A failed control keeps its complete record: the claim is sealed and reported as withheld.

The representation audit's fault-injection control is made to fail for real: the replay
tool is wrapped so that the injected faults are not injected (the wrapper runs the real
tool with every job's fault set to ``none`` and puts the fault names back in its report).
The audit then finds injected faults "not detected" and exits 1 with its complete table.
Under Snakemake the run goes on: the record is assembled, sealed, reported and checked,
with the audit's claim withheld; nothing is deleted.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from refspec.core.paths import REPO_ROOT
from refspec.provenance.claims import CLAIM_STAGES

WRAPPER = """#!{python}
import json, os, subprocess, sys
real, args = {real!r}, sys.argv[1:]
if "--jobs" not in args:
    os.execv(real, [real, *args])
jp, rp = args[args.index("--jobs") + 1], args[args.index("--report") + 1]
jobs = json.load(open(jp))
faults = [j.get("fault", "none") for j in jobs]
for j in jobs:
    j["fault"] = "none"  # the sabotage: nothing is injected
json.dump(jobs, open(jp, "w"))
rc = subprocess.call([real, *args])
rep = json.load(open(rp))
for job, f in zip(rep["jobs"], faults):
    job["fault"] = f
    for ev in job.get("evaluations", []):
        ev["fault"] = f
json.dump(rep, open(rp, "w"))
sys.exit(rc)
"""


@pytest.fixture()
def sabotaged_tool(replay_tool, tmp_path) -> Path:
    p = tmp_path / "sabotaged-replay"
    p.write_text(WRAPPER.format(python=sys.executable, real=str(replay_tool)))
    p.chmod(0o755)
    return p


def _env(tmp: Path, tool: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["REFSPEC_KEY_DIR"] = str(tmp / "keys")
    if tool is not None:
        env["REFSPEC_REPLAY_TOOL"] = str(tool)
    return env


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "refspec.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_failed_control_records_a_withheld_claim(sabotaged_tool, tmp_path):
    d, done = tmp_path / "res" / "campaigns" / "audit", tmp_path / "res" / "campaigns" / "audit.done"
    r = _cli(
        "claim",
        "audit",
        "--dir",
        str(d),
        "--done",
        str(done),
        "--results",
        str(tmp_path / "res"),
        "--",
        "audit",
        "--limit",
        "30",
        "--out",
        str(d),
        "--tool",
        str(sabotaged_tool),
        env=_env(tmp_path),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "claim WITHHELD" in r.stderr
    claim = json.loads(done.read_text())
    assert claim["status"] == "withheld" and claim["exit_code"] == 1 and claim["controls_failed"] > 0
    assert "not detected" in claim["reason"]
    # the complete record stays: the audit table with its undetected faults, the claims table, the ledger line
    rows = _csv(d / "audit.csv")
    assert any(x["fault"] and x["detected"] == "false" for x in rows)
    assert _csv(d / "claims.csv")[0]["status"] == "withheld"
    ledger = [json.loads(x) for x in (tmp_path / "res" / "ledger.jsonl").read_text().splitlines()]
    assert ledger[-1]["kind"] == "stage_claim" and ledger[-1]["status"] == "withheld"


def test_a_stage_that_errors_records_no_claim(tmp_path):
    d, done = tmp_path / "a", tmp_path / "a.done"
    r = _cli(
        "claim",
        "audit",
        "--dir",
        str(d),
        "--done",
        str(done),
        "--",
        "audit",
        "--out",
        str(d),
        "--tool",
        str(tmp_path / "no-such-tool"),
        env=_env(tmp_path),
    )
    assert r.returncode == 2, r.stderr  # a usage error is not a failed control: the stage fails
    assert not done.exists() and not (d / "claims.csv").exists()


def test_workflow_seals_and_reports_the_withheld_claim(sabotaged_tool, tmp_path):
    cfg = {
        "family": "smollm2-135m",
        "threads": 1,
        "results": str(tmp_path / "res"),
        "panel": {"source": "humaneval", "tasks": "0"},
        "campaigns": {"run": [], "preset": "default"},
        "stages": {
            "audit": True,
            "replay": False,
            "partition": False,
            "crosses": False,
            "admission": False,
            "screen": False,
        },
    }
    cp = tmp_path / "config.yaml"
    cp.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(REPO_ROOT / "Snakefile"),
            "--configfile",
            str(cp),
            "--cores",
            "2",
        ],
        cwd=REPO_ROOT,
        env=_env(tmp_path, sabotaged_tool),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = tmp_path / "res"
    assert (res / "campaigns" / "audit" / "audit.csv").is_file()  # nothing deleted
    archive = res / "archive"
    claims = _csv(archive / "tables" / "claims.csv")
    assert [(c["stage"], c["status"]) for c in claims] == [("audit", "withheld")]
    audit = _csv(archive / "tables" / "audit.csv")
    assert any(x["fault"] and x["detected"] == "false" for x in audit)
    assert (archive / "campaigns" / "audit" / "claim.json").is_file()
    html = (archive / "report.html").read_text()
    assert "WITHHELD" in html and "not detected" in html
    # sealed, and the independent checker agrees with the withheld status it recomputes
    c = subprocess.run(
        [
            "python3",
            "-I",
            "-S",
            str(REPO_ROOT / "report" / "check.py"),
            str(archive),
            "--pubkey",
            str(res / "provenance" / "signer.pub"),
        ],
        capture_output=True,
        text=True,
    )
    assert c.returncode == 0, c.stdout + c.stderr


def _replay_rows(ok_second: bool) -> list[dict]:
    rows = []
    for layer, ok in ((0, True), (15, ok_second)):
        for stage in ("kq", "kq_soft_max", "kqv"):
            rows.append(
                {
                    "family": "smollm2-135m",
                    "layer": layer,
                    "phase": "prefill",
                    "q": 2,
                    "stage": stage,
                    "pq_eq_qb": True,
                    "pq_eq_qh": True,
                    "mq_eq_pq": False,
                    "max_abs_mq": 1e-6,
                    "max_ulp_mq": 3,
                    "first_diff": 0,
                    "visible_keys": 40,
                    "device_refused": None,
                    "control_ok": ok,
                    "reason": None if ok else "repeatability: own-path mq differs between two replays",
                }
            )
    return rows


@pytest.mark.parametrize(
    "ok_second,exit_code,status,failed",
    [(True, 0, "supported", 0), (False, 1, "withheld", 1), (True, 1, "withheld", 0)],
)
def test_replay_claim_from_its_table(tmp_path, ok_second, exit_code, status, failed):
    """E1's claim: contexts with a failed control are counted and named; a non-zero exit withholds."""
    from refspec.core import tables
    from refspec.provenance import claims

    d = tmp_path / "campaigns" / "replay"
    tables.write_table(_replay_rows(ok_second), "replay", d)
    row = claims.record_claim("replay", d, exit_code, tmp_path)
    assert (row["status"], row["controls"], row["controls_failed"]) == (status, 2, failed)
    assert row["record"] == "campaigns/replay"
    if failed:
        assert "layer 15 prefill q=2" in row["reason"] and "repeatability" in row["reason"]
    elif status == "withheld":
        assert "exited 1" in row["reason"]
    assert tables.read_records("claims", d) == [row]


def _rule_blocks() -> dict[str, str]:
    """Every rule of workflow/rules/*.smk by name: its text up to the next rule."""
    import re

    text = "\n".join(p.read_text() for p in sorted((REPO_ROOT / "workflow" / "rules").glob("*.smk")))
    return dict(re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", text, re.S | re.M))


@pytest.mark.parametrize("claim_stage", CLAIM_STAGES)
def test_controlled_stage_rules_declare_markers_not_folders(claim_stage):
    """Snakemake deletes a failed rule's outputs: every controlled stage (``CLAIM_STAGES``) is run
    by one rule through ``refspec claim`` that declares the marker, never the stage's folder."""
    import re

    from refspec.provenance.claims import CLAIMS, DERIVE

    assert claim_stage in CLAIMS and claim_stage in DERIVE, claim_stage
    rules = {name: block for name, block in _rule_blocks().items() if f"refspec claim {claim_stage} " in block}
    assert len(rules) == 1, (claim_stage, sorted(rules))
    [(rule, block)] = rules.items()
    out = re.search(r"output:\n(.*?)\n    \w+:", block, re.S).group(1)
    assert "directory(" not in out and ".done" in out, (rule, out)
