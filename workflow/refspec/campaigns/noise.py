r"""The A/A control (the noise floor measured in the same run) and the machine load of every block.

A/A control (``noise`` table)
    A timed campaign with ``aa_arm: X`` also runs ``X_aa``, the same recipe under its own
    name, in the same blocks and sessions (:func:`refspec.campaigns.context.aa_twins`). With
    both qualified on every panel task, the log contrasts of ``X_aa`` over ``X`` are

    * kind ``ratio`` (confirmation, implementation): the task log ratios
      ``d(t) = L_X_aa(t) - L_X(t)`` on the panel, pooled over sessions and repeats (the terms
      of a qualified ratio);
    * kind ``estimate`` (replication): the session contrasts ``c_s`` of ``X_aa`` over ``X``
      (the terms of an E2 estimate);

    and :func:`refspec.core.stats.noise_floor` gives the value, the bootstrap interval and the
    verdict (``ok`` or ``noise_too_high``). An estimate's ``exceeds``/``below`` decision is
    ``noise_too_high`` when the A/A control of its campaign and family is
    (:func:`gate_estimates`).

Machine load (``loads`` table)
    The campaign engine samples the machine before and after every block
    (:mod:`refspec.engine.load`) and writes a ``block_load`` ledger line; the table has one
    row per block from those lines. A block is *busy* when the CPU of competing processes
    (not this campaign process and its workers) is above ``busy_threshold`` cores before or
    after it; a busy block is kept, flagged in the ledger, the table and the report.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..core.arms import is_twin, twin_of
from ..core.stats import (
    DEFAULT_DRAWS,
    DEFAULT_SEED,
    DEFAULT_THRESHOLD,
    NOISE_TOO_HIGH,
    gate,
    noise_floor,
    noise_reason,
    paired_ratio,
)
from ..core.tables import records
from .derived import _panels, _unqualified_reason

KIND_OF = {"replication": "estimate"}  # every other campaign's A/A control is of kind ratio


def _times(reqs: list[dict]) -> dict:
    """(family, cap, arm, task, session) -> [t_ns] of the ok rows."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in reqs:
        if r["status"] == "ok" and r["t_ns"] is not None:
            out[(r["family"], int(r["cap"]), r["arm"], r["task_id"], r["session"])].append(float(r["t_ns"]))
    return out


def _contrasts(times: dict, fam: str, cap: int, twin: str, arm: str, tasks: list[str], kind: str) -> tuple:
    """(log contrasts, sessions timing both arms) of ``twin`` over ``arm``."""
    sessions = sorted({k[4] for k in times if k[0] == fam and k[1] == cap and k[2] in (twin, arm)})

    def pooled(a: str, ss: list[str]) -> dict[str, list[float]]:
        return {t: [x for s in ss for x in times.get((fam, cap, a, t, s), [])] for t in tasks}

    both = [
        s
        for s in sessions
        if any(times.get((fam, cap, twin, t, s)) and times.get((fam, cap, arm, t, s)) for t in tasks)
    ]
    if kind == "ratio":
        return list(paired_ratio(pooled(twin, sessions), pooled(arm, sessions), tasks).task_log_ratios.values()), both
    cs = []
    for s in both:
        num, den = pooled(twin, [s]), pooled(arm, [s])
        cs.append(paired_ratio(num, den, [t for t in tasks if num[t] and den[t]]).log_ratio)
    return cs, both


