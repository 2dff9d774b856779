"""Statistics (refspec.core.stats), table I/O (refspec.core.tables) and their agreement with report/check.py."""

from __future__ import annotations

import json
import math
import random
import re

import pytest
import refspec_check as CHECK

from refspec.campaigns import derived as D
from refspec.core import stats as S
from refspec.core import tables as T
from refspec.core.endpoint import Endpoint
from refspec.core.paths import REPO_ROOT

# --------------------------------------------------------------------------- ratios


def test_paired_ratio_by_hand():
    # task a: geometric mean of (2, 8) = 4 over 2 -> 2; task b: 3 over 6 -> 0.5
    pr = S.paired_ratio({"a": [2, 8], "b": [3]}, {"a": [2], "b": [6]})
    assert pr.task_ratios == pytest.approx({"a": 2.0, "b": 0.5}, rel=1e-15)
    assert pr.ratio == pytest.approx(1.0, abs=1e-15)  # sqrt(2 * 0.5)
    assert pr.n_tasks == 2
    assert pr.regressed == ("b",)
    pr2 = S.paired_ratio({"a": [4.0], "b": [9.0]}, {"a": [1.0], "b": [1.0]})
    assert pr2.ratio == pytest.approx(6.0, rel=1e-14)  # sqrt(4 * 9)
    assert pr2.n_regressions == 0


def test_paired_ratio_is_unit_free_and_transitive():
    rng = random.Random(3)
    tasks = [f"t{i}" for i in range(7)]
    arms = {a: {t: [rng.uniform(1e8, 3e9) for _ in range(rng.randint(1, 4))] for t in tasks} for a in "ABC"}
    ab = S.paired_ratio(arms["A"], arms["B"]).ratio
    bc = S.paired_ratio(arms["B"], arms["C"]).ratio
    ac = S.paired_ratio(arms["A"], arms["C"]).ratio
    assert ac == pytest.approx(ab * bc, rel=1e-13)
    scaled = {t: [x * 1e-9 for x in v] for t, v in arms["A"].items()}
    scaled_b = {t: [x * 1e-9 for x in v] for t, v in arms["B"].items()}
    assert S.paired_ratio(scaled, scaled_b).ratio == pytest.approx(ab, rel=1e-13)


def test_paired_ratio_refuses_missing_times():
    with pytest.raises(S.StatsError):
        S.paired_ratio({"a": [1.0]}, {"a": []}, tasks=["a"])
    with pytest.raises(S.StatsError):
        S.paired_ratio({"a": [1.0]}, {"b": [1.0]})
    with pytest.raises(S.StatsError):
        S.paired_ratio({"a": [0.0]}, {"a": [1.0]})


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_indices_follow_the_documented_draw_order():
    idx = S.bootstrap_indices(4, draws=5, seed=99)
    rng = random.Random(99)
    expect = [[rng.randrange(4) for _ in range(4)] for _ in range(5)]
    assert idx.tolist() == expect


def test_percentile_is_linear_interpolation():
    xs = [1.0, 2.0, 4.0, 8.0]
    # h = 3 * 0.5 = 1.5 -> 2 + 0.5 * (4 - 2)
    assert S.percentile(xs, 50) == 3.0
    assert CHECK.percentile(sorted(xs), 50) == 3.0
    assert S.percentile(xs, 2.5) == pytest.approx(1.0 + 0.075 * 1.0)
    assert CHECK.percentile(xs, 97.5) == pytest.approx(4.0 + 0.925 * 4.0)


@pytest.mark.parametrize(
    "lo,hi,floor,decision",
    [
        (1.03, 1.05, 1.0, "exceeds"),
        (1.02, 1.05, 1.0, "inconclusive"),
        (0.99, 1.019, 1.0, "below"),
        (1.0, 1.02, 1.0, "inconclusive"),
        (1.03, 1.05, 1.02, "noise_too_high"),
        (1.05, 1.10, 1.02, "exceeds"),
    ],
)
def test_decision(lo, hi, floor, decision):
    assert S.decide_weighed(lo, hi, 1.02, floor) == decision
    assert CHECK.decide_weighed(lo, hi, 1.02, floor) == decision


def _blocks(rng, n, tasks, shift=0.0):
    return {
        f"w{b}": [(t, rng.lognormvariate(21 + shift, 0.05)) for t in tasks for _ in range(rng.randint(1, 2))]
        for b in range(n)
    }


