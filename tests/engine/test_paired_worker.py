"""The paired design's worker: one process serves several arms, request by request, and no arm's
state leaks into another's request.

One worker serves M_qb, M_pq and C_qb (the target loaded once, the draft once, each arm with
contexts of its own); one fresh single-arm worker per arm serves the same prompts alone. Every
arm's endpoints, counters, margins and speculative evidence must be bit-identical in the two
designs, in an interleaved order that puts every arm after every other. The arms must also
stay themselves: the layouts' counters differ between M_qb and M_pq on the same prompt, so a
worker that served every request with its first arm's contexts fails here.
"""

from __future__ import annotations

import pytest

from refspec.core.arms import load_arms
from refspec.engine.errors import InvalidResponse, RequestError
from refspec.engines.worker.process import WorkerProcess, WorkerSpec
from support.arms import FAMILY, one_thread_arms

ARMS = ("M_qb", "M_pq", "C_qb")
CAP = 12
TEXTS = (
    "Write a Python function that checks whether a number is prime.",
    "Write a Python function that reverses a list in place.",
)
# every arm after every other arm (and after itself), the order a paired campaign draws from
ORDER = [
    ("M_qb", 0),
    ("M_pq", 0),
    ("C_qb", 0),
    ("C_qb", 1),
    ("M_pq", 1),
    ("M_qb", 1),
    ("M_pq", 0),
    ("M_qb", 0),
    ("C_qb", 0),
    ("M_qb", 1),
    ("C_qb", 1),
    ("M_pq", 1),
]


def spec(d, arms_file, family_files, lib_path, worker_id, arm, also=()):
    arms = load_arms(arms_file)
    return WorkerSpec(
        family=FAMILY,
        arm=arms[arm],
        also_arms=tuple(arms[a] for a in also),
        files=family_files,
        lib_dir=lib_path,
        worker_id=worker_id,
        run_dir=d,
        draft="q4_1",
        arms_file=arms_file,
        warmup_cap=4,
    )


def answer(c) -> dict:
    """What must not depend on the design: the endpoint, counters, margins and evidence."""
    return {
        "endpoint": c.endpoint.sha256,
        "tokens": list(c.endpoint.tokens),
        "counters": c.counters,
        "margins": c.margins,
        "evidence": c.evidence,
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory, lib_path, family_files):
    d = tmp_path_factory.mktemp("paired")
    arms_file = one_thread_arms(d / "arms.yaml")
    paired = WorkerProcess.start(spec(d, arms_file, family_files, lib_path, "p-all", ARMS[0], ARMS[1:]))
    try:
        prompts = [paired.tokenize(t) for t in TEXTS]
        together = {}
        for arm, i in ORDER:
            c = paired.complete(prompts[i], CAP, request_id=f"p/{arm}/{i}", arm=arm)
            together.setdefault((arm, i), []).append(answer(c))
        health = paired.health()
        refused = {}
        for name, kwargs in (("unknown", {"arm": "M_gs"}), ("first", {})):
            try:
                refused[name] = answer(paired.complete(prompts[0], CAP, request_id=f"x/{name}", **kwargs))
            except (RequestError, InvalidResponse) as e:
                refused[name] = e
    finally:
        paired.stop(timeout=30)
    alone = {}
    for arm in ARMS:
        w = WorkerProcess.start(spec(d, arms_file, family_files, lib_path, f"a-{arm}", arm))
        try:
            for i, ids in enumerate(prompts):
                alone[(arm, i)] = answer(w.complete(ids, CAP, request_id=f"a/{arm}/{i}"))
        finally:
            w.stop(timeout=30)
    return {"together": together, "alone": alone, "health": health, "refused": refused, "pid": paired.pid}


def test_each_arm_answers_alike_alone_and_interleaved(served):
    for key, answers in served["together"].items():
        for got in answers:
            assert got == served["alone"][key], f"{key}: the paired worker's answer differs from the arm alone"


def test_the_arms_stay_distinct(served):
    alone = served["alone"]
    for i in range(len(TEXTS)):
        qb, pq, spec_qb = alone[("M_qb", i)], alone[("M_pq", i)], alone[("C_qb", i)]
        assert qb["counters"] != pq["counters"], "M_qb and M_pq count alike: the layouts were not both served"
        assert spec_qb["evidence"] is not None and qb["evidence"] is None
        assert spec_qb["counters"] != qb["counters"]


def test_the_paired_worker_reports_every_arm_and_refuses_another(served):
    h = served["health"]
    assert sorted(h["arms"]) == sorted(ARMS) and h["arm"] == ARMS[0]
    assert all(h["warmups"][a]["done"] for a in ARMS)
    assert h["requests_served"] == len(ORDER)
    refused = served["refused"]
    assert isinstance(refused["unknown"], RequestError) and "M_gs" in str(refused["unknown"])
    # a request that names no arm is the first arm's, after the refusal the worker still serves
    assert refused["first"] == served["alone"][("M_qb", 0)]
