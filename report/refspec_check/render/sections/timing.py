"""The timed sections: qualified latency ratios, the diagnostic (unqualified) timings, the
replication estimates (E2) with their session contrasts and sessions, and the draft acceptance."""

from __future__ import annotations

from typing import Any

from refspec_check import stats as S

from ..aggregates import acceptance
from ..document import DASH, Archive, Cell, Figure, Numbers, Section, ShownTable, Table, absent_note, table_section
from ..svg import bar_figure, forest_estimate_groups, forest_figure, forest_ratio_groups, interval_figure
from .noise import aa_table
from .verdicts import speed_cell, verdict_word
from .vocabulary import CAMPAIGN_TITLES, WORDS, campaigns_in


def _interval_cells(nums: ShownTable, base: tuple, key: dict, r: dict) -> list[Cell]:
    """A qualified ratio's 95 % interval with its design and units, its verdict in words
    (:func:`.verdicts.verdict_word`) and its detectable ratio (``ratios`` columns of
    :mod:`refspec.campaigns.intervals`)."""
    units = nums.add(base + ("units",), r["units"], "d", row=key, column="units")
    word = verdict_word(r["verdict"])
    if r["lo"] is None:
        return [Cell([DASH, f" ({r['design']}, ", units, ")"]), Cell([word], cls="reason"), Cell([DASH])]
    lo = nums.add(base + ("lo",), r["lo"], ".6f", row=key, column="lo")
    hi = nums.add(base + ("hi",), r["hi"], ".6f", row=key, column="hi")
    det = nums.add(base + ("detectable",), r["detectable"], ".3f", row=key, column="detectable")
    # the verdict in words wraps in report.tex's narrow column
    return [Cell(["[", lo, ", ", hi, f"] ({r['design']}, ", units, ")"]), Cell([word], cls="wrap"), Cell([det])]


RATIO_HEADER = (
    "family",
    "path",
    "comparison",
    "ratio",
    "as a speed",
    "CPU-time ratio",
    "95% interval (design, processes)",
    "verdict",
    "detectable ratio",
    "regressions",
    "regressed tasks / reason",
)


def _ratio_cells(nums: ShownTable, camp: str, r: dict) -> list[Cell]:
    """One ratios row: its comparison, and the ratio with its speed, CPU-time ratio, interval, verdict and
    regressions when qualified, else dashes and the reason."""
    key = dict(campaign=camp, family=r["family"], cap=r["cap"], numerator=r["numerator"], denominator=r["denominator"])
    base = ("ratio", camp, r["family"], r["cap"], r["numerator"], r["denominator"])
    cells = [Cell([r["family"]]), Cell([r["path"]]), Cell([f"{r['numerator']}/{r['denominator']}"], cls="mono")]
    nt = nums.add(base + ("n_tasks",), r["n_tasks"], "d", row=key, column="n_tasks")
    if r["qualified"] and r["ratio"] is not None:
        cells.append(Cell([nums.add(base + ("ratio",), r["ratio"], ".6f", row=key, column="ratio")]))
        cells.append(Cell(speed_cell(nums, base, key, "ratio", r), cls="wrap"))  # wraps in report.tex
        cpu = r.get("cpu_ratio")
        cells.append(
            Cell([nums.add(base + ("cpu_ratio",), cpu, ".6f", row=key, column="cpu_ratio")] if cpu else [DASH])
        )
        nr = nums.add(base + ("n_regressions",), r["n_regressions"], "d", row=key, column="n_regressions")
        cells += _interval_cells(nums, base, key, r)
        cells.append(Cell([nr, "/", nt]))
        cells.append(Cell([r["regressed_tasks"] or ""], cls="mono small"))
    else:
        cells.append(Cell([DASH], cls="bad", title="not qualified"))
        cells.append(Cell([DASH]))
        cells.append(Cell([DASH]))
        cells += [Cell([DASH]), Cell([DASH]), Cell([DASH])]
        cells.append(Cell([DASH, "/", nt]))
        cells.append(Cell([r["reason"] or "not qualified"], cls="reason"))
    return cells


