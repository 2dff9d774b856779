"""The paired design: its schedule (balanced, drawn from the seed) and a tiny implementation campaign
run with real workers, each serving every arm, with its A/A twin in the same processes.

The fresh design stays what it was: a definition without ``design`` schedules the same blocks as
before, and its plan names no request arm.
"""

from __future__ import annotations

import json
from collections import Counter

import yaml

from refspec import cli
from refspec.campaigns.scheduler import paired_schedule, process_orders, round_schedule, session_ids
from refspec.core.tables import read_records

ARMS = ["R", "M_qb", "M_pq", "M_qb_aa"]
PANEL = [{"task_id": "T/0", "text": "Say hello."}, {"task_id": "T/1", "text": "Count to three."}]


def test_process_orders_come_in_reversed_pairs_so_a_position_trend_cancels_in_every_contrast():
    import random

    arms = [f"A{i}" for i in range(10)]
    orders = process_orders(arms, 5, random.Random(1))
    assert all(sorted(o) == sorted(arms) for o in orders)
    assert orders[1] == orders[0][::-1] and orders[3] == orders[2][::-1]
    assert orders[2] != orders[0] and orders[4] not in (orders[2], orders[3])  # a last round: its own draw
    for pair in (orders[0:2], orders[2:4]):
        # every arm's positions sum to n - 1: a linear trend over positions adds the same to every arm
        assert {sum(o.index(a) for o in pair) for a in arms} == {9}
        # every arm runs once before and once after every other
        assert all(sum(o.index(a) < o.index(b) for o in pair) == 1 for a in arms for b in arms if a != b)


def test_a_position_trend_leaves_no_bias_in_a_paired_contrast():
    """A round's first requests slower than its last (a trend of 1 % a position, as the default runs'
    implementation campaign showed): with orders in reversed pairs every process's contrast of two
    arms of one recipe is exactly 1, whatever the positions drawn."""
    import math

    arms = ["R", "M_qb", "C_qb", "M_pq", "C_pq", "M_gs", "C_gs", "M_qh", "C_qh", "M_qb_aa"]
    (s,) = paired_schedule(session_ids(1), arms, ["T/0", "T/1"], caps=[8], repeats=1, processes=5, seed=9)
    for b in s.blocks:
        log_t = {}
        for i, r in enumerate(b.requests):
            log_t.setdefault(r.arm, []).append(0.01 * (i % len(arms)))  # the position in its round
        assert math.isclose(sum(log_t["M_qb_aa"]), sum(log_t["M_qb"]), abs_tol=1e-12)


def test_paired_blocks_serve_every_arm_each_on_every_task_and_repeat():
    sessions = paired_schedule(session_ids(1), ARMS, ["T/0", "T/1"], caps=[8], repeats=2, processes=3, seed=7)
    (s,) = sessions
    assert len(s.blocks) == 3
    for p, b in enumerate(s.blocks):
        assert sorted(b.arms) == sorted(ARMS)
        got = Counter((r.arm, r.task_id, r.repeat) for r in b.requests)
        reps = (2 * p + 1, 2 * p + 2)  # one endpoint per (arm, task, session, repeat): numbered across processes
        assert got == {(a, t, r): 1 for a in ARMS for t in ("T/0", "T/1") for r in reps}
        assert b.record()["also_arms"] == list(b.also_arms)
    # the draw is the seed's: the same definition, the same schedule; another seed, another
    again = paired_schedule(session_ids(1), ARMS, ["T/0", "T/1"], caps=[8], repeats=2, processes=3, seed=7)
    other = paired_schedule(session_ids(1), ARMS, ["T/0", "T/1"], caps=[8], repeats=2, processes=3, seed=8)
    assert [b.record() for b in again[0].blocks] == [b.record() for b in s.blocks]
    assert [b.record() for b in other[0].blocks] != [b.record() for b in s.blocks]


def test_a_process_that_runs_one_round_draws_its_own_order_and_its_first_arm_is_its_workers():
    # ten arms, one task, one repeat: a process of one round balances nothing by itself; its order is
    # its own draw, so the processes are independent draws of one design
    arms = [f"A{i}" for i in range(10)]
    sessions = paired_schedule(session_ids(2), arms, ["T/0"], caps=[8], repeats=1, processes=5, seed=11)
    orders = [[r.arm for r in b.requests] for s in sessions for b in s.blocks]
    assert len(orders) == 10 and len({tuple(o) for o in orders}) == 10
    # each process's first arm is its worker's first arm (the first context it creates)
    assert [b.arm for s in sessions for b in s.blocks] == [o[0] for o in orders]
    # two arms, four rounds: within the process, each arm first in half its rounds
    (two,) = paired_schedule(session_ids(1), ["A", "B"], ["T/0", "T/1"], caps=[8], repeats=2, processes=4, seed=3)
    for b in two.blocks:
        firsts = [b.requests[i].arm for i in range(0, len(b.requests), 2)]
        assert Counter(firsts) == {"A": 2, "B": 2}


