"""A controlled state stage whose partition arms never differ records a vacuous claim, not a supported one.

``refspec claim partition`` and ``refspec claim crosses`` derive their claims from the partition table:
where no arm's endpoint, KV or initial-logits class differs from A's on any input, the claim says
"vacuous: no exposed input in N screened" (status ``vacuous``); where one differs, it is the stage's
claim as before. Real Parquet tables, written and read by refspec's table layer."""

from __future__ import annotations

import json
from pathlib import Path

from refspec.core import tables as T
from refspec.provenance.claims import CLAIMS, record_claim

TASKS = ("HumanEval/0", "HumanEval/1", "HumanEval/2")


def _row(task: str, arm: str, repeat: int, kv_class: int = 0) -> dict:
    kv = "k" * 63 + str(kv_class)
    return dict(
        family="smollm2-135m",
        task_id=task,
        arm=arm,
        repeat=repeat,
        prompt_len=40,
        ub=4 if arm == "A" else 1,
        partition=[40] if arm == "A" else [20, 20],
        degenerate=False,
        cap=16,
        callers=1,
        micrographs=1,
        endpoint_sha256="e" * 64,
        tokens=[1, 2, 3],
        n=3,
        eog=False,
        last_token=3,
        stop_reason="cap",
        initial_token=1,
        initial_margin=0.5,
        logits_sha256="l" * 64,
        kv_sha256=kv,
        kv_bytes=1024,
        first_diff_vs_A=None,
        endpoint_class=0,
        kv_class=kv_class,
        logits_class=0,
        kv_payload=None,
        logits_payload=None,
    )


def _partition(d: Path, exposed: str | None) -> Path:
    d.mkdir(parents=True)
    rows = [
        _row(t, arm, rep, kv_class=1 if (t == exposed and arm == "B") else 0)
        for t in TASKS
        for arm in ("A", "B")
        for rep in (1, 2)
    ]
    T.write_table(rows, "partition", d)
    return d


def test_partition_arms_never_differ_is_vacuous(tmp_path):
    d = _partition(tmp_path / "partition", exposed=None)
    row = record_claim("partition", d, 0)
    assert row["status"] == "vacuous"
    assert row["claim"] == "vacuous: no exposed input in 3 screened"
    assert json.loads((d / "claim.json").read_text())["status"] == "vacuous"
    assert T.read_records("claims", d)[0]["status"] == "vacuous"


def test_an_exposed_input_keeps_the_claim(tmp_path):
    d = _partition(tmp_path / "partition", exposed="HumanEval/1")
    row = record_claim("partition", d, 0)
    assert row["status"] == "supported" and row["claim"] == CLAIMS["partition"]


def test_crosses_on_a_vacuous_partition_are_vacuous(tmp_path):
    p = _partition(tmp_path / "partition", exposed=None)
    d = tmp_path / "crosses"
    d.mkdir()
    T.write_table([], "crosses", d)
    (d / "crosses.json").write_text(json.dumps({"partition": str(p)}))
    assert record_claim("crosses", d, 0)["status"] == "vacuous"
    p2 = _partition(tmp_path / "partition2", exposed="HumanEval/2")
    (d / "crosses.json").write_text(json.dumps({"partition": str(p2)}))
    assert record_claim("crosses", d, 0)["status"] == "supported"


def test_a_failed_control_is_withheld_even_when_vacuous(tmp_path):
    d = _partition(tmp_path / "partition", exposed=None)
    assert record_claim("partition", d, 1)["status"] == "withheld"
