"""Preregistration: the plan of a campaign, frozen before its first timed session.

A campaign computes its plan from its inputs -- the campaign definition (after
the preset), the panels (task ids and the sha256 of their texts), the arms
(complete recipes), the schedule drawn from the seed (sessions, blocks, request
order), the threshold and the bootstrap settings ``{seed, draws, threshold}``,
the model files and the *analysis code hash* (sha256 of ``stats.py`` and of the
campaign module sources) -- and, before anything runs, freezes it:

* ``plan.json`` in the campaign folder (canonical JSON, sorted keys, indented);
* a ``plan_frozen`` record in the campaign's ledger carrying the complete plan
  and its sha256 (the ledger is hash-chained, so the frozen copy cannot be
  edited unnoticed).

A campaign may add to its plan later only by an *amendment*: a ledger record
``plan_amendment`` naming a new top-level field that did not exist (the
prospective prediction campaign freezes its predicted endpoints this way before
the live session). ``plan.json`` is rewritten with the amendment applied.

Every later use checks the plan (:func:`check`):

1. ``plan.json`` must equal the ledger's frozen plan with its amendments
   applied -- otherwise it was edited after freezing;
2. the plan the campaign computes now (same definition, panels, arms, seeds,
   code) must equal the frozen plan on every field the campaign computes --
   otherwise an input changed since freezing.

Either difference refuses the run or the analysis (:class:`PlanMismatch`, exit
code 1) with one line per changed field, as a dotted path
(``bootstrap.threshold: frozen 1.02, now 1.05``). The format is described in
``anc/plan.md``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import EXIT_FAILED, RefspecError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file, sha256_json
from .ledger import Ledger

PLAN_NAME = "plan.json"
PLAN_FORMAT = 1
FROZEN_KIND = "plan_frozen"
AMENDMENT_KIND = "plan_amendment"
_MAX_SHOWN = 40


class PlanMismatch(RefspecError):
    """The plan differs from the frozen one; ``differences`` lists the changed fields."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, differences: list[str]):
        self.differences = list(differences)
        shown = self.differences[:_MAX_SHOWN]
        more = len(self.differences) - len(shown)
        text = message + ":\n  " + "\n  ".join(shown) + (f"\n  ... and {more} more" if more > 0 else "")
        super().__init__(text)


# --------------------------------------------------------------------------- code digests


def file_digests(paths: Iterable[tuple[str, Path]]) -> dict[str, Any]:
    """``{"files": {name: sha256}, "sha256": sha256 of that mapping}``."""
    files = {name: sha256_file(p) for name, p in sorted(paths)}
    return {"files": files, "sha256": sha256_json(files)}


def analysis_code_digest(package_dir: Path | None = None) -> dict[str, Any]:
    """sha256 of ``core/stats.py``, of this module and of every module of the ``campaigns``
    package; ``package_dir`` is the ``refspec`` package folder."""
    pkg = Path(package_dir) if package_dir else Path(__file__).resolve().parents[1]
    paths = [("core/stats.py", pkg / "core" / "stats.py"), ("provenance/plan.py", pkg / "provenance" / "plan.py")]
    cdir = pkg / "campaigns"
    if cdir.is_dir():
        paths += [(f"campaigns/{p.name}", p) for p in sorted(cdir.glob("*.py"))]
    return file_digests(paths)


# --------------------------------------------------------------------------- comparison


def _show(v: Any) -> str:
    s = json.dumps(v, sort_keys=True, ensure_ascii=False)
    return s if len(s) <= 80 else s[:77] + "..."