def test_a_process_creates_its_contexts_in_its_first_rounds_order_drawn_per_process():
    # where a context's buffers land moves its speed by a few percent (anc/campaigns.md, "Which context
    # came first"): created in one fixed order, the same recipe came out about 4 % faster as the sixth
    # context than as the second in every process, a bias of every contrast; drawn, it is variance
    arms = ["R", "M_qb", "C_qb", "M_pq", "C_pq", "M_gs", "C_gs", "M_qh", "C_qh", "M_qb_aa"]
    (s,) = paired_schedule(session_ids(1), arms, ["T/0", "T/1"], caps=[8], repeats=1, processes=6, seed=5)
    created = []
    for b in s.blocks:
        first_round = [r.arm for r in b.requests[: len(arms)]]
        assert list(b.arms) == first_round  # the worker's arm, then its also-arms: its creation order
        created.append(tuple(b.arms))
    assert len(set(created)) == len(created)  # no two processes create their contexts alike
    ranks = {a: {order.index(a) for order in created} for a in ("M_qb", "M_qb_aa")}
    assert len(ranks["M_qb"]) > 1 and len(ranks["M_qb_aa"]) > 1  # neither context sits in one slot


def test_the_fresh_design_records_no_request_arm():
    (s,) = round_schedule(session_ids(1), ["M_qb"], ["T/0"], caps=[8], repeats=1, block_by="arm_repeat", seed=7)
    for b in s.blocks:
        rec = b.record()
        assert "also_arms" not in rec and all(len(r) == 3 for r in rec["requests"])


def test_a_tiny_paired_implementation_campaign(tmp_path, lib_path, family_files, capsys, monkeypatch):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    (tmp_path / "panel.jsonl").write_text("".join(json.dumps(t) + "\n" for t in PANEL))
    defn = tmp_path / "implementation.yaml"
    defn.write_text(
        yaml.safe_dump(
            {
                "campaign": "implementation",
                "arms": ["R", "M_qb", "M_pq"],
                "panel": {"source": "file", "file": "panel.jsonl"},
                "cap": 6,
                "repeats": 1,
                "sessions": 1,
                "design": "paired",
                "processes": 2,
                "warmup_cap": 2,
                "aa_arm": "M_qb",
            }
        )
    )
    out = tmp_path / "res"
    rc = cli.main(
        ["campaign", "implementation", "--definition", str(defn), "--out", str(out), "--threads", "1", "--no-progress"]
    )
    assert rc == 0
    cdir = out / "campaigns" / "implementation"
    reqs = read_records("requests", cdir)
    timed = [r for r in reqs if r["status"] == "ok"]
    warm = [r for r in reqs if r["status"] == "excluded_warmup"]
    workers = sorted({r["worker"] for r in reqs})
    assert len(workers) == 2  # two processes, each serving all four arms
    for w in workers:
        assert {r["arm"] for r in timed if r["worker"] == w} == {"R", "M_qb", "M_pq", "M_qb_aa"}
        mine = [r for r in warm if r["worker"] == w]
        assert sorted(r["arm"] for r in mine) == sorted(["R", "M_qb", "M_pq", "M_qb_aa"])
        assert sorted(r["order_index"] for r in mine) == [0, 1, 2, 3]  # each arm's warmup before any timed request
        assert min(r["order_index"] for r in timed if r["worker"] == w) == 4
    # every repaired arm reproduces R on this panel, and every qualified ratio has its paired interval
    qual = read_records("qualification", cdir)
    assert all(q["qualified"] for q in qual), qual
    ratios = read_records("ratios", cdir)
    assert ratios and all(r["design"] == "paired" and r["units"] == 2 for r in ratios), ratios
    assert all(r["lo"] is not None and r["lo"] < r["hi"] and r["verdict"] for r in ratios)
    noise = read_records("noise", cdir)
    (aa,) = noise
    assert aa["twin"] == "M_qb_aa" and aa["units"] == 2 and aa["lo"] is not None
    plan = json.loads((cdir / "plan.json").read_text())
    assert plan["definition"]["design"] == "paired" if "definition" in plan else True


