"""Vacuity of a qualification panel (refspec.core.vacuity) and ``refspec qualify``'s verdict lines.

Unrepaired arms are those with phase mask 0 and micro-batch capacity above 1 (M0, C0, R_prod, the stock
servers); a panel that ran one is vacuous when none diverges from the reference on any task. Then the
verdict line of every repaired arm says "vacuous: no exposed input in N screened"; where an unrepaired
arm diverges the lines read as before."""

from __future__ import annotations

from refspec.campaigns.arm_qualification import format_summary
from refspec.core.vacuity import is_unrepaired, panel_exposure

# arm -> (mode, layout, ub, mask), as config/arms.yaml defines them
ARMS = {
    "R": ("target", "mq", 1, 0),
    "M0": ("target", "mq", 4, 0),
    "C0": ("spec", "mq", 4, 0),
    "R_prod": ("target", "mq", 512, 0),
    "M3": ("target", "qb", 4, 3),
    "M_pq": ("target", "pq", 4, 3),
    "S_qb": ("target", "qb", 4, 15),
    "M_gs": ("target", "gs", 1, 3),
}
TASKS = ("HumanEval/0", "HumanEval/1", "HumanEval/2")


def test_which_arms_are_unrepaired():
    assert {a for a, (_m, _l, ub, mask) in ARMS.items() if is_unrepaired(ub, mask)} == {"M0", "C0", "R_prod"}


def _tables(diverging: dict[str, str]) -> tuple[list[dict], list[dict]]:
    arms = ("R", "M0", "C0", "M3", "M_pq")
    reqs = [
        dict(
            campaign="confirmation",
            family="f",
            arm=a,
            mode=ARMS[a][0],
            layout=ARMS[a][1],
            ub=ARMS[a][2],
            mask=ARMS[a][3],
        )
        for a in arms
    ]
    qual = [
        dict(
            campaign="confirmation",
            family="f",
            task_id=t,
            arm=a,
            first_diff_index=7 if diverging.get(a) == t else None,
            qualified=diverging.get(a) != t,
        )
        for t in TASKS
        for a in arms
    ]
    return qual, reqs


def test_panel_exposure():
    quiet = panel_exposure(*_tables({}))[("confirmation", "f")]
    assert quiet == dict(unrepaired=["C0", "M0"], screened=3, exposed=0, vacuous=True)
    loud = panel_exposure(*_tables({"C0": "HumanEval/1"}))[("confirmation", "f")]
    assert loud["vacuous"] is False and loud["exposed"] == 1
    # a repaired arm's divergence does not expose the panel
    assert panel_exposure(*_tables({"M3": "HumanEval/2"}))[("confirmation", "f")]["vacuous"] is True


def _summary(diverging: dict[str, str]) -> dict:
    qual, reqs = _tables(diverging)
    arms = []
    for a in ("R", "M0", "C0", "M3", "M_pq"):
        mode, lay, ub, mask = ARMS[a]
        ok = sum(1 for q in qual if q["arm"] == a and q["qualified"])
        arms.append(
            dict(
                arm=a,
                mode=mode,
                layout=lay,
                ub=ub,
                mask=mask,
                matching=ok,
                required=3,
                tasks=3,
                tasks_qualified=ok,
                acceptance=None,
                median_t_ns=None,
                unrepaired=is_unrepaired(ub, mask),
            )
        )
    return dict(
        family="f",
        panel=dict(spec="humaneval:0-2", tasks=3),
        cap=24,
        repeats=1,
        draft=None,
        session="s01",
        reference=dict(arm="R", runs_per_task=2, stable_tasks=3, unstable_tasks=[]),
        arms=arms,
        divergences=[],
        vacuous_arms=[],
        failures=[],
        complete=True,
        exposure=panel_exposure(qual, reqs).get(("confirmation", "f")),
    )


def _line(text: str, arm: str) -> str:
    return next(ln for ln in text.splitlines() if ln.split() and ln.split()[0] == arm)


def test_verdict_lines_of_a_vacuous_panel_say_vacuous():
    text = format_summary(_summary({}))
    for arm in ("M3", "M_pq"):
        assert _line(text, arm).endswith("vacuous: no exposed input in 3 screened"), text
    for arm in ("R", "M0", "C0"):
        assert "vacuous" not in _line(text, arm), text
    assert "vacuous: no exposed input in 3 screened: the unrepaired arms (C0, M0) never diverge from R" in text


def test_verdict_lines_of_an_exposed_panel_read_as_before():
    text = format_summary(_summary({"M0": "HumanEval/0"}))
    assert "vacuous" not in text.lower(), text


def test_one_exit_rule_the_candidates_not_the_controls_decide():
    """Every ``refspec qualify`` sub-command exits by :func:`exit_status`: 1 when a candidate does not
    reproduce its reference, 0 when all do, 5 when a request did not complete. ``qualify arms``'s
    candidates are the arms other than R and the unrepaired controls: M0 diverging is what makes the
    panel non-vacuous, M3 diverging is the failure (it used to exit 0 either way)."""
    from refspec.campaigns.arm_qualification import verdicts
    from refspec.commands.qualify import exit_status

    controls_diverge = _summary({"M0": "HumanEval/0", "C0": "HumanEval/1"})
    cands = verdicts(controls_diverge, controls=False)
    assert [v["arm"] for v in cands] == ["M3", "M_pq"]
    assert exit_status(True, cands) == 0
    assert [v["arm"] for v in verdicts(controls_diverge)] == ["M0", "C0", "M3", "M_pq"]
    assert exit_status(True, verdicts(controls_diverge)) == 1  # a server's every arm is a candidate
    repaired_diverges = _summary({"M0": "HumanEval/0", "M3": "HumanEval/2"})
    cands = verdicts(repaired_diverges, controls=False)
    assert [v["reproduces"] for v in cands] == [False, True]
    assert exit_status(True, cands) == 1
    assert exit_status(False, cands) == 5 and exit_status(False, []) == 5
