"""The claims section: each controlled stage's claim, supported or withheld, with its controls."""

from __future__ import annotations

from ..document import Archive, Cell, Numbers, Section, ShownTable, Table, table_section
from ..vacuity import VACUOUS, partition_exposure
from .state_studies import study_vacuity_parts


def _vacuity(a: Archive, N: Numbers, tid: str, stage: str) -> list:
    """The verdict's parts: N the partition study's inputs, or for crosses on a partition that has an
    exposed input, the inputs crossed (the pair's continuations agree on all of them)."""
    if stage == "crosses" and a.has("crosses") and not partition_exposure(a.rows("partition"))["vacuous"]:
        return study_vacuity_parts(a, N, tid, "crosses")
    return study_vacuity_parts(a, N, tid, "partition")


@table_section(
    "claims",
    "Controlled stages and their claims",
    "Each controlled stage runs its controls before its tables may be read as claims. A failed control "
    "keeps the stage's complete record in this archive; the claim is then withheld, never dropped.",
    table="claims",
    absent="no controlled stage was run",
)
def section_claims(sec: Section, a: Archive, N: Numbers) -> None:
    src, tid = a.src("claims"), "claims"
    nums = ShownTable(N, a, "claims", tid)
    rows = []
    for r in sorted(a.rows("claims"), key=lambda r: (r["stage"], r["record"])):
        key = dict(stage=r["stage"], record=r["record"])
        base = ("claim", r["stage"], r["record"])
        ok = r["status"] == "supported"
        vac = r["status"] == VACUOUS and a.has("partition")
        rows.append(
            [
                Cell([r["stage"]], cls="mono"),
                Cell([r["record"]], cls="mono small"),
                Cell(
                    [r["status"] if ok or r["status"] == VACUOUS else "WITHHELD"],
                    cls="ok" if ok else "warn" if r["status"] == VACUOUS else "bad",
                ),
                Cell(
                    [
                        nums.add(
                            base + ("controls_failed",), r["controls_failed"], "d", row=key, column="controls_failed"
                        ),
                        " / ",
                        nums.add(base + ("controls",), r["controls"], "d", row=key, column="controls"),
                    ]
                ),
                Cell(_vacuity(a, N, tid, r["stage"]) if vac else [r["claim"]], cls="small"),
                Cell([r["reason"] or ""], cls="reason"),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Claims of the controlled stages",
            [src],
            ["stage", "record", "claim status", "controls failed / run", "claim", "why withheld"],
            rows,
            numeric=[False, False, False, True, False, False],
        )
    )
    withheld = [r for r in a.rows("claims") if r["status"] not in ("supported", VACUOUS)]
    if withheld:
        sec.notes.append("withheld: " + "; ".join(f"{r['stage']} ({r['record']}): {r['reason']}" for r in withheld))
