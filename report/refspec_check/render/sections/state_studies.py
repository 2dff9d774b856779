"""The sections of the state studies: partition classes (S8/S9), first-layer and full K/V
differences (S10/S12), the projection replay on fixed operands (§6.1), the subset matrix of the
crosses (S11) and the frontier contrasts (S13). Every number is registered in ``numbers.json`` and
recomputed by ``report/check.py`` from the sealed CSV tables."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..document import DASH, Archive, Cell, Numbers, Section, ShownTable, Table, table_section
from ..vacuity import crosses_exposure, partition_exposure
from .vocabulary import VACUOUS_TAIL, VACUOUS_TEXT

SELECTOR_ORDER = ("L0_K", "L0_V", "L0_KV", "K_ALL", "V_ALL", "EARLY", "MIDDLE", "LATE", "PREFIX", "TAIL")
OUTCOME_CODE = {"recipient": "=", "donor": "D", "third": "T"}


def _arms(prows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["arm"] for r in prows))


def _tasks(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["task_id"] for r in rows))


@table_section(
    "state-partition-screen",
    "Partition screen",
    "Before the partition study, each arm prefills every input of a discovery panel with output capacity "
    "one and decodes nothing. Per cell: sequence KV class / initial-logits class (class zero is A's). An "
    "input where some arm's class is not zero is exposed; the study runs on the first exposed inputs where "
    "its pair differs, and on stable controls (check.py recomputes the choice from this table).",
    table="partition_screen",
    absent="partition screen not run (the partition study names its inputs)",
)
def section_partition_screen(sec: Section, a: Archive, N: Numbers) -> None:
    tid = "state-partition-screen"
    nums = ShownTable(N, a, "partition_screen", tid)
    prows = a.rows("partition_screen")
    arms = _arms(prows)
    by = {(r["task_id"], r["arm"]): r for r in prows}
    rows = []
    for t in _tasks(prows):
        r0 = by[(t, arms[0])]
        cells = [
            Cell([t]),
            Cell(
                [
                    nums.add(
                        ("pscreen", t, arms[0], "prompt_len"),
                        r0["prompt_len"],
                        "d",
                        row=dict(task_id=t, arm=arms[0]),
                        column="prompt_len",
                    )
                ]
            ),
        ]
        for arm in arms:
            r = by.get((t, arm))
            if r is None:
                cells.append(Cell([DASH]))
                continue
            key = dict(task_id=t, arm=arm)
            parts: list[Any] = [
                nums.add(("pscreen", t, arm, "kv_class"), r["kv_class"], "d", row=key, column="kv_class"),
                "/",
                nums.add(("pscreen", t, arm, "logits_class"), r["logits_class"], "d", row=key, column="logits_class"),
            ]
            if r["degenerate"]:
                parts.append(" (one caller)")
            cells.append(Cell(parts, cls="mono" + (" warn" if r["differs"] else "")))
        rows.append(cells)
    sec.items.append(
        Table(
            tid,
            "Partition screen: classes per input",
            [a.src("partition_screen")],
            ["task", "prompt tokens", *arms],
            rows,
            numeric=[False, True] + [False] * len(arms),
        )
    )


@table_section(
    "state-partition",
    "State formation: prefill partitions",
    "Each arm prefills the same prompt partitioned differently (A: one caller, the full micro-batch; B: an "
    "external split; C: a quarter of that micro-batch; Sn-1: all but the last token, then one; U1: "
    "physical micro-batch one) and continues by natural greedy decoding (paper §6.1, Tables S8-S9). Per "
    "cell: endpoint / KV / initial-logits class (class zero is A's) and the first generated index that "
    "differs from A.",
    table="partition",
    absent="prefill partition campaign not run",
)
def section_partition(sec: Section, a: Archive, N: Numbers) -> None:
    src = a.src("partition")
    prows = [r for r in a.rows("partition") if r["repeat"] == 1]
    arms = _arms(prows)
    by = {(r["task_id"], r["arm"]): r for r in prows}
    sec.items.append(_partition_classes(ShownTable(N, a, "partition", "state-partition"), src, prows, arms, by))
    nums_tid2 = ShownTable(N, a, "partition", "state-partition-counts")
    n_in = len(_tasks(prows))
    sec.items.append(_partition_counts(nums_tid2, src, prows, arms, n_in))
    if partition_exposure(prows)["vacuous"]:
        # no arm differs from A on any input: the study had nothing to find (refspec_check.render.vacuity)
        sec.items.append(
            Table(
                "state-partition-verdict",
                "Partition verdict",
                [src],
                ["study", "verdict"],
                [
                    [
                        Cell(["prefill partition"]),
                        Cell(
                            [
                                VACUOUS_TEXT,
                                nums_tid2.add(("partition", "inputs"), n_in, "d", row={}, column="task_id"),
                                VACUOUS_TAIL,
                            ],
                            cls="warn",
                        ),
                    ]
                ],
                numeric=[False, False],
            )
        )
    problems = [
        r
        for r in a.rows("partition")
        if r["repeat"] > 1 and (by.get((r["task_id"], r["arm"])) or {}).get("endpoint_sha256") != r["endpoint_sha256"]
    ]
    if problems:
        sec.notes.append(f"{len(problems)} repeat(s) differ from repeat 1")


def _partition_classes(nums: ShownTable, src: str, prows: list[dict], arms: list[str], by: dict) -> Table:
    """Per input (repeat 1): its prompt length and each arm's classes (:func:`_partition_cell`)."""
    rows = []
    for t in _tasks(prows):
        r0 = by[(t, arms[0])]
        cells = [
            Cell([t]),
            Cell(
                [
                    nums.add(
                        ("partition", t, "prompt_len"), r0["prompt_len"], "d", row=dict(task_id=t), column="prompt_len"
                    )
                ]
            ),
        ]
        for arm in arms:
            r = by.get((t, arm))
            cells.append(Cell([DASH]) if r is None else _partition_cell(nums, t, arm, r))
        rows.append(cells)
    return Table(
        nums.tid,
        "Partition classes per input",
        [src],
        ["task", "prompt tokens", *arms],
        rows,
        numeric=[False, True] + [False] * len(arms),
    )


