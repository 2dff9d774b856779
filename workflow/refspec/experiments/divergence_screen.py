"""The divergence screen: ``refspec screen``, which finds the tasks where the unrepaired paths
leave the reference, before any qualification runs on them.

A qualification only means something on tasks where an unrepaired arm is at risk. The screen
finds them by a rule fixed before it runs (written into ``screen.json`` with its results):

1. R (micro-batch 1, the reference) decodes every task of a *discovery panel* up to the cap and
   records the target's top-2 logit margin at every generated index. A task's *risk* is its
   smallest margin, min_i m_R(i): rounding that moves two logits by about that much apart can
   change R's greedy choice there.
2. The tasks are ranked by risk, smallest first (ties: panel order).
3. The unrepaired arms (phase mask 0 with micro-batch above 1, :mod:`refspec.core.vacuity`:
   M0, C0, R_prod by default) decode the tasks in that order, one task at a time, until ``want``
   tasks have at least one divergent arm or ``budget`` tasks have been tried (the stage's budget,
   counted in tasks so that a rerun on another machine screens the same tasks).
4. The *exposed* tasks are those with a divergent arm, in screen order. The *stable controls* are
   the ``controls`` untried or matching tasks of largest risk margin (the least at risk).

The output is frozen: ``screen.json`` (the panel, its sha256, the rule, the budget, the order,
the exposed tasks and the controls), the ``divergence_screen`` table (one row per task and arm,
R included) and ``exposed-panel.jsonl``, the panel file later stages read (exposed tasks, then
controls). Later stages take their tasks from that file; they never pick tasks themselves.
Every request decodes in this process through the bindings (:class:`ArmRunner`); the timed,
isolated workers of the campaigns then confirm on the exposed panel.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from ..core import tables as T
from ..core.arms import REFERENCE_ARM, Arm, select
from ..core.config import Config
from ..core.divergence import NEAR_TIE_MARGIN, divergence_class
from ..core.endpoint import compare_endpoints
from ..core.errors import ConfigError
from ..core.fsutil import atomic_write_text
from ..core.panels import EXPOSED_PANEL, Task, prompt_tokens, read_frozen_screen, resolve_panel, write_panel
from ..core.vacuity import is_unrepaired
from ..engine.transaction import ArmRunner
from ..native.models import ensure_family
from ..native.runtime import Model

SCREEN_FORMAT = 1
SCREEN_RECORD = "screen.json"
RULE = (
    "R decodes the discovery panel; tasks ranked by R's smallest top-2 logit margin over the generated "
    "indices, smallest first (ties: panel order); the unrepaired arms decode them in that order until "
    "`want` tasks have a divergent arm or `budget` tasks were tried; exposed: a task with a divergent arm; "
    "controls: the `controls` tasks without a divergence of largest smallest-margin"
)


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def risk(margins: Sequence[float]) -> float | None:
    """A task's risk margin: the smallest finite top-2 margin of R over its generated indices."""
    vals = [float(m) for m in margins if m is not None and math.isfinite(float(m))]
    return min(vals) if vals else None


def screen_order(tasks: Sequence[Task], risks: dict[str, float | None]) -> list[str]:
    """Task IDs by risk margin, smallest first; ties, and tasks without a margin (last), in panel order."""
    pos = {t.task_id: i for i, t in enumerate(tasks)}
    return sorted(pos, key=lambda tid: (risks[tid] is None, risks[tid] if risks[tid] is not None else 0.0, pos[tid]))


def choose_controls(order: list[str], risks: dict, exposed: set[str], n: int) -> list[str]:
    """The ``n`` tasks outside ``exposed`` with the largest risk margin (ties: screen order)."""
    rest = [t for t in order if t not in exposed and risks[t] is not None]
    rest.sort(key=lambda t: (-risks[t], order.index(t)))
    return rest[:n]