def test_a_tiny_paired_replication_campaign(tmp_path, lib_path, family_files, monkeypatch):
    """E2 in the paired design: one process per session serves R and both layouts of both paths (and
    the A/A twin); the session contrast is the process's within-process contrast."""
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    (tmp_path / "panel.jsonl").write_text("".join(json.dumps(t) + "\n" for t in PANEL))
    defn = tmp_path / "replication.yaml"
    defn.write_text(
        yaml.safe_dump(
            {
                "campaign": "replication",
                "arms": ["R", "M_pq", "M_qb"],
                "paths": ["target"],
                "layouts": ["pq", "qb"],
                "panel": {"source": "file", "file": "panel.jsonl"},
                "block_tasks": 2,
                "references_per_session": 1,
                "cap": 6,
                "repeats": 1,
                "sessions": 3,
                "design": "paired",
                "warmup_cap": 2,
                "aa_arm": "M_qb",
            }
        )
    )
    out = tmp_path / "res"
    rc = cli.main(
        ["campaign", "replication", "--definition", str(defn), "--out", str(out), "--threads", "1", "--no-progress"]
    )
    assert rc == 0
    cdir = out / "campaigns" / "replication"
    reqs = read_records("requests", cdir)
    timed = [r for r in reqs if r["status"] == "ok"]
    by_session = {}
    for r in timed:
        by_session.setdefault(r["session"], set()).add(r["worker"])
    assert len(by_session) == 3 and all(len(w) == 1 for w in by_session.values())  # one process per session
    assert {r["arm"] for r in timed} == {"R", "M_pq", "M_qb", "M_qb_aa"}
    (est,) = read_records("estimates", cdir)
    assert est["n_sessions"] == 3 and est["lo"] is not None and est["lo"] < est["hi"]
    (aa,) = read_records("noise", cdir)
    assert aa["kind"] == "estimate" and aa["units"] == 3


def _sized(interaction: float, within: float, budget_s: float, target: float = 1.03) -> dict:
    """A sized definition under the calibration rule (detectable tau * exp(h)), whose 1.03 costs
    about what 1.05 did under the floor rule (tau * exp(2 h))."""
    from refspec.campaigns.sizing import resolve_size

    defn = {
        "campaign": "implementation",
        "design": "paired",
        "processes": 2,
        "repeats": 1,
        "bootstrap": {"threshold": 1.02},
        "sizing": {
            "target": target,
            "budget_s": budget_s,
            "prior": {
                "between": 0.04,
                "within": within,
                "interaction": interaction,
                "process_s": 3.0,
                "request_s": 0.2,
            },
        },
    }
    return resolve_size(defn, n_arms=4, n_tasks=2)


def test_sizing_chooses_processes_and_passes_from_the_prior_and_records_them():
    small = _sized(interaction=1e-5, within=0.003, budget_s=600)
    plan = small["sizing"]["plan"]
    assert plan["reachable"] and plan["expected_detectable"] <= 1.05
    assert (small["processes"], small["repeats"]) == (plan["processes"], plan["repeats"])
    # a larger process-by-arm interaction needs more processes; a larger within noise, more passes
    more_inter = _sized(interaction=1e-4, within=0.003, budget_s=600)["sizing"]["plan"]
    more_within = _sized(interaction=1e-5, within=0.03, budget_s=600)["sizing"]["plan"]
    assert more_inter["processes"] > plan["processes"]
    assert more_within["repeats"] * more_within["processes"] > plan["repeats"] * plan["processes"]
    # the expected size is what the cost model says it is
    assert plan["expected_seconds"] <= 600
    # a budget that cannot reach the target says so, and what it reaches
    poor = _sized(interaction=1e-3, within=0.03, budget_s=30)["sizing"]["plan"]
    assert not poor["reachable"] and "would cost" in poor["reason"] or "not reached" in poor["reason"]
    assert poor["expected_seconds"] <= 30 or "buys no design" in poor["reason"]
    # the paired design only
    import pytest

    from refspec.campaigns.sizing import resolve_size
    from refspec.core.errors import ConfigError

    with pytest.raises(ConfigError):
        resolve_size({**small, "design": "fresh"}, 4, 2)


