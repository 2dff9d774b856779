"""The divergence screen section: which tasks the unrepaired arms were tried on, in order of R's
smallest margin, where each diverged, and what the repairs did on the tasks where an unrepaired arm
diverges (from the qualification table)."""

from __future__ import annotations

from refspec_check.divergence import DECISIVE, DIVERGENCE_TEXT
from refspec_check.names import arm_sort_key

from ..document import DASH, Archive, Cell, Numbers, Section, ShownTable, Table, absent_note
from ..vacuity import exposed_repairs
from .vocabulary import VACUOUS_TAIL, VACUOUS_TEXT

SCREEN_COLUMNS = (
    ("first_diff_index", "d"),
    ("ref_token", "d"),
    ("arm_token", "d"),
    ("ref_margin", ".4g"),
    ("arm_margin", ".4g"),
)


SCREEN_INTRO = (
    "R decodes the discovery panel; its tasks are ranked by the smallest margin between R's two largest logits, and the "
    "unrepaired arms decode them in that order until enough diverge or the budget of tasks ends "
    "(campaigns/screen/screen.json holds the rule, the order and the frozen exposed panel). "
    "The confirmation runs on the exposed tasks and the stable controls."
)


def section_screen(a: Archive, N: Numbers) -> Section:
    """The screen's tables when it ran, and in any case each repaired arm on the tasks where an
    unrepaired arm of its campaign diverges (a campaign exposes tasks without a screen too)."""
    sec = Section("screen", "Divergence screen", SCREEN_INTRO)
    if a.has("divergence_screen"):
        _screen_tables(sec, a, N)
    else:
        sec.notes.append(absent_note("divergence_screen", "the divergence screen did not run"))
    if a.has("qualification"):
        _exposed_repairs(sec, a, N)
    return sec


def _screen_tables(sec: Section, a: Archive, N: Numbers) -> None:
    """The screen's summary per family, and its tried tasks when there are any."""
    rows = a.rows("divergence_screen")
    sec.items.append(_screen_summary_table(a, N, rows))
    trows = _screen_task_rows(a, N, rows)
    if trows:
        sec.items.append(
            Table(
                "screen-tasks",
                "Tasks tried, in screen order: each unrepaired arm against R",
                [a.src("divergence_screen")],
                [
                    "family",
                    "task",
                    "rank",
                    "prompt tokens",
                    "risk margin",
                    "arm",
                    "status",
                    "first diff",
                    "ref token",
                    "arm token",
                    "ref margin",
                    "arm margin",
                    "divergence",
                ],
                trows,
                numeric=[False, False, True, True, True, False, False] + [True] * 5 + [False],
            )
        )


def _screen_summary_table(a: Archive, N: Numbers, rows: list[dict]) -> Table:
    """Per family, the tasks R decoded, those tried, exposed and kept as controls, and the screen's own
    vacuity verdict where it exposed none."""
    tasks: dict[tuple[str, str], dict] = {}
    for r in rows:
        tasks.setdefault((r["family"], r["task_id"]), r)
    fams = sorted({f for f, _ in tasks})
    nums = ShownTable(N, a, "divergence_screen", "screen-summary")
    srows = []
    for fam in fams:
        ts = [r for (f, _), r in tasks.items() if f == fam]
        tried = {r["task_id"] for r in rows if r["family"] == fam and r["status"] in ("diverges", "matches")}
        key = dict(family=fam)
        values = {
            "discovery": len(ts),
            "tried": len(tried),
            "exposed": sum(1 for r in ts if r["exposed"]),
            "controls": sum(1 for r in ts if r["control"]),
        }
        cells = [Cell([fam])]
        for col, v in values.items():
            cells.append(Cell([nums.add(("screen", fam, col), v, "d", row=key, column=col)]))
        if values["exposed"]:
            cells.append(Cell([DASH]))
        else:  # nothing to qualify on: the screen's own verdict, never "preserved"
            n = nums.add(("screen", fam, "vacuous_screened"), values["tried"], "d", row=key, column="tried")
            cells.append(Cell([VACUOUS_TEXT, n, VACUOUS_TAIL], cls="bad"))
        srows.append(cells)
    return Table(
        "screen-summary",
        "Tasks decoded by R, tried by the unrepaired arms, exposed, and kept as stable controls",
        [a.src("divergence_screen")],
        ["family", "discovery tasks", "tried", "exposed", "controls", "verdict"],
        srows,
        numeric=[False] + [True] * 4 + [False],
    )


def _screen_task_rows(a: Archive, N: Numbers, rows: list[dict]) -> list[list[Cell]]:
    """One row per arm tried on a task, in screen order: the task's rank and margin, the arm's status, where
    it first diverged from R and the class of that divergence."""
    nums = ShownTable(N, a, "divergence_screen", "screen-tasks")
    trows = []
    for r in sorted(
        (r for r in rows if r["status"] in ("diverges", "matches")),
        key=lambda r: (r["family"], r["rank"], arm_sort_key(r["arm"])),
    ):
        key = dict(family=r["family"], task_id=r["task_id"], arm=r["arm"])
        base = ("screen", r["family"], r["task_id"], r["arm"])
        cells = [
            Cell([r["family"]]),
            Cell([r["task_id"]], cls="mono"),
            Cell([nums.add(base + ("rank",), r["rank"], "d", row=key, column="rank")]),
            Cell([nums.add(base + ("prompt_tokens",), r["prompt_tokens"], "d", row=key, column="prompt_tokens")]),
            Cell(
                [DASH]
                if r["risk_margin"] is None
                else [nums.add(base + ("risk_margin",), r["risk_margin"], ".4g", row=key, column="risk_margin")]
            ),
            Cell([r["arm"]], cls="mono"),
            Cell([r["status"]], cls="bad" if r["status"] == "diverges" else "ok"),
        ]
        for col, fmt in SCREEN_COLUMNS:
            v = r[col]
            cells.append(Cell([DASH] if v is None else [nums.add(base + (col,), v, fmt, row=key, column=col)]))
        cls = r["divergence"]
        cells.append(
            Cell(
                [DASH] if cls is None else [DIVERGENCE_TEXT.get(cls, cls)],
                cls="bad wrap" if cls == DECISIVE else "wrap",
            )
        )
        trows.append(cells)
    return trows


def _exposed_repairs(sec: Section, a: Archive, N: Numbers) -> None:
    reps = exposed_repairs(a.rows("qualification"), a.rows("requests"))
    nums = ShownTable(N, a, "qualification", "screen-repairs")
    rrows = []
    for (camp, fam, arm), (k, n) in sorted(reps.items(), key=lambda x: (x[0][0], x[0][1], arm_sort_key(x[0][2]))):
        key = dict(campaign=camp, family=fam, arm=arm)
        base = ("exprep", camp, fam, arm)
        rrows.append(
            [
                Cell([camp]),
                Cell([fam]),
                Cell([arm], cls="mono"),
                Cell(
                    [
                        nums.add(base + ("reproduces",), k, "d", row=key, column="qualified"),
                        " of ",
                        nums.add(base + ("exposed",), n, "d", row=key, column="task_id"),
                    ],
                    cls="ok" if k == n else "bad",
                ),
            ]
        )
    if rrows:
        sec.items.append(
            Table(
                "screen-repairs",
                "Each repaired arm on the exposed tasks of its campaign",
                [a.src("qualification")],
                ["campaign", "family", "arm", "reproduces R on (of the exposed tasks)"],
                rrows,
                caption="The exposed tasks are those where an unrepaired arm (no phase of the repair, "
                "a micro-batch above one) diverges from R.",
                numeric=[False, False, False, True],
            )
        )
