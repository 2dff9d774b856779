"""The A/A control (the noise floor measured in the same run) and the machine load of every block.

:func:`aa_parts` is the A/A value, interval and verdict that the ratios, the replication
estimates and the headline show beside each of their numbers; :func:`section_noise` holds the
A/A table and the flagged (busy) blocks."""

from __future__ import annotations

from typing import Any

from ...core import stats as S
from ..document import DASH, Archive, Cell, Numbers, Section, ShownTable, Table, absent_note

VERDICT_TEXT = {S.NOISE_OK: "A/A ok", S.NOISE_BIASED: "A/A biased", "unqualified": "A/A not qualified"}


def aa_rows(a: Archive, campaign: str, family: str | None = None) -> list[dict[str, Any]]:
    return [r for r in a.rows("noise") if r["campaign"] == campaign and (family is None or r["family"] == family)]


def aa_parts(a: Archive, N: Numbers, r: dict[str, Any]) -> list[Any]:
    """``twin/arm value [lo, hi] verdict, floor F, minimum detectable M`` of one noise row, its numbers registered."""
    nums = ShownTable(N, a, "noise", "noise")
    key = dict(campaign=r["campaign"], family=r["family"], arm=r["arm"], twin=r["twin"], kind=r["kind"], cap=r["cap"])
    base = ("noise", r["campaign"], r["family"], r["twin"], r["kind"], r["cap"])
    head = [f"{r['twin']}/{r['arm']} "]
    if r["value"] is None:
        return head + [DASH, " ", VERDICT_TEXT.get(r["verdict"], r["verdict"])]
    v = nums.add(base + ("value",), r["value"], ".6f", row=key, column="value")
    lo = nums.add(base + ("lo",), r["lo"], ".6f", row=key, column="lo")
    hi = nums.add(base + ("hi",), r["hi"], ".6f", row=key, column="hi")
    floor = nums.add(base + ("floor",), r["floor"], ".4f", row=key, column="floor")
    mde = nums.add(base + ("mde",), r["mde"], ".4f", row=key, column="mde")
    verdict = VERDICT_TEXT.get(r["verdict"], r["verdict"])
    return head + [v, " [", lo, ", ", hi, "] ", verdict, ", floor ", floor, ", minimum detectable ", mde]


def aa_cell(a: Archive, N: Numbers, campaign: str, family: str) -> Cell:
    """The A/A control of a campaign and family, for the column beside its ratios or estimates."""
    rows = aa_rows(a, campaign, family)
    if not rows:
        return Cell([DASH], title="no A/A control")
    parts: list[Any] = []
    for r in rows:
        parts += (["; "] if parts else []) + aa_parts(a, N, r)
    return Cell(parts, cls="small " + " ".join(sorted({r["verdict"] for r in rows})))


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