def _partition_cell(nums: ShownTable, t: str, arm: str, r: dict) -> Cell:
    """An arm's endpoint / KV / initial-logits class on input ``t`` and its first index differing from A."""
    key = dict(task_id=t, arm=arm, repeat=1)
    parts: list[Any] = []
    for col in ("endpoint_class", "kv_class", "logits_class"):
        if parts:
            parts.append("/")
        parts.append(nums.add(("partition", t, arm, col), r[col], "d", row=key, column=col))
    if r["first_diff_vs_A"] is not None:
        parts += [
            " @",
            nums.add(
                ("partition", t, arm, "first_diff_vs_A"),
                r["first_diff_vs_A"],
                "d",
                row=key,
                column="first_diff_vs_A",
            ),
        ]
    if r["degenerate"]:
        parts.append(" (one caller)")
    differs = r["endpoint_class"] or r["kv_class"] or r["logits_class"]
    return Cell(parts, cls="mono" + (" bad" if r["endpoint_class"] else " warn" if differs else ""))


def _partition_counts(nums: ShownTable, src: str, prows: list[dict], arms: list[str], n_in: int) -> Table:
    """Per arm other than A: on how many of the ``n_in`` inputs each class differs from A's."""
    rows2 = []
    for arm in arms[1:]:
        rs = [r for r in prows if r["arm"] == arm]
        key = dict(arm=arm)
        vals = {c: sum(1 for r in rs if r[c] != 0) for c in ("endpoint_class", "kv_class", "logits_class")}
        rows2.append(
            [Cell([arm], cls="mono")]
            + [
                Cell(
                    [
                        nums.add(("partition", arm, c, "differs"), v, "d", row=key, column=c),
                        " of ",
                        nums.add(("partition", "inputs"), n_in, "d", row={}, column="task_id"),
                    ]
                )
                for c, v in vals.items()
            ]
        )
    return Table(
        nums.tid,
        "Inputs on which an arm differs from A",
        [src],
        ["arm", "endpoint differs", "sequence KV differs", "initial logits differ"],
        rows2,
        numeric=[False, True, True, True],
    )


