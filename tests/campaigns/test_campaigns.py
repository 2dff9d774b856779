"""Campaigns: counterbalanced schedules, definitions, resume after SIGKILL, a tiny phase-mask sweep.

* Schedules are drawn from the seed: the same seed gives the same schedule; the
  replication blocks read ABBA within a group, each layout runs first in as many
  groups as the other, and every worker serves one block.
* A replication campaign run as ``refspec campaign`` in a subprocess is killed
  with SIGKILL at three points (after its first completed request, with a
  request in flight in the middle of a block, between sessions) and resumed each
  time: it completes, the journal and ledger written before each kill are intact
  byte for byte, every completed request is in the final tables unchanged, each
  in-flight request is a failed attempt "interrupted: ..." and the ledger shows
  the interruptions.
* A tiny phase-mask sweep writes the per-mask table.

Real models (the embedded ``smollm2-135m`` family) and real workers, one thread
each; short text prompts and small caps keep the whole file near two minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from refspec import cli
from refspec.campaigns.definitions import load_definition
from refspec.campaigns.scheduler import abba_schedule, round_schedule, session_ids
from refspec.core.campaign_names import CAMPAIGNS
from refspec.core.errors import ConfigError
from refspec.core.paths import package_path
from refspec.core.tables import read_records
from refspec.provenance.ledger import verify_chain

PANEL = [{"task_id": "T/0", "text": "Say hello."}, {"task_id": "T/1", "text": "Count to three."}]


def write_panel(path: Path) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in PANEL))
    return path


# --------------------------------------------------------------------------- schedules (no models)


def _arm_for(path, layout):
    return {"target": "M", "spec": "C"}[path] + "_" + layout


def _abba(seed, n_tasks=8, sessions=4, block_tasks=2):
    tasks = [f"T/{i}" for i in range(n_tasks)]
    return abba_schedule(
        session_ids(sessions),
        tasks,
        paths=["target", "spec"],
        layouts=["pq", "qb"],
        arm_for=_arm_for,
        block_tasks=block_tasks,
        cap=32,
        repeats=1,
        references=2,
        seed=seed,
    )


def test_abba_blocks_counterbalanced_and_reproducible_from_the_seed():
    a, b = _abba(20261014), _abba(20261014)
    assert [s.record() for s in a] == [s.record() for s in b]
    assert [s.record() for s in a] != [s.record() for s in _abba(7)]
    tasks = {f"T/{i}" for i in range(8)}
    for s in a:
        groups: dict[str, list] = {}
        for blk in s.blocks:
            groups.setdefault(blk.role.split(":")[0], []).append(blk)
        assert len(groups) == 4
        first = Counter()
        first_by_path = Counter()
        for g, blocks in groups.items():
            arms = [blk.arm for blk in blocks]
            assert arms[0] == arms[-1] == "R"  # serial references open and close the group
            mid = blocks[1:-1]
            lays = [blk.arm.split("_")[1] for blk in mid]
            paths = [blk.arm.split("_")[0] for blk in mid]
            assert lays[0] == lays[3] and lays[1] == lays[2] and lays[0] != lays[1], lays  # ABBA
            assert paths[0] == paths[1] and paths[2] == paths[3] and paths[0] != paths[2]
            first[lays[0]] += 1
            first_by_path[(paths[0], lays[0])] += 1
            first_by_path[(paths[2], lays[2])] += 1
            # one worker per block, all blocks of a group serve the same tasks in the same order
            orders = {tuple(q.task_id for q in blk.requests if q.repeat == blk.requests[0].repeat) for blk in blocks}
            assert len(orders) == 1
            full = {"M": "target", "C": "spec"}
            assert [blk.role.split(": ")[1] for blk in mid] == [
                f"{full[paths[0]]} A",
                f"{full[paths[0]]} B",
                f"{full[paths[2]]} A",
                f"{full[paths[2]]} B",
            ]
        assert first["pq"] == first["qb"] == 2  # balanced: as many groups start with PQ as with QB
        for path in "MC":  # and, within each path, as many blocks of PQ as of QB run first
            assert first_by_path[(path, "pq")] == first_by_path[(path, "qb")] == 2
        # every arm serves every task once per session; two serial references per task and session
        per_arm = Counter((blk.arm, q.task_id) for blk in s.blocks for q in blk.requests)
        for arm in ("M_pq", "M_qb", "C_pq", "C_qb"):
            assert {t for (a_, t) in per_arm if a_ == arm} == tasks
            assert all(per_arm[(arm, t)] == 1 for t in tasks)
        assert all(per_arm[("R", t)] == 2 for t in tasks)
        assert sorted(q.repeat for blk in s.blocks if blk.arm == "R" for q in blk.requests if q.task_id == "T/0") == [
            1,
            2,
        ]


def test_abba_odd_group_count_balances_over_sessions():
    sched = _abba(11, n_tasks=6, sessions=2, block_tasks=2)  # three groups per session
    first = Counter()
    for s in sched:
        for blk in s.blocks:
            if blk.role.endswith(" A"):
                first[blk.arm] += 1
    assert first["M_pq"] == first["M_qb"] == first["C_pq"] == first["C_qb"] == 3


def test_round_schedule_reverses_the_arm_order_and_is_reproducible():
    args = dict(caps=[16], repeats=2, block_by="arm_repeat", seed=5)
    s = round_schedule(session_ids(2), ["A", "B", "C"], ["t1", "t2", "t3"], **args)
    assert [x.record() for x in s] == [
        x.record() for x in round_schedule(session_ids(2), ["A", "B", "C"], ["t1", "t2", "t3"], **args)
    ]
    rounds = [[b.arm for b in x.blocks if b.arm != "R"] for x in s]
    for x in rounds:
        assert x[3:] == x[:3][::-1]  # the second round of a pair reverses the first
    pos = Counter()
    for x in s:
        others = [b.arm for b in x.blocks if b.arm != "R"]
        for i, a in enumerate(others):
            pos[a] += i % 3
    assert len(set(pos.values())) == 1  # every arm has the same mean position in its round
    # the reference runs at least twice per task and session
    for x in s:
        assert sorted(q.repeat for b in x.blocks if b.arm == "R" for q in b.requests if q.task_id == "t1") == [1, 2]
    one = round_schedule(["s01"], ["A"], ["t1"], caps=[8], repeats=1, block_by="arm", seed=1)[0]
    assert [b.arm for b in one.blocks] == ["R", "A", "R"]


def test_round_schedule_draws_a_fresh_order_per_session_and_pair_of_rounds():
    """A fixed order for the whole campaign makes one arm always follow the same other arm (its
    predecessor's memory, page cache and draft file): the order must differ between sessions and
    between pairs of rounds, drawn from the seed."""
    arms = ["A", "B", "C", "D", "E", "F", "G"]
    s = round_schedule(session_ids(4), arms, ["t1"], caps=[8], repeats=4, block_by="arm_repeat", seed=5)
    firsts = set()
    for x in s:
        others = [b.arm for b in x.blocks if b.arm != "R"]
        pairs = [others[0:7], others[14:21]]
        assert others[7:14] == pairs[0][::-1] and others[21:28] == pairs[1][::-1]
        firsts.update(tuple(p) for p in pairs)
    assert len(firsts) == 8  # eight pairs of rounds, eight different orders


# --------------------------------------------------------------------------- definitions


def test_every_definition_validates_in_both_presets():
    for name in CAMPAIGNS:
        d, _ = load_definition(name, "default")
        p, _ = load_definition(name, "paper")
        assert d["campaign"] == p["campaign"] == name
        assert "presets" not in d and "presets" not in p
        assert p["bootstrap"] == {"seed": 20261014, "draws": 10000, "threshold": 1.02}
    rep, _ = load_definition("replication", "paper")
    assert (rep["sessions"], rep["gap_s"], rep["block_tasks"], rep["cap"]) == (6, 3600, 4, 128)
    assert load_definition("replication")[0]["gap_s"] <= 5
    conf, _ = load_definition("confirmation", "paper")
    assert (conf["sessions"], conf["repeats"]) == (2, 5)
    pm, _ = load_definition("phase_mask", "paper")
    assert sorted(pm["masks"]) == list(range(16)) and pm["repeats"] >= 2


def test_a_bad_definition_is_refused_with_its_path(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "campaign": "replication",
                "arms": ["R"],
                "paths": ["target"],
                "layouts": ["pq", "qb"],
                "panel": {"source": "humaneval", "tasks": "0"},
                "block_tasks": 1,
                "sesions": 2,
            }
        )
    )
    with pytest.raises(ConfigError, match="sesions"):
        load_definition("replication", path=bad)
    with pytest.raises(ConfigError, match="no preset"):
        load_definition("replication", "nope")


# --------------------------------------------------------------------------- kill and resume (real models)


def _ledger(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    with open(path, "rb") as f:
        for line in f:
            if line.endswith(b"\n"):
                out.append(json.loads(line))
    return out


def _run(cmd, env, ledger_path, kill_when, log, timeout=240):
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    t0 = time.monotonic()
    try:
        while p.poll() is None:
            if kill_when is not None and kill_when(_ledger(ledger_path)):
                p.send_signal(signal.SIGKILL)
                p.wait()
                return "killed"
            if time.monotonic() - t0 > timeout:
                raise AssertionError("campaign did not finish in time")
            time.sleep(0.03)
        return p.returncode
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _our_workers(out: Path) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "refspec.commands.worker" in cmd and str(out) in cmd:
                pids.append(int(d.name))
    return pids


@pytest.mark.slow
def test_replication_killed_three_times_resumes_with_everything_intact(tmp_path, lib_path, family_files):
    write_panel(tmp_path / "panel.jsonl")
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
                "cap": 4,
                "sessions": 2,
                "gap_s": 4,
                "warmup_cap": 2,
                "bootstrap": {"draws": 200},
            }
        )
    )
    out = tmp_path / "results"
    cdir = out / "campaigns" / "replication"
    ledger_path, journal_path = cdir / "ledger.jsonl", cdir / "journal.jsonl"
    env = dict(os.environ, PYTHONPATH=package_path(), LLAMA_CPP_LIB_PATH=str(lib_path))
    cmd = [
        sys.executable,
        "-m",
        "refspec.cli",
        "campaign",
        "replication",
        "--definition",
        str(defn),
        "--out",
        str(out),
        "--threads",
        "1",
        "--no-progress",
    ]
    log = open(tmp_path / "campaign.log", "ab")

    def kinds(recs, kind, **kw):
        return [r for r in recs if r.get("kind") == kind and all(r.get(k) == v for k, v in kw.items())]

    kill_points = [
        # 1. right after the first completed request
        lambda recs: len(kinds(recs, "attempt")) >= 1,
        # 2. mid-block: the second request of the first PQ/QB block is in flight
        lambda recs: bool(kinds(recs, "submit", session="s01", block=1, order_index=2)),
        # 3. between sessions (waiting out the gap)
        lambda recs: bool(kinds(recs, "session_end", session="s01")),
    ]
    snapshots = []
    for i, when in enumerate(kill_points):
        rc = _run(cmd + (["--resume"] if i else []), env, ledger_path, when, log)
        assert rc == "killed", f"kill point {i + 1} was never reached (exit {rc}); see {tmp_path / 'campaign.log'}"
        snapshots.append((journal_path.read_bytes(), ledger_path.read_bytes()))
    rc = _run(cmd + ["--resume"], env, ledger_path, None, log)
    assert rc == 0, (tmp_path / "campaign.log").read_text()[-3000:]

    # append-only: everything written before each kill is still there, byte for byte
    final_journal, final_ledger = journal_path.read_bytes(), ledger_path.read_bytes()
    for j, led in snapshots:
        assert final_journal.startswith(j) and final_ledger.startswith(led)
    assert verify_chain(ledger_path) == []

    # every request completed before a kill is in the final tables, unchanged
    rows = {(r["session"], r["worker"], r["order_index"], r["attempt"]): r for r in read_records("requests", cdir)}
    for j, _led in snapshots:
        for line in j.splitlines():
            rec = json.loads(line)
            if rec.get("type") != "request":
                continue
            row = rec["row"]
            assert rows[(row["session"], row["worker"], row["order_index"], row["attempt"])] == row
    ok = Counter((r["session"], r["block"], r["task_id"], r["repeat"]) for r in rows.values() if r["status"] == "ok")
    assert len(ok) == 12 and set(ok.values()) == {1}  # 2 sessions x 3 blocks x 2 tasks, each exactly once
    interrupted = [r for r in rows.values() if r["status"] == "failed"]
    assert interrupted and all(r["reason"].startswith("interrupted:") for r in interrupted)
    for r in interrupted:  # the interrupted attempt was re-run as the next attempt and completed
        assert any(
            x["status"] == "ok"
            and x["attempt"] == r["attempt"] + 1
            and (x["session"], x["block"], x["task_id"], x["repeat"])
            == (r["session"], r["block"], r["task_id"], r["repeat"])
            for x in rows.values()
        )

    recs = _ledger(ledger_path)
    runs = [r for r in recs if r["kind"] == "interruption" and "ended without closing" in r["reason"]]
    assert len(runs) == 3
    assert len(kinds(recs, "run_start")) == 4 and len(kinds(recs, "plan_frozen")) == 1
    # the gap held across the kill between sessions
    end1 = next(r for r in recs if r["kind"] == "session_end" and r["session"] == "s01")
    start2 = next(r for r in recs if r["kind"] == "session_start" and r["session"] == "s02")
    from refspec.campaigns.runner import parse_utc

    assert (parse_utc(start2["time"]) - parse_utc(end1["time"])).total_seconds() >= 4
    est = read_records("estimates", cdir)
    assert len(est) == 1 and est[0]["n_sessions"] == 2 and est[0]["estimate"] > 0
    assert len(read_records("contrasts", cdir)) == 2
    audit = json.loads((cdir / "timed_audit.json").read_text())
    assert audit["counters"]["target-only PQ/QB"]["pairs"] == 4
    assert "Table S5" in (cdir / "summary.txt").read_text()
    assert _our_workers(out) == []


# --------------------------------------------------------------------------- phase-mask sweep (real models)


@pytest.mark.slow
def test_tiny_phase_mask_sweep_writes_the_per_mask_table(tmp_path, lib_path, family_files, capsys, monkeypatch):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib_path))
    write_panel(tmp_path / "panel.jsonl")
    defn = tmp_path / "phase_mask.yaml"
    defn.write_text(
        yaml.safe_dump(
            {
                "campaign": "phase_mask",
                "panel": {"source": "file", "file": "panel.jsonl"},
                "base_arm": "C_qb",
                "masks": [0, 3],
                "arm_overrides": {"draft_ub": 4},
                "cap": 6,
                "repeats": 2,
                "block_by": "arm",
                "warmup_cap": 2,
            }
        )
    )
    rc = cli.main(
        [
            "campaign",
            "phase_mask",
            "--definition",
            str(defn),
            "--out",
            str(tmp_path / "res"),
            "--threads",
            "1",
            "--no-progress",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "inclusion-minimal passing mask(s):" in text and "Table S1" in text
    cdir = tmp_path / "res" / "campaigns" / "phase_mask"
    rows = read_records("phase_masks", cdir)
    assert [r["mask"] for r in rows] == [0, 3]
    for r in rows:
        assert r["n_tasks"] == 2 and r["repeats"] == 2 and 0 <= r["matches"] <= 4
        assert r["passes"] == (r["matches"] == 4)
    passing = [r["mask"] for r in rows if r["passes"]]
    assert [r["mask"] for r in rows if r["minimal"]] == passing[:1]
    qual = read_records("qualification", cdir)
    assert {q["arm"] for q in qual} == {"R", "C_m0", "C_m3"}
    plan = json.loads((cdir / "plan.json").read_text())
    assert plan["arms"]["C_m3"]["mask"] == 3 and plan["arms"]["C_m3"]["draft_ub"] == 4
    assert plan["bootstrap"] == {"seed": 20261014, "draws": 10000, "threshold": 1.02}
    # a second start without --resume is refused; --analyze rewrites the same tables
    assert (
        cli.main(
            [
                "campaign",
                "phase_mask",
                "--definition",
                str(defn),
                "--out",
                str(tmp_path / "res"),
                "--threads",
                "1",
                "--no-progress",
            ]
        )
        == 2
    )
    before = (cdir / "phase_masks.csv").read_bytes()
    assert (
        cli.main(
            [
                "campaign",
                "phase_mask",
                "--definition",
                str(defn),
                "--out",
                str(tmp_path / "res"),
                "--threads",
                "1",
                "--analyze",
            ]
        )
        == 0
    )
    assert (cdir / "phase_masks.csv").read_bytes() == before