def test_pipeline_and_checker_agree_on_random_data():
    """refspec.core.stats and report/check.py agree to 1e-12 on ratios, contrasts and intervals."""
    for trial in range(12):
        rng = random.Random(1000 + trial)
        tasks = [f"T/{i}" for i in range(rng.randint(2, 9))]
        num = {t: [rng.lognormvariate(21, 0.4) for _ in range(rng.randint(1, 5))] for t in tasks}
        den = {t: [rng.lognormvariate(21, 0.4) for _ in range(rng.randint(1, 5))] for t in tasks}
        pr = S.paired_ratio(num, den)
        D, d, reg = CHECK.paired(num, den, tasks)
        assert abs(pr.log_ratio - D) <= 1e-12
        assert abs(pr.ratio - math.exp(D)) <= 1e-12
        assert list(pr.regressed) == reg
        assert all(abs(pr.task_log_ratios[t] - d[t]) <= 1e-12 for t in tasks)
        cs = [rng.gauss(0.02, 0.02) for _ in range(rng.randint(2, 8))]
        e = S.session_interval(cs)
        v, lo, hi, df, n = CHECK.session_interval(cs)
        assert abs(e.lo - lo) <= 1e-12 and abs(e.hi - hi) <= 1e-12 and abs(e.value - v) <= 1e-12
        assert e.df == df and e.units == n == len(cs)
        a, b = _blocks(rng, rng.randint(2, 7), tasks), _blocks(rng, rng.randint(2, 7), tasks, 0.03)
        w = S.process_interval(a, b, tasks)
        v, lo, hi, df, n = CHECK.process_interval(a, b, tasks)
        assert abs(w.value - v) <= 1e-12 and abs(w.lo - lo) <= 1e-12 and abs(w.hi - hi) <= 1e-12
        assert abs(w.df - df) <= 1e-9 * df and w.units == n
        assert S.minimum_detectable(w.lo, w.hi) == pytest.approx(CHECK.minimum_detectable(lo, hi, 1.02), rel=1e-12)
        times = [x for v in num.values() for x in v]
        assert S.median(times) == CHECK.median(times)


def test_fewer_than_two_sessions_get_no_interval():
    with pytest.raises(S.StatsError, match="at least 2 sessions"):
        S.session_interval([0.05])
    assert CHECK.session_interval([0.05]) is None
    e = S.session_interval([0.05, 0.06, 0.05, 0.07, 0.06])
    assert S.decide_weighed(e.lo, e.hi) == "exceeds"


# --------------------------------------------------------------------------- qualification


def _ep(camp, fam, task, arm, session, repeat, tokens, eog=True, cap=32):
    stop = "eog" if eog else "cap"
    return dict(
        campaign=camp,
        family=fam,
        task_id=task,
        arm=arm,
        cap=cap,
        session=session,
        repeat=repeat,
        endpoint_sha256=Endpoint(tuple(tokens), eog, stop).sha256,
        tokens=tokens,
        n=len(tokens),
        eog=eog,
        last_token=tokens[-1] if tokens else None,
        stop_reason=stop,
    )


def _rq(ep, status="ok", attempt=1):
    return dict(
        campaign=ep["campaign"],
        family=ep["family"],
        task_id=ep["task_id"],
        arm=ep["arm"],
        cap=ep["cap"],
        session=ep["session"],
        repeat=ep["repeat"],
        status=status,
        attempt=attempt,
        worker=f"{ep['session']}-{ep['arm']}",
    )


def test_first_divergence():
    from refspec.core.endpoint import first_divergence

    assert first_divergence([1, 2, 3], True, "eog", [1, 2, 3], True, "eog") is None
    assert first_divergence([1, 2, 3], True, "eog", [1, 5, 3], True, "eog") == 1
    assert first_divergence([1, 2, 3], True, "eog", [1, 2], True, "eog") == 2
    assert first_divergence([1, 2], True, "eog", [1, 2], False, "cap") == 2