@table_section(
    "state-kv",
    "Where the states differ",
    "Per-layer differences of the stored F16 sequence KV against A's (paper Tables S10 and S12; taken "
    "from the KV state at prefill completion, not from native projection captures).",
    table="kv_diff",
    absent="no arm's KV differs from A's, or the partition campaign was not run",
)
def section_kv(sec: Section, a: Archive, N: Numbers) -> None:
    src, tid = a.src("kv_diff"), "state-kv-first"
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("kv_diff"):
        groups[(r["task_id"], r["arm_b"])].append(r)
    pby = {(r["task_id"], r["arm"]): r for r in a.rows("partition") if r["repeat"] == 1}
    rows, rows2 = [], []
    for (t, arm), g in groups.items():
        rows.append(_kv_first_row(a, N, tid, t, arm, g))
        rows2.append(_kv_full_row(a, N, t, arm, g, pby.get((t, arm))))
    sec.items.append(
        Table(
            tid,
            "First-layer K/V differences from A (Table S10 shape)",
            [src],
            [
                "task",
                "arm",
                "layer-0 K max |d|",
                "layer-0 V max |d|",
                "first differing layer",
                "its K max |d|",
                "its V max |d|",
            ],
            rows,
            numeric=[False, False] + [True] * 5,
        )
    )
    sec.items.append(
        Table(
            "state-kv-full",
            "Full-KV differences from A and the natural endpoint (Table S12 shape)",
            [src, a.src("partition")] if a.has("partition") else [src],
            [
                "task",
                "arm",
                "bytes differing",
                "layers differing",
                "max |d|",
                "max per-layer relative Frobenius",
                "endpoint vs A",
            ],
            rows2,
            numeric=[False, False, True, True, True, True, False],
        )
    )


def _kv_first_row(a: Archive, N: Numbers, tid: str, t: str, arm: str, g: list[dict]) -> list[Cell]:
    """Layer 0's K and V differences of one input and arm, and the first layer that differs."""
    nums = ShownTable(N, a, "kv_diff", tid)
    key = dict(task_id=t, arm_b=arm)
    base = ("kv", t, arm)
    lay = {(r["layer"], r["part"]): r for r in g}
    changed = sorted({r["layer"] for r in g if r["bytes_differing"] > 0})
    l0 = [
        nums.add(
            base + ("L0", p, "max_abs"),
            lay[(0, p)]["max_abs"] if (0, p) in lay else 0.0,
            ".6g",
            row=dict(key, layer=0, part=p),
            column="max_abs",
        )
        for p in ("K", "V")
    ]
    if changed:
        fl = changed[0]
        first = [Cell([nums.add(base + ("first_layer",), fl, "d", row=key, column="layer")])] + [
            Cell(
                [
                    nums.add(
                        base + ("first", p, "max_abs"),
                        lay[(fl, p)]["max_abs"],
                        ".6g",
                        row=dict(key, layer=fl, part=p),
                        column="max_abs",
                    )
                ]
            )
            for p in ("K", "V")
        ]
    else:
        first = [Cell([DASH]), Cell([DASH]), Cell([DASH])]
    return [Cell([t]), Cell([arm], cls="mono"), Cell([l0[0]]), Cell([l0[1]]), *first]


