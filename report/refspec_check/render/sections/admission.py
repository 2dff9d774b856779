"""The backend admission section: the family's attention shape lifted to one to four occupied
queries, per layout, with the chosen backend's verdicts and placements (paper §6.3, S6.3); and the
graph size of each layout's target caller (nodes, dispatches, splits), its cost in counts."""

from __future__ import annotations

from collections import defaultdict

from refspec_check.names import LAYOUT_ORDER

from ..document import Archive, Cell, Numbers, Section, ShownTable, Table, table_section


@table_section(
    "admission",
    "Backend admission",
    "The family's attention shape lifted to one to four occupied queries (q): per layout, the chosen backend's "
    "supports_op for every node and where the nodes ran (paper §6.3, S6.3). 'false' is a proven "
    "violation of a necessary condition; 'unknown' is never a certificate of support.",
    table="admission",
    absent="backend admission not run",
)
def section_admission(sec: Section, a: Archive, N: Numbers) -> None:
    src, tid = a.src("admission"), "admission"
    nums = ShownTable(N, a, "admission", tid)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in a.rows("admission"):
        groups[(r["family"], r["backend"], r["n_kv"], r["layout"], r["q"])].append(r)
    rows = []
    for (fam, be, n_kv, lay, q), g in sorted(groups.items()):
        key = dict(family=fam, backend=be, n_kv=n_kv, layout=lay, q=q)
        base = ("admission", fam, be, n_kv, lay, q)
        nf = sum(r["verdict"] == "false" for r in g)
        refused = [r for r in g if r["verdict"] == "false"]
        verdict = Cell([f"refused: {refused[0]['reason']}"], cls="refused") if refused else Cell(["unknown"])
        rows.append(
            [
                Cell([fam]),
                Cell([be], cls="mono"),
                Cell([f"h={g[0]['n_head']}/{g[0]['n_head_kv']} d={g[0]['head_dim']} n_kv={n_kv}"], cls="small"),
                Cell([lay], cls="mono"),
                Cell([nums.add(base + ("q",), q, "d", row=key, column="q")]),
                Cell([nums.add(base + ("ops",), len(g), "d", row=key, column="op")]),
                Cell([nums.add(base + ("false",), nf, "d", row=key, column="verdict")], cls=""),
                Cell(
                    [
                        nums.add(
                            base + ("fallback",), sum(bool(r["fallback"]) for r in g), "d", row=key, column="fallback"
                        )
                    ]
                ),
                Cell([",".join(sorted({x for r in g for x in r["observed"].split(",")}))], cls="mono small"),
                verdict,
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Admission of the lifted shapes",
            [src],
            [
                "family",
                "backend",
                "shape",
                "layout",
                "q",
                "operators",
                "refused (false)",
                "with fallback",
                "observed placement",
                "verdict",
            ],
            rows,
            numeric=[False] * 4 + [True] * 4 + [False, False],
        )
    )


@table_section(
    "graph-size",
    "Graph size per layout",
    "One continuation caller of the target with q rows and the layout active, from the patched library's "
    "counters: the graph's nodes, the nodes a backend computes (dispatches: every node but views; on a GPU "
    "without kernel fusion, one launch each), the dispatches it adds to MQ's graph of the same caller, and the "
    "scheduler's backend splits, summed over the caller's micrographs. These are counts, not timings: the same "
    "on any backend that runs the graph, and what a launch-bound device pays per caller.",
    table="graph_size",
    absent="graph size not measured",
)
def section_graph_size(sec: Section, a: Archive, N: Numbers) -> None:
    src, tid = a.src("graph_size"), "graph-size"
    nums = ShownTable(N, a, "graph_size", tid)
    rows_in = sorted(
        a.rows("graph_size"),
        key=lambda r: (r["family"], r["device"], LAYOUT_ORDER.index(r["layout"]), r["q"]),
    )
    mq = {(r["family"], r["device"], r["q"]): r for r in rows_in if r["layout"] == "mq" and r["status"] == "ok"}
    rows = []
    for r in rows_in:
        key = dict(family=r["family"], device=r["device"], layout=r["layout"], q=r["q"])
        base = ("graph_size", r["family"], r["device"], r["layout"], r["q"])
        cells = [
            Cell([r["family"]]),
            Cell([r["device"]], cls="mono"),
            Cell([r["layout"]], cls="mono"),
            Cell([nums.add(base + ("q",), r["q"], "d", row=key, column="q")]),
        ]
        if r["status"] != "ok":
            cells += [Cell([r["status"]], cls="bad")] + [Cell([""]) for _ in range(5)]
            cells.append(Cell([r["reason"]], cls="wrap"))
        else:
            ref = mq.get((r["family"], r["device"], r["q"]))
            added = (
                Cell(
                    [
                        nums.add(
                            base + ("added",), r["dispatches"] - ref["dispatches"], "d", row=key, column="dispatches"
                        )
                    ]
                )
                if ref is not None
                else Cell([""])
            )
            cells += [
                Cell(["ok"]),
                Cell([nums.add(base + ("micrographs",), r["micrographs"], "d", row=key, column="micrographs")]),
                Cell([nums.add(base + ("nodes",), r["nodes"], "d", row=key, column="nodes")]),
                Cell([nums.add(base + ("dispatches",), r["dispatches"], "d", row=key, column="dispatches")]),
                added,
                Cell([nums.add(base + ("splits",), r["splits"], "d", row=key, column="splits")]),
                Cell([""]),
            ]
        rows.append(cells)
    sec.items.append(
        Table(
            tid,
            "Graph nodes and dispatches per caller",
            [src],
            [
                "family",
                "device",
                "layout",
                "q",
                "status",
                "micrographs",
                "nodes",
                "dispatches",
                "added to MQ",
                "splits",
                "reason",
            ],
            rows,
            numeric=[False] * 3 + [True] + [False] + [True] * 5 + [False],
        )
    )
