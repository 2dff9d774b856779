"""The A/A control (two runs of one recipe in the same run) and the machine load of every block.

:func:`aa_table` states a campaign's A/A control once, above its ratios (or estimates): whether its
interval holds one and what that means for the campaign's verdicts; :func:`aa_parts` is the same
statement in the headline; :func:`section_noise` holds the A/A table of every control, the variance
components of log request time (``variance``) and the flagged (busy) blocks."""

from __future__ import annotations

from typing import Any

from refspec_check import stats as S

from ..document import DASH, Archive, Cell, Numbers, Section, ShownTable, Table, absent_note
from .verdicts import verdict_word
from .vocabulary import CAMPAIGN_TITLES

VERDICT_TEXT = {S.NOISE_OK: "holds", S.NOISE_BIASED: "fails (biased)", "unqualified": "not qualified"}


def aa_rows(a: Archive, campaign: str, family: str | None = None) -> list[dict[str, Any]]:
    return [r for r in a.rows("noise") if r["campaign"] == campaign and (family is None or r["family"] == family)]


def _aa_numbers(a: Archive, N: Numbers, r: dict[str, Any]) -> dict[str, Any]:
    """The checked numbers of one noise row the A/A statements show: value, lo, hi, floor, mde."""
    nums = ShownTable(N, a, "noise", "noise")
    key = dict(campaign=r["campaign"], family=r["family"], arm=r["arm"], twin=r["twin"], kind=r["kind"], cap=r["cap"])
    base = ("noise", r["campaign"], r["family"], r["twin"], r["kind"], r["cap"])
    fmts = dict(value=".6f", lo=".6f", hi=".6f", floor=".4f", mde=".4f")
    return {k: nums.add(base + (k,), r[k], f, row=key, column=k) for k, f in fmts.items()}


def aa_parts(a: Archive, N: Numbers, r: dict[str, Any]) -> list[Any]:
    """``A/A twin/arm value [lo, hi] holds, detectable ratio M`` of one noise row (a failed control adds
    the widening F its campaign's decisions carry), its numbers registered."""
    head = [f"A/A {r['twin']}/{r['arm']} "]
    if r["value"] is None:
        return head + [DASH, " ", VERDICT_TEXT.get(r["verdict"], r["verdict"])]
    n = _aa_numbers(a, N, r)
    out = head + [n["value"], " [", n["lo"], ", ", n["hi"], "] ", VERDICT_TEXT.get(r["verdict"], r["verdict"])]
    if r["verdict"] == S.NOISE_BIASED:
        out += [", decisions widened by ", n["floor"]]
    return out + [", detectable ratio ", n["mde"]]


def aa_table(a: Archive, N: Numbers, campaign: str) -> Table | None:
    """The A/A control of a campaign, once: per family the twin over its arm with its interval, whether
    it holds one, and what that means for the campaign's verdicts."""
    rows = []
    for r in aa_rows(a, campaign):
        cells = [Cell([r["family"]]), Cell([f"{r['twin']}/{r['arm']}"], cls="mono")]
        if r["value"] is None:
            rows.append(
                cells + [Cell([DASH]), Cell([VERDICT_TEXT.get(r["verdict"], r["verdict"])], cls="bad"), Cell([DASH])]
            )
            continue
        n = _aa_numbers(a, N, r)
        cells.append(Cell([n["value"], " [", n["lo"], ", ", n["hi"], "]"]))
        if r["verdict"] == S.NOISE_OK:
            cells.append(Cell(["holds: the interval contains one"], cls="ok"))
            means = ["two runs of one recipe agree; this campaign decides ratios beyond ", n["mde"]]
        else:
            cells.append(Cell(["fails: the interval excludes one"], cls="bad"))
            means = [
                "two runs of one recipe differ beyond the noise: every verdict of this campaign is decided against "
                "the threshold widened by ",
                n["floor"],
                " (detectable ratio ",
                n["mde"],
                "), and a decided ratio near it may be that bias",
            ]
        rows.append(cells + [Cell(means)])
    if not rows:
        return None
    return Table(
        f"aa-{campaign}",
        f"{CAMPAIGN_TITLES.get(campaign, campaign)}: A/A control",
        [a.src("noise")],
        ["family", "control", "ratio [95% interval]", "verdict", "what it means"],
        rows,
        numeric=[False] * 5,
        stack=True,
    )