def _kv_full_row(a: Archive, N: Numbers, t: str, arm: str, g: list[dict], pr: dict | None) -> list[Cell]:
    """The whole sequence KV's differences of one input and arm, and whether its endpoint diverges
    (``pr``: the arm's first-repeat partition row)."""
    tid2 = "state-kv-full"
    kv_nums = ShownTable(N, a, "kv_diff", tid2)
    partition_nums = ShownTable(N, a, "partition", tid2)
    key = dict(task_id=t, arm_b=arm)
    base = ("kv", t, arm)
    changed = sorted({r["layer"] for r in g if r["bytes_differing"] > 0})
    label: list[Any] = ["equal endpoint"]
    if pr is not None and pr["first_diff_vs_A"] is not None:
        label = [
            "diverges @",
            partition_nums.add(
                ("partition", t, arm, "first_diff_vs_A"),
                pr["first_diff_vs_A"],
                "d",
                row=dict(task_id=t, arm=arm, repeat=1),
                column="first_diff_vs_A",
            ),
        ]
    return [
        Cell([t]),
        Cell([arm], cls="mono"),
        Cell(
            [
                kv_nums.add(
                    base + ("bytes",), sum(r["bytes_differing"] for r in g), "d", row=key, column="bytes_differing"
                )
            ]
        ),
        Cell([kv_nums.add(base + ("layers",), len(changed), "d", row=key, column="layer")]),
        Cell([kv_nums.add(base + ("max_abs",), max(r["max_abs"] for r in g), ".6g", row=key, column="max_abs")]),
        Cell(
            [
                kv_nums.add(
                    base + ("max_rel_frobenius",),
                    max(r["rel_frobenius"] for r in g),
                    ".6g",
                    row=key,
                    column="rel_frobenius",
                )
            ]
        ),
        Cell(label),
    ]


PROJECTION_STATUSES = ("qualified", "mismatch", "excluded", "error")


def projection_positions(rows: list[dict]) -> dict[int, str]:
    """Prompt position -> sha256 of the captured output row there, over one arm's calls of a node
    (the ``row_sha256`` cells: one digest per position ``p0`` to ``p1 - 1``)."""
    return {r["p0"] + j: h for r in rows for j, h in enumerate(r["row_sha256"].split())}


def _projection_calls_table(a: Archive, N: Numbers, groups: dict[tuple[str, str, str], list[dict]]) -> Table:
    """The replayed calls per input, arm and node: their count, each outcome's count and the reasons given."""
    tid = "state-projection"
    nums_tid = ShownTable(N, a, "projection", tid)
    rows = []
    for (t, arm, node), g in groups.items():
        key = dict(task_id=t, arm=arm, node=node)
        base = ("projection", t, arm, node)
        counts = {s: sum(r["status"] == s for r in g) for s in PROJECTION_STATUSES}
        reasons = list(dict.fromkeys(r["reason"] for r in g if r["reason"]))
        rows.append(
            [
                Cell([t]),
                Cell([arm], cls="mono"),
                Cell([node], cls="mono"),
                Cell([g[0]["op"]], cls="mono small"),
                Cell([nums_tid.add(base + ("calls",), len(g), "d", row=key, column="call")]),
            ]
            + [
                Cell(
                    [nums_tid.add(base + (s,), v, "d", row=key, column="status")],
                    cls="bad" if v and s in ("mismatch", "error") else "",
                )
                for s, v in counts.items()
            ]
            + [Cell(["; ".join(reasons)], cls="reason")]
        )
    return Table(
        tid,
        "Replayed calls per input, arm and node",
        [a.src("projection")],
        ["task", "arm", "node", "op", "calls", *PROJECTION_STATUSES, "reason"],
        rows,
        numeric=[False] * 4 + [True] * 5 + [False],
    )


