r"""The A/A control (a calibration test measured in the same run) and the machine load of every block.

A/A control (``noise`` table)
    A timed campaign with ``aa_arm: X`` also runs ``X_aa``, the same recipe under its own
    name, in the same blocks and sessions (:func:`refspec.campaigns.context.aa_twins`). With
    both qualified on every panel task, the log contrasts of ``X_aa`` over ``X`` are

    * kind ``ratio`` (confirmation, implementation): the task log ratios
      ``d(t) = L_X_aa(t) - L_X(t)`` on the panel, pooled over sessions and repeats (the terms
      of a qualified ratio);
    * kind ``estimate`` (replication): the session contrasts ``c_s`` of ``X_aa`` over ``X``
      (the terms of an E2 estimate);

    with the interval of their design (the worker-level or paired interval of kind ``ratio``, the
    session interval of kind ``estimate``) and the verdict ``ok`` (the interval holds 1) or
    ``biased``. The control is a calibration test (:func:`refspec.core.stats.decision_floor`, the
    rule the campaign's plan froze as ``aa_rule``): under the calibration rule the row's ``floor``
    ``F`` is 1 while the interval holds 1 (the twin's noise is already inside every ratio's own
    interval) and ``max(hi, 1/lo)`` when it does not (the control failed and the decisions carry
    the measured bias); under the floor rule of older plans it is ``max(hi, 1/lo)`` always. The
    row's ``mde`` and ``units_needed`` follow the same ``F``, and an E2 estimate is decided under
    the largest ``F`` of its family (:func:`weigh_estimates`).

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
    CONFIDENCE,
    DEFAULT_AA_RULE,
    DEFAULT_THRESHOLD,
    NOISE_BIASED,
    NOISE_TOO_HIGH,
    PAIRED,
    TARGET_EFFECT,
    StatsError,
    aa_verdict,
    decide_weighed,
    decision_floor,
    minimum_detectable,
    paired_ratio,
    process_interval,
    session_interval,
    units_needed,
)
from ..core.tables import records
from ..engine.load import steal_percent
from . import intervals as IV
from .derived import _arms_and_times, _panels, _unqualified_reason, cpu_ratio

KIND_OF = {"replication": "estimate"}  # every other campaign's A/A control is of kind ratio


def _blocks(reqs: list[dict]) -> dict:
    """(family, cap, arm) -> worker -> [(task, t_ns)] and (family, cap, arm, task, session) -> [t_ns],
    of the ok rows."""
    blocks: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    times: dict[tuple, list[float]] = defaultdict(list)
    for r in reqs:
        if r["status"] == "ok" and r["t_ns"] is not None:
            blocks[(r["family"], int(r["cap"]), r["arm"])][r["worker"]].append((r["task_id"], float(r["t_ns"])))
            times[(r["family"], int(r["cap"]), r["arm"], r["task_id"], r["session"])].append(float(r["t_ns"]))
    return blocks, times


def session_contrasts(times: dict, fam: str, cap: int, num: str, den: str, tasks: list[str]) -> dict[str, float]:
    """session -> c_s, the paired log ratio of ``num`` over ``den`` on the tasks both timed in it."""
    sessions = sorted({k[4] for k in times if k[0] == fam and k[1] == cap and k[2] in (num, den)})
    out = {}
    for s in sessions:
        a = {t: times.get((fam, cap, num, t, s), []) for t in tasks}
        b = {t: times.get((fam, cap, den, t, s), []) for t in tasks}
        common = [t for t in tasks if a[t] and b[t]]
        if common:
            out[s] = paired_ratio(a, b, common).log_ratio
    return out


def aa_interval(
    blocks: dict, times: dict, fam: str, cap: int, twin: str, arm: str, tasks: list[str], kind: str, timed=()
):
    """(the A/A :class:`~refspec.core.stats.Interval`, sessions timing both), or (None, sessions, reason).
    Kind ratio in the paired design (``timed``, the family and cap's timed rows, has a process that
    served several arms): the interval over the processes' within-process contrasts of twin over arm."""
    cs = session_contrasts(times, fam, cap, twin, arm, tasks)
    try:
        if kind == "ratio" and IV.design_of(timed) == PAIRED:
            iv = IV.design_interval(timed, twin, arm, tasks, PAIRED, CONFIDENCE)
        elif kind == "ratio":
            iv = process_interval(blocks[(fam, cap, twin)], blocks[(fam, cap, arm)], tasks)
        else:
            iv = session_interval(list(cs.values()))
    except StatsError as e:
        return None, len(cs), str(e)
    return iv, len(cs), None


