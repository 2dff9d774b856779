"""E1 numerical replay on the SmolLM2 target: captured operands, own-path replay, controls.

One prefill and one continuation context (q = 3, middle layer) are captured from the live
target once per module; the tests replay the frozen operand files with the native tool.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from refspec import cli
from refspec.core.layouts import CAPTURED_LAYOUTS
from refspec.experiments import capture, operands, replay_runner
from refspec.experiments import replay as e1
from refspec.native import build as native
from refspec.native import runtime

LAYER = 15
Q = 3
SETTINGS = e1.Settings(n_continue=3)


@pytest.fixture(scope="module")
def build():
    b = native.current()
    runtime.load(b.lib_dir)
    return b


@pytest.fixture(scope="module")
def tool(build):
    return build.replay_tool


@pytest.fixture(scope="module")
def captured(target, tmp_path_factory):
    prompt = e1.make_prompt(target)
    out = {}
    for phase in ("prefill", "continuation"):
        ctx = e1.E1Context("smollm2-135m", LAYER, phase, Q)
        out[phase] = e1.capture_context(target, ctx, prompt, SETTINGS, tmp_path_factory.mktemp(ctx.id))
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _replay(tool, path, layouts, tmp_path, tag):
    rep = replay_runner.run_replay(
        tool, [replay_runner.ReplayRun(path, layouts, "none", tmp_path / tag)], workdir=tmp_path
    )
    (job,) = rep["jobs"]
    assert job["status"] == "ok", job
    return {ev["layout"]: operands.read_stages(ev["stages"]) for ev in job["evaluations"]}


def test_contexts_and_cli():
    cs = e1.contexts("smollm2-135m", 30)
    assert len(cs) == 24 and len({c.id for c in cs}) == 24
    assert sorted({c.layer for c in cs}) == [0, 15, 29]
    assert cli.SUBCOMMANDS["replay"][0] == "refspec.commands.replay"


@pytest.mark.parametrize("phase", ["prefill", "continuation"])
def test_captured_operands_are_the_graph_views(captured, phase):
    cc = captured[phase]
    assert cc.problems == [] and set(cc.files) == {"mq", "pq", "qb"}
    ops = {lay: operands.read_operands(p) for lay, p in cc.files.items()}
    for lay, o in ops.items():
        assert o.q.ne == (64, Q, 9, 1) and o.k.ne[0] == 64 and o.k.ne[2] == 3 and o.v.ne[1:] == (64, 3, 1)
        assert o.n_kv == 256 and o.scale == 0.125 and o.meta["layout"] == lay
        vis = np.isfinite(o.logical_mask()).sum(axis=1)
        assert list(vis) == [o.meta["pos0"] + j + 1 for j in range(Q)]
        assert set(o.refs) == set(e1.CAPTURED_STAGES)
    # the repaired layouts saw the same operand bytes
    for get in ("logical_q", "logical_k", "logical_v", "logical_mask"):
        a, b = getattr(ops["pq"], get)(), getattr(ops["qb"], get)()
        assert np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)), get
    # capture on/off: same complete endpoint
    for lay in CAPTURED_LAYOUTS:
        assert cc.observations[lay].endpoint == cc.controls_off[lay].endpoint
        assert cc.observations[lay].counters[f"micrographs_{lay}"] == 1


@pytest.mark.parametrize("phase", ["prefill", "continuation"])
def test_own_path_replay_reproduces_native_stages(captured, tool, tmp_path, phase):
    cc = captured[phase]
    for lay in ("mq", "pq", "qb"):
        ops = operands.read_operands(cc.files[lay])
        got = _replay(tool, cc.files[lay], (lay,), tmp_path, f"own-{lay}")[lay]
        for s in e1.CAPTURED_STAGES:
            ref = operands._canonical(ops.refs[s], s)
            assert ref.shape[0] == Q
            assert np.array_equal(_bits(ref), _bits(got[s])), f"{phase} {lay} {s}: replay differs from native"


@pytest.mark.parametrize("phase", ["prefill", "continuation"])
def test_pq_qb_operands_replayed_give_pq_eq_qb(captured, tool, tmp_path, phase):
    cc = captured[phase]
    for src in ("pq", "qb"):
        st = _replay(tool, cc.files[src], ("pq", "qb", "mq", "qh"), tmp_path, f"x-{src}")
        for s in e1.CAPTURED_STAGES:
            assert np.array_equal(_bits(st["pq"][s]), _bits(st["qb"][s])), f"{src} operands: {s} pq != qb"
            assert np.array_equal(_bits(st["pq"][s]), _bits(st["qh"][s])), f"{src} operands: {s} pq != qh"
        # q = 3 rows: MQ's batched kernels differ from the single-row computation at QK
        assert not np.array_equal(_bits(st["mq"]["kq"]), _bits(st["qb"]["kq"]))


def test_evaluate_context_rows_and_table(captured, tool, tmp_path):
    rows, details = [], []
    for phase, cc in captured.items():
        r, d = e1.evaluate_context(cc, tool, SETTINGS, tmp_path / phase)
        assert d["problems"] == [] and d["control_ok"], d["problems"]
        rows += r
        details.append(d)
    assert len(rows) == 6
    for r in rows:
        assert r["control_ok"] and r["reason"] is None and r["pq_eq_qb"] and r["pq_eq_qh"]
        assert r["device_refused"] is None
        assert r["visible_keys"] >= Q
    assert not rows[0]["mq_eq_pq"] and rows[0]["first_diff"] is not None and rows[0]["max_ulp_mq"] > 0
    s = e1.summarize(rows, details, family="smollm2-135m", layers=[LAYER], backend="CPU", seconds=0.0)
    assert s["controls_passed"] == 2 and s["stages"]["kq"]["pq_eq_qb"] == [2, 2]
    assert s["stages"]["kq"]["pq_eq_qh"] == [2, 2]
    assert "PQ = QB bitwise" in e1.format_summary(s) and "PQ = QH bitwise" in e1.format_summary(s)
    assert s["phases"] == [ph for ph in e1.PHASES if ph in captured]
    assert f"x {'/'.join(s['phases'])} x" in e1.format_summary(s)
    paths = e1.write_results(e1.E1Result(rows, details, s), tmp_path / "out")
    assert paths["csv"].read_text().count("\n") == 7
    assert json.loads(paths["summary"].read_text())["contexts"] == 2


def _copy(cc: e1.CapturedContext, dest) -> e1.CapturedContext:
    dest.mkdir(parents=True, exist_ok=True)
    files = {lay: Path(shutil.copy(p, dest / p.name)) for lay, p in cc.files.items()}
    return dataclasses.replace(
        cc,
        files=files,
        observations=dict(cc.observations),
        controls_off=dict(cc.controls_off),
        problems=list(cc.problems),
    )


def test_failed_control_withholds_the_claim(captured, tool, tmp_path):
    # own-path: one native reference element corrupted in the mq capture
    cc = _copy(captured["continuation"], tmp_path / "own")
    ops = operands.read_operands(cc.files["mq"])
    arr = np.array(ops.refs["kq"].array(), dtype=np.float32)
    arr.reshape(-1)[5] = np.nextafter(arr.reshape(-1)[5], np.float32(np.inf))
    ops.refs["kq"] = dataclasses.replace(operands.contiguous_tensor(arr, "f32"), axes=ops.refs["kq"].axes)
    operands.write_operands(cc.files["mq"], ops)
    rows, d = e1.evaluate_context(cc, tool, SETTINGS, tmp_path / "own")
    assert not d["control_ok"] and all(not r["control_ok"] for r in rows)
    assert all("own-path mq kq: native and replay differ (1/" in r["reason"] for r in rows)
    assert rows[0]["pq_eq_qb"]  # the measurement is kept, the claim withheld

    # capture on/off: a different endpoint without the callback
    cc = _copy(captured["prefill"], tmp_path / "onoff")
    off = cc.controls_off["qb"]
    ep = off.endpoint
    cc.controls_off["qb"] = dataclasses.replace(
        off, endpoint=dataclasses.replace(ep, tokens=ep.tokens[:-1] + (ep.tokens[-1] + 1,))
    )
    rows, d = e1.evaluate_context(cc, tool, SETTINGS, tmp_path / "onoff")
    assert all(not r["control_ok"] and "capture on/off qb: endpoints differ" in r["reason"] for r in rows)


def test_repeatability_failure_withholds_the_claim(captured, tool, tmp_path, monkeypatch):
    cc = _copy(captured["prefill"], tmp_path / "rep")
    real = operands.read_stages

    def perturbed(path):
        st = real(path)
        if ".pq.r2." in str(path):
            st["kqv"] = st["kqv"].copy()
            st["kqv"].reshape(-1)[0] = np.nextafter(st["kqv"].reshape(-1)[0], np.float32(np.inf))
        return st

    monkeypatch.setattr(operands, "read_stages", perturbed)  # the operand library replay.py uses
    rows, d = e1.evaluate_context(cc, tool, SETTINGS, tmp_path / "rep")
    assert not d["control_ok"]
    assert any(p.startswith("repeatability pq/") and "kqv" in p for p in d["problems"])
    assert all(not r["control_ok"] for r in rows)


def _fake_pq_capture(shared: bool):
    """A PQ micrograph's capture with two queries; ``shared=False`` gives each query its own
    copied Q and mask tensor, as a GPU scheduler does for split inputs."""
    from types import SimpleNamespace

    d, h, hkv, n_kv, n_q = 4, 2, 1, 8, 2
    rng = np.random.default_rng(3)
    qroot = rng.standard_normal((n_q, h, d)).astype("<f4")  # a (d, h, n_q) projection
    mroot = np.zeros((n_q, n_kv), "<f4")
    mroot[0, 6:] = -np.inf
    mroot[1, 7:] = -np.inf
    k = rng.standard_normal((hkv, n_kv, d)).astype("<f2")
    v = rng.standard_normal((hkv, d, n_kv)).astype("<f2")

    def src(name, type_, ne, nb, root, offs, raw):
        return capture.SourceView(name, type_, ne, nb, root, name, offs, raw)

    ks = src("k", 1, (d, n_kv, hkv, 1), (2, 2 * d, 2 * d * n_kv, 2 * d * n_kv * hkv), 10, 0, k.tobytes())
    vs = src("v", 1, (n_kv, d, hkv, 1), (2, 2 * n_kv, 2 * n_kv * d, 2 * n_kv * d * hkv), 11, 0, v.tobytes())
    qnb = (4, 4 * d * h, 4 * d, 4 * d * h * n_q)
    mnb = (4, 4 * n_kv, 4 * n_kv, 4 * n_kv)
    scale = np.array([0.5, 0.0], np.float32).view(np.int32)
    items, extras = [], {}
    for j in range(n_q):
        if shared:
            qj = src("q", 0, (d, 1, h, 1), qnb, 20, j * qnb[1], qroot.tobytes()[j * qnb[1] :])
            mj = src("m", 0, (n_kv, 1, 1, 1), mnb, 30, j * mnb[1], mroot.tobytes()[j * mnb[1] :])
        else:  # a copy with the view's layout holds exactly the bytes the view spans
            span = 4 * ((h - 1) * d + d)
            qj = src("q", 0, (d, 1, h, 1), qnb, 40 + j, 0, qroot.tobytes()[j * qnb[1] : j * qnb[1] + span])
            mj = src("m", 0, (n_kv, 1, 1, 1), mnb, 50 + j, 0, mroot[j].tobytes())
        for name, ne, s0, s1 in (
            (f"kq_pq{j}", (n_kv, 1, h, 1), ks, qj),
            (f"kq_soft_max_pq{j}", (n_kv, 1, h, 1), None, mj),
            (f"kqv_pq{j}", (d, 1, h, 1), vs, None),
        ):
            n = int(np.prod(ne))
            nb = (4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2])
            extras[len(items)] = capture.NodeExtra(tuple(int(x) for x in scale) + (0,) * 14, (s0, s1))
            items.append(runtime.Captured(name, 7, 0, ne, nb, np.full(n, j, np.float32)))
    return SimpleNamespace(errors=[], items=items, extras=extras), qroot, mroot


def test_pq_operands_from_shared_or_copied_views():
    out = {}
    for shared in (True, False):
        cap, qroot, mroot = _fake_pq_capture(shared)
        ops = capture.operands_from_capture(cap, 7, "pq", 2, {"x": 1})
        operands.validate_operands(ops)
        assert np.array_equal(ops.logical_q(), qroot) and np.array_equal(ops.logical_mask(), mroot)
        assert ops.scale == 0.5 and ops.refs["kq"].ne == (8, 1, 2, 2)
        assert ops.meta.get("gathered") == (None if shared else ["q", "mask"])
        out[shared] = ops
    assert np.array_equal(out[True].logical_k(), out[False].logical_k())