def section_noise(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "noise",
        "Noise floor: A/A control and machine load",
        "The A/A control runs one arm twice, as the arm and its twin <arm>_aa (the same recipe), in the "
        "same blocks and sessions on fresh workers. Kind ratio: the paired ratio of twin over arm on the panel "
        "tasks, with a 95% Welch interval whose units are the workers (each block is one fresh process, and "
        "the tasks of a block share its start-up luck); kind estimate: the t interval over the session "
        "contrasts. Verdict: ok when the interval contains one, biased otherwise. Floor F: the larger of hi and "
        "the reciprocal of lo; an "
        "estimate is decided only when its interval clears the threshold by F. Minimum detectable ratio: "
        "threshold x F x sqrt(hi/lo), the smallest effect this design decides; the units (workers per arm, or "
        "sessions) for the target effect, a minimum detectable ratio of TARGET_EFFECT in refspec.core.stats "
        "(the size of the paper's PQ/QB effect), scale as (half width / target half width) squared. The CPU-time A/A ratio "
        "(user plus system time of the serving processes) stands beside the wall-time one. Machine load: every block "
        "is sampled before and after; a block during which competing processes (not the run's own) used "
        "more CPU than the busy threshold is flagged, and kept.",
    )
    if not a.has("noise"):
        sec.notes.append(absent_note("noise", "no A/A control was run"))
    else:
        sec.items.append(_noise_table(a, N))
    if a.has("variance"):
        sec.items.append(_variance_table(a, N))
    if a.has("sizing"):
        sec.items.append(_sizing_table(a, N))
    elif a.has("requests"):
        sec.notes.append(absent_note("variance", "the variance components of request time were not computed"))
    if not a.has("loads"):
        sec.notes.append(absent_note("loads", "the machine load was not sampled"))
    else:
        sec.items.append(_busy_table(a, N))
    return sec


def _noise_table(a: Archive, N: Numbers) -> Table:
    nums = ShownTable(N, a, "noise", "noise")
    rows = []
    for r in a.rows("noise"):
        key = dict(
            campaign=r["campaign"], family=r["family"], arm=r["arm"], twin=r["twin"], kind=r["kind"], cap=r["cap"]
        )
        base = ("noise", r["campaign"], r["family"], r["twin"], r["kind"], r["cap"])
        units = nums.add(base + ("units",), r["units"], "d", row=key, column="units")
        sess = nums.add(base + ("sessions",), r["sessions"], "d", row=key, column="sessions")
        thr = nums.add(base + ("threshold",), r["threshold"], ".4f", row=key, column="threshold")
        cpu = r.get("cpu_value")
        cpu_cell = [nums.add(base + ("cpu_value",), cpu, ".6f", row=key, column="cpu_value")] if cpu else [DASH]
        need = r.get("units_needed")
        unit = "workers per arm" if r["kind"] == "ratio" else "sessions"
        need_cell = (
            [nums.add(base + ("units_needed",), need, "d", row=key, column="units_needed"), f" {unit}"]
            if need is not None
            else [DASH]
        )
        rows.append(
            [
                Cell([r["campaign"]]),
                Cell([r["family"]]),
                Cell([r["kind"]]),
                Cell(aa_parts(a, N, r), cls=r["verdict"]),
                Cell(cpu_cell),
                Cell([thr]),
                Cell([units, " / ", sess]),
                Cell(need_cell),
                Cell([r["reason"] or ""], cls="reason"),
            ]
        )
    return Table(
        "noise",
        "A/A control (twin / arm)",
        [a.src("noise")],
        [
            "campaign",
            "family",
            "kind",
            "A/A ratio [95% interval] verdict, floor, minimum detectable ratio",
            "CPU-time A/A",
            "threshold",
            "units / sessions",
            "units for the target effect",
            "reason",
        ],
        rows,
        numeric=[False, False, False, True, True, True, True, True, False],
    )


