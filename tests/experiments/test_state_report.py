"""The state studies and the backend admission as stages: real runs, their claims, the report
sections in the shapes of Tables S10-S13, the projection replay and the admission table, and the
independent checker recomputing their classes and counts (and catching a changed outcome class,
a changed projection count and a changed projection row digest).

Small real runs on the embedded family: HumanEval/2 (where physical micro-batch 1 leaves A's
endpoint at index 32) with cap 34, the crosses of A and U1 with the L0 and KV panels' selectors
in two processes, the projection replay of A and U1 on layers 0 and 1, and the admission of the
target's shape at n_kv = 64, q = 1..2.
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


def _claim(res: Path, name: str, *cmd: str) -> dict:
    d = res / "campaigns" / name
    _cli("claim", name, "--dir", str(d), "--done", str(d) + ".done", "--results", str(res), "--", *cmd, "--out", str(d))
    return json.loads((res / "campaigns" / f"{name}.done").read_text())


@pytest.fixture(scope="module")
def archive(tmp_path_factory, native_build, family_files, replay_tool) -> Path:
    tmp = tmp_path_factory.mktemp("state")
    res = tmp / "res"
    screen = res / "campaigns" / "partition_screen"
    _cli(
        *("state", "screen", "--tasks", "2", "--splits=-1", "--ub-sweep", "1", "--pair", "A,U1"),
        *("--inputs", "1", "--controls", "0", "--no-progress", "--out", str(screen)),
    )
    claims = [
        _claim(
            res,
            "partition",
            *("state", "partition", "--tasks", str(screen / "exposed-panel.jsonl"), "--cap", "34"),
            *("--splits=-1", "--ub-sweep", "1"),
        ),
        _claim(
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
        _claim(
            res,
            "projection",
            "state",
            "projection",
            "--partition",
            str(res / "campaigns" / "partition"),
            "--pair",
            "A,U1",
            "--layers",
            "0,1",
        ),
        _claim(
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
    assert [c["status"] for c in claims] == ["supported"] * 4, claims
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
        *[
            x
            for n in ("partition_screen", "partition", "crosses", "projection", "admission")
            for x in ("--campaign", str(res / "campaigns" / n))
        ],
    )
    _cli("report", str(stage), "--no-pdf")
    return stage


def _csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _write_csv(p: Path, rows: list[dict]) -> None:
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


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
    assert set(claims) == {"partition", "crosses", "projection", "admission"}
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
        "Graph nodes and dispatches per caller",
        "Claims of the controlled stages",
        "Replayed calls per input, arm and node",
        "Projection replay: calls by outcome",
    ):
        assert title in html, title
    nums = {n["id"]: n for n in json.loads((archive / "numbers.json").read_text())["numbers"]}
    assert nums["partition|HumanEval/2|U1|first_diff_vs_A"]["value"] == 32
    assert nums["crosses|shams"]["value"] == 4 and nums["crosses|shams_ok"]["value"] == 4
    assert nums["claim|crosses|campaigns/crosses|controls_failed"]["value"] == 0


def test_graph_size_counts_each_layouts_nodes(archive):
    """The admission stage decodes the target once per layout and q: PQ grows by a QK product, a softmax,
    an AV product and a concat per layer and added query; QB does not grow; QH is QB plus one Q copy per layer."""
    rows = {(r["layout"], int(r["q"])): r for r in _csv(archive / "tables" / "graph_size.csv")}
    assert set(rows) == {(lay, q) for lay in ("mq", "pq", "qb", "gs", "qh") for q in (1, 2)}
    assert all(r["status"] == "ok" and r["device"] == "CPU" for r in rows.values())
    d = {k: int(r["dispatches"]) for k, r in rows.items()}
    n_layer = 30
    assert d[("pq", 2)] - d[("pq", 1)] == 4 * n_layer
    assert d[("qb", 2)] == d[("qb", 1)] and d[("qh", 2)] - d[("qb", 2)] == n_layer
    assert int(rows[("gs", 2)]["micrographs"]) == 2 and int(rows[("qh", 2)]["micrographs"]) == 1
    nums = {n["id"]: n for n in json.loads((archive / "numbers.json").read_text())["numbers"]}
    assert nums["graph_size|smollm2-135m|CPU|pq|2|added"]["value"] == d[("pq", 2)] - d[("mq", 2)]


def test_checker_refuses_a_changed_graph_size(archive, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    p = bad / "tables" / "graph_size.csv"
    rows = _csv(p)
    i = next(i for i, r in enumerate(rows) if r["layout"] == "pq" and r["q"] == "2")
    rows[i]["micrographs"] = "2"  # a PQ caller is one graph: the table says two
    _write_csv(p, rows)
    r = subprocess.run(["python3", "-I", "-S", str(CHECK), str(bad), "--unsealed"], capture_output=True, text=True)
    assert r.returncode == 1 and "graph_size" in r.stdout + r.stderr, r.stdout + r.stderr


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
    _write_csv(p, rows)
    r = subprocess.run(["python3", "-I", "-S", str(CHECK), str(bad), "--unsealed"], capture_output=True, text=True)
    assert r.returncode == 1 and "outcome" in r.stdout + r.stderr, r.stdout + r.stderr


def test_checker_catches_a_failed_control_marked_supported(archive, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    p = bad / "tables" / "crosses.csv"
    rows = _csv(p)
    sham = next(r for r in rows if r["selector"] == "EMPTY")
    sham["changed_bytes"], sham["bytes_changed"] = "1", "true"  # a sham that changed a byte failed its control
    _write_csv(p, rows)
    r = subprocess.run(["python3", "-I", "-S", str(CHECK), str(bad), "--unsealed"], capture_output=True, text=True)
    assert r.returncode == 1 and "controls_failed" in r.stdout + r.stderr, r.stdout + r.stderr


def _check(archive: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["python3", "-I", "-S", str(CHECK), str(archive), "--unsealed"], capture_output=True, text=True
    )


def test_report_shows_the_projection_section(archive):
    rows = _csv(archive / "tables" / "projection.csv")
    doc = json.loads((archive / "campaigns" / "projection" / "projection.json").read_text())
    nums = {n["id"]: n for n in json.loads((archive / "numbers.json").read_text())["numbers"]}
    assert nums["projection|total|calls"]["value"] == len(rows) > 0
    for s in ("qualified", "mismatch", "excluded", "error"):
        assert nums[f"projection|total|{s}"]["value"] == doc["counts"][s]
        assert nums[f"projection|total|{s}"]["source"] == "tables/projection.csv"
    (task,) = doc["tasks"]
    for node, k in doc["by_node"].items():
        for arm in ("A", "U1"):
            n = sum(r["node"] == node and r["arm"] == arm for r in rows)
            assert nums[f"projection|{task}|{arm}|{node}|calls"]["value"] == n
        assert sum(nums[f"projection|{task}|{arm}|{node}|excluded"]["value"] for arm in ("A", "U1")) == k["excluded"]
    assert (
        nums[f"projection|{task}|A|attn_norm-0|excluded"]["value"]
        == nums[f"projection|{task}|A|attn_norm-0|calls"]["value"]
    )
    # the row digests locate what the command located on the float outputs themselves
    for node, cmp in doc["arms"][task].items():
        assert nums[f"projection|{task}|{node}|positions"]["value"] == cmp["positions"]
        assert nums[f"projection|{task}|{node}|positions_differing"]["value"] == cmp["positions_differing"]
        first = nums.get(f"projection|{task}|{node}|first_position")
        assert (first and first["value"]) == (cmp["first_position"] if not cmp["equal"] else None)
    assert all(doc["arms"][task][f"{b}-0"]["equal"] for b in ("norm", "Qcur", "Kcur", "Vcur"))
    html = (archive / "report.html").read_text()
    assert 'data-num="projection|total|qualified"' in html and "in-place: ggml-alloc placed" in html
    assert "projections first differ" in html


def test_checker_catches_a_changed_projection_count(archive, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    nid = "projection|total|qualified"
    n = next(x for x in json.loads((bad / "numbers.json").read_text())["numbers"] if x["id"] == nid)
    p = bad / "report.html"
    html = p.read_text()
    old = f'data-num="{nid}" data-src="tables/projection.csv">{n["text"]}</span>'
    assert html.count(old) == 1
    p.write_text(html.replace(old, old.replace(f">{n['text']}<", f">{n['value'] - 1}<")))
    r = _check(bad)
    shown = f'projection.csv">{n["value"] - 1}</span>'
    assert r.returncode == 1 and "MISMATCH report.html: differs from the canonical rendering" in r.stdout, r.stdout
    assert shown in r.stdout, r.stdout


def test_checker_catches_a_changed_projection_row(archive, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    p = bad / "tables" / "projection.csv"
    rows = _csv(p)
    # a U1 call of the first layer's Q projection, equal to A's there: one row digest changed
    i = next(i for i, r in enumerate(rows) if r["arm"] == "U1" and r["node"] == "Qcur-0")
    rows[i]["row_sha256"] = "0" * 64
    j = next(i for i, r in enumerate(rows) if r["status"] == "qualified")
    rows[j]["status"] = "mismatch"
    _write_csv(p, rows)
    r = _check(bad)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    task = rows[i]["task_id"]
    assert f"numbers.json: projection|{task}|Qcur-0|positions_differing" in out, out
    assert f"numbers.json: projection|{task}|Qcur-0|first_position" in out, out  # recomputed, not in the report
    assert "column status" in out and "numbers.json: projection|total|mismatch" in out, out


# --------------------------------------------------------------------------- the partition screen


def test_partition_screen_finds_the_state_difference_and_feeds_the_study(archive):
    """Prefill only: on HumanEval/2, U1 (physical micro-batch 1) and Sn-1 (its last token alone) leave
    A's KV bytes and initial logits, B (one caller: the prompt is shorter than its split) and C do not.
    If the unrepaired partitions stopped differing, every state study would be vacuous: this fails."""
    rows = _csv(archive / "tables" / "partition_screen.csv")
    by = {r["arm"]: r for r in rows}
    assert list(by) == ["A", "B", "C", "Sn-1", "U1"]
    assert by["U1"]["kv_class"] != "0" and by["U1"]["logits_class"] != "0" and by["U1"]["differs"] == "true"
    assert by["Sn-1"]["differs"] == "true"
    assert by["B"]["degenerate"] == "true"
    assert all(by[a]["kv_class"] == by[a]["logits_class"] == "0" for a in ("B", "C"))
    rec = json.loads((archive / "campaigns" / "partition_screen" / "partition-screen.json").read_text())
    assert rec["pair"] == ["A", "U1"] and rec["pair_rule"] == "configured"
    assert rec["exposed"] == rec["study"] == ["HumanEval/2"] and rec["controls"] == [] and not rec["vacuous"]
    assert {r["task_id"] for r in _csv(archive / "tables" / "partition.csv")} == {"HumanEval/2"}
    html = (archive / "report.html").read_text()
    assert "Partition screen: classes per input" in html
    nums = {n["id"]: n for n in json.loads((archive / "numbers.json").read_text())["numbers"]}
    assert nums["pscreen|HumanEval/2|U1|kv_class"]["value"] == int(by["U1"]["kv_class"])


def test_checker_catches_a_partition_screen_class_changed(archive, tmp_path):
    """An arm shown in A's class (the state difference hidden): the class and its flag are recomputed."""
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    p = bad / "tables" / "partition_screen.csv"
    rows = _csv(p)
    u1 = next(r for r in rows if r["arm"] == "U1")
    u1["kv_class"], u1["logits_class"], u1["differs"] = "0", "0", "false"
    _write_csv(p, rows)
    r = _check(bad)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "column kv_class" in out and "column differs" in out, out