def test_qualify_by_hand():
    ref = [5, 6, 7, 8]
    eps = [
        _ep("confirmation", "f", "t1", "R", "s1", 1, ref),
        _ep("confirmation", "f", "t1", "R", "s1", 2, ref),
        _ep("confirmation", "f", "t1", "M0", "s1", 1, ref),
        _ep("confirmation", "f", "t1", "M0", "s1", 2, [5, 6, 9, 9, 9]),
        _ep("confirmation", "f", "t1", "M3", "s1", 1, ref),
        _ep("confirmation", "f", "t2", "R", "s1", 1, [1, 2]),
        _ep("confirmation", "f", "t2", "R", "s1", 2, [1, 3]),  # unstable reference
        _ep("confirmation", "f", "t2", "M3", "s1", 1, [1, 2]),
    ]
    reqs = [_rq(e) for e in eps]
    # M3 on t1 repeat 2: a failed attempt that was never completed
    reqs.append(dict(_rq(eps[4]), repeat=2, status="failed"))
    q = {
        (r["task_id"], r["arm"]): r
        for r in D.qualification_table(reqs, eps, margins={("confirmation", "f", "t1", 32): [0.5, 0.4, 0.25, 0.1]})
    }
    assert q[("t1", "R")]["qualified"] and q[("t1", "R")]["ref_stable"]
    m0 = q[("t1", "M0")]
    assert not m0["qualified"] and m0["n_matching"] == 1 and m0["n_required"] == 2
    assert (m0["first_diff_index"], m0["ref_token"], m0["arm_token"], m0["ref_margin"]) == (2, 7, 9, 0.25)
    assert "1 of 2 endpoints differ" in m0["reason"]
    m3 = q[("t1", "M3")]
    assert not m3["qualified"] and m3["n_required"] == 2 and m3["n_requests"] == 1
    assert "not completed" in m3["reason"] and m3["first_diff_index"] is None
    assert not q[("t2", "R")]["ref_stable"] and not q[("t2", "M3")]["qualified"]
    assert "unstable" in q[("t2", "M3")]["reason"]
    # the checker's qualification agrees field by field
    rq = CHECK.recompute_qualification(reqs, eps)
    for (task, arm), row in q.items():
        other = rq[("confirmation", "f", task, 32, arm)]
        for k in (
            "n_required",
            "n_requests",
            "n_matching",
            "qualified",
            "first_diff_index",
            "ref_token",
            "arm_token",
            "ref_stable",
            "ref_endpoint_sha256",
        ):
            assert row[k] == other[k], (task, arm, k)


def test_ratio_table_dashes_unqualified_pairs():
    eps, reqs = [], []
    for task in ("a", "b"):
        for arm, layout, mode in (("R", "mq", "target"), ("M_pq", "pq", "target"), ("M_qb", "qb", "target")):
            toks = [1, 2, 3] if not (arm == "M_pq" and task == "b") else [1, 2, 4]
            e = _ep("implementation", "f", task, arm, "s1", 1, toks)
            eps.append(e)
            reqs.append(dict(_rq(e), mode=mode, layout=layout, t_ns=1000 + len(reqs)))
    qual = D.qualification_table(reqs, eps)
    rows = {(r["numerator"], r["denominator"]): r for r in D.ratios_table(reqs, qual, "implementation")}
    assert set(rows) == {("R", "M_pq"), ("R", "M_qb"), ("M_pq", "M_qb")}
    bad = rows[("M_pq", "M_qb")]
    assert not bad["qualified"] and bad["ratio"] is None and "M_pq not qualified on 1/2 tasks (b)" in bad["reason"]
    good = rows[("R", "M_qb")]
    assert good["qualified"] and good["ratio"] == pytest.approx(math.sqrt(1000 / 1002 * 1003 / 1005), rel=1e-14)
    assert good["n_regressions"] == 2 and good["regressed_tasks"] == "a b"


def test_phase_mask_minimality():
    rows = [dict(mask=m, p=p) for m, p in ((0, False), (1, False), (3, True), (7, True), (2, False), (11, True))]
    passes = {r["mask"]: r["p"] for r in rows}
    minimal = {m for m in passes if passes[m] and not any(passes[s] for s in passes if s != m and s & m == s)}
    assert minimal == {3}


# --------------------------------------------------------------------------- tables


def _req_row(**kw):
    base = dict(
        campaign="implementation",
        session="s1",
        block=0,
        worker="w0",
        family="f",
        task_id="MBPP/1",
        arm="M_qb",
        mode="target",
        layout="qb",
        draft=None,
        k=0,
        ub=4,
        mask=3,
        cap=64,
        repeat=1,
        order_index=0,
        attempt=1,
        status="ok",
        reason=None,
        t_ns=123456789,
        cpu_ns=240000000,
        n_generated=3,
        stop_reason="eog",
        eog=True,
        last_token=7,
        endpoint_sha256=Endpoint(tuple([1, 2, 7]), True, "eog").sha256,
        proposals=0,
        accepted=0,
        rollbacks=0,
        cycles=0,
        callers=4,
        micrographs=4,
        rows=40,
        graph_rebuilds=2,
        graph_reuses=2,
        device="CUDA0",
        device_description="NVIDIA H200",
        gpu_layers=31,
        draft_gpu_layers=None,
    )
    base.update(kw)
    return base