def run_screen(
    cfg: Config,
    *,
    panel,
    cap: int,
    arms: Sequence[str],
    want: int,
    budget: int,
    controls: int,
    out: Path,
    family: str | None = None,
    gpu_layers: int = 0,
    threads: int | None = None,
    progress: bool = True,
) -> dict:
    """Run the screen and write its frozen outputs under ``out``; returns the ``screen.json`` record."""
    family = family or cfg.family
    if cap < 1 or want < 1 or budget < 1 or controls < 0:
        raise ConfigError("the screen needs cap, want and budget of at least 1 and controls of at least 0")
    tasks, prec = resolve_panel(panel)
    arm_objs = _screen_arms(arms, cap, threads or cfg.threads)
    target, draft = _models(cfg, family, arm_objs, gpu_layers)
    device = target.placement["device"]
    prompts = {t.task_id: prompt_tokens(target, t) for t in tasks}
    bar = _progress_bar(len(tasks) + budget * len(arms)) if progress else None
    refs = _reference_runs(arm_objs[0], target, draft, tasks, prompts, bar)
    risks = {tid: risk(r.margins) for tid, r in refs.items()}
    order = screen_order(tasks, risks)
    results, tried, exposed = _arm_runs(arm_objs[1:], target, draft, order, refs, prompts, want, budget, bar)
    ctrl = choose_controls(order, risks, set(exposed), controls)
    rows = _table_rows(family, tasks, arm_objs, prompts, refs, risks, order, results, exposed, ctrl)
    out.mkdir(parents=True, exist_ok=True)
    T.write_table(rows, "divergence_screen", out)
    by_id = {t.task_id: t for t in tasks}
    picked = [by_id[t] for t in exposed + ctrl]
    panel_sha = write_panel(picked, out / EXPOSED_PANEL) if picked else None
    record = {
        "format": SCREEN_FORMAT,
        "stage": "divergence_screen",
        "family": family,
        "device": device,
        "panel": prec,
        "cap": cap,
        "arms": list(arms),
        "rule": RULE,
        "want": want,
        "budget": budget,
        "controls_wanted": controls,
        "order": order,
        "tried": tried,
        "exposed": exposed,
        "controls": ctrl,
        "stopped": _stopped(exposed, tried, want, budget),
        "exposed_panel": {"file": EXPOSED_PANEL, "sha256": panel_sha, "tasks": [t.task_id for t in picked]},
    }
    atomic_write_text(out / SCREEN_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def _screen_arms(arms: Sequence[str], cap: int, threads) -> list[Arm]:
    """R, then the screened arms (each must be unrepaired), at the screen's cap and thread count."""
    arm_objs = select([REFERENCE_ARM, *arms])
    for a in arm_objs[1:]:
        if not is_unrepaired(a.ub, a.mask):
            raise ConfigError(
                f"arm {a.name} (ub {a.ub}, mask {a.mask}) is not an unrepaired arm: the screen looks for "
                "where the unrepaired paths leave R"
            )
    arm_objs = [a.with_(cap=cap) for a in arm_objs]
    if threads:
        arm_objs = [a.with_(threads=int(threads)) for a in arm_objs]
    return arm_objs


def _models(cfg: Config, family: str, arm_objs: Sequence[Arm], gpu_layers: int) -> tuple[Model, Model | None]:
    """The family's target model, and its draft model when an arm is speculative."""
    files = ensure_family(family, models_dir=cfg.models_dir)
    target = Model(files.target.path, sha256=files.target.sha256, n_gpu_layers=gpu_layers, require_placement=True)
    draft = None
    if any(a.speculative for a in arm_objs):
        d = files.draft(None)
        draft = Model(d.path, sha256=d.sha256, n_gpu_layers=gpu_layers, require_placement=True)
    return target, draft


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="screen", unit="req", file=sys.stderr)


def _reference_runs(arm: Arm, target: Model, draft: Model | None, tasks: Sequence[Task], prompts: dict, bar) -> dict:
    """Step 1: R's run of every task of the panel, by task ID."""
    refs = {}
    with ArmRunner(arm, target, draft) as runner:
        for t in tasks:
            refs[t.task_id] = runner.run(prompts[t.task_id])
            if bar is not None:
                bar.update(1)
    return refs


def _arm_runs(
    arms: Sequence[Arm],
    target: Model,
    draft: Model | None,
    order: list[str],
    refs: dict,
    prompts: dict,
    want: int,
    budget: int,
    bar,
) -> tuple[dict[tuple[str, str], dict], list[str], list[str]]:
    """Step 3: the unrepaired arms on the tasks in screen order until ``want`` tasks are exposed or
    ``budget`` were tried; (the result of each (task, arm) tried, the tasks tried, the exposed tasks).
    Closes the progress bar."""
    results: dict[tuple[str, str], dict] = {}
    tried: list[str] = []
    exposed: list[str] = []
    runners = [ArmRunner(a, target, draft) for a in arms]
    try:
        for tid in order:
            if len(exposed) >= want or len(tried) >= budget:
                break
            tried.append(tid)
            divergent = False
            for r in runners:
                results[(tid, r.arm.name)] = _arm_result(refs[tid], r.run(prompts[tid]))
                divergent = divergent or results[(tid, r.arm.name)]["status"] == "diverges"
                if bar is not None:
                    bar.update(1)
            if divergent:
                exposed.append(tid)
    finally:
        for r in runners:
            r.close()
        if bar is not None:
            bar.close()
    return results, tried, exposed


