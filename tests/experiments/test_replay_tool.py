"""Operand files, comparison, the native replay tool (mq/pq/qb) and backend admission.

Tests that run the tool use the one ``refspec build`` builds with the default (CPU) llama.cpp
(``refspec.native.tools.build_replay_tool``), or ``$REFSPEC_REPLAY_TOOL``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from refspec.core.errors import ReplayToolError
from refspec.core.layouts import REPLAYED_LAYOUTS
from refspec.experiments import admission as AD
from refspec.experiments import bitwise, operands, replay_runner
from refspec.native import build as native
from refspec.native import tools
from support.operandcases import list_devices, random_case

# ------------------------------------------------------------------------------ helpers


def rewrite(path: Path, edit) -> None:
    """Rewrite an operand file after ``edit(header, tensors)`` (blob hashes are recomputed)."""
    header, tensors = operands.read_container(path)
    edit(header, tensors)
    header.pop("tensors", None)
    operands.write_container(path, header, tensors)


def fp64(q, k, v, m, scale):
    g = np.arange(q.shape[1]) // (q.shape[1] // k.shape[1])
    kq = np.einsum("jac,tac->jat", q.astype(np.float64), k.astype(np.float64)[:, g])
    z = scale * kq + m[:, None, :]
    p = np.exp(z - z.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    return kq, p, np.einsum("jat,tac->jac", p, v.astype(np.float64)[:, g])


# ------------------------------------------------------------------------------ operand files


@pytest.mark.parametrize("q_layout", ["compact", "offset"])
def test_operand_roundtrip(tmp_path, q_layout):
    q, k, v, m = random_case(3, 37, seed=1)
    ops = operands.make_operands(q, k, v, m, q_layout=q_layout, kv_size=40, mask_rows=4, meta={"layer": 5})
    path = tmp_path / "x.rsop"
    operands.write_operands(path, ops)
    back = operands.read_operands(path)
    assert np.array_equal(back.logical_q(), q)
    assert np.array_equal(back.logical_k(), k)
    assert np.array_equal(back.logical_v(), v)
    assert np.array_equal(back.logical_mask(), m)
    assert (back.n_q, back.n_head, back.n_head_kv, back.d, back.d_v, back.n_kv) == (3, 8, 2, 64, 64, 37)
    assert back.scale == float(np.float32(1 / 8)) and back.meta == {"layer": 5}
    # the offset layout really is a view at a non-zero offset inside a wider row
    assert (back.q.offset > 0) == (q_layout == "offset")
    assert back.q.nb[1] == (4 * (64 * 8 + 2 * 64 * 2) if q_layout == "offset" else 4 * 64 * 8)
    # V is stored transposed in a larger cache
    assert back.v.nb[1] == 2 * 40


def test_captured_references_roundtrip(tmp_path):
    q, k, v, m = random_case(2, 16, seed=2)
    ops = operands.make_operands(q, k, v, m)
    ops.refs["kq"] = operands.contiguous_tensor(np.arange(2 * 8 * 16, dtype=np.float32).reshape(1, 8, 2, 16), "f32")
    operands.write_operands(tmp_path / "c.rsop", ops)
    back = operands.read_operands(tmp_path / "c.rsop")
    assert list(back.refs) == ["kq"]
    assert back.refs["kq"].ne == (16, 2, 8, 1)
    assert np.array_equal(back.refs["kq"].array().ravel(), np.arange(256, dtype=np.float32))


def _valid_file(tmp_path, **kw) -> Path:
    q, k, v, m = random_case(2, 24, seed=3)
    p = tmp_path / "ok.rsop"
    operands.write_operands(p, operands.make_operands(q, k, v, m, **kw))
    operands.read_operands(p)  # valid before tampering
    return p


def test_wrong_shape_is_an_error(tmp_path):
    p = _valid_file(tmp_path)

    def k_dim(h, t):
        t["k"].ne = (t["k"].ne[0] // 2, t["k"].ne[1], t["k"].ne[2], t["k"].ne[3])

    rewrite(p, k_dim)
    with pytest.raises(operands.OperandError, match="wrong shape: k head dim"):
        operands.read_operands(p)

    p = _valid_file(tmp_path)
    rewrite(p, lambda h, t: h["attention"].__setitem__("n_head", 4))
    with pytest.raises(operands.OperandError, match="header says n_head=4"):
        operands.read_operands(p)

    p = _valid_file(tmp_path)

    def heads(h, t):  # 7 query heads over 2 kv heads: not an integral GQA ratio
        t["q"].ne = (t["q"].ne[0], t["q"].ne[1], 7, 1)
        h["attention"].pop("n_head")

    rewrite(p, heads)
    with pytest.raises(operands.OperandError, match="not a multiple"):
        operands.read_operands(p)


def test_view_past_blob_is_an_error(tmp_path):
    p = _valid_file(tmp_path)

    def grow(h, t):
        t["v"].nb = (t["v"].nb[0], t["v"].nb[1] * 4, t["v"].nb[2], t["v"].nb[3])

    rewrite(p, grow)
    with pytest.raises(operands.OperandError, match="tensor 'v': view reaches byte"):
        operands.read_operands(p)


def test_truncated_tensor_is_an_error(tmp_path):
    p = _valid_file(tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[:-100])
    with pytest.raises(operands.OperandError, match="truncated"):
        operands.read_operands(p)
    p.write_bytes(data[:20])
    with pytest.raises(operands.OperandError, match="truncated header"):
        operands.read_operands(p)


def test_corrupted_blob_is_an_error(tmp_path):
    p = _valid_file(tmp_path)
    data = bytearray(p.read_bytes())
    data[-70] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(operands.OperandError, match="sha256"):
        operands.read_operands(p)


def test_nonfinite_values(tmp_path):
    q, k, v, m = random_case(2, 24, seed=4)
    m[:, 20:] = -np.inf  # keys 20.. are masked out for every query
    k_bad = k.copy()
    k_bad[21, 1, 5] = np.inf  # masked out: allowed
    operands.write_operands(tmp_path / "a.rsop", operands.make_operands(q, k_bad, v, m))
    operands.read_operands(tmp_path / "a.rsop")
    v_bad = v.copy()
    v_bad[3, 0, 7] = np.nan  # masked in: an error
    with pytest.raises(operands.OperandError, match="non-finite v value at key 3, kv head 0, channel 7"):
        operands.write_operands(tmp_path / "b.rsop", operands.make_operands(q, k, v_bad, m))
    q_bad = q.copy()
    q_bad[1, 2, 3] = np.nan
    with pytest.raises(operands.OperandError, match="non-finite q value at query 1, head 2, channel 3"):
        operands.validate_operands(operands.make_operands(q_bad, k, v, m))
    m_bad = m.copy()
    m_bad[0, 1] = np.nan
    with pytest.raises(operands.OperandError, match="mask has NaN"):
        operands.validate_operands(operands.make_operands(q, k, v, m_bad))
    m_empty = m.copy()
    m_empty[1, :] = -np.inf
    with pytest.raises(operands.OperandError, match="query 1 has no visible key"):
        operands.validate_operands(operands.make_operands(q, k, v, m_empty))
    # an invalid file written without validation is still refused on reading
    operands.write_operands(tmp_path / "c.rsop", operands.make_operands(q, k, v_bad, m), validate=False)
    with pytest.raises(operands.OperandError, match="masked in for query 0"):
        operands.read_operands(tmp_path / "c.rsop")


# ------------------------------------------------------------------------------ comparison


def test_ulp_distance():
    one = np.float32(1.0)
    nxt = np.nextafter(one, np.float32(2.0))
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    a = np.array([one, 0.0, tiny, one, np.nan, -np.inf, 2.0], dtype=np.float32)
    b = np.array(
        [nxt, -0.0, -tiny, -one, one, -np.inf, np.nextafter(np.float32(2.0), np.float32(0.0))], dtype=np.float32
    )
    u = bitwise.ulp_distance(a, b)
    assert u.tolist() == [1, 0, 2, 2 * 0x3F800000, -1, 0, 1]


def test_compare():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    c = bitwise.compare(a, a.copy())
    assert c.bitwise_equal and c.n_diff == 0 and c.max_abs_diff == 0 and c.max_ulp == 0 and c.first_diff is None
    b = a.copy()
    b[1, 2, 1] = np.nextafter(b[1, 2, 1], np.float32(100))
    b[1, 2, 3] += 0.5
    c = bitwise.compare(a, b)
    assert not c.bitwise_equal and c.n_diff == 2 and c.first_diff == (1, 2, 1)
    assert c.max_abs_diff == 0.5 and c.max_ulp == 1 << 18  # 0.5 at exponent 4: 0.5 / 2**-19
    z = np.zeros(3, np.float32)
    assert not bitwise.compare(z, -z).bitwise_equal and bitwise.compare(z, -z).max_ulp == 0
    with pytest.raises(operands.OperandError):
        bitwise.compare(a, a[0])


# ------------------------------------------------------------------------------ the tool


def _stages(report):
    out = {}
    for job in report["jobs"]:
        assert job["status"] == "ok", job
        out[job["input"]] = {ev["layout"]: operands.read_stages(ev["stages"]) for ev in job["evaluations"]}
    return out


def test_layouts_on_random_fixtures(replay_tool, tmp_path, record_property):
    cases = [(nq, nkv) for nq in (1, 2, 3, 4) for nkv in (127, 128, 256, 257)]
    jobs, meta = [], {}
    for i, (nq, nkv) in enumerate(cases):
        q, k, v, m = random_case(nq, nkv, seed=10 + i)
        p = tmp_path / f"r{nq}_{nkv}.rsop"
        operands.write_operands(
            p, operands.make_operands(q, k, v, m, q_layout="offset" if i % 2 else "compact", kv_size=nkv + 3)
        )
        jobs.append(replay_runner.ReplayRun(p))
        meta[str(p)] = (nq, nkv, q, k, v, m)
    report = replay_runner.run_replay(replay_tool, jobs, threads=1)
    assert set(report["input_sha256"]) == set(meta)
    st = _stages(report)
    mq_differs = []
    for path, by in st.items():
        nq, nkv, q, k, v, m = meta[path]
        for s in operands.STAGES:
            c = bitwise.compare(by["pq"][s], by["qb"][s])
            assert c.bitwise_equal, (path, s, c.as_dict())
            c = bitwise.compare(by["pq"][s], by["qh"][s])
            assert c.bitwise_equal, (path, s, "qh", c.as_dict())
        for lay in REPLAYED_LAYOUTS:  # the output restore puts (query, head, channel) in place
            assert bitwise.compare(by[lay]["out"], by[lay]["kqv"].reshape(nq, -1)).bitwise_equal
        if nq == 1:
            for s in operands.STAGES:
                assert bitwise.compare(by["mq"][s], by["pq"][s]).bitwise_equal, (path, s)
        else:
            diff = [s for s in operands.STAGES if not bitwise.compare(by["mq"][s], by["pq"][s]).bitwise_equal]
            if diff:
                mq_differs.append((nq, nkv, diff[0], bitwise.compare(by["mq"]["kq"], by["pq"]["kq"]).max_ulp))
        kq, p, kqv = fp64(q, k, v, m, float(np.float32(1 / 8)))
        # sanity against FP64 (q is rounded to f16 and p to f16 by the CPU kernels)
        assert np.abs(by["qb"]["kq"] - kq).max() < 5e-2
        assert np.abs(by["qb"]["kq_soft_max"] - p).max() < 5e-3
        assert np.abs(by["qb"]["kqv"] - kqv).max() < 5e-2
    record_property("mq_differs_q_ge_2", json.dumps(mq_differs))
    print("mq differs from pq/qb (q, n_kv, first stage, max ulp at kq):", mq_differs)


def test_report_placement_and_supports(replay_tool, tmp_path):
    q, k, v, m = random_case(2, 64, seed=5)
    p = tmp_path / "p.rsop"
    operands.write_operands(p, operands.make_operands(q, k, v, m))
    report = replay_runner.run_replay(replay_tool, [replay_runner.ReplayRun(p, write_stages=False)])
    assert report["backend"]["device"] == "CPU" and report["sched_backends"] == ["CPU"]
    assert any("libggml" in mod for mod in report["modules"])
    for ev in report["jobs"][0]["evaluations"]:
        assert ev["status"] == "ok" and ev["stages"] is None and ev["fallback"] is False
        compute = [n for n in ev["nodes"] if n["op"] not in ("NONE", "VIEW", "PERMUTE", "RESHAPE", "TRANSPOSE")]
        ops = {n["op"] for n in compute}
        assert {"MUL_MAT", "SOFT_MAX", "CONT"} <= ops
        assert ("CONCAT" in ops) == (ev["layout"] == "pq")
        for n in compute:
            assert n["backend"] == "CPU" and n["pinned"] == "CPU"
            assert n["supports_op"] == {"CPU": True} and n["dev_supports_op"]["CPU"] is True
        names = {n["name"] for n in compute}
        assert "kqv_out" in names
        kq = [n for n in compute if n["op"] == "MUL_MAT" and n["name"].split("-")[0] == "kq"]
        assert kq and all(n["op_params"]["prec_f32"] for n in kq)
        if ev["layout"] == "qb":  # the lifted 4-D shapes
            assert kq[0]["ne"] == [64, 1, 8, 2]
            qv = next(n for n in ev["nodes"] if n["name"] == "q_qb")
            qo = next(n for n in ev["nodes"] if n["name"] == "q")
            assert qv["ne"] == [64, 1, 8, 2] and qv["nb"][3] == qo["nb"][1] and qv["nb"][2] == qo["nb"][2]
        if ev["layout"] == "qh":  # the queries folded into the head batch axis, dim 3 left at one
            assert kq[0]["ne"] == [64, 1, 16, 1]
            qc = next(n for n in ev["nodes"] if n["name"] == "q_qh")
            assert qc["op"] == "CONT" and qc["ne"] == [64, 2, 8, 1] and qc["contiguous"]
            # its view keeps PQ's stride order, row stride above batch stride (ggml_is_permuted): a
            # backend choosing its kernel by strides (ggml-vulkan's p021) takes PQ's for both
            qv = next(n for n in ev["nodes"] if n["id"] == kq[0]["src"][1])
            assert qv["ne"] == [64, 1, 16, 1] and qv["nb"][2] == 4 * 64 and qv["nb"][1] > qv["nb"][2], qv
            sm = next(n for n in compute if n["op"] == "SOFT_MAX")
            mask = next(n for n in ev["nodes"] if n["id"] == sm["src"][1])
            assert mask["ne"] == [64, 1, 2, 1]  # mask row j % n_q = query j
        if ev["layout"] == "pq":
            qj = next(n for n in ev["nodes"] if n["id"] == kq[0]["src"][1])
            assert qj["nb"][1] > qj["nb"][2] and qj["nb"][2] == 4 * 64, qj


def test_qh_refuses_alibi(replay_tool, tmp_path):
    """With ALiBi the softmax takes each head's slope from the batch index, which QH fills with
    head * n_q + query: the tool refuses QH there, and PQ (one head per batch entry) still runs."""
    q, k, v, m = random_case(2, 32, seed=8)
    p = tmp_path / "alibi.rsop"
    operands.write_operands(p, dataclasses.replace(operands.make_operands(q, k, v, m), max_bias=8.0))
    report = replay_runner.run_replay(replay_tool, [replay_runner.ReplayRun(p, ("pq", "qh"), write_stages=False)])
    by = {ev["layout"]: ev for ev in report["jobs"][0]["evaluations"]}
    assert by["pq"]["status"] == "ok"
    assert by["qh"]["status"] == "error" and "ALiBi" in by["qh"]["error"], by["qh"]


def test_tool_reports_bad_files_without_crashing(replay_tool, tmp_path):
    good = tmp_path / "good.rsop"
    q, k, v, m = random_case(2, 32, seed=6)
    operands.write_operands(good, operands.make_operands(q, k, v, m))
    bad = tmp_path / "bad.rsop"
    bad.write_bytes(good.read_bytes()[:-200])
    with pytest.raises(operands.OperandError, match="truncated"):  # refused before anything runs
        replay_runner.run_replay(replay_tool, [replay_runner.ReplayRun(bad), replay_runner.ReplayRun(good)])
    report = replay_runner.run_replay(
        replay_tool, [replay_runner.ReplayRun(bad), replay_runner.ReplayRun(good)], check_inputs=False, validate=False
    )
    jb, jg = report["jobs"]
    assert jb["status"] == "error" and "truncated" in jb["error"]
    assert jg["status"] == "ok" and len(jg["evaluations"]) == len(REPLAYED_LAYOUTS)


def test_nonfinite_masked_in_is_not_replayed(replay_tool, tmp_path):
    q, k, v, m = random_case(2, 32, seed=7)
    v[5, 1, 2] = np.nan
    p = tmp_path / "nan.rsop"
    operands.write_operands(p, operands.make_operands(q, k, v, m), validate=False)
    with pytest.raises(operands.OperandError, match="non-finite v value at key 5"):
        replay_runner.run_replay(replay_tool, [replay_runner.ReplayRun(p)])
    assert not list(tmp_path.glob("*.rsst"))


def test_tool_usage_errors(replay_tool, tmp_path):
    q, k, v, m = random_case(1, 16)
    p = tmp_path / "u.rsop"
    operands.write_operands(p, operands.make_operands(q, k, v, m))
    with pytest.raises(ReplayToolError, match="exit status 2"):
        replay_runner.run_replay(replay_tool, [replay_runner.ReplayRun(p)], backend="NoSuchDevice0")
    rc = subprocess.run([str(replay_tool), "--fault", "nonsense", str(p)], capture_output=True).returncode
    assert rc == 2
    devs = list_devices(replay_tool)
    assert any(d["name"] == "CPU" and d["type"] == "cpu" for d in devs)


def test_replay_tool_is_built_once_and_rebuilt_when_its_record_lies():
    """The build's own tool (also where $REFSPEC_REPLAY_TOOL gives the other tests another one)."""
    b = native.current()
    replay_tool = b.replay_tool
    before = replay_tool.stat().st_mtime_ns
    again = tools.build_replay_tool(b)
    assert again == replay_tool and again.stat().st_mtime_ns == before
    stamp = again.parent / "build.json"
    rec = json.loads(stamp.read_text())
    assert rec["key"] == tools.replay_tool_key(b)
    assert b.record["replay_tool"]["sha256"] == rec["files"][tools.REPLAY_TOOL]["sha256"]
    # a record that does not describe its binaries is not trusted: the tools are built again
    stamp.write_text(json.dumps({**rec, "files": {**rec["files"], tools.REPLAY_TOOL: {"sha256": "0" * 64, "size": 1}}}))
    rebuilt = tools.build_replay_tool(b)
    assert rebuilt == replay_tool and rebuilt.stat().st_mtime_ns != before
    assert json.loads(stamp.read_text())["files"] == rec["files"]