def _projection_totals_table(a: Archive, N: Numbers, rows_all: list[dict]) -> Table:
    """One row: the replayed calls and their count by outcome."""
    tid2 = "state-projection-totals"
    nums_tid2 = ShownTable(N, a, "projection", tid2)
    totals = [("calls", "call", len(rows_all))] + [
        (s, "status", sum(r["status"] == s for r in rows_all)) for s in PROJECTION_STATUSES
    ]
    # one row, the outcomes as its header: an outcome no call had (a zero count) is a column of the
    # format, not a word of a row no record holds
    return Table(
        tid2,
        "Projection replay: calls by outcome",
        [a.src("projection")],
        [label for label, _col, _v in totals],
        [
            [
                Cell([nums_tid2.add(("projection", "total", label), v, "d", row={}, column=col)])
                for label, col, v in totals
            ]
        ],
        numeric=[True] * len(totals),
    )


def _projection_pair_table(
    a: Archive, N: Numbers, rows_all: list[dict], groups: dict[tuple[str, str, str], list[dict]]
) -> Table:
    """Per input and node, the pair's outputs compared position by position: how many positions, how many
    differ and the first that does (not compared where the arms' calls cover other positions)."""
    tid3 = "state-projection-pair"
    nums_tid3 = ShownTable(N, a, "projection", tid3)
    prow = []
    for t in _tasks(rows_all):
        arms = list(dict.fromkeys(r["arm"] for r in rows_all if r["task_id"] == t))
        for node in dict.fromkeys(r["node"] for r in rows_all if r["task_id"] == t):
            head = [Cell([t]), Cell([node], cls="mono"), Cell([" vs ".join(arms)], cls="mono")]
            pos = [projection_positions(groups.get((t, arm, node), [])) for arm in arms]
            if len(pos) != 2 or not pos[0] or set(pos[0]) != set(pos[1]):
                prow.append(head + [Cell([DASH])] * 3 + [Cell(["not compared: the arms' calls cover other positions"])])
                continue
            key = dict(task_id=t, node=node)
            base = ("projection", t, node)
            differ = sorted(p for p in pos[0] if pos[0][p] != pos[1][p])
            first = (
                Cell([nums_tid3.add(base + ("first_position",), differ[0], "d", row=key, column="p0")], cls="warn")
                if differ
                else Cell([DASH])
            )
            prow.append(
                head
                + [
                    Cell([nums_tid3.add(base + ("positions",), len(pos[0]), "d", row=key, column="p0")]),
                    Cell([nums_tid3.add(base + ("positions_differing",), len(differ), "d", row=key, column="p0")]),
                    first,
                    Cell(["outputs differ" if differ else "bitwise equal"], cls="warn" if differ else "ok"),
                ]
            )
    return Table(
        tid3,
        "Where the pair's projections first differ",
        [a.src("projection")],
        ["task", "node", "pair", "positions", "positions differing", "first differing position", "outputs"],
        prow,
        numeric=[False, False, False, True, True, True, False],
    )


@table_section(
    "state-projection",
    "Projection replay on fixed operands",
    "The RMS norm (norm), norm-weight MUL (attn_norm) and Q/K/V projection MUL_MATs of the captured "
    "layers in the prefills of the pair's arms, on the inputs whose states differ (paper §6.1). Each call "
    "is replayed alone on its captured operands on the same backend and compared bitwise with its "
    "captured output: qualified (equal), mismatch, excluded (ggml-alloc computed it in place over its "
    "operand, which no capture can read back; never replayed) or error. Then the pair's outputs of each "
    "node are compared position by position.",
    table="projection",
    absent="projection replay not run (stages.projection)",
)
def section_projection(sec: Section, a: Archive, N: Numbers) -> None:
    rows_all = a.rows("projection")
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows_all:
        groups[(r["task_id"], r["arm"], r["node"])].append(r)
    sec.items.append(_projection_calls_table(a, N, groups))
    sec.items.append(_projection_totals_table(a, N, rows_all))
    sec.items.append(_projection_pair_table(a, N, rows_all, groups))


