"""The numerical sections: the replay of frozen operands (E1) and the representation audit."""

from __future__ import annotations

from collections import defaultdict

from ..document import Archive, Cell, Numbers, Section, ShownTable, Table, table_section
from .vocabulary import STAGE_ORDER


def refused_qb(r: dict) -> bool:
    """Whether the device refused QB at graph build in this replay row's context."""
    return "qb" in (r.get("device_refused") or "").split(",")


def e1_counts(g: list[dict]) -> dict[str, int]:
    """One (family, stage) of the replay table: its contexts, those where the device refused QB and
    those where it admitted it, PQ = QB among the admitted (a refused context is neither equal nor
    differing: its QB replay ran nodes on another backend), PQ = QH and MQ = PQ."""
    refused = sum(1 for r in g if refused_qb(r))
    return {
        "contexts": len(g),
        "qb_refused": refused,
        "qb_admitted": len(g) - refused,
        "pq_eq_qb": sum(1 for r in g if r["pq_eq_qb"] and not refused_qb(r)),
        "pq_eq_qh": sum(1 for r in g if r["pq_eq_qh"]),
        "mq_eq_pq": sum(1 for r in g if r["mq_eq_pq"]),
    }


@table_section(
    "replay",
    "Numerical replay (E1)",
    "Frozen Q/K/V/mask operands replayed through MQ, PQ, QB and QH graphs (paper Table S7). "
    "Counts of bitwise-equal contexts per stage and the largest MQ-to-repair differences. PQ = QB counts "
    "the contexts where the device admitted QB; a context where it refused QB at graph build is counted "
    "apart, as refused, neither equal nor differing.",
    table="replay",
    absent="numerical replay not run",
)
def section_replay(sec: Section, a: Archive, N: Numbers) -> None:
    src = a.src("replay")
    tid = "replay"
    shown = ShownTable(N, a, "replay", tid)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("replay"):
        groups[(r["family"], r["stage"])].append(r)
    rows = []
    for fam, stage in sorted(groups, key=lambda k: (k[0], STAGE_ORDER.index(k[1]) if k[1] in STAGE_ORDER else 9)):
        g = groups[(fam, stage)]
        key = dict(family=fam, stage=stage)
        base = ("replay", fam, stage)
        counts = e1_counts(g)
        vals = dict(
            **{k: (v, "d") for k, v in counts.items()},
            control_ok=(sum(1 for r in g if r["control_ok"]), "d"),
            max_abs_mq=(max(r["max_abs_mq"] for r in g), ".6g"),
            max_ulp_mq=(max(r["max_ulp_mq"] for r in g), "d"),
            max_visible_keys=(max(r["visible_keys"] for r in g), "d"),
        )
        nums = {k: shown.add(base + (k,), v, f, row=key, column=k) for k, (v, f) in vals.items()}
        rows.append(
            [
                Cell([fam]),
                Cell([stage], cls="mono"),
                Cell([nums["contexts"]]),
                Cell(
                    [nums["pq_eq_qb"], "/", nums["qb_admitted"]],
                    cls="ok" if counts["pq_eq_qb"] == counts["qb_admitted"] else "bad",
                ),
                Cell([nums["qb_refused"]]),
                Cell([nums["pq_eq_qh"], "/", nums["contexts"]], cls="ok" if counts["pq_eq_qh"] == len(g) else "bad"),
                Cell([nums["mq_eq_pq"], "/", nums["contexts"]]),
                Cell([nums["max_abs_mq"]]),
                Cell([nums["max_ulp_mq"]]),
                Cell([nums["control_ok"], "/", nums["contexts"]]),
                Cell([nums["max_visible_keys"]]),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Replay correspondence and maximum MQ differences",
            [src],
            [
                "family",
                "stage",
                "contexts",
                "PQ = QB",
                "QB refused",
                "PQ = QH",
                "MQ = PQ",
                "max |MQ-PQ|",
                "max ULP",
                "controls ok",
                "max visible keys",
            ],
            rows,
            numeric=[False, False] + [True] * 9,
        )
    )
    bad = [r for r in a.rows("replay") if not r["control_ok"]]
    if bad:
        sec.notes.append(
            f"{len(bad)} context(s) failed a control; their numerical claims are withheld: "
            + "; ".join(sorted({r["reason"] or "no reason recorded" for r in bad}))
        )


@table_section(
    "audit",
    "Representation audit",
    "Synthetic fixtures with an integer address oracle, an FP64 oracle and injected faults (paper S6.2).",
    table="audit",
    absent="representation audit not run",
)
def section_audit(sec: Section, a: Archive, N: Numbers) -> None:
    src = a.src("audit")
    tid = "audit"
    shown = ShownTable(N, a, "audit", tid)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("audit"):
        groups[(r["layout"], r["stage"])].append(r)
    rows = []
    for lay, stage in sorted(groups, key=lambda k: (k[0], STAGE_ORDER.index(k[1]) if k[1] in STAGE_ORDER else 9)):
        g = groups[(lay, stage)]
        clean = [r for r in g if r["fault"] is None]
        faulty = [r for r in g if r["fault"] is not None]
        key = dict(layout=lay, stage=stage)
        base = ("audit", lay, stage)
        vals = dict(
            fixtures=(len(clean), "d"),
            oracle_ok=(sum(1 for r in clean if r["oracle_ok"]), "d"),
            faults=(len(faulty), "d"),
            detected=(sum(1 for r in faulty if r["detected"]), "d"),
            max_abs_err=(max((r["max_abs_err"] for r in clean), default=0.0), ".6g"),
            max_rel_err=(max((r["max_rel_err"] for r in clean), default=0.0), ".6g"),
        )
        nums = {k: shown.add(base + (k,), v, f, row=key, column=k) for k, (v, f) in vals.items()}
        ok = vals["oracle_ok"][0] == len(clean) and vals["detected"][0] == len(faulty)
        rows.append(
            [
                Cell([lay], cls="mono"),
                Cell([stage], cls="mono"),
                Cell([nums["oracle_ok"], "/", nums["fixtures"]], cls="ok" if ok else "bad"),
                Cell(
                    [nums["detected"], "/", nums["faults"]], cls="" if not faulty else "ok" if ok else "bad"
                ),  # 0/0: neutral
                Cell([nums["max_abs_err"]]),
                Cell([nums["max_rel_err"]]),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Audit summary",
            [src],
            [
                "layout",
                "stage",
                "clean fixtures agreeing with the oracle",
                "injected faults detected",
                "max abs error",
                "max rel error",
            ],
            rows,
            numeric=[False, False, True, True, True, True],
        )
    )
    missed = [r for r in a.rows("audit") if r["fault"] is not None and not r["detected"]]
    if missed:
        sec.notes.append(
            "injected faults NOT detected: "
            + "; ".join(f"{r['fixture']} {r['layout']} {r['stage']} ({r['fault']})" for r in missed[:10])
        )
