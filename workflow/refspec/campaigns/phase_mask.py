"""Phase-mask sweep (paper §3.5, Supplement S1.2).

Every phase mask of the base arm (bits: target prefill 1, target continuation
2, draft prefill 4, draft continuation 8) runs as its own arm ``C_m<mask>`` (or
``M_m<mask>`` for a target-only base) on the probe panel, at least twice per
task, next to the reference R. A mask *passes* when every probe matched the
reference's complete endpoint in every repeat; a passing mask is
*inclusion-minimal* when no proper sub-mask passes
(:func:`refspec.campaigns.derived.phase_mask_table`). Output table: ``phase_masks``.
"""

from __future__ import annotations

from ..core.arms import REFERENCE_ARM
from ..core.errors import ConfigError
from .derived import phase_mask_table
from .scheduler import round_schedule, session_ids
from .text import table_text

BITS = ((1, "TP"), (2, "TC"), (4, "DP"), (8, "DC"))


def panels(defn: dict) -> dict:
    return {"probe": defn["panel"]}


def mask_arm_name(base, mask: int) -> str:
    return f"{'C' if base.speculative else 'M'}_m{mask}"


def arms(defn: dict, catalog: dict) -> list:
    if defn["base_arm"] not in catalog:
        raise ConfigError(f"phase_mask: unknown base arm {defn['base_arm']!r}")
    base = catalog[defn["base_arm"]]
    if defn["repeats"] < 2:
        raise ConfigError("phase_mask: every mask needs at least 2 repeats")
    out = [catalog[REFERENCE_ARM]]
    for m in defn["masks"]:
        out.append(
            base.with_(
                name=mask_arm_name(base, m),
                mask=int(m),
                description=f"{base.name} ({base.mode}, {base.layout}, UB{base.ub}, k={base.k}) with phase mask {m}",
            )
        )
    return out


def schedule(ctx) -> list:
    d = ctx.defn
    others = [n for n in ctx.arms if n != REFERENCE_ARM]
    return round_schedule(
        session_ids(d["sessions"]),
        others,
        ctx.task_ids("probe"),
        caps=[d["cap"]],
        repeats=d["repeats"],
        block_by=d["block_by"],
        seed=d["seed"],
    )


def analyze(ctx, base: dict) -> dict:
    rows = phase_mask_table(base["requests"], base["qualification"], campaign="phase_mask")
    body = []
    for r in rows:
        bits = ["Y" if r["mask"] & b else "." for b, _n in BITS]
        body.append(
            [
                r["mask"],
                *bits,
                f"{r['matches']}/{r['n_tasks'] * r['repeats']}",
                "pass" if r["passes"] else "fail",
                "minimal" if r["minimal"] else "",
            ]
        )
    passing = [r["mask"] for r in rows if r["passes"]]
    minimal = [r["mask"] for r in rows if r["minimal"]]
    per_task = _per_task(base)
    text = "\n".join(
        [
            f"Phase-mask sweep (Table S1 shape): {len(ctx.task_ids('probe'))} probe task(s), cap {ctx.defn['cap']}, "
            f"{ctx.defn['repeats']} repeats, base arm {ctx.defn['base_arm']}",
            table_text(["mask", *[n for _b, n in BITS], "matches", "result", ""], body),
            f"passing masks: {' '.join(map(str, passing)) or 'none'}",
            f"inclusion-minimal passing mask(s): {' '.join(map(str, minimal)) or 'none'}",
            per_task,
        ]
    )
    return {
        "tables": {"phase_masks": rows},
        "text": text,
        "json": {"phase_mask_summary.json": {"passing": passing, "minimal": minimal, "rows": rows}},
    }


def _per_task(base: dict) -> str:
    """Which probe each mask matched (Y: every repeat matched R), like the paper's Table S1 cells."""
    q = [r for r in base["qualification"] if r["arm"] != REFERENCE_ARM]
    tasks = sorted({r["task_id"] for r in q})
    arms_ = sorted({r["arm"] for r in q}, key=lambda a: int(a.split("_m", 1)[1]) if "_m" in a else 99)
    by = {(r["arm"], r["task_id"]): r for r in q}
    rows = []
    for a in arms_:
        cells = []
        for t in tasks:
            r = by.get((a, t))
            cells.append(
                "Y"
                if r and r["qualified"]
                else (f"@{r['first_diff_index']}" if r and r["first_diff_index"] is not None else "n")
            )
        rows.append([a, *cells])
    return "per probe (Y: full-reference match in every repeat; @i: first difference):\n" + table_text(
        ["arm", *tasks], rows
    )