# ------------------------------------------------------------------------------ admission


def test_admission_cpu(replay_tool):
    shape = AD.AttentionShape(n_head=8, n_head_kv=2, head_dim=64, n_kv=96)
    res = AD.run_admission(replay_tool, "CPU", shape, queries=(1, 2, 3))
    assert not res["errors"]
    rows = res["rows"]
    assert {(r["layout"], r["q"]) for r in rows} == {(lay, q) for lay in REPLAYED_LAYOUTS for q in (1, 2, 3)}
    assert {r["op"] for r in rows} == {"qk_mul_mat", "soft_max", "av_mul_mat", "cont", "concat"}
    for r in rows:
        assert r["verdict"] == "unknown" and r["supports_main"] and r["observed"] == "CPU" and not r["fallback"]


def test_admission_false_only_on_refusal():
    """A refusal by the chosen backend gives 'false' and the reason; the CPU fallback is observed."""

    def node(i, name, op, ne, src=(), sup=True, backend="Vulkan0"):
        return {
            "id": i,
            "name": name,
            "op": op,
            "type": "f32",
            "ne": ne,
            "src": list(src),
            "supports_op": {"Vulkan0": sup, "CPU": True},
            "backend": backend,
        }

    ev = {
        "layout": "qb",
        "nodes": [
            node(0, "k", "VIEW", [64, 96, 2, 1]),
            node(1, "q_qb", "VIEW", [64, 1, 8, 2]),
            node(2, "kq", "MUL_MAT", [96, 1, 8, 2], (0, 1), sup=False, backend="CPU"),
            node(3, "kq_soft_max", "SOFT_MAX", [96, 1, 8, 2], (2,)),
            node(4, "kqv", "MUL_MAT", [64, 1, 8, 2], (0, 3), sup=False, backend="CPU"),
            node(5, "kqv_out", "CONT", [512, 2, 1, 1], (4,)),
        ],
        "roles": {"kq": [2], "kq_soft_max": [3], "kqv": [4], "out": 5},
    }
    report = {
        "backend": {"requested": "Vulkan0", "device": "Vulkan0", "name": "Vulkan0"},
        "sched_backends": ["Vulkan0", "CPU"],
    }
    rows = {r["op"]: r for r in AD.evaluation_rows(report, AD.AttentionShape(8, 2, 64, 96), 2, ev)}
    assert rows["qk_mul_mat"]["verdict"] == "false" and rows["qk_mul_mat"]["fallback"]
    assert (
        "src0 ne=[64, 96, 2, 1]" in rows["qk_mul_mat"]["reason"]
        and "src1 ne=[64, 1, 8, 2]" in rows["qk_mul_mat"]["reason"]
    )
    assert rows["soft_max"]["verdict"] == "unknown" and not rows["soft_max"]["fallback"]
    assert rows["cont"]["verdict"] == "unknown" and rows["cont"]["reason"] == ""