def noise_table(
    requests: Any,
    qualification: Any,
    campaign: str,
    threshold: float = DEFAULT_THRESHOLD,
    aa_rule: str = DEFAULT_AA_RULE,
) -> list[dict[str, Any]]:
    """Rows of the ``noise`` table for one campaign: one per family, cap and twin arm; ``floor``,
    ``mde`` and ``units_needed`` under ``aa_rule`` (the campaign plan's)."""
    reqs = [r for r in records(requests) if r["campaign"] == campaign]
    panels = _panels(records(qualification), campaign)
    blocks, times = _blocks(reqs)
    _caps, cpu_times = _arms_and_times(reqs, "cpu_ns")
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
        row = dict(campaign=campaign, family=fam, arm=arm, twin=twin, kind=kind, cap=cap, tasks=len(tasks))
        reason = _unqualified_reason(panel, (arm, twin)) if tasks else "no qualification rows"
        iv, n_sessions, why = (
            (None, 0, None)
            if reason
            else aa_interval(blocks, times, fam, cap, twin, arm, tasks, kind, IV.timed(reqs, fam, cap))
        )
        row.update(threshold=float(threshold), sessions=n_sessions)
        if iv is None:
            row.update(value=None, cpu_value=None, lo=None, hi=None, df=None, units=0)
            row.update(floor=None, mde=None, units_needed=None)
            row.update(verdict="unqualified", reason=reason or why or "no session timed both arms")
        else:
            verdict = aa_verdict(iv.lo, iv.hi)
            row.update(
                value=iv.value,
                cpu_value=cpu_ratio(cpu_times, fam, cap, twin, arm, tasks),
                lo=iv.lo,
                hi=iv.hi,
                df=iv.df,
                units=iv.units,
                floor=decision_floor(iv.lo, iv.hi, aa_rule),
                mde=minimum_detectable(iv.lo, iv.hi, threshold, aa_rule),
                units_needed=units_needed(iv.units, iv.lo, iv.hi, TARGET_EFFECT, threshold, aa_rule),
                verdict=verdict,
                reason="the A/A interval does not contain 1" if verdict == NOISE_BIASED else None,
            )
        rows.append(row)
    return rows


def weigh_estimates(estimates: list[dict], noise: list[dict]) -> list[dict]:
    """The estimates decided under the A/A floor of their family (:func:`~refspec.core.stats.decide_weighed`):
    the floor is the largest ``floor`` of the family's control rows (already under the campaign's rule:
    1 for a control that holds under the calibration rule); an estimate decided only inside the band
    says so."""
    floors: dict[str, dict] = {}
    for n in noise:
        if n["floor"] is not None and (n["family"] not in floors or n["floor"] > floors[n["family"]]["floor"]):
            floors[n["family"]] = n
    out = []
    for e in estimates:
        n = floors.get(e["family"])
        if e["lo"] is None:
            out.append(dict(e, floor=None))
            continue
        floor = n["floor"] if n else 1.0
        dec = decide_weighed(e["lo"], e["hi"], float(e["threshold"]), floor)
        reason = e["reason"]
        if dec == NOISE_TOO_HIGH:
            reason = (
                f"machine noise too high: the interval clears the threshold {e['threshold']:g} but not by the"
                f" A/A floor {floor:.4f} ({n['twin']}/{n['arm']})"
            )
        out.append(dict(e, floor=floor, decision=dec, reason=reason))
    return out


def noise_text(rows: list[dict]) -> str:
    """The summary's A/A lines."""
    if not rows:
        return "A/A control: none (aa_arm is null)"
    lines = ["A/A control (noise floor; twin/arm, same blocks and sessions; 95 % worker-level interval):"]
    for n in rows:
        if n["value"] is None:
            lines.append(f"  {n['family']} {n['twin']}/{n['arm']}: - ({n['reason']})")
            continue
        unit = "workers per arm" if n["kind"] == "ratio" else "sessions"
        lines.append(
            f"  {n['family']} {n['twin']}/{n['arm']} ({n['kind']}, {n['units']} {unit}): {n['value']:.6f} "
            f"[{n['lo']:.6f}, {n['hi']:.6f}] {n['verdict']}" + (f" ({n['reason']})" if n["reason"] else "")
        )
        if n["cpu_value"] is not None:
            lines.append(f"    CPU time (user + system of the serving processes): {n['cpu_value']:.6f}")
        need = f"{n['units_needed']} {unit}" if n["units_needed"] is not None else "-"
        lines.append(
            f"    floor {n['floor']:.4f}; minimum detectable ratio {n['mde']:.4f}"
            f" (threshold {n['threshold']:g} x floor x half width); {TARGET_EFFECT:g} needs about {need}"
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
            steal_percent=steal_percent(b, a),
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
