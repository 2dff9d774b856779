"""Any arm can be a campaign's reference (``reference: ARM``): refused unless a micro-batch-1 recipe;
qualification and report/check.py follow the named reference."""

from __future__ import annotations

import copy

import pytest
import refspec_check

from refspec.campaigns import confirmation
from refspec.campaigns.derived import qualification_table
from refspec.core.arms import Arm, check_reference, reference_of, reference_problems
from refspec.core.endpoint import Endpoint
from refspec.core.errors import ConfigError
from refspec.core.paths import REPO_ROOT

CHECK = REPO_ROOT / "report" / "check.py"


def server_arm(name, **kw):
    base = dict(mode="target", layout="mq", ub=1, mask=0, kind="server", server={"binary": "/x/llama-server"})
    return Arm.of(name, {**base, **kw})


def test_reference_must_be_micro_batch_1():
    assert reference_problems(server_arm("S_ref")) == []
    for arm, words in (
        (server_arm("S_ub512", ub=512), "micro-batch is 512"),
        (server_arm("S_spec", mode="spec"), "speculates"),
        (server_arm("S_args", server={"binary": "/x/s", "args": ["-ub", "4"]}), "server.args set -ub"),
    ):
        with pytest.raises(ConfigError) as e:
            check_reference(arm, "campaign confirmation")
        assert words in str(e.value) and arm.name in str(e.value) and e.value.exit_code == 2
    assert reference_of({}) == "R" and reference_of({"reference": "S_ref"}) == "S_ref"


def test_named_reference_goes_first_and_is_refused_when_batched():
    catalog = {
        "R": Arm(name="R", mode="target", layout="mq", ub=1, mask=0),
        "S_ref": server_arm("S_ref"),
        "S_ub512": server_arm("S_ub512", ub=512),
    }
    defn = {"campaign": "confirmation", "arms": ["S_ub512", "S_ref"], "reference": "S_ref"}
    assert [a.name for a in confirmation.named_arms(defn, catalog)] == ["S_ref", "S_ub512"]
    with pytest.raises(ConfigError, match="S_ub512 cannot be the reference"):
        check_reference(confirmation.named_arms({**defn, "reference": "S_ub512"}, catalog)[0])


def _rows(arm, task, toks, *, session="s1", repeat=1, stop="cap"):
    ep = Endpoint(tuple(toks), stop == "eog", stop)
    req = dict(campaign="confirmation", family="f", task_id=task, cap=4, arm=arm, session=session, repeat=repeat)
    return (
        {**req, "status": "ok"},
        {**req, "tokens": list(toks), "eog": ep.eog, "stop_reason": stop, "endpoint_sha256": ep.sha256},
    )


def synthetic():
    """Two tasks. The named reference S_ref (two runs each); R disagrees with S_ref on t1 at index 2;
    S_ub512 matches S_ref on t0 and diverges on t1 at index 1 (reference 5, arm 9)."""
    spec = [
        ("S_ref", "t0", [1, 2, 3, 4], 1),
        ("S_ref", "t0", [1, 2, 3, 4], 2),
        ("S_ref", "t1", [7, 5, 6, 8], 1),
        ("S_ref", "t1", [7, 5, 6, 8], 2),
        ("R", "t0", [1, 2, 3, 4], 1),
        ("R", "t1", [7, 5, 0, 8], 1),
        ("S_ub512", "t0", [1, 2, 3, 4], 1),
        ("S_ub512", "t1", [7, 9, 6, 8], 1),
    ]
    reqs, eps = [], []
    for arm, task, toks, rep in spec:
        r, e = _rows(arm, task, toks, repeat=rep)
        reqs.append(r)
        eps.append(e)
    return reqs, eps


def test_qualification_against_named_reference_by_hand():
    reqs, eps = synthetic()
    rows = {(q["arm"], q["task_id"]): q for q in qualification_table(reqs, eps, reference_arm="S_ref")}
    # by hand: S_ref stable on both tasks (2/2 each); R 1/1 on t0, 0/1 on t1 at index 2 (6 vs 0);
    # S_ub512 1/1 on t0, 0/1 on t1 at index 1 (5 vs 9)
    assert rows[("S_ref", "t0")]["qualified"] and rows[("S_ref", "t0")]["n_matching"] == 2
    assert rows[("R", "t0")]["qualified"] and not rows[("R", "t1")]["qualified"]
    assert (rows[("R", "t1")]["first_diff_index"], rows[("R", "t1")]["ref_token"], rows[("R", "t1")]["arm_token"]) == (
        2,
        6,
        0,
    )
    q = rows[("S_ub512", "t1")]
    assert (q["n_required"], q["n_matching"], q["first_diff_index"], q["ref_token"], q["arm_token"]) == (1, 0, 1, 5, 9)
    assert rows[("S_ub512", "t0")]["qualified"]
    # against refspec's R instead, S_ref itself would diverge on t1 (R is a single run there: stable)
    by_r = {(q["arm"], q["task_id"]): q for q in qualification_table(reqs, eps)}
    assert not by_r[("S_ref", "t1")]["qualified"] and by_r[("S_ref", "t1")]["first_diff_index"] == 2


def test_check_py_recomputes_against_the_named_reference():
    C = refspec_check
    reqs, eps = synthetic()
    plan = {"campaigns": {"confirmation": {"campaign": "confirmation", "definition": {"reference": "S_ref"}}}}
    refs = C.reference_arms(plan)
    assert refs == {"confirmation": "S_ref"}
    assert C.reference_arms({"campaigns": {"confirmation": {"campaign": "confirmation", "definition": {}}}}) == {
        "confirmation": "R"
    }
    stated = qualification_table(reqs, eps, reference_arm="S_ref")

    def run(rows, references):
        c = C.Checker(".")
        tables = {
            "requests": C.CsvTable("requests", "requests.csv", "tables/requests.csv", reqs, list(range(len(reqs)))),
            "endpoints": C.CsvTable("endpoints", "endpoints.csv", "tables/endpoints.csv", eps, list(range(len(eps)))),
            "qualification": C.CsvTable(
                "qualification", "q.csv", "tables/qualification.csv", rows, list(range(len(rows)))
            ),
        }
        C.check_qualification(C.Context(c, tables, lambda name: f"tables/{name}.csv"), references)
        return c.problems

    assert run(stated, refs) == []
    # the checker reads the reference from the plan: against R the same rows do not recompute
    assert run(stated, {"confirmation": "R"})
    edited = copy.deepcopy(stated)
    i = next(j for j, q in enumerate(edited) if (q["arm"], q["task_id"]) == ("S_ub512", "t1"))
    edited[i]["first_diff_index"] = 2
    problems = run(edited, refs)
    assert len(problems) == 1 and "first_diff_index" in problems[0] and "S_ub512" in problems[0]
