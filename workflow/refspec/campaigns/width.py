"""Width sweep (paper Supplement S1.3): qualification and cost per (k, U) geometry.

Each geometry is the base arm with draft width ``k`` and target micro-batch
capacity ``U`` (arm ``C_k<k>u<U>``), run at every cap next to the reference R.
Output: ``qualification`` per geometry and task, and ``ratios``: every geometry
against the baseline geometry and the reference against every geometry (above
1: the geometry is faster than R). A geometry the admission guard refuses (more
occupied queries than the layout admits) shows up as failed requests with the
refusal as the reason: never a silent fallback.
"""

from __future__ import annotations

import statistics

from ..core.arms import REFERENCE_ARM
from ..core.errors import ConfigError
from ..core.stats import aa_rule_of
from .derived import ratios_table
from .scheduler import round_schedule, session_ids
from .text import fmt_ratio, table_text


def panels(defn: dict) -> dict:
    return {"panel": defn["panel"]}


def geometry_name(base, k: int, ub: int) -> str:
    return f"{'C' if base.speculative else 'M'}_k{k}u{ub}"


def arms(defn: dict, catalog: dict) -> list:
    if defn["base_arm"] not in catalog:
        raise ConfigError(f"width: unknown base arm {defn['base_arm']!r}")
    base = catalog[defn["base_arm"]]
    geos = [(g["k"], g["ub"]) for g in defn["geometries"]]
    if len(set(geos)) != len(geos):
        raise ConfigError("width: a geometry is listed twice")
    b = (defn["baseline"]["k"], defn["baseline"]["ub"])
    if b not in geos:
        raise ConfigError(f"width: the baseline geometry {b} is not among the geometries")
    return [catalog[REFERENCE_ARM]] + [
        base.with_(name=geometry_name(base, k, ub), k=int(k), ub=int(ub), description=f"{base.name} at k={k}, U={ub}")
        for k, ub in geos
    ]


def schedule(ctx) -> list:
    d = ctx.defn
    others = [n for n in ctx.arms if n != REFERENCE_ARM]
    return round_schedule(
        session_ids(d["sessions"]),
        others,
        ctx.task_ids("panel"),
        caps=sorted(d["caps"]),
        repeats=d["repeats"],
        block_by=d["block_by"],
        seed=d["seed"],
    )


def analyze(ctx, base: dict) -> dict:

    d = ctx.defn
    ref_base = ctx.arms[d["base_arm"]] if d["base_arm"] in ctx.arms else None
    b = next(
        n
        for n, a in ctx.arms.items()
        if n != REFERENCE_ARM and (a.k, a.ub) == (d["baseline"]["k"], d["baseline"]["ub"])
    )
    geos = [n for n in ctx.arms if n != REFERENCE_ARM]
    pairs = [(g, b) for g in geos if g != b] + [(REFERENCE_ARM, g) for g in geos]
    ratios = ratios_table(base["requests"], base["qualification"], "width", pairs=pairs, aa_rule=aa_rule_of(ctx.plan))
    rat = {(r["numerator"], r["denominator"], r["cap"]): r for r in ratios}
    rows = []
    for cap in sorted(d["caps"]):
        for g in geos:
            a = ctx.arms[g]
            q = [x for x in base["qualification"] if x["arm"] == g and x["cap"] == cap]
            reqs = [
                r for r in base["requests"] if r["arm"] == g and r["cap"] == cap and r["status"] != "excluded_warmup"
            ]
            ok = [r for r in reqs if r["status"] == "ok"]
            failed = [r for r in reqs if r["status"] == "failed"]
            prop = sum(r["proposals"] or 0 for r in ok)
            acc = sum(r["accepted"] or 0 for r in ok)
            note = ""
            if failed and not ok:
                starts = ctx.run.start_failures().get(g)
                note = starts[-1] if starts else str(failed[-1]["reason"])
                note = note.split("error: ", 1)[-1][:110]
            vs_b = rat.get((g, b, cap))
            vs_r = rat.get((REFERENCE_ARM, g, cap))
            rows.append(
                [
                    f"k={a.k} U={a.ub}",
                    cap,
                    f"{sum(x['n_matching'] for x in q)}/{sum(x['n_required'] for x in q)}",
                    f"{sum(1 for x in q if x['qualified'])}/{len(q)}",
                    f"{acc / prop:.3f}" if prop else "-",
                    f"{statistics.mean(r['callers'] for r in ok):.1f}" if ok else "-",
                    f"{statistics.mean(r['micrographs'] for r in ok):.1f}" if ok else "-",
                    f"{statistics.median(r['t_ns'] for r in ok) / 1e6:.1f}" if ok else "-",
                    fmt_ratio(vs_b["ratio"]) if vs_b else ("1 (baseline)" if g == b else "-"),
                    fmt_ratio(vs_r["ratio"]) if vs_r else "-",
                    note,
                ]
            )
    text = "\n".join(
        [
            f"Width sweep: base {d['base_arm']}"
            + (f" ({ref_base.layout}, mask {ref_base.mask})" if ref_base else "")
            + f", {len(ctx.task_ids('panel'))} task(s), caps {', '.join(map(str, sorted(d['caps'])))}, "
            f"baseline k={d['baseline']['k']} U={d['baseline']['ub']}",
            table_text(
                [
                    "geometry",
                    "cap",
                    "matching",
                    "tasks ok",
                    "acceptance",
                    "callers",
                    "micrographs",
                    "median ms",
                    "time / baseline",
                    "R / geometry",
                    "note",
                ],
                rows,
            ),
            "(paper, fixed UB4: k=7 preserved endpoints at 0.890 of the k=3 request speed)",
        ]
    )
    return {"tables": {"ratios": ratios}, "text": text}
