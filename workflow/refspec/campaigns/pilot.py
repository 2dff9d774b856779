"""The pilot of a sized paired campaign: its costs measured on this machine before it is sized.

A paired campaign with ``sizing`` (:mod:`refspec.campaigns.sizing`) spends its budget on processes
and passes over the panel at two costs: a process's start with its registered warm-ups
(``process_s``) and one request (``request_s``). Costs measured on another machine misjudge both
on a slower or busier one: sized at the prior's 1.5 s a request, the default implementation,
replication and confirmation campaigns ran 2.2 to 2.3 times their budgets on a cold 2-core VM.

The pilot starts one process exactly as a timed block starts one (the same arms, models, threads
and warm-ups), sends one request of every arm, the ``i``-th arm on task ``i mod T`` of the panel's
``T`` tasks at the campaign's cap, and stops the process:

    process_s = seconds from the spawn to the ready worker (model loads, every arm's warm-up)
                + the campaign's gap between sessions (replication: one process per session)
    request_s = (seconds of the A requests, as the client sees them) / A
    seconds   = the pilot's whole wall time, spawn to stop

The plan is then sized for ``budget_s - seconds``, so the pilot is paid from the budget. Its
requests are not data: they reach no table, only ``sizing.pilot`` of the frozen plan, which a
resumed campaign reuses rather than measuring again (it recomputes the same plan), and from which
report/check.py sizes the plan again. A pilot that fails (a worker that does not start, an arm the
device refuses) is recorded with its reason, and the plan is sized from the prior's costs.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..core.errors import RefspecError
from ..core.fsutil import atomic_write_text
from ..core.hashing import canonical_json
from ..engines.worker.process import WorkerProcess, WorkerSpec

PILOT_DIR = "pilot"


def measure(
    *,
    family: str,
    arms: dict,
    tasks: list,
    cap: int,
    files,
    draft: str | None,
    lib_dir: Path,
    arms_file: Path,
    out: Path,
    warmup_cap: int,
    gap_s: float = 0.0,
) -> dict:
    """Run the pilot in ``out`` (its worker's log and ``pilot.json`` there); return ``sizing.pilot``."""
    out.mkdir(parents=True, exist_ok=True)
    first, *others = arms.values()
    spec = WorkerSpec(
        family=family,
        arm=first,
        also_arms=tuple(others),
        files=files,
        lib_dir=lib_dir,
        worker_id="pilot",
        run_dir=out,
        draft=draft if any(a.speculative for a in arms.values()) else None,
        arms_file=str(arms_file),
        warmup_cap=warmup_cap,
    )
    t0 = time.perf_counter()
    try:
        w = WorkerProcess.start(spec)
    except RefspecError as e:
        return _record(out, {"failed": f"the pilot's worker did not start: {e}".splitlines()[0]})
    try:
        process_s = time.perf_counter() - t0
        prompts = {t.task_id: list(t.prompt_ids) if t.prompt_ids else w.tokenize(t.text, chat=True) for t in tasks}
        t1 = time.perf_counter()
        for i, name in enumerate(arms):
            task = tasks[i % len(tasks)].task_id
            w.complete(prompts[task], cap, request_id=f"pilot/{i}", arm=name)
        request_s = (time.perf_counter() - t1) / len(arms)
    except (RefspecError, OSError, ValueError) as e:
        w.kill()
        return _record(out, {"failed": f"a pilot request failed: {e}".splitlines()[0]})
    w.stop(timeout=60)
    return _record(
        out,
        {
            "process_s": round(process_s + float(gap_s), 3),
            "request_s": round(request_s, 3),
            "requests": len(arms),
            "seconds": round(time.perf_counter() - t0, 3),
        },
    )


def _record(out: Path, pilot: dict) -> dict:
    atomic_write_text(out / "pilot.json", canonical_json(pilot).decode() + "\n", mode=0o644)
    return pilot


def costs(sizing: dict) -> tuple[float, float, float]:
    """(process_s, request_s, budget_s left for the plan): the pilot's costs and the budget less its
    seconds where it measured them, else the prior's costs and the whole budget."""
    pilot = sizing.get("pilot") or {}
    budget = float(sizing["budget_s"])
    if "request_s" in pilot:
        return float(pilot["process_s"]), float(pilot["request_s"]), max(0.0, budget - float(pilot["seconds"]))
    prior = sizing["prior"]
    return float(prior["process_s"]), float(prior["request_s"]), budget