def _cost_figure(a: Archive, rows_all: list[dict]) -> Figure | None:
    """The repair cost figure: GS/QB and PQ/QB of the implementation campaign (None: no such ratio)."""
    impl = [r for r in rows_all if r["campaign"] == "implementation" and r["path"] in ("target", "spec")]
    pts = []
    for r in sorted(impl, key=lambda r: (r["family"], r["path"], r["numerator"])):
        lay_n = _layout_of(a, "implementation", r["family"], r["numerator"])
        lay_d = _layout_of(a, "implementation", r["family"], r["denominator"])
        if lay_d != "qb" or lay_n not in ("gs", "pq"):
            continue
        pts.append(
            dict(
                label=f"{r['family']} {r['path']} {lay_n.upper()}/QB",
                value=r["ratio"] if r["qualified"] else None,
                cls=r["path"],
                note=f"{DASH} not qualified",
            )
        )
    if not pts:
        return None
    return Figure(
        "fig-cost",
        "Repair cost per family: GS and PQ relative to QB",
        [a.src("ratios")],
        interval_figure("Repair cost per family: GS and PQ relative to QB", pts, [(1.0, "ref", "1")]),
        "Implementation-campaign ratios; above one the alternative is slower than QB. "
        "Blue: target-only arms; orange: speculative arms.",
    )


@table_section(
    "ratios",
    "Qualified latency ratios",
    "Numerator time / denominator time: exp of the mean over panel tasks of the paired log-time difference "
    "(paper Tables S2, S3). A regression is a task on which the denominator is slower (task ratio below one). "
    "Comparisons with a failed qualification are shown as a dash with the reason. The CPU-time ratio is the "
    "same ratio over the user plus system CPU time of the serving processes (requests.cpu_ns), beside the "
    "wall-time ratio, never in its place. Each qualified ratio has its own interval in the design that timed "
    "it (fresh: every process served one arm, the Welch interval over each arm's processes; paired: one process "
    "served every arm, the t interval over the processes' within-process contrasts), its verdict at the "
    "threshold tau (slower or faster beyond tau; equivalent, when the interval of the two one-sided tests lies "
    "inside [1/tau, tau]; undecided: noise too high, interval too wide or too few processes), widened by F only "
    "where the campaign's A/A control fails (its table, once per campaign), and its detectable ratio, "
    "tau x F x exp(half width): the smallest ratio an interval this wide decides. An interval that holds one "
    "reads: no detectable difference.",
    table="ratios",
    absent="confirmation / implementation ratios not run",
)
def section_ratios(sec: Section, a: Archive, N: Numbers) -> None:
    src = a.src("ratios")
    rows_all = a.rows("ratios")
    for camp in campaigns_in(rows_all):
        tid = f"ratios-{camp}"
        nums = ShownTable(N, a, "ratios", tid)
        aa = aa_table(a, N, camp)  # the campaign's A/A control, once above its ratios
        if aa is not None:
            sec.items.append(aa)
        rows = [_ratio_cells(nums, camp, r) for r in rows_all if r["campaign"] == camp]
        sec.items.append(
            Table(
                tid,
                f"{CAMPAIGN_TITLES.get(camp, camp)} ratios",
                [src],
                list(RATIO_HEADER),
                rows,
                numeric=[False, False, False, True, False, True, False, False, True, True, False],
                stack=True,
            )
        )
    cost = _cost_figure(a, rows_all)  # GS/QB and PQ/QB of the implementation campaign
    if cost is not None:
        sec.items.append(cost)
    forest = _forest(a)
    if forest is not None:  # the figure a reader wants first, above the campaigns' tables
        sec.items.insert(0, forest)


FOREST_TITLE = "Every timed ratio with its interval, A/A band and decision lines"


