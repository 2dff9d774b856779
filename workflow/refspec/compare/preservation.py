"""Preservation findings of two archives, compared row by row.

Each finding is a result table, a row key and the columns that state the finding
(``FINDINGS``). A finding is ``same`` when both archives hold the same rows (by key)
with equal values in those columns, and ``differs`` otherwise, listing every row
that differs (a row present in one archive only differs in every column). A table
absent from both archives is ``same`` with the note "absent from both"; absent from
one only, every row of the other differs.

``report/check.py`` recomputes the same comparison from the CSV copies the
comparison archive carries (``inputs/a``, ``inputs/b``); change both together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.endpoint import first_divergence
from .model import DIFFERS, SAME, ArchiveData, Difference, Finding


@dataclass(frozen=True)
class FindingSpec:
    id: str
    title: str
    table: str
    key: tuple[str, ...]
    columns: tuple[str, ...]


FINDINGS: tuple[FindingSpec, ...] = (
    FindingSpec(
        "qualification",
        "matching counts",
        "qualification",
        ("campaign", "family", "task_id", "arm", "cap"),
        ("n_required", "n_matching", "qualified"),
    ),
    FindingSpec(
        "first_divergence",
        "first divergences",
        "qualification",
        ("campaign", "family", "task_id", "arm", "cap"),
        ("first_diff_index", "ref_token", "arm_token"),
    ),
    FindingSpec(
        "endpoints",
        "endpoints",
        "endpoints",
        ("campaign", "family", "task_id", "arm", "cap", "session", "repeat"),
        ("endpoint_sha256",),
    ),
    FindingSpec(
        "replay",
        "E1 replay",
        "replay",
        ("family", "layer", "phase", "q", "stage"),
        ("pq_eq_qb", "pq_eq_qh", "mq_eq_pq", "control_ok"),
    ),
    FindingSpec("phase_masks", "phase-mask minimal masks", "phase_masks", ("family", "mask"), ("passes", "minimal")),
    FindingSpec(
        "partition",
        "state classes",
        "partition",
        ("family", "task_id", "arm", "repeat"),
        ("endpoint_class", "kv_class", "logits_class", "first_diff_vs_A"),
    ),
    FindingSpec(
        "crosses",
        "state crosses",
        "crosses",
        ("family", "task_id", "direction", "selector", "repeat"),
        ("outcome", "distinguishable", "first_diff_vs_recipient"),
    ),
)

#: the tables the preservation findings read
PRESERVATION_TABLES = tuple(dict.fromkeys(f.table for f in FINDINGS))


def cell_text(v: Any) -> str | None:
    """A value as the comparison shows and stores it (the CSV spelling; None stays None)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return " ".join(str(int(x)) for x in v)
    return str(v)


def row_key(r: dict[str, Any], key: Sequence[str]) -> str:
    return "|".join(str(r[k]) for k in key)


def _index(rows: list[dict[str, Any]], key: Sequence[str]) -> dict[str, dict[str, Any]]:
    return {row_key(r, key): r for r in rows}


def _endpoint_detail(ra: dict[str, Any] | None, rb: dict[str, Any] | None) -> str:
    if ra is None or rb is None or "tokens" not in ra or "tokens" not in rb:
        return ""
    i = first_divergence(ra["tokens"], ra["eog"], ra["stop_reason"], rb["tokens"], rb["eog"], rb["stop_reason"])
    if i is None:
        return ""
    ta = ra["tokens"][i] if i < len(ra["tokens"]) else "end"
    tb = rb["tokens"][i] if i < len(rb["tokens"]) else "end"
    return f"first differing token at index {i}: A {ta}, B {tb}"


def compare_finding(spec: FindingSpec, a: ArchiveData, b: ArchiveData) -> Finding:
    if not a.has(spec.table) and not b.has(spec.table):
        return Finding(spec.id, spec.title, spec.table, 0, 0, SAME, note="absent from both archives")
    ia = _index(a.rows(spec.table), spec.key)
    ib = _index(b.rows(spec.table), spec.key)
    diffs: list[Difference] = []
    for k in sorted(set(ia) | set(ib)):
        ra, rb = ia.get(k), ib.get(k)
        for col in spec.columns:
            va = cell_text(ra[col]) if ra is not None else None
            vb = cell_text(rb[col]) if rb is not None else None
            if ra is not None and rb is not None and va == vb:
                continue
            detail = "absent from A" if ra is None else "absent from B" if rb is None else ""
            if spec.id == "endpoints" and not detail:
                detail = _endpoint_detail(ra, rb)
            diffs.append(Difference(spec.id, k, col, va, vb, detail))
    note = ""
    if a.has(spec.table) != b.has(spec.table):
        note = f"{spec.table} absent from {'A' if not a.has(spec.table) else 'B'}"
    return Finding(
        spec.id, spec.title, spec.table, len(ia), len(ib), DIFFERS if diffs else SAME, differences=diffs, note=note
    )


def compare_preservation(a: ArchiveData, b: ArchiveData) -> list[Finding]:
    return [compare_finding(s, a, b) for s in FINDINGS]