def diff(frozen: Any, now: Any, path: str = "") -> list[str]:
    """Every difference between two JSON values, as ``dotted.path: frozen X, now Y`` lines.

    Lists are compared element by element (``schedule[3].arm``); a field present
    on one side only is reported as added or removed.
    """
    out: list[str] = []
    where = path or "(plan)"
    if isinstance(frozen, Mapping) and isinstance(now, Mapping):
        for k in sorted(set(frozen) | set(now), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in now:
                out.append(f"{p}: removed (frozen {_show(frozen[k])})")
            elif k not in frozen:
                out.append(f"{p}: added (now {_show(now[k])})")
            else:
                out.extend(diff(frozen[k], now[k], p))
        return out
    if isinstance(frozen, list) and isinstance(now, list):
        for i, (a, b) in enumerate(zip(frozen, now)):
            out.extend(diff(a, b, f"{path}[{i}]"))
        if len(frozen) != len(now):
            out.append(f"{where}: length frozen {len(frozen)}, now {len(now)}")
        return out
    if type(frozen) is not type(now) or frozen != now:
        # 1 and 1.0 are the same JSON number
        if (
            isinstance(frozen, (int, float))
            and isinstance(now, (int, float))
            and not isinstance(frozen, bool)
            and not isinstance(now, bool)
            and frozen == now
        ):
            return out
        out.append(f"{where}: frozen {_show(frozen)}, now {_show(now)}")
    return out


def changed_fields(differences: Iterable[str]) -> list[str]:
    """The dotted paths named in :func:`diff` lines."""
    return [d.split(":", 1)[0] for d in differences]


# --------------------------------------------------------------------------- files and ledger


def plan_path(directory: str | Path) -> Path:
    return Path(directory) / PLAN_NAME


def _normalize(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The plan as JSON would give it back (tuples become lists, int keys become strings)."""
    return json.loads(json.dumps(plan, sort_keys=True, ensure_ascii=False, allow_nan=False))


def write_plan(directory: str | Path, plan: Mapping[str, Any]) -> str:
    """Write ``plan.json``; return its sha256 (of the file bytes)."""
    p = plan_path(directory)
    atomic_write_text(
        p, json.dumps(plan, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n", mode=0o644
    )
    return sha256_file(p)


def read_plan(directory: str | Path) -> dict[str, Any]:
    p = plan_path(directory)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise PlanMismatch(f"{p}", ["plan.json: missing (the plan was frozen in the ledger)"]) from e
    except ValueError as e:
        raise PlanMismatch(f"{p} is not JSON", [f"plan.json: {e}"]) from e
    if not isinstance(data, dict):
        raise PlanMismatch(f"{p}", ["plan.json: not a JSON object"])
    return data


def frozen_records(ledger: Ledger) -> tuple[dict | None, list[dict]]:
    """The ledger's ``plan_frozen`` record (None if the plan was never frozen) and its amendments."""
    frozen = None
    amendments = []
    for rec in ledger:
        kind = rec.get("kind")
        if kind == FROZEN_KIND:
            if frozen is not None:
                raise PlanMismatch(
                    f"ledger {ledger.path}", [f"plan frozen twice (seq {frozen['seq']} and {rec['seq']})"]
                )
            frozen = rec
        elif kind == AMENDMENT_KIND:
            amendments.append(rec)
    return frozen, amendments


def frozen_plan(ledger: Ledger) -> dict[str, Any] | None:
    """The frozen plan with every amendment applied, as the ledger records it."""
    frozen, amendments = frozen_records(ledger)
    if frozen is None:
        return None
    plan = copy.deepcopy(frozen["plan"])
    if sha256_json(plan) != frozen.get("plan_sha256"):
        raise PlanMismatch(f"ledger {ledger.path}", ["plan_frozen record: its plan does not hash to plan_sha256"])
    for a in amendments:
        plan[a["field"]] = copy.deepcopy(a["value"])
    return plan


def freeze(directory: str | Path, plan: Mapping[str, Any], ledger: Ledger, reason: str) -> str:
    """Freeze ``plan``: write ``plan.json`` and the ``plan_frozen`` ledger record. Returns the plan's sha256."""
    frozen, _ = frozen_records(ledger)
    if frozen is not None:
        raise PlanMismatch(f"ledger {ledger.path}", [f"the plan is already frozen (seq {frozen['seq']})"])
    plan = _normalize(plan)
    digest = sha256_json(plan)
    file_sha = write_plan(directory, plan)
    ledger.append(
        {
            "kind": FROZEN_KIND,
            "reason": reason,
            "campaign": plan.get("campaign"),
            "plan_sha256": digest,
            "plan_file_sha256": file_sha,
            "plan": plan,
        }
    )
    return digest


def amend(directory: str | Path, ledger: Ledger, field: str, value: Any, reason: str) -> dict[str, Any]:
    """Add a new top-level field to the frozen plan (never change an existing one); rewrite plan.json."""
    current = check_file(directory, ledger)
    if field in current:
        raise PlanMismatch(f"amendment of {field!r} refused", [f"{field}: already in the frozen plan"])
    value = _normalize({"v": value})["v"]
    new = dict(current)
    new[field] = value
    ledger.append(
        {
            "kind": AMENDMENT_KIND,
            "reason": reason,
            "campaign": current.get("campaign"),
            "field": field,
            "value": value,
            "plan_sha256": sha256_json(new),
        }
    )
    write_plan(directory, new)
    return new


def check_file(directory: str | Path, ledger: Ledger) -> dict[str, Any]:
    """``plan.json`` must equal the ledger's frozen plan (with amendments); return it."""
    expected = frozen_plan(ledger)
    if expected is None:
        raise PlanMismatch(f"{directory}", ["plan: never frozen in the ledger (no plan_frozen record)"])
    stored = read_plan(directory)
    d = diff(expected, stored)
    if d:
        raise PlanMismatch(
            f"{plan_path(directory)} was edited after the plan was frozen "
            f"(changed field(s): {', '.join(changed_fields(d))})",
            d,
        )
    return stored


def check(directory: str | Path, ledger: Ledger, computed: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse unless plan.json is the frozen plan and ``computed`` (the plan computed now) equals it.

    Fields that only amendments add are not compared with ``computed``.
    Returns the stored plan.
    """
    stored = check_file(directory, ledger)
    computed = _normalize(computed)
    _, amendments = frozen_records(ledger)
    added = {a["field"] for a in amendments}
    base = {k: v for k, v in stored.items() if k not in added}
    d = diff(base, computed)
    if d:
        raise PlanMismatch(
            "the plan computed now differs from the frozen plan "
            f"(changed field(s): {', '.join(changed_fields(d))}); refusing to run against it",
            d,
        )
    return stored
