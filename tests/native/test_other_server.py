"""A llama-server of another llama.cpp version (opt-in: ``./run test -m other_server``).

Builds the stock ``llama-server`` of ``llama-cpp-python==0.3.16`` (llama.cpp 4227c9be, sha256-pinned
sdist, ``support.other_server.build_other_server``; cached under ``$REFSPEC_CACHE/native`` by its inputs,
about 9 to 17 minutes on a shared 2-core machine the first time) and runs one confirmation campaign
with refspec's R and that server's arms on HumanEval 0-11 at cap 128. Its endpoints are then
qualified twice: against refspec's R (the campaign's own table) and against the server's own
micro-batch-1 reference ``S_ref`` (the same endpoints, ``qualification_table(reference_arm=...)``).
The table is written to ``other_server.json`` in the campaign folder and printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from support.paths import REPO_ROOT as REPO

ARMS = {"S_ref": 1, "S_ub512": 512, "S_ub4": 4}


@pytest.fixture(scope="module")
def old_server(native_build):
    from support.other_server import OLD_SERVER_SDIST, build_other_server

    b = build_other_server(OLD_SERVER_SDIST)
    assert b.record["sdist"]["version"] == "0.3.16"
    assert b.record["sdist"]["sha256"] == "34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6"
    assert b.record["patches"] == [] and b.record["variant"] == "stock"
    return b.tool("llama-server")


def _table(qual_r: list[dict], qual_own: list[dict]) -> dict:
    def by(q):
        return {(r["arm"], r["task_id"]): r for r in q}

    r, own = by(qual_r), by(qual_own)
    out = {}
    for arm in ("S_ref", "S_ub512", "S_ub4", "S_spec"):
        tasks = sorted({t for a, t in r if a == arm}, key=lambda t: int(t.split("/")[-1]))
        rows = []
        for t in tasks:
            a, b = r[(arm, t)], own[(arm, t)]
            rows.append(
                {
                    "task": t,
                    "vs_R": None if a["qualified"] else [a["first_diff_index"], a["ref_token"], a["arm_token"]],
                    "vs_own": None if b["qualified"] else [b["first_diff_index"], b["ref_token"], b["arm_token"]],
                }
            )
        out[arm] = {
            "vs_R": sum(1 for x in rows if x["vs_R"] is None),
            "vs_own": sum(1 for x in rows if x["vs_own"] is None),
            "tasks": len(rows),
            "rows": rows,
        }
    return out


@pytest.mark.other_server
def test_other_version_against_R_and_its_own_reference(tmp_path, old_server, family_files):
    from refspec.campaigns.derived import qualification_table
    from refspec.core.tables import read_table

    base = yaml.safe_load((REPO / "config" / "arms.yaml").read_text())
    arms = {"R": base["arms"]["R"]}
    srv = {"binary": str(old_server), "ready_timeout_s": 300}
    for name, ub in ARMS.items():
        arms[name] = {"kind": "server", "mode": "target", "layout": "mq", "ub": ub, "mask": 0, "server": srv}
    arms["S_spec"] = {"kind": "server", "mode": "spec", "layout": "mq", "ub": 512, "mask": 0, "k": 3, "server": srv}
    (tmp_path / "arms.yaml").write_text(yaml.safe_dump({"defaults": base["defaults"], "arms": arms}))
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg.update(arms_file=str(tmp_path / "arms.yaml"), results=str(tmp_path / "results"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    defn = {
        "campaign": "confirmation",
        "arms": ["R", *ARMS, "S_spec"],
        "panel": {"source": "humaneval", "tasks": "0-11"},
        "cap": 128,
        "repeats": 1,
        "sessions": 1,
        "warmup_cap": 4,
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(defn))
    p = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "campaign", "confirmation", "--definition", str(tmp_path / "c.yaml"),
         "--config", str(tmp_path / "config.yaml"), "--out", str(tmp_path / "results"), "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=5400, env=dict(os.environ),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    cdir = next((tmp_path / "results").rglob("campaigns/confirmation"))
    req, eps = read_table("requests", cdir), read_table("endpoints", cdir)
    qual_r = read_table("qualification", cdir).to_dict("records")
    qual_own = qualification_table(req, eps, campaign="confirmation", reference_arm="S_ref")
    table = _table(qual_r, qual_own)
    (cdir / "other_server.json").write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps({a: {k: v for k, v in t.items() if k != "rows"} for a, t in table.items()}))
    for arm, t in table.items():
        assert t["tasks"] == 12, arm
        for row in t["rows"]:
            for side in ("vs_R", "vs_own"):
                if row[side] is not None:  # a divergence names its index (the tokens: None past an end)
                    assert row[side][0] is not None
    assert table["S_ref"]["vs_own"] == 12  # the reference against itself: stable, every task