def noise_table(
    requests: Any,
    qualification: Any,
    campaign: str,
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
    threshold: float = DEFAULT_THRESHOLD,
) -> list[dict[str, Any]]:
    """Rows of the ``noise`` table for one campaign: one per family, cap and twin arm."""
    reqs = [r for r in records(requests) if r["campaign"] == campaign]
    panels = _panels(records(qualification), campaign)
    times = _times(reqs)
    kind = KIND_OF.get(campaign, "ratio")
    # a twin's timed requests (its registered warmup, at the warmup cap, is no control)
    twins = sorted(
        {(r["family"], int(r["cap"]), r["arm"]) for r in reqs if is_twin(r["arm"]) and r["status"] != "excluded_warmup"}
    )
    rows = []
    for fam, cap, twin in twins:
        arm = twin_of(twin)
        panel = panels.get((fam, cap), {})
        tasks = sorted(panel)
        row = dict(
            campaign=campaign,
            family=fam,
            arm=arm,
            twin=twin,
            kind=kind,
            cap=cap,
            tasks=len(tasks),
            draws=int(draws),
            seed=int(seed),
            threshold=float(threshold),
        )
        reason = _unqualified_reason(panel, (arm, twin)) if tasks else "no qualification rows"
        u, both = ([], []) if reason else _contrasts(times, fam, cap, twin, arm, tasks, kind)
        if reason or not u:
            row.update(value=None, lo=None, hi=None, units=0, sessions=len(both), verdict="unqualified")
            row["reason"] = reason or "no session timed both arms"
        else:
            nf = noise_floor(u, draws, seed, threshold)
            row.update(value=nf.value, lo=nf.lo, hi=nf.hi, units=nf.n, sessions=len(both), verdict=nf.verdict)
            row["reason"] = noise_reason(nf.lo, nf.hi, threshold) if nf.verdict == NOISE_TOO_HIGH else None
        rows.append(row)
    return rows


def gate_estimates(estimates: list[dict], noise: list[dict]) -> list[dict]:
    """The estimates with ``exceeds``/``below`` turned into ``noise_too_high`` where the A/A control
    of their family is ``noise_too_high`` (the reason names the control)."""
    high = {n["family"]: n for n in noise if n["verdict"] == NOISE_TOO_HIGH}
    out = []
    for e in estimates:
        n = high.get(e["family"])
        dec = gate(e["decision"], n["verdict"] if n else None)
        if dec != e["decision"]:
            e = dict(e, decision=dec, reason=f"machine noise too high: A/A {n['twin']}/{n['arm']}: {n['reason']}")
        out.append(e)
    return out


def noise_text(rows: list[dict]) -> str:
    """The summary's A/A lines."""
    if not rows:
        return "A/A control: none (aa_arm is null)"
    lines = ["A/A control (noise floor; twin/arm, same blocks and sessions):"]
    for n in rows:
        if n["value"] is None:
            lines.append(f"  {n['family']} {n['twin']}/{n['arm']}: - ({n['reason']})")
        else:
            lines.append(
                f"  {n['family']} {n['twin']}/{n['arm']} ({n['kind']}, {n['units']} units): {n['value']:.6f} "
                f"[{n['lo']:.6f}, {n['hi']:.6f}] {n['verdict']}" + (f" ({n['reason']})" if n["reason"] else "")
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- machine load


def loads_table(ledger: list[dict], campaign: str, family: str) -> list[dict[str, Any]]:
    """One row per block from the ``block_load`` ledger lines (the last line of a block wins: a
    resumed block is sampled again)."""
    by: dict[tuple, dict] = {}
    for r in ledger:
        if r.get("kind") != "block_load":
            continue
        b, a = r["before"], r["after"]
        by[(r["session"], int(r["block"]))] = dict(
            campaign=campaign,
            family=family,
            session=r["session"],
            block=int(r["block"]),
            arm=r["arm"],
            load1_before=b.get("load1"),
            load1_after=a.get("load1"),
            cpu_before=float(b["cpu_percent"]),
            cpu_after=float(a["cpu_percent"]),
            competing_before=float(b["competing_cores"]),
            competing_after=float(a["competing_cores"]),
            top_competing=" | ".join(x for x in (_top(b), _top(a)) if x) or None,
            governor=b.get("governor"),
            freq_mhz=b.get("freq_mhz"),
            busy_threshold=float(r["busy_threshold"]),
            busy=bool(r["busy"]),
        )
    return [by[k] for k in sorted(by)]


def _top(sample: dict) -> str:
    return " ".join(f"{p['name']}:{p['pid']}:{p['cores']:.2f}" for p in sample.get("top") or [])


def busy_text(rows: list[dict]) -> str:
    busy = [r for r in rows if r["busy"]]
    if not rows:
        return "machine load: not sampled"
    head = f"machine load: {len(busy)}/{len(rows)} block(s) ran on a busy machine"
    return "\n".join(
        [head]
        + [
            f"  {r['session']} block {r['block']} {r['arm']}: competing {r['competing_before']:.2f} / "
            f"{r['competing_after']:.2f} cores ({r['top_competing'] or ''})"
            for r in busy
        ]
    )