def _forest(a: Archive) -> Figure | None:
    """The forest plot of every qualified ratio and E2 estimate with an interval (svg.forest_figure),
    in the ratios section, or in the replication section of an archive without ratios."""
    ratio_groups = forest_ratio_groups(a.rows("ratios"), a.rows("noise"), S.DEFAULT_THRESHOLD)
    estimate_groups = forest_estimate_groups(a.rows("estimates"), a.rows("noise"))
    groups = ratio_groups + estimate_groups
    if not groups:
        return None
    sources = [a.src("ratios")] if ratio_groups else []
    sources += [a.src("estimates")] if estimate_groups else []
    sources += [a.src("noise")] if any(g.band for g in groups) else []
    return Figure(
        "fig-forest",
        FOREST_TITLE,
        sources,
        forest_figure(FOREST_TITLE, groups, "ratio, log scale; above one the numerator is slower"),
        "Every qualified ratio and every E2 estimate with an interval, grouped by campaign and family: "
        "the point, its interval as a whisker and its verdict in words. Solid grey line: one. Dashed: the "
        "decision lines, tau x F and one over tau x F for a ratio, threshold x F and threshold / F for an "
        "estimate (F the A/A floor of the campaign and family, one without a control). Shaded: the interval "
        "of the A/A twin over its arm. Blue: decided; grey: undecided.",
    )


def _layout_of(a: Archive, campaign: str, family: str, arm: str) -> str | None:
    for r in a.rows("requests"):
        if r["campaign"] == campaign and r["family"] == family and r["arm"] == arm:
            return r["layout"]
    return None