def test_gguf_attention_shape(tmp_path):
    import gguf  # pinned in envs/requirements.txt

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(1024)
    w.add_head_count(16)
    w.add_head_count_kv(4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    s = AD.gguf_attention_shape(path)
    assert (s.n_head, s.n_head_kv, s.head_dim, s.n_kv) == (16, 4, 64, 4096)
    assert AD.gguf_attention_shape(path, n_kv=300).n_kv == 300


def test_admission_runs_a_killed_tool_process_again_and_records_it(replay_tool, tmp_path):
    """A tool process killed by a signal observed nothing: the width runs again in a fresh process
    and the killed attempt is recorded. The real tool, behind a wrapper that aborts the first run
    of the q = 2 width; an abort on every attempt, or a tool that exits 2, is an error."""
    marks = tmp_path / "marks"
    marks.mkdir()
    wrapper = tmp_path / "flaky-tool"
    wrapper.write_text(
        "#!/usr/bin/env bash\n"
        "# abort the first run whose jobs file names the q = 2 operands, as a SIGABRT inside the driver would\n"
        'jobs=""; prev=""; for a in "$@"; do [ "$prev" = --jobs ] && jobs="$a"; prev="$a"; done\n'
        f'if grep -q q2.rsop "$jobs" && [ ! -e {marks}/aborted ] || [ -e {marks}/always ]; then\n'
        f"  touch {marks}/aborted; kill -ABRT $$\n"
        "fi\n"
        f'exec {replay_tool} "$@"\n'
    )
    wrapper.chmod(0o755)
    shape = AD.AttentionShape(n_head=8, n_head_kv=2, head_dim=64, n_kv=96)
    res = AD.run_admission(wrapper, "CPU", shape, queries=(1, 2))
    assert res["errors"] == []
    assert [(c["q"], c["attempt"], c["returncode"]) for c in res["tool_crashes"]] == [(2, 1, -6)]
    assert {r["q"] for r in res["rows"]} == {1, 2}
    assert res["rows"] == AD.run_admission(replay_tool, "CPU", shape, queries=(1, 2))["rows"]
    (marks / "always").touch()
    with pytest.raises(ReplayToolError, match="exit status -6"):
        AD.run_admission(wrapper, "CPU", shape, queries=(1, 2))