def test_write_read_round_trip(tmp_path):
    import pandas as pd

    rows = [
        _req_row(),
        _req_row(
            order_index=1,
            status="failed",
            reason="worker died",
            t_ns=None,
            cpu_ns=None,
            n_generated=None,
            stop_reason=None,
            eog=None,
            last_token=None,
            endpoint_sha256=None,
        ),
    ]
    paths = T.write_table(pd.DataFrame(rows), "requests", tmp_path)
    assert paths["parquet"].is_file() and paths["csv"].is_file()
    back = T.read_records("requests", tmp_path)
    assert back == [T.validate([r], "requests")[0] for r in rows]
    assert T.read_csv_records("requests", tmp_path) == back
    df = T.read_table("requests", tmp_path)
    assert list(df.columns) == T.TABLES["requests"].names and df["t_ns"].isna().tolist() == [False, True]
    import pyarrow.parquet as pq

    md = pq.ParquetFile(paths["parquet"]).metadata
    assert md.row_group(0).column(0).compression == "GZIP"  # T.PARQUET_WRITE, which the checker reads
    assert set(md.row_group(0).column(0).encodings) <= {"PLAIN", "RLE"}  # no dictionary, PLAIN values
    text = paths["csv"].read_text()
    assert text.splitlines()[0].split(",") == T.TABLES["requests"].names
    assert ",true," in text.splitlines()[1] and "worker died" in text


def test_csv_encodings(tmp_path):
    toks = [0, 1, 2147483647, -5]
    e = _ep("confirmation", "f", "t", "R", "s1", 1, toks)
    T.write_table([e], "endpoints", tmp_path)
    line = (tmp_path / "endpoints.csv").read_text().splitlines()[1]
    assert "0 1 2147483647 -5" in line
    est = dict(
        family="f",
        path="spec",
        comparison="PQ/QB",
        estimate=0.1 + 0.2,
        lo=1 / 3,
        hi=1e-300,
        n_sessions=6,
        n_tasks=12,
        n_regressions=0,
        regressed_tasks="",
        df=5.0,
        threshold=1.02,
        floor=1.1,
        decision="exceeds",
        reason=None,
    )
    T.write_table([est], "estimates", tmp_path)
    rec = T.read_csv_records("estimates", tmp_path)[0]
    assert rec["estimate"] == 0.1 + 0.2 and rec["lo"] == 1 / 3 and rec["hi"] == 1e-300  # exact round trip
    assert rec["regressed_tasks"] is None  # empty string in a nullable string column is stored as null
    assert T.read_records("estimates", tmp_path)[0]["regressed_tasks"] is None


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(status="done"), "is not one of"),
        (dict(t_ns="12"), "expected int64"),
        (dict(family=None), "null in a non-nullable column"),
        (dict(k=-1), "below the minimum"),
        (dict(eog=1), "expected bool"),
        (dict(last_token=1.5), "expected int32"),
        (dict(n_generated=2**31), "out of the int32 range"),
    ],
)
def test_validation_errors_are_clear(tmp_path, change, message):
    with pytest.raises(T.TableError) as ei:
        T.write_table([_req_row(**change)], "requests", tmp_path)
    assert message in str(ei.value) and "row 0" in str(ei.value)
    assert not (tmp_path / "requests.csv").exists()


def test_validation_of_columns_and_keys(tmp_path):
    row = _req_row()
    row.pop("rows")
    with pytest.raises(T.TableError, match=r"missing column\(s\) \['rows'\]"):
        T.write_table([row], "requests", tmp_path)
    with pytest.raises(T.TableError, match=r"unknown column\(s\) \['extra'\]"):
        T.write_table([_req_row(extra=1)], "requests", tmp_path)
    with pytest.raises(T.TableError, match="share the key"):
        T.write_table([_req_row(), _req_row()], "requests", tmp_path)
    with pytest.raises(T.TableError, match="unknown table"):
        T.write_table([], "nope", tmp_path)


def test_schemas_are_documented():
    doc = (REPO_ROOT / "anc" / "tables.md").read_text(encoding="utf-8")
    assert set(T.TABLES) == {
        "requests",
        "endpoints",
        "qualification",
        "sessions",
        "contrasts",
        "estimates",
        "ratios",
        "replay",
        "audit",
        "phase_masks",
        "partition",
        "kv_diff",
        "crosses",
        "frontier",
        "diagnostics",
        "prediction",
        "admission",
        "claims",
        "projection",
        "noise",
        "loads",
        "variance",
        "sizing",
        "divergence_screen",
        "partition_screen",
        "graph_size",
    }
    for name, sp in T.TABLES.items():
        raw = json.loads(sp.path.read_text())
        assert raw["title"] == name and raw["key"]
        m = re.search(rf"^## `{name}`\s*$(.*?)(?=^## |\Z)", doc, re.S | re.M)
        assert m, f"anc/tables.md has no section for {name}"
        for col in sp.columns:
            assert col.description, (name, col.name)
            assert re.search(rf"^\| `{re.escape(col.name)}` \| {re.escape(col.type)} \|", m.group(1), re.M), (
                f"anc/tables.md does not document {name}.{col.name} ({col.type})"
            )