def test_checker_catches_a_study_input_picked_by_hand(archive, tmp_path):
    """A record whose study inputs are not the rule's, and a partition study on other inputs."""
    bad = tmp_path / "bad"
    shutil.copytree(archive, bad)
    p = bad / "campaigns" / "partition_screen" / "partition-screen.json"
    rec = json.loads(p.read_text())
    rec["study"], rec["controls"] = [], ["HumanEval/2"]  # the exposed input passed off as a stable control
    p.write_text(json.dumps(rec))
    r = _check(bad)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "partition-screen.json: study" in out and "partition-screen.json: controls" in out
    bad2 = tmp_path / "bad2"
    shutil.copytree(archive, bad2)
    p = bad2 / "tables" / "partition_screen.csv"
    rows = _csv(p)
    for r_ in rows:
        r_["task_id"] = "HumanEval/0"  # the screen says it screened another input than the study ran on
    _write_csv(p, rows)
    out = _check(bad2).stdout
    assert "the partition study runs on the screen's study inputs" in out, out


@pytest.fixture(scope="module")
def short_crosses(tmp_path_factory, native_build, family_files) -> Path:
    """The same input crossed at cap 8: U1's state differs from A's from position 0, but its
    continuation leaves A's only at index 32, so no cross can tell the donor from the recipient."""
    tmp = tmp_path_factory.mktemp("short-crosses")
    res = tmp / "res"
    claims = [
        _claim(res, "partition", "state", "partition", "--tasks", "2", "--cap", "8", "--splits=", "--ub-sweep", "1"),
        _claim(
            res,
            "crosses",
            *("state", "crosses", "--partition", str(res / "campaigns" / "partition"), "--pair", "A,U1"),
            *("--tasks", "2", "--selectors", "L0_KV,K_ALL", "--repeats", "1"),
        ),
    ]
    manifest = tmp / "manifest.json"
    manifest.write_text("{}\n")
    stage = tmp / "stage"
    campaigns = [x for n in ("partition", "crosses") for x in ("--campaign", str(res / "campaigns" / n))]
    _cli("assemble", "--results", str(res), "--manifest", str(manifest), "--out", str(stage), *campaigns)
    _cli("report", str(stage), "--no-pdf")
    return stage, {c["stage"]: c for c in claims}


