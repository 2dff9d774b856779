"""The backend admission section: the family's attention shape lifted to one to four occupied
queries, per layout, with the chosen backend's verdicts and placements (paper §6.3, S6.3)."""

from __future__ import annotations

from collections import defaultdict

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
        verdict = Cell([f"refused: {refused[0]['reason']}"], cls="bad") if refused else Cell(["unknown"])
        rows.append(
            [
                Cell([fam]),
                Cell([be], cls="mono"),
                Cell([f"h={g[0]['n_head']}/{g[0]['n_head_kv']} d={g[0]['head_dim']} n_kv={n_kv}"], cls="small"),
                Cell([lay], cls="mono"),
                Cell([nums.add(base + ("q",), q, "d", row=key, column="q")]),
                Cell([nums.add(base + ("ops",), len(g), "d", row=key, column="op")]),
                Cell([nums.add(base + ("false",), nf, "d", row=key, column="verdict")], cls="bad" if nf else ""),
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
