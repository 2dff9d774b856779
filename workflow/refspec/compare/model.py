"""What a comparison of two sealed archives holds: typed inputs and results.

:class:`ArchiveData` (one verified archive: its seal, plan, manifest and result tables),
:class:`Finding` and :class:`Difference` (preservation), :class:`TimingComparison`
(timings), :class:`InputsComparison` (plan and pinned inputs) and :class:`ArchiveComparison`
(all of it, with the exit status of ``refspec compare``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SAME = "same"
DIFFERS = "differs"
REPRODUCED = "reproduced"
NOT_COMPARABLE = "not comparable"


@dataclass
class ArchiveData:
    """One archive after verification: where it is, what sealed it, and its records and tables."""

    label: str  # "A" or "B"
    path: Path  # the archive folder (a tar is restored into a temporary folder first)
    shown: str  # the path as the user gave it
    seal_sha256: str
    keyid: str
    archive_id: str
    created: str
    plan: dict[str, Any]
    manifest: dict[str, Any]
    tables: dict[str, list[dict[str, Any]]]  # table name -> rows (only the tables the comparison reads)
    table_csv: dict[str, Path] = field(default_factory=dict)  # table name -> its sealed CSV copy

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self.tables.get(name, [])

    def has(self, name: str) -> bool:
        return name in self.tables

    def ref(self) -> dict[str, Any]:
        return {
            "seal_sha256": self.seal_sha256,
            "keyid": self.keyid,
            "archive_id": self.archive_id,
            "created": self.created,
            "path": self.shown,
        }


@dataclass(frozen=True)
class Difference:
    """One row of a preservation finding that differs: its key, the column, and both values (as text)."""

    finding: str
    key: str  # the row key, "|"-joined
    column: str
    a: str | None  # None: the row is absent from A
    b: str | None
    detail: str = ""


@dataclass
class Finding:
    """One preservation finding compared row by row."""

    finding: str  # id: qualification, first_divergence, endpoints, replay, phase_masks, partition, crosses
    title: str
    table: str
    rows_a: int
    rows_b: int
    verdict: str  # same | differs
    differences: list[Difference] = field(default_factory=list)
    note: str = ""  # e.g. "absent from both archives"

    @property
    def rows_differing(self) -> int:
        return len({d.key for d in self.differences})


@dataclass
class TimingComparison:
    """One qualified ratio or E2 estimate of both archives and the ratio of the two (B over A)."""

    kind: str  # ratio | estimate
    campaign: str
    family: str
    cap: int | None
    comparison: str  # NUM/DEN (arms for a ratio, layouts for an estimate)
    path: str
    numerator: str | None  # arms (for an estimate: the arms of A, which B must share)
    denominator: str | None
    a_value: float | None
    a_lo: float | None
    a_hi: float | None
    b_value: float | None
    b_lo: float | None
    b_hi: float | None
    ratio: float | None  # b_value / a_value
    lo: float | None  # bootstrap interval of the ratio over sessions and tasks
    hi: float | None
    n_tasks: int
    n_sessions_a: int
    n_sessions_b: int
    draws: int
    seed: int
    band: float  # reproduced when [lo, hi] contains 1 or lies within [1/band, band]
    verdict: str  # reproduced | differs | not comparable
    reason: str

    @property
    def id(self) -> str:
        if self.kind == "estimate":
            return f"estimate|{self.family}|{self.path}|{self.comparison}"
        return f"ratio|{self.campaign}|{self.family}|{self.cap}|{self.comparison}"


@dataclass
class InputsComparison:
    """Whether the two archives ran the same registered plan on the same pinned inputs."""

    plan_a: str  # registered-plan digest (plan.json without its derived manifest digests)
    plan_b: str
    plan_differences: dict[str, list[str]]  # campaign (or "(plan)") -> differing plan fields
    pinned_differences: list[str]  # differences of pinned inputs (manifest), one line each
    other_differences: list[str]  # unpinned differences (host, built libraries, code), informational
    bootstrap_a: dict[str, Any]
    bootstrap_b: dict[str, Any]

    def campaign_reason(self, campaign: str) -> str | None:
        """Why timings of ``campaign`` are not comparable, or None."""
        why = []
        if self.pinned_differences:
            why.append(
                f"pinned inputs differ ({len(self.pinned_differences)}: " + "; ".join(self.pinned_differences[:2]) + ")"
            )
        diffs = self.plan_differences.get(campaign, []) + self.plan_differences.get("(plan)", [])
        if diffs:
            why.append(f"plan of {campaign} differs ({len(diffs)}: " + "; ".join(diffs[:2]) + ")")
        if self.bootstrap_a != self.bootstrap_b:
            why.append(f"bootstrap settings differ ({self.bootstrap_a} vs {self.bootstrap_b})")
        return "; ".join(why) or None


@dataclass
class ArchiveNoiseFloors:
    """The A/A noise floor: how far from 1 an A/A ratio's interval reaches (a ratio >= 1), per archive.

    None where the archive recorded no A/A control."""

    a: float | None = None
    b: float | None = None

    @property
    def recorded(self) -> bool:
        return self.a is not None or self.b is not None

    def band(self, threshold: float) -> float:
        """The reproduction band's upper edge: the practical threshold widened by the larger noise floor,
        ``tau * max(F_A, F_B)`` (``tau`` alone without a floor), the band inside which an estimate's
        decision is "machine noise too high" (``refspec.core.stats.decide_weighed``)."""
        return threshold * max([1.0] + [f for f in (self.a, self.b) if f is not None])


@dataclass
class ArchiveComparison:
    a: ArchiveData
    b: ArchiveData
    inputs: InputsComparison
    findings: list[Finding]
    timings: list[TimingComparison]
    noise: ArchiveNoiseFloors
    threshold: float
    band: float
    notes: list[str] = field(default_factory=list)
    noise_given: float | None = None  # the floor given by hand (--noise-floor), which replaced the archives' own

    @property
    def preservation_same(self) -> bool:
        return all(f.verdict == SAME for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 0 if self.preservation_same else 1

    def as_json(self) -> dict[str, Any]:
        return {
            "format": "refspec-compare/1",
            "a": self.a.ref(),
            "b": self.b.ref(),
            "inputs": asdict(self.inputs),
            "noise_floor": {"recorded": self.noise.recorded, "a": self.noise.a, "b": self.noise.b},
            "threshold": self.threshold,
            "band": [1.0 / self.band, self.band],
            "preservation": [
                {
                    "finding": f.finding,
                    "title": f.title,
                    "table": f.table,
                    "rows_a": f.rows_a,
                    "rows_b": f.rows_b,
                    "rows_differing": f.rows_differing,
                    "verdict": f.verdict,
                    "note": f.note,
                    "differences": [asdict(d) for d in f.differences],
                }
                for f in self.findings
            ],
            "timings": [dict(asdict(t), id=t.id) for t in self.timings],
            "notes": list(self.notes),
            "preservation_same": self.preservation_same,
            "exit_code": self.exit_code,
        }