def _crosses_matrix_table(a: Archive, rows_all: list[dict]) -> Table:
    """The subset matrix (Table S11's shape): per selector and input-direction, the outcome's code, '.' where
    no byte changed and '!' where the process repeats disagree."""
    cols = list(dict.fromkeys((r["task_id"], r["direction"]) for r in rows_all))
    cell: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows_all:
        cell[(r["selector"], r["task_id"], r["direction"])].append(r)
    sels = ["EMPTY", "ALL"] + [s for s in SELECTOR_ORDER if any(r["selector"] == s for r in rows_all)]
    mrows = []
    for s in sels:
        out = [Cell([s], cls="mono")]
        for t, d in cols:
            rs = cell.get((s, t, d), [])
            if not rs:
                out.append(Cell([DASH]))
                continue
            code = OUTCOME_CODE[rs[0]["outcome"]]
            if not rs[0]["bytes_changed"] and s != "EMPTY":
                code += "."
            if len({(x["endpoint_sha256"], x["spliced_kv_sha256"]) for x in rs}) > 1:
                code += "!"
            out.append(Cell([code], cls="mono " + ("warn" if code[0] == "3" else "ok" if code[0] == "D" else "")))
        mrows.append(out)
    return Table(
        "state-crosses",
        "Subset matrix (Table S11 shape)",
        [a.src("crosses")],
        ["selector", *[f"{t} {d}" for t, d in cols]],
        mrows,
        numeric=[False] * (1 + len(cols)),
    )


def _crosses_counts(rows_all: list[dict]) -> list[tuple[str, str, int]]:
    """(label, key, count) of the crosses' outcomes and controls: subset requests by outcome, the processes,
    the subset coordinates and the own-path shams (those reproducing the recipient among them)."""
    subs = [r for r in rows_all if r["kind"] == "subset"]
    shams = [r for r in rows_all if r["selector"] == "EMPTY"]
    coords = {(r["task_id"], r["direction"], r["selector"]) for r in subs}
    return [
        ("subset requests", "requests", len(subs)),
        ("processes", "processes", len({r["process"] for r in rows_all})),
        ("donor endpoint", "donor", sum(r["outcome"] == "donor" for r in subs)),
        ("third trajectory", "third", sum(r["outcome"] == "third" for r in subs)),
        (
            "recipient endpoint, bytes changed",
            "recipient_changed",
            sum(r["outcome"] == "recipient" and r["bytes_changed"] for r in subs),
        ),
        (
            "recipient endpoint, no byte changed",
            "recipient_unchanged",
            sum(r["outcome"] == "recipient" and not r["bytes_changed"] for r in subs),
        ),
        ("subset coordinates", "coordinates", len(coords)),
        ("own-path shams", "shams", len(shams)),
        (
            "own-path shams reproducing the recipient",
            "shams_ok",
            sum(r["outcome"] == "recipient" and r["changed_bytes"] == 0 for r in shams),
        ),
    ]


def _crosses_verdict_table(a: Archive, N: Numbers) -> Table:
    """The vacuity verdict of crosses whose pair's natural endpoints agree on every input crossed."""
    return Table(
        "state-crosses-verdict",
        "Crosses verdict",
        [a.src("crosses")],
        ["study", "verdict"],
        [
            [
                Cell(["state crosses"]),
                Cell(study_vacuity_parts(a, N, "state-crosses-verdict", "crosses"), cls="warn"),
            ]
        ],
        caption="An input is exposed to the crosses where the pair's natural continuations part "
        "within the cap (the rows are distinguishable).",
        numeric=[False, False],
    )