def _variance_table(a: Archive, N: Numbers) -> Table:
    """Per campaign, family and cap: the design, its processes and requests, and the standard deviations
    of log request time by source with the process's share of the variance."""
    nums = ShownTable(N, a, "variance", "variance")
    rows = []
    for r in a.rows("variance"):
        key = dict(campaign=r["campaign"], family=r["family"], cap=r["cap"])
        base = ("variance", r["campaign"], r["family"], r["cap"])
        cap = nums.add(base + ("cap",), r["cap"], "d", row=key, column="cap")
        procs = nums.add(base + ("processes",), r["processes"], "d", row=key, column="processes")
        reqs = nums.add(base + ("requests",), r["requests"], "d", row=key, column="requests")
        if r["reason"] is not None:
            comps = [Cell([DASH]), Cell([DASH]), Cell([DASH]), Cell([DASH])]
        else:
            sd_b = nums.add(base + ("sd_between",), r["sd_between"], ".4f", row=key, column="sd_between")
            sd_w = nums.add(base + ("sd_within",), r["sd_within"], ".4f", row=key, column="sd_within")
            share = nums.add(base + ("share_between",), r["share_between"], ".3f", row=key, column="share_between")
            if r["sd_interaction"] is None:
                inter = Cell([DASH], title="confounded with between (fresh design)")
            else:
                sd_i = nums.add(
                    base + ("sd_interaction",), r["sd_interaction"], ".4f", row=key, column="sd_interaction"
                )
                inter = Cell([sd_i])
            comps = [Cell([sd_b]), Cell([sd_w]), inter, Cell([share])]
        rows.append(
            [
                Cell([r["campaign"]]),
                Cell([r["family"]]),
                Cell([cap]),
                Cell([r["design"]]),
                Cell([procs]),
                Cell([reqs]),
                *comps,
                Cell([verdict_word(r["reason"]) if r["reason"] else ""], cls="reason"),
            ]
        )
    return Table(
        "variance",
        "Variance components of log request time",
        [a.src("variance")],
        [
            "campaign",
            "family",
            "cap",
            "design",
            "processes",
            "requests",
            "sd between",
            "sd within",
            "sd interaction",
            "share between",
            "reason",
        ],
        rows,
        caption="Method of moments on log time after the arm-by-task means are removed. Between: the process "
        "(worker) effect; within: the request noise around its process and arm; interaction: process by arm, "
        "measured in the paired design (every process serves every arm); a dash in the fresh design (every "
        "process serves one arm), where it is confounded with between. Share between: between over the sum of the components. A row "
        "with a reason has too few processes or requests for components.",
        numeric=[False, False, True, False, True, True, True, True, True, True, False],
    )