def _diagnostic_cells(nums: ShownTable, r: dict) -> tuple[list[Cell], dict | None]:
    """One diagnostics row's cells (its medians, ratio as a speed and regressions, or dashes where no task
    was timed for both arms) and its point of the figure (None without a ratio)."""
    key = dict(
        campaign=r["campaign"],
        family=r["family"],
        cap=r["cap"],
        numerator=r["numerator"],
        denominator=r["denominator"],
    )
    base = ("diag", r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"])
    cmp_ = f"{r['numerator']}/{r['denominator']}"
    nt = nums.add(base + ("n_tasks",), r["n_tasks"], "d", row=key, column="n_tasks")
    timed = nums.add(base + ("n_tasks_timed",), r["n_tasks_timed"], "d", row=key, column="n_tasks_timed")
    cells = [Cell([r["campaign"]]), Cell([r["family"]]), Cell([cmp_], cls="mono"), Cell([r["label"]], cls="diag")]
    pt = None
    if r["ratio"] is not None:
        mn = nums.add(
            base + ("median_numerator_ms",),
            r["median_numerator_ns"] / 1e6,
            ".2f",
            row=key,
            column="median_numerator_ns",
        )
        md = nums.add(
            base + ("median_denominator_ms",),
            r["median_denominator_ns"] / 1e6,
            ".2f",
            row=key,
            column="median_denominator_ns",
        )
        ra = nums.add(base + ("ratio",), r["ratio"], ".6f", row=key, column="ratio")
        nr = nums.add(base + ("n_regressions",), r["n_regressions"], "d", row=key, column="n_regressions")
        sp = nums.speed(base, key, "ratio", dict(ratio=r["ratio"]))
        cells += [
            Cell([mn]),
            Cell([md]),
            Cell([ra, " ("] + sp.parts() + [")"], cls="diag"),
            Cell([nr, "/", timed, "/", nt]),
        ]
        pt = dict(label=f"{r['family']} {cmp_} ({r['campaign']})", value=r["ratio"], cls="diag")
    else:
        cells += [
            Cell([DASH]),
            Cell([DASH]),
            Cell([DASH], title="no task timed for both arms"),
            Cell([DASH, "/", timed, "/", nt]),
        ]
    cells.append(Cell([r["reason"]], cls="reason"))
    return cells, pt


@table_section(
    "diagnostics",
    "Diagnostic timings (not qualified)",
    "The price of preservation, measured on arms that do not all reproduce the reference: M3/M0 and C3/C0 "
    "(repaired over unrepaired path) and R_prod/M3 (deployed default over the repaired target-only path). "
    "Every row has an unqualified side and says which; these ratios compare paths whose outputs differ on "
    "some tasks and are descriptive only. They are never qualified ratios, which are in the section above. "
    "Ratio: exp of the mean over the tasks timed for both arms of the paired log-time difference; medians: "
    "the middle request time of each arm on those tasks.",
    table="diagnostics",
    absent="no diagnostic timing recorded",
)
def section_diagnostics(sec: Section, a: Archive, N: Numbers) -> None:
    rows_all = a.rows("diagnostics")
    if not rows_all:
        sec.notes.append("no diagnostic row: every registered pair (M3/M0, C3/C0, R_prod/M3) qualified or was not run")
        return
    src = a.src("diagnostics")
    tid = "diagnostics"
    nums = ShownTable(N, a, "diagnostics", tid)
    rows, pts = [], []
    for r in rows_all:
        cells, pt = _diagnostic_cells(nums, r)
        rows.append(cells)
        if pt is not None:
            pts.append(pt)
    sec.items.append(
        Table(
            tid,
            "Diagnostic (unqualified) medians and paired ratios",
            [src],
            [
                "campaign",
                "family",
                "comparison",
                "label",
                "median num (ms)",
                "median den (ms)",
                "diagnostic ratio",
                "regressions / timed / tasks",
                "not qualified",
            ],
            rows,
            caption="Diagnostic: not qualified.",
            numeric=[False, False, False, False, True, True, True, True, False],
        )
    )
    if pts:
        sec.items.append(
            Figure(
                "fig-diagnostics",
                "Diagnostic (unqualified) timing ratios",
                [src],
                interval_figure("Diagnostic (unqualified) timing ratios", pts, [(1.0, "ref", "1")]),
                "Diagnostic, not qualified: at least one arm of each pair differs from the reference "
                "on some task. Above one the numerator is slower.",
            )
        )


def section_replication(a: Archive, N: Numbers, boot: dict[str, Any]) -> Section:
    sec = Section(
        "replication",
        "Replication estimates (E2)",
        "Session contrast c_s = mean over tasks of (mean log t_NUM - mean log t_DEN) within session s; "
        "estimate = exp(mean_s c_s); 95% interval: the one-sample t interval over the sessions, "
        "exp(mean c -+ q s / sqrt(n)), q the two-sided 95% quantile of Student's t with n minus one degrees of freedom; each session has its own fresh workers, so the session is "
        "the unit of variance. Above one favours QB (paper Table S5). Decision against the threshold, widened by "
        "the floor F only where the campaign's A/A control fails (its table above; otherwise F is one): slower when "
        "the lower bound is above the threshold times F, not slower by the threshold when the upper bound is below "
        "the threshold over F, undecided: noise too high when the interval clears the threshold only inside that "
        "band, undecided: interval too wide otherwise; with fewer "
        f"than {WORDS.get(S.MIN_UNITS, S.MIN_UNITS)} sessions there is no interval (undecided: too few sessions).",
    )
    if not a.has("estimates"):
        sec.notes.append(absent_note("estimates", "replication not run"))
    else:
        sec.items.extend(_estimate_items(a, N))
    if boot:
        # the value itself is the table's checked threshold number
        sec.notes.append("plan.json freezes the threshold (as in the table)")
    forest = None if a.has("ratios") else _forest(a)
    if forest is not None:
        sec.items.append(forest)
    if a.has("contrasts"):
        sec.items.append(_contrasts_table(a, N))
    elif a.has("estimates"):
        sec.notes.append(absent_note("contrasts"))
    if a.has("sessions"):
        sec.items.append(_sessions_table(a, N))
    return sec


def _estimate_items(a: Archive, N: Numbers) -> list[Table | Figure]:
    """The estimates table and, when it has rows, the figure of their intervals."""
    src = a.src("estimates")
    tid = "estimates"
    aa = aa_table(a, N, "replication")
    rows, pts = [], []
    for r in a.rows("estimates"):
        cells, pt = _estimate_row(a, N, tid, r)
        rows.append(cells)
        pts.append(pt)
    items: list[Table | Figure] = [] if aa is None else [aa]
    items += [
        Table(
            tid,
            "Replication estimates with 95% session intervals",
            [src],
            [
                "family",
                "path",
                "comparison",
                "estimate",
                "95% interval",
                "decision",
                "threshold",
                "sessions",
                "regressions",
                "df / floor",
                "regressed tasks / reason",
            ],
            rows,
            numeric=[False, False, False, True, True, False, True, True, True, True, False],
            stack=True,
        )
    ]
    if pts:
        thr_v = next((r["threshold"] for r in a.rows("estimates")), S.DEFAULT_THRESHOLD)
        items.append(
            Figure(
                "fig-replication",
                "Replication ratios with 95% session intervals",
                [src],
                interval_figure(
                    "Replication ratios with 95% session intervals",
                    pts,
                    [(1.0, "ref", "1"), (thr_v, "thr", f"threshold {thr_v:g}")],
                ),
                "Point: exp(mean c_s); whiskers: the t interval over sessions. Blue: target-only; "
                "orange: speculative. Dashed: practical threshold.",
            )
        )
    return items


def _estimate_row(a: Archive, N: Numbers, tid: str, r: dict) -> tuple[list[Cell], dict[str, Any]]:
    """One estimate's table row and its point of the figure."""
    nums = ShownTable(N, a, "estimates", tid)
    key = dict(family=r["family"], path=r["path"], comparison=r["comparison"])
    base = ("est", r["family"], r["path"], r["comparison"])
    cells = [Cell([r["family"]]), Cell([r["path"]]), Cell([r["comparison"]], cls="mono")]
    nt = nums.add(base + ("n_tasks",), r["n_tasks"], "d", row=key, column="n_tasks")
    ns = nums.add(base + ("n_sessions",), r["n_sessions"], "d", row=key, column="n_sessions")
    df_fl = (
        [
            nums.add(base + ("df",), r["df"], ".0f", row=key, column="df"),
            " / ",
            nums.add(base + ("floor",), r["floor"], ".4f", row=key, column="floor"),
        ]
        if r.get("df") is not None
        else [DASH]
    )
    thr = nums.add(base + ("threshold",), r["threshold"], ".4f", row=key, column="threshold")
    if r["estimate"] is None:
        cells += [
            Cell([DASH], cls="bad"),
            Cell([DASH]),
            Cell([verdict_word(r["decision"])], cls="bad"),
            Cell([thr]),
            Cell([ns]),
            Cell([DASH, "/", nt]),
            Cell(df_fl, cls="small"),
            Cell([r["reason"] or "not qualified"], cls="reason"),
        ]
        pt = dict(label=f"{r['family']} {r['path']} {r['comparison']}", value=None, note=f"{DASH} not qualified")
        return cells, pt
    e = nums.add(base + ("estimate",), r["estimate"], ".6f", row=key, column="estimate")
    nr = nums.add(base + ("n_regressions",), r["n_regressions"], "d", row=key, column="n_regressions")
    few = r["lo"] is None
    if few:
        interval = Cell([DASH], title="too few sessions for an interval")
    else:
        lo = nums.add(base + ("lo",), r["lo"], ".6f", row=key, column="lo")
        hi = nums.add(base + ("hi",), r["hi"], ".6f", row=key, column="hi")
        interval = Cell(["[", lo, ", ", hi, "]"])
    cells += [
        Cell([e]),
        interval,
        Cell([verdict_word(r["decision"])], cls=r["decision"]),
        Cell([thr]),
        Cell([ns]),
        Cell([nr, "/", nt]),
        Cell(df_fl, cls="small"),
        Cell([r["regressed_tasks"] or ""], cls="mono small"),
    ]
    pt = dict(
        label=f"{r['family']} {r['path']} {r['comparison']}" + (" (too few sessions)" if few else ""),
        value=r["estimate"],
        lo=r["lo"],
        hi=r["hi"],
        cls=r["path"],
    )
    return cells, pt


def _contrasts_table(a: Archive, N: Numbers) -> Table:
    """The session contrasts c_s of each comparison."""
    src = a.src("contrasts")
    tid = "contrasts"
    nums = ShownTable(N, a, "contrasts", tid)
    rows = []
    for r in a.rows("contrasts"):
        key = dict(family=r["family"], path=r["path"], comparison=r["comparison"], session=r["session"])
        base = ("contrast", r["family"], r["path"], r["comparison"], r["session"])
        c_s = nums.add(base + ("c_s",), r["c_s"], ".6f", row=key, column="c_s")
        nt = nums.add(base + ("n_tasks",), r["n_tasks"], "d", row=key, column="n_tasks")
        rows.append(
            [
                Cell([r["family"]]),
                Cell([r["path"]]),
                Cell([r["comparison"]], cls="mono"),
                Cell([r["session"]], cls="mono"),
                Cell([c_s]),
                Cell([nt]),
            ]
        )
    return Table(
        tid,
        "Session contrasts c_s (natural log scale)",
        [src],
        ["family", "path", "comparison", "session", "c_s", "tasks"],
        rows,
        numeric=[False] * 4 + [True, True],
    )


def _sessions_table(a: Archive, N: Numbers) -> Table:
    """The sessions of each campaign and family: times, gaps, requests and workers."""
    src = a.src("sessions")
    tid = "sessions"
    nums = ShownTable(N, a, "sessions", tid)
    rows = []
    for r in a.rows("sessions"):
        key = dict(campaign=r["campaign"], family=r["family"], session=r["session"])
        base = ("session", r["campaign"], r["family"], r["session"])
        gap = (
            Cell([nums.add(base + ("gap_before_s",), r["gap_before_s"], ".1f", row=key, column="gap_before_s")])
            if r["gap_before_s"] is not None
            else Cell([DASH], title="first session")
        )
        rows.append(
            [
                Cell([r["campaign"]]),
                Cell([r["family"]]),
                Cell([r["session"]], cls="mono"),
                Cell([r["started_utc"]], cls="mono small"),
                Cell([r["ended_utc"]], cls="mono small"),
                gap,
                Cell([nums.add(base + ("n_requests",), r["n_requests"], "d", row=key, column="n_requests")]),
                Cell([nums.add(base + ("n_workers",), r["n_workers"], "d", row=key, column="n_workers")]),
            ]
        )
    return Table(
        tid,
        "Sessions",
        [src],
        [
            "campaign",
            "family",
            "session",
            "started (UTC)",
            "ended (UTC)",
            "gap before (s)",
            "requests",
            "workers",
        ],
        rows,
        numeric=[False] * 5 + [True] * 3,
    )


@table_section(
    "acceptance",
    "Draft acceptance",
    "Accepted / proposed draft tokens over completed speculative requests, per family and draft.",
    table="requests",
    absent="no request was run",
)
def section_acceptance(sec: Section, a: Archive, N: Numbers) -> None:
    acc = acceptance(a.rows("requests"))
    if not acc:
        sec.notes.append("no completed speculative request")
        return
    src = a.src("requests")
    tid = "acceptance"
    nums = ShownTable(N, a, "requests", tid)
    rows, bars = [], []
    for r in acc:
        key = dict(family=r["family"], draft=r["draft"])
        base = ("accept", r["family"], r["draft"])
        p = nums.add(base + ("proposals",), r["proposals"], "d", row=key, column="proposals")
        k = nums.add(base + ("accepted",), r["accepted"], "d", row=key, column="accepted")
        n = nums.add(base + ("requests",), r["requests"], "d", row=key, column="requests")
        if r["acceptance"] is None:
            ac = Cell([DASH], title="no proposals")
        else:
            ac = Cell([nums.add(base + ("acceptance",), r["acceptance"], ".4f", row=key, column="acceptance")])
            bars.append((f"{r['family']} {r['draft']}", r["acceptance"], f"{r['acceptance']:.4f}"))
        rows.append([Cell([r["family"]]), Cell([r["draft"]], cls="mono"), Cell([n]), Cell([p]), Cell([k]), ac])
    sec.items.append(
        Table(
            tid,
            "Draft acceptance",
            [src],
            ["family", "draft", "requests", "proposed", "accepted", "acceptance"],
            rows,
            numeric=[False, False, True, True, True, True],
        )
    )
    if bars:
        sec.items.append(
            Figure(
                "fig-acceptance",
                "Acceptance per draft",
                [src],
                bar_figure("Acceptance per draft", bars, "accepted / proposed draft tokens"),
                "Fraction of proposed draft tokens accepted by the target.",
            )
        )
