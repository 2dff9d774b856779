"""Projection-operator replay on the CPU build with the embedded SmolLM2-135M target
(``refspec state projection``, anc/state.md).

* Every captured RMS_NORM and Q/K/V MUL_MAT of a partition arm's prefill, replayed alone on
  fixed operands (the weight read from the GGUF with its own Q8_0 type), gives the captured
  output bit for bit; the captured prefills reproduce the partition's KV bytes.
* One flipped bit in an activation operand makes that call a mismatch (and the command fail).
* The norm-weight MUL that ggml-alloc computes in place over the norm's output is excluded with
  the reason: its operand bytes at capture time are its own output.
* A and U1 (micro-batch 1) form different states on this build: the first layer's projections
  agree, the second layer's differ from the KV difference's first position on, and the command
  says where.
"""

from __future__ import annotations

import csv
import json

import pytest

from refspec import cli
from refspec.core import tables as T
from refspec.core.panels import humaneval_tasks
from refspec.experiments import projection as P
from refspec.experiments.state import partition as state_partition
from refspec.native import runtime

TASK = "HumanEval/1"  # A and U1 differ from layer 1 on (position 108) on the CPU build


@pytest.fixture(scope="module")
def partition(lib_path, tmp_path_factory):
    runtime.load(lib_path)
    out = tmp_path_factory.mktemp("partition")
    arms = [state_partition.PartitionArm("A", 512, None), state_partition.PartitionArm("U1", 1, None)]
    state_partition.run_partition(
        family="smollm2-135m", tasks=humaneval_tasks([1]), out=out, cap=2, arms=arms, n_ctx=256, progress=False
    )
    return out


@pytest.fixture(scope="module")
def tool(native_build):
    return native_build.tool("refspec-opreplay")


@pytest.fixture(scope="module")
def proj(partition, tool, tmp_path_factory):
    out = tmp_path_factory.mktemp("projection")
    doc = P.run_projection(partition_dir=partition, out=out, pair=("A", "U1"), tool=tool, progress=False)
    return doc, T.read_records("projection", out)


def test_replay_on_fixed_operands_is_bitwise_equal(proj):
    doc, rows = proj
    assert doc["tasks"] == [TASK] and doc["problems"] == []  # captured prefills reproduce the partition's KV
    assert doc["counts"]["qualified"] > 0 and doc["counts"]["mismatch"] == 0 and doc["counts"]["error"] == 0
    replayed = [r for r in rows if r["op"] in ("RMS_NORM", "MUL_MAT")]
    assert replayed and all(r["status"] == "qualified" for r in replayed)
    assert all(r["replayed_sha256"] == r["captured_sha256"] and r["elements_differing"] == 0 for r in replayed)
    # U1 runs one micrograph per token: one call per node and prompt position
    u1 = [r for r in rows if r["arm"] == "U1" and r["node"] == "Qcur-0"]
    assert [(r["p0"], r["p1"]) for r in u1] == [(p, p + 1) for p in range(len(u1))]
    # one digest per token row of the output: A's single call holds U1's per-token rows in order
    a_q = next(r for r in rows if r["arm"] == "A" and r["node"] == "Qcur-0")
    assert len(a_q["row_sha256"].split()) == a_q["p1"] - a_q["p0"] == len(u1) == a_q["out_ne"][1]
    assert all(len(r["row_sha256"].split()) == 1 for r in u1)
    assert [r["row_sha256"] for r in u1] == a_q["row_sha256"].split()  # layer 0 is equal in both arms
    q = next(r for r in rows if r["node"] == "Qcur-0")
    assert (q["src0_name"], q["src0_type"], q["src1_type"]) == ("blk.0.attn_q.weight", "q8_0", "f32")
    # the weight the model computed with is the GGUF's (the replay reads it from there)
    w = doc["weights"]["blk.0.attn_q.weight"]
    assert w["live_equals_gguf"] and q["weight_sha256"] == w["gguf_sha256"]
    assert P.exit_code(doc) == 0


def test_a_perturbed_operand_is_a_mismatch(partition, tool, proj, tmp_path):
    _doc, rows = proj
    i = next(r["call"] for r in rows if r["arm"] == "A" and r["node"] == "Kcur-0")
    doc = P.run_projection(
        partition_dir=partition, out=tmp_path, pair=("A", "U1"), tool=tool, progress=False, perturb=(TASK, "A", i)
    )
    got = {(r["arm"], r["call"]): r for r in T.read_records("projection", tmp_path)}
    bad = got[("A", i)]
    assert bad["status"] == "mismatch" and bad["elements_differing"] > 0 and bad["first_differing"] == 0
    assert bad["replayed_sha256"] != bad["captured_sha256"]
    assert doc["counts"]["mismatch"] == 1 and P.exit_code(doc) == 1


def test_in_place_alias_is_excluded(proj, lib_path, family_files):
    _doc, rows = proj
    mul = [r for r in rows if r["node"] == "attn_norm-0"]
    assert mul and all(r["status"] == "excluded" and r["replayed_sha256"] is None for r in mul)
    assert all(r["reason"].startswith("in-place: ") and "norm-0" in r["reason"] for r in mul)
    # what the capture would have replayed: the MUL's operand already holds the MUL's output
    model = runtime.Model(family_files.target.path, sha256=family_files.target.sha256)
    try:
        cap = P.ProjectionCapture()
        ctx = runtime.Context(model, runtime.ContextSpec(n_ctx=64, n_batch=512, n_ubatch=512, threads=1), capture=cap)
        with ctx:
            state_partition.prefill(ctx, list(range(100, 116)), [16])
    finally:
        model.close()
    norm, mul_call = (next(c for c in cap.calls if c.node == n) for n in ("norm-0", "attn_norm-0"))
    assert mul_call.excluded and P._overlap(mul_call.srcs[0].span, mul_call.span)
    assert mul_call.srcs[0].view.raw[: len(mul_call.out)] == mul_call.out != norm.out
    assert norm.excluded is None and not P._overlap(norm.srcs[0].span, norm.span)


def test_pair_divergence_is_located(partition, tmp_path, capsys):
    kv_first = {
        (int(r["layer"]), r["part"]): r["first_position"]
        for r in T.read_records("kv_diff", partition)
        if r["arm_b"] == "U1"
    }
    assert kv_first[(0, "K")] is None and kv_first[(1, "K")] is not None  # the states differ from layer 1
    rc = cli.main(
        [
            "state",
            "projection",
            "--partition",
            str(partition),
            "--pair",
            "A,U1",
            "--layers",
            "0,1",
            "--out",
            str(tmp_path),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0
    arms = json.loads((tmp_path / "projection.json").read_text())["arms"][TASK]
    assert all(arms[f"{b}-0"]["equal"] for b in P.PROJECTIONS)
    for b in ("Qcur", "Kcur", "Vcur"):
        r = arms[f"{b}-1"]
        assert not r["equal"] and r["first_position"] == kv_first[(1, "K")] and r["positions_differing"] >= 1
    assert f"Qcur-1 first differs at position {kv_first[(1, 'K')]} feature" in text
    with open(tmp_path / "projection.csv", newline="") as f:
        statuses = {r["status"] for r in csv.DictReader(f)}
    assert statuses == {"qualified", "excluded"}