def test_crosses_whose_pair_never_parts_are_vacuous(short_crosses):
    stage, claims = short_crosses
    # the partition study has an exposed input (U1's KV differs), the crosses have none
    assert claims["partition"]["status"] == "supported"
    assert claims["crosses"]["status"] == "vacuous", claims["crosses"]
    assert claims["crosses"]["claim"] == "vacuous: no exposed input in 1 screened"
    cr = _csv(stage / "tables" / "crosses.csv")
    assert cr and all(r["distinguishable"] == "false" and r["outcome"] == "recipient" for r in cr)
    html = (stage / "report.html").read_text()
    verdict = html[html.index('data-table="state-crosses-verdict"') :]
    assert "vacuous: no exposed input in" in verdict[: verdict.index("</table>")]
    claims_table = html[html.index('data-table="claims"') :]
    claims_table = claims_table[: claims_table.index("</table>")]
    assert claims_table.count("vacuous: no exposed input in") == 1 and "supported" in claims_table
    r = _check(stage)
    assert r.returncode == 0, r.stdout + r.stderr


def test_checker_refuses_vacuous_crosses_marked_supported(short_crosses, tmp_path):
    stage, _claims = short_crosses
    bad = tmp_path / "bad"
    shutil.copytree(stage, bad)
    p = bad / "tables" / "claims.csv"
    rows = _csv(p)
    for r in rows:
        if r["stage"] == "crosses":
            r["status"], r["claim"] = "supported", "the subset interventions give the tabled outcome classes"
    _write_csv(p, rows)
    r = _check(bad)
    assert r.returncode == 1
    assert "the pair's natural endpoints agree on every one of the 1 inputs crossed: the claim is vacuous" in r.stdout