@table_section(
    "state-crosses",
    "State transfer: crosses and subset splices",
    "A fresh receiver restores the recipient's KV with the donor's regions spliced in, samples the "
    "recipient's stored initial logits and continues greedily (paper §6.2, Table S11). '=' the "
    "recipient's natural endpoint, 'D' the donor's (distinguishable), 'T' a third trajectory; '.' no "
    "byte changed; '!' the process repeats disagree.",
    table="crosses",
    absent="state crosses not run",
)
def section_crosses(sec: Section, a: Archive, N: Numbers) -> None:
    rows_all = a.rows("crosses")
    sec.items.append(_crosses_matrix_table(a, rows_all))
    tid2 = "state-crosses-counts"
    nums = ShownTable(N, a, "crosses", tid2)
    vals = _crosses_counts(rows_all)
    rows2 = [[Cell([label]), Cell([nums.add(("crosses", k), v, "d", row={}, column=k)])] for label, k, v in vals]
    sec.items.append(
        Table(
            tid2,
            "Crosses: outcome counts and controls",
            [a.src("crosses")],
            ["count", "value"],
            rows2,
            numeric=[False, True],
        )
    )
    if crosses_exposure(rows_all)["vacuous"]:
        # the pair's natural endpoints agree on every input crossed: no cross can show the donor's
        # endpoint rather than the recipient's (refspec_check.render.vacuity)
        sec.items.append(_crosses_verdict_table(a, N))


def study_vacuity_parts(a: Archive, N: Numbers, tid: str, table: str) -> list:
    """ "vacuous: no exposed input in N screened" with N the study's inputs, as a checked number
    ``<table>|inputs``: the partition study's inputs (``table`` partition) or the inputs crossed (crosses)."""
    exposure = partition_exposure if table == "partition" else crosses_exposure
    n = exposure(a.rows(table))["screened"]
    num = ShownTable(N, a, table, tid).add((table, "inputs"), n, "d", row={}, column="task_id")
    return [VACUOUS_TEXT, num, VACUOUS_TAIL]


@table_section(
    "state-frontier",
    "Frontier contrasts",
    "At the first output t* where a panel's four trajectories (EMPTY, first, second, joint) cease to "
    "agree, the pair score logit[a] - logit[b] of each arm: the additive prediction d_first + d_second "
    "against the actual joint change (paper S5.2, Table S13). The first repeat is shown; both repeats must agree.",
    table="frontier",
    absent="state crosses not run",
)
def section_frontier(sec: Section, a: Archive, N: Numbers) -> None:
    src, tid = a.src("frontier"), "state-frontier"
    nums = ShownTable(N, a, "frontier", tid)
    rows = []
    for r in a.rows("frontier"):
        if r["repeat"] != 1:
            continue
        key = dict(task_id=r["task_id"], direction=r["direction"], panel=r["panel"], repeat=1)
        base = ("frontier", r["task_id"], r["direction"], r["panel"])
        head = [Cell([r["task_id"]]), Cell([r["direction"]], cls="mono"), Cell([r["panel"]], cls="mono")]
        if r["frontier"] is None:
            rows.append(head + [Cell([DASH])] * 6 + [Cell([r["note"] or ""], cls="small")])
            continue
        fr = Cell([nums.add(base + ("frontier",), r["frontier"], "d", row=key, column="frontier")])
        am = Cell(["/".join(str(x) for x in r["argmax"])], cls="mono small")
        pair = Cell([f"{r['token_a']}/{r['token_b']}" if r["token_b"] is not None else DASH], cls="mono small")
        scores = [
            Cell([nums.add(base + (c,), r[c], ".6f", row=key, column=c)]) if r[c] is not None else Cell([DASH])
            for c in ("additive", "actual", "interaction", "max_abs_interaction")
        ]
        rows.append(
            head
            + [fr, am, pair, *scores]
            + [Cell([r["note"] or ("" if r["repeats_agree"] else "repeats disagree")], cls="small")]
        )
    sec.items.append(
        Table(
            tid,
            "Frontier contrasts (Table S13 shape)",
            [src],
            [
                "task",
                "direction",
                "panel",
                "t*",
                "argmax (panel order)",
                "pair a/b",
                "additive",
                "actual",
                "interaction",
                "max |interaction|",
                "note",
            ],
            rows,
            numeric=[False] * 3 + [True, False, False, True, True, True, True, False],
        )
    )
