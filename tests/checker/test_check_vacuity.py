"""report/check.py recomputes the vacuity verdict of the partition and crosses claims from partition.csv:
a claim marked ``supported`` where no partition arm differs from A on any input is refused, as is a claim
marked ``vacuous`` where one differs; the matching claim passes (refspec_check.state.check_claims)."""

from __future__ import annotations

import pytest
from refspec_check.context import Context
from refspec_check.contract import CLAIMS, CsvTable
from refspec_check.digests import endpoint_digest
from refspec_check.problems import Checker
from refspec_check.render.vacuity import vacuous_text
from refspec_check.state import check_claims, check_frontier, check_partition, frontier_note

TASKS = ("HumanEval/0", "HumanEval/1")


def _partition(exposed: bool) -> CsvTable:
    rows = []
    for t in TASKS:
        for arm in ("A", "B"):
            for rep in (1, 2):
                differs = exposed and t == TASKS[1] and arm == "B"
                toks = [1, 2, 3]
                rows.append(
                    dict(
                        task_id=t,
                        arm=arm,
                        repeat=rep,
                        prompt_len=40,
                        degenerate=False,
                        endpoint_sha256=endpoint_digest(toks, False, "cap"),
                        tokens=toks,
                        n=3,
                        eog=False,
                        last_token=3,
                        stop_reason="cap",
                        kv_sha256="k1" if differs else "k0",
                        logits_sha256="l0",
                        first_diff_vs_A=None,
                        endpoint_class=0,
                        kv_class=1 if differs else 0,
                        logits_class=0,
                    )
                )
    return CsvTable("partition", "partition.csv", "tables/partition.csv", rows, list(range(2, len(rows) + 2)))


def _problems(exposed: bool, status: str, words: str | None = None) -> list[str]:
    c = Checker("archive", quiet=True)
    if words is None:  # a vacuous claim says so in its words, as refspec claim records it
        words = vacuous_text(len(TASKS)) if status == "vacuous" else CLAIMS["partition"]
    claim = dict(
        claim=words,
        stage="partition",
        record="campaigns/partition",
        status=status,
        exit_code=0,
        controls=4,
        controls_failed=0,
        reason=None,
    )
    tables = {
        "partition": _partition(exposed),
        "claims": CsvTable("claims", "claims.csv", "tables/claims.csv", [claim], [2]),
    }
    ctx = Context(c, tables, lambda name: f"tables/{name}.csv")
    nat = check_partition(ctx)
    check_claims(ctx, nat)
    return c.problems


@pytest.mark.parametrize("exposed,status", [(False, "vacuous"), (True, "supported")])
def test_matching_verdict_passes(exposed, status):
    assert _problems(exposed, status) == []


def test_supported_where_no_partition_arm_differs_is_refused():
    probs = _problems(False, "supported")
    assert any("no partition arm differs on any of the 2 inputs: the claim is vacuous" in p for p in probs), probs


def test_vacuous_where_a_partition_arm_differs_is_refused():
    probs = _problems(True, "vacuous")
    assert any("vacuous, but a partition arm differs" in p for p in probs), probs


def test_a_claim_in_other_words_is_refused():
    """A claim's words are its stage's registered claim, as refspec claim records them: a claim rewritten
    to say more than its table shows is a mismatch."""
    probs = _problems(True, "supported", "every partition arm gives bitwise equal endpoints, KV bytes and logits")
    assert any("the stage's registered claim:" in p for p in probs), probs


def _frontier(**over) -> list[str]:
    row = dict(
        task_id="HumanEval/2",
        direction="A->U1",
        panel="KV",
        repeat=2,
        arms="EMPTY,K_ALL,V_ALL,ALL",
        frontier=32,
        token_a=5075,
        token_b=464,
        additive=None,
        d_first=None,
        d_second=None,
        actual=None,
        interaction=None,
        max_abs_interaction=None,
        note=None,
    )
    row.update(over)
    c = Checker("archive", quiet=True)
    ctx = Context(c, {"frontier": CsvTable("frontier", "frontier.csv", "tables/frontier.csv", [row], [2])}, str)
    check_frontier(ctx, {})
    return c.problems


@pytest.mark.parametrize(
    "over",
    [
        {"frontier": None, "token_a": None, "token_b": None},
        {"token_a": None, "token_b": None},
        {"token_b": None},
        {},
    ],
)
def test_a_frontier_note_is_derived_from_its_row(over):
    assert _frontier(**over, note=frontier_note({**dict(frontier=32, token_a=5075, token_b=464), **over})) == []
    wrong = "the four trajectories agree to the end" if over.get("frontier", 32) is not None else None
    probs = _frontier(**over, note=wrong)
    assert any("frontier.csv" in p and "note" in p for p in probs), probs