def _sizing_table(a: Archive, N: Numbers) -> Table:
    """Per sized campaign and family: the size the cost model chose before the run and what it expected,
    beside the detectable ratio the run achieved."""
    nums = ShownTable(N, a, "sizing", "sizing")
    rows = []
    for r in a.rows("sizing"):
        key = dict(campaign=r["campaign"], family=r["family"])
        base = ("sizing", r["campaign"], r["family"])
        achieved = r["achieved_detectable"]
        rows.append(
            [
                Cell([r["campaign"]]),
                Cell([r["family"]]),
                Cell([nums.add(base + ("target",), r["target"], ".4f", row=key, column="target")]),
                Cell([nums.add(base + ("budget_s",), r["budget_s"], ".0f", row=key, column="budget_s")]),
                Cell([nums.add(base + ("processes",), r["processes"], "d", row=key, column="processes")]),
                Cell([nums.add(base + ("repeats",), r["repeats"], "d", row=key, column="repeats")]),
                Cell(
                    [
                        nums.add(
                            base + ("expected_detectable",),
                            r["expected_detectable"],
                            ".4f",
                            row=key,
                            column="expected_detectable",
                        )
                    ]
                ),
                Cell(
                    [
                        nums.add(
                            base + ("expected_seconds",),
                            r["expected_seconds"],
                            ".0f",
                            row=key,
                            column="expected_seconds",
                        )
                    ]
                ),
                Cell(
                    ["reachable" if r["reachable"] else "not reachable within the budget"],
                    cls="" if r["reachable"] else "reason",
                ),
                Cell(
                    [nums.add(base + ("achieved_detectable",), achieved, ".4f", row=key, column="achieved_detectable")]
                    if achieved is not None
                    else [DASH]
                ),
            ]
        )
    return Table(
        "sizing",
        "Size chosen before the run, and the detectable ratio achieved",
        [a.src("sizing")],
        [
            "campaign",
            "family",
            "target",
            "budget (s)",
            "processes",
            "passes",
            "expected detectable",
            "expected seconds",
            "reachable",
            "achieved detectable (largest)",
        ],
        rows,
        caption="A paired campaign sized by the cost model (Kalibera and Jones) from a prior of its variance "
        "components and the costs its pilot measured on this machine (a process's start, a request; the prior's "
        "where the pilot failed), the pilot's seconds paid from the budget: the processes and passes over the "
        "panel chosen for the target detectable ratio "
        "within the budget, the detectable ratio and seconds expected, and the largest detectable ratio among "
        "the run's own intervals.",
        numeric=[False, False, True, True, True, True, True, True, False, True],
    )


def _busy_table(a: Archive, N: Numbers) -> Table:
    """Per campaign and family: blocks sampled and blocks flagged busy; then each flagged block."""
    nums = ShownTable(N, a, "loads", "loads")
    all_rows = a.rows("loads")
    counts: dict[tuple[str, str], list[int]] = {}
    for r in all_rows:
        c = counts.setdefault((r["campaign"], r["family"]), [0, 0])
        c[0] += 1
        c[1] += 1 if r["busy"] else 0
    rows = []
    for (camp, fam), (n, nb) in counts.items():
        key = dict(campaign=camp, family=fam)
        blocks = nums.add(("loadsum", camp, fam, "blocks"), n, "d", row=key, column="blocks")
        busy = nums.add(("loadsum", camp, fam, "busy"), nb, "d", row=key, column="busy")
        rows.append(
            [
                Cell([camp]),
                Cell([fam]),
                Cell([DASH]),
                Cell([busy, " of ", blocks, " blocks busy"], cls="bad" if nb else ""),
                Cell([""]),
                Cell([""]),
                Cell([""]),
            ]
        )
    for r in all_rows:
        if not r["busy"]:
            continue
        key = dict(campaign=r["campaign"], family=r["family"], session=r["session"], block=r["block"])
        base = ("load", r["campaign"], r["family"], r["session"], r["block"])
        blk = nums.add(base + ("block",), r["block"], "d", row=key, column="block")
        cb = nums.add(base + ("competing_before",), r["competing_before"], ".2f", row=key, column="competing_before")
        ca = nums.add(base + ("competing_after",), r["competing_after"], ".2f", row=key, column="competing_after")
        rows.append(
            [
                Cell([r["campaign"]]),
                Cell([r["family"]]),
                Cell([r["session"]], cls="mono"),
                Cell([blk]),
                Cell([r["arm"]], cls="mono"),
                Cell([cb, " / ", ca], cls="bad"),
                Cell([r["top_competing"] or ""], cls="mono small"),
            ]
        )
    return Table(
        "loads",
        "Machine load: blocks run on a busy machine (flagged and kept)",
        [a.src("loads")],
        ["campaign", "family", "session", "block", "arm", "competing cores before / after", "top competing"],
        rows,
        caption="Busy: competing CPU above the busy threshold (loads.csv) before or after the block. "
        "Flagged blocks are kept in every table; none is dropped or re-run.",
        numeric=[False, False, False, True, False, True, False],
    )
