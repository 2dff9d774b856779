"""Representation audit: fixture grid, integer address oracle, FP64 oracle, injected faults."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from refspec.core import tables
from refspec.core.layouts import REPLAYED_LAYOUTS
from refspec.experiments import audit as A
from refspec.experiments import operands, replay_runner


def test_fixture_grid():
    geos = A.geometries()
    fxs = A.fixtures()
    assert len(geos) == 72 and len(set(g.name for g in geos)) == 72
    assert len(fxs) == 432 and len(set(f.name for f in fxs)) == 432
    assert len(fxs) * len(REPLAYED_LAYOUTS) == 1728
    assert {g.d for g in geos} == {128}
    assert {(g.n_head, g.n_head_kv) for g in geos} == {(8, 8), (8, 1), (32, 8)}
    assert {g.n_kv for g in geos} == {127, 128, 129, 255, 256, 257}
    n_faults = sum(len(A.applicable_faults(f.geometry)) for f in fxs)
    assert n_faults == 144 + 3 * 216
    for kind in A.MASKS:
        for nq in (1, 2, 4):
            m = A.make_mask(kind, nq, 129)
            visible = np.isfinite(m)
            assert visible.any(axis=1).all(), kind  # non-empty rows
            assert set(np.unique(m[visible])) == {0.0}
            if nq > 1:  # each query has its own column
                assert len({visible[j].tobytes() for j in range(nq)}) == nq
    assert (np.isfinite(A.make_mask("single", 2, 127)).sum(axis=1) == 1).all()


def test_fixtures_are_valid_and_deterministic(tmp_path):
    fx = A.Fixture(A.Geometry(2, 129, 32, 8, 128, "offset"), "prefix", "dyadic")
    a, b = A.build_fixture(fx), A.build_fixture(fx)
    operands.write_operands(tmp_path / "a.rsop", a)
    operands.write_operands(tmp_path / "b.rsop", b)
    assert (tmp_path / "a.rsop").read_bytes() == (tmp_path / "b.rsop").read_bytes()
    q = a.logical_q()
    assert np.array_equal(q.astype(np.float16).astype(np.float32), q)  # dyadic: exact in f16
    assert a.q.offset > 0 and a.k.nb[1] == 2 * 128 * 8
    oh = A.build_fixture(A.Fixture(fx.geometry, "causal", "onehot"))
    assert (np.count_nonzero(oh.logical_q(), axis=2) == 1).all()


def test_fp64_oracle_matches_definition():
    fx = A.Fixture(A.Geometry(2, 127, 8, 1, 128, "compact"), "single", "onehot")
    ops = A.build_fixture(fx)
    exp = A.fp64_oracle(ops)
    m = ops.logical_mask()
    # single valid key: probability one there, zero elsewhere; the output is that key's value row
    for j in range(2):
        t = int(np.flatnonzero(np.isfinite(m[j]))[0])
        assert np.all(exp["kq_soft_max"][j, :, t] == 1.0)
        assert np.array_equal(exp["kqv"][j], np.broadcast_to(ops.logical_v()[t, 0].astype(np.float64), (8, 128)))
    assert A.stage_error(np.float32(exp["kqv"]), exp["kqv"])[:2] == (0.0, 0.0)
    got = exp["kq"].astype(np.float32).copy()
    got[0, 0, 0] = np.nan
    assert A.stage_error(got, exp["kq"])[2] is False


def _small_set():
    """One fixture per (head pair, q width, Q layout) at two key extents, all masks/patterns covered."""
    fx = []
    for i, g in enumerate(A.geometries()):
        if g.n_kv in (128, 257):
            fx.append(A.Fixture(g, A.MASKS[i % 3], A.PATTERNS[(i // 3) % 2]))
    return fx


def test_audit_subset(replay_tool, tmp_path):
    fxs = _small_set()
    res = A.run_audit(replay_tool, fixture_list=fxs, faults=True)
    s = res.summary
    assert s["fixtures"] == len(fxs) == 24
    assert s["crashes"] == [] and s["address_failures_clean"] == [] and s["strict_failures_clean"] == []
    assert s["pq_eq_qb_bitwise"] == {"equal": 24, "of": 24}
    assert s["pq_eq_qh_bitwise"] == {"equal": 24, "of": 24}  # every geometry's GQA ratio and q, through the oracle
    assert {r["layout"] for r in res.rows if r["fault"] is None} == {"mq", "pq", "qb", "qh"}
    assert s["q1_mq_pq_qb_bitwise"]["equal"] == s["q1_mq_pq_qb_bitwise"]["of"] == 12
    for name, v in s["faults"].items():
        assert v["injected"] > 0 and v["detected_address"] == v["injected"], name
    assert s["all_faults_detected"] and s["faults_not_injected"] == [] and A.audit_ok(s)
    # every clean row passes; every fault row is detected at the address stage
    for r in res.rows:
        if r["fault"] is None:
            assert r["oracle_ok"] and r["detected"] is None, r
        elif r["stage"] == "address":
            assert r["detected"] and not r["oracle_ok"], r
    assert s["max_error_clean"]["kq"]["max_abs_err"] == 0.0  # dyadic and one-hot inputs: exact QK
    paths = A.write_results(res, tmp_path)
    back = tables.read_records("audit", tmp_path)
    assert len(back) == len(res.rows) and paths["summary"].exists()


def test_address_oracle_detects_tampered_graphs(replay_tool, tmp_path):
    """The oracle reads only descriptors: editing one stride, offset or parameter in a clean report
    is caught, and the untouched report passes."""
    fx = A.Fixture(A.Geometry(2, 129, 32, 8, 128, "offset"), "causal", "dyadic")
    ops = A.build_fixture(fx)
    p = tmp_path / "f.rsop"
    operands.write_operands(p, ops)
    rep = replay_runner.run_replay(replay_tool, [replay_runner.ReplayRun(p, write_stages=False)])
    evs = {ev["layout"]: ev for ev in rep["jobs"][0]["evaluations"]}
    for lay, ev in evs.items():
        assert A.address_oracle(ops, ev) == [], lay

    def tamper(layout, name, field, fn):
        ev = copy.deepcopy(evs[layout])
        n = next(n for n in ev["nodes"] if n["name"] == name)
        n[field] = fn(n[field])
        return A.address_oracle(ops, ev)

    assert any("K (GQA group)" in x for x in tamper("mq", "k", "nb", lambda nb: [nb[0], nb[1], 0, nb[3]]))
    assert any("Q:" in x for x in tamper("qb", "q_qb", "view_offs", lambda o: o + 4))
    assert any("mask column" in x for x in tamper("pq", "mask_pq-1", "view_offs", lambda o: 0))
    assert any("V:" in x for x in tamper("mq", "v", "nb", lambda nb: [nb[0], nb[1], nb[2] + 2, nb[3]]))
    assert any(
        "parameters" in x
        for x in tamper("qb", "kq_soft_max", "op_params", lambda p_: {**p_, "scale_f32_bits": "3f800000"})
    )
    assert any("restored output" in x for x in tamper("qb", "kqv_out", "ne", lambda ne: [ne[1], ne[0], 1, 1]))


@pytest.mark.parametrize("fault", replay_runner.FAULTS)
def test_each_fault_detected(replay_tool, fault):
    g = A.Geometry(2, 128, 32, 8, 128, "compact")
    assert fault in A.applicable_faults(g)
    res = A.run_audit(replay_tool, fixture_list=[A.Fixture(g, "causal", "dyadic")], faults=True)
    st = res.summary["faults"][fault]
    assert st == {"injected": 1, "detected_address": 1, "detected_numeric": 1}
    rows = [r for r in res.rows if r["fault"] == fault and r["stage"] == "address"]
    assert len(rows) == 1 and rows[0]["detected"] and rows[0]["fixture"].endswith(f"+{fault}")


def test_cli_audit(replay_tool, tmp_path, monkeypatch, capsys):
    from refspec import cli

    rc = cli.main(["audit", "--tool", str(replay_tool), "--limit", "6", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "6 fixtures" in out and (tmp_path / "audit.csv").exists() and (tmp_path / "audit.parquet").exists()


@pytest.mark.slow
def test_full_audit(replay_tool):
    res = A.run_audit(replay_tool)
    s = res.summary
    assert (s["fixtures"], s["geometries"], s["clean_evaluations"]) == (432, 72, 1728)
    assert A.audit_ok(s), (s["crashes"][:3], s["address_failures_clean"][:3], s["strict_failures_clean"][:3])
    assert s["pq_eq_qb_bitwise"] == {"equal": 432, "of": 432}
    assert s["pq_eq_qh_bitwise"] == {"equal": 432, "of": 432}
    assert s["faults_not_injected"] == [] and s["all_faults_detected"]
    assert {f: v["injected"] for f, v in s["faults"].items()} == {
        "gqa_interleaved": 144,
        "mask_shared": 216,
        "output_swapped": 216,
        "stride_off_by_one": 216,
    }