def test_a_sized_campaign_measures_its_costs_pays_its_pilot_from_the_budget_and_a_resume_reuses_it(
    tmp_path, lib_path, family_files, monkeypatch
):
    """The pilot: a prior whose costs are a thousand times too small would buy 30 processes x 6
    passes (the cheapest plan that reaches 1.03 under the calibration rule); sized with the costs the pilot measures here (and the budget less the pilot's seconds),
    the plan is the one the cost model gives for those costs. The frozen plan records the pilot, an
    analysis of the frozen plan reuses it (no second pilot, the same plan), and report/check.py sizes
    the plan again from it."""
    import os

    from refspec_check.sizing import expected_row

    from refspec.campaigns.sizing import resolve_size

    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    (tmp_path / "panel.jsonl").write_text("".join(json.dumps(t) + "\n" for t in PANEL))
    prior = {"between": 0.0007, "within": 0.0035, "interaction": 0.00004, "process_s": 0.001, "request_s": 0.001}
    base = {
        "campaign": "implementation",
        "arms": ["R", "M_qb"],
        "panel": {"source": "file", "file": "panel.jsonl"},
        "cap": 6,
        "repeats": 1,
        "sessions": 1,
        "design": "paired",
        "processes": 2,
        "warmup_cap": 2,
        "aa_arm": "M_qb",
        "bootstrap": {"threshold": 1.02},
    }
    defn = tmp_path / "implementation.yaml"
    defn.write_text(yaml.safe_dump({**base, "sizing": {"target": 1.03, "budget_s": 20, "prior": prior}}))
    out = tmp_path / "res"
    args = ["campaign", "implementation", "--definition", str(defn), "--out", str(out), "--threads", "1"]
    assert cli.main([*args, "--no-progress"]) == 0
    cdir = out / "campaigns" / "implementation"
    plan = json.loads((cdir / "plan.json").read_text())
    sizing = plan["definition"]["sizing"]
    pilot = sizing["pilot"]
    assert "failed" not in pilot, pilot
    assert pilot["requests"] == 3  # R, M_qb and the twin M_qb_aa, one request each
    assert pilot["request_s"] > 10 * prior["request_s"] and pilot["process_s"] > 10 * prior["process_s"]
    assert 0 < pilot["seconds"] < 20
    assert json.loads((cdir / "pilot" / "pilot.json").read_text()) == pilot
    # the plan is the cost model's for the pilot's costs, not the prior's
    bare = {**base, "sizing": {"target": 1.03, "budget_s": 20, "prior": prior}}
    by_prior = resolve_size(bare, 3, 2)["sizing"]["plan"]
    by_pilot = resolve_size({**bare, "sizing": {**bare["sizing"], "pilot": pilot}}, 3, 2)["sizing"]["plan"]
    assert (by_prior["processes"], by_prior["repeats"], by_prior["reachable"]) == (30, 6, True)
    assert plan["aa_rule"] == "calibration"  # the rule the plan was sized under, frozen with it
    assert sizing["plan"] == by_pilot and plan["definition"]["processes"] == by_pilot["processes"] < 30
    assert by_pilot["expected_seconds"] <= 20 - pilot["seconds"] or "buys no design" in by_pilot["reason"]
    workers = {r["worker"] for r in read_records("requests", cdir)}
    assert len(workers) == by_pilot["processes"]  # the pilot's process timed nothing
    # re-analysed from the frozen plan: the same pilot, no second one
    stamp = os.stat(cdir / "pilot" / "pilot.json").st_mtime_ns
    assert cli.main([*args, "--analyze"]) == 0
    assert os.stat(cdir / "pilot" / "pilot.json").st_mtime_ns == stamp
    assert json.loads((cdir / "plan.json").read_text())["definition"]["sizing"]["pilot"] == pilot
    # the checker sizes the plan again from the pilot
    row = expected_row(plan)
    assert (row["processes"], row["repeats"], row["expected_seconds"]) == (
        by_pilot["processes"],
        by_pilot["repeats"],
        by_pilot["expected_seconds"],
    )


def test_a_pilot_that_fails_is_recorded_and_the_prior_sizes_the_plan(tmp_path, family_files, lib_path):
    """A pilot whose worker cannot start (no libraries where it looks) is recorded with its reason; the
    plan is then the prior's."""
    from refspec.campaigns.pilot import costs, measure
    from refspec.core.arms import load_arms

    arms = load_arms()
    picked = {n: arms[n].with_(threads=1) for n in ("R", "M_qb")}
    from refspec.campaigns.context import write_arms_file

    write_arms_file(picked, tmp_path / "arms.yaml")
    from refspec.core.panels import Task

    pilot = measure(
        family="smollm2-135m",
        arms=picked,
        tasks=[Task("T/0", "Say hello.")],
        cap=4,
        files=family_files,
        draft=None,
        lib_dir=tmp_path / "no-libraries",
        arms_file=tmp_path / "arms.yaml",
        out=tmp_path / "pilot",
        warmup_cap=2,
    )
    assert set(pilot) == {"failed"} and "did not start" in pilot["failed"]
    assert json.loads((tmp_path / "pilot" / "pilot.json").read_text()) == pilot
    sizing = {"budget_s": 50, "prior": {"process_s": 3.0, "request_s": 0.5}, "pilot": pilot}
    assert costs(sizing) == (3.0, 0.5, 50.0)