def _arm_result(ref, res) -> dict:
    """One arm's run of a task against R's: the table's result columns."""
    cmp = compare_endpoints(ref.endpoint, res.endpoint)
    fd = cmp.first_diff_index
    result = {
        "status": "matches" if cmp.qualified else "diverges",
        "n_tokens": res.endpoint.n,
        "stop_reason": res.endpoint.stop_reason,
        "first_diff_index": fd,
        "ref_token": cmp.ref_token,
        "arm_token": cmp.arm_token,
        "ref_margin": _finite(ref.margins[fd]) if fd is not None and fd < len(ref.margins) else None,
        "arm_margin": _finite(res.margins[fd]) if fd is not None and fd < len(res.margins) else None,
    }
    cls = divergence_class(result["ref_margin"]) if fd is not None else None
    return result | {"divergence": cls, "near_tie_bound": NEAR_TIE_MARGIN if cls is not None else None}


def _stopped(exposed: list[str], tried: list[str], want: int, budget: int) -> str:
    """Why step 3 ended: enough exposed tasks, the budget spent, or the panel exhausted."""
    if len(exposed) >= want:
        return "want"
    if len(tried) >= budget:
        return "budget"
    return "panel"


def _no_result(status: str, n_tokens: int | None = None, stop_reason: str | None = None) -> dict:
    """The result columns of a row without a comparison (R itself, or an arm that did not run)."""
    return {
        "status": status,
        "n_tokens": n_tokens,
        "stop_reason": stop_reason,
        "first_diff_index": None,
        "ref_token": None,
        "arm_token": None,
        "ref_margin": None,
        "arm_margin": None,
        "divergence": None,
        "near_tie_bound": None,
    }


def _table_rows(
    family: str,
    tasks: Sequence[Task],
    arm_objs: Sequence[Arm],
    prompts: dict,
    refs: dict,
    risks: dict,
    order: list[str],
    results: dict[tuple[str, str], dict],
    exposed: list[str],
    ctrl: list[str],
) -> list[dict]:
    """The ``divergence_screen`` table: per task in panel order, R's row, then one per screened arm."""
    rank = {tid: i + 1 for i, tid in enumerate(order)}
    rows = []
    for t in tasks:
        tid = t.task_id
        base = {
            "family": family,
            "task_id": tid,
            "rank": rank[tid],
            "prompt_tokens": len(prompts[tid]),
            "risk_margin": risks[tid],
            "exposed": tid in exposed,
            "control": tid in ctrl,
        }
        ref = refs[tid]
        rows.append(base | {"arm": REFERENCE_ARM} | _no_result("reference", ref.endpoint.n, ref.endpoint.stop_reason))
        for a in arm_objs[1:]:
            r = results.get((tid, a.name))
            if r is None:
                r = _no_result("not tried")
            rows.append(base | {"arm": a.name} | r)
    return rows


def summary(record: dict, rows: list[dict]) -> str:
    """The screen's result in a few lines (the command prints it)."""
    lines = [
        f"divergence screen ({record['family']} on {record['device']}): {len(record['tried'])} of "
        f"{len(record['order'])} tasks tried by {', '.join(record['arms'])} at cap {record['cap']}; "
        f"{len(record['exposed'])} exposed (want {record['want']}, budget {record['budget']}, stopped: "
        f"{record['stopped']})"
    ]
    for r in rows:
        if r["status"] == "diverges":
            lines.append(
                f"  {r['task_id']} {r['arm']}: first divergence at {r['first_diff_index']} (R {r['ref_token']}, "
                f"arm {r['arm_token']}; margins R {r['ref_margin']}, arm {r['arm_margin']})"
            )
    if not record["exposed"]:
        lines.append(f"  vacuous: no exposed input in {len(record['tried'])} screened")
    lines.append(f"  controls: {', '.join(record['controls']) or 'none'}")
    return "\n".join(lines)


def read_screen(folder: Path) -> dict:
    """The frozen record of a screen folder; its exposed panel file must have the recorded digest."""
    return read_frozen_screen(
        folder,
        SCREEN_RECORD,
        missing="no divergence screen here (run the screen stage first)",
        empty="the screen found no task to confirm on (no exposed task and no control)",
    )
