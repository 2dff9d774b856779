"""Did the two archives run the same registered plan on the same pinned inputs?

**Registered plan.** ``plan.json`` with its derived fields taken out: the top-level
``plan_sha256`` and each campaign's ``manifest_sha256`` (the digest of a manifest that
also records the host and file paths, so it differs on every machine; the manifest's
pinned inputs are compared on their own, below). Its digest, ``registered_plan_sha256``,
is the sha256 of its canonical JSON. Differences are listed per campaign; a difference
outside ``campaigns`` concerns every campaign.

**Pinned inputs** (the manifest, ``anc/manifest.md``): the sdist, patch, model and panel
files by sha256, the package set by name and version (``pkg:pypi/...``), and the run's
config without its ``results`` folder and its ``reproduces`` record (the config holds the
native build's options). A difference
makes every timing "not comparable". Everything else the manifest records -- the host,
the built libraries and tools, the code (``source:refspec``), the interpreter's path and
file paths -- is listed as an unpinned difference and never makes timings incomparable:
reproducing on another machine is the point.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ..core import stats
from ..core.hashing import canonical_json, sha256_bytes
from ..provenance.manifest import diff_manifests
from .model import ArchiveData, InputsComparison

PINNED_ROLES = ("sdist", "patch", "model", "panel")
_DEP = re.compile(r"^buildDefinition\.resolvedDependencies\[([^\]:]+):[^\]]*\]\.(.*)$")
_CONFIG = "buildDefinition.externalParameters.config."
UNPINNED_CONFIG = ("results", "reproduces")


def registered_plan(plan: dict[str, Any]) -> dict[str, Any]:
    p = copy.deepcopy(plan) if isinstance(plan, dict) else {}
    p.pop("plan_sha256", None)
    for c in (p.get("campaigns") or {}).values():
        if isinstance(c, dict):
            c.pop("manifest_sha256", None)
    return p


def registered_plan_sha256(plan: dict[str, Any]) -> str:
    return sha256_bytes(canonical_json(registered_plan(plan)))


def plan_differences(plan_a: dict[str, Any], plan_b: dict[str, Any]) -> dict[str, list[str]]:
    """campaign -> differing fields of its registered plan ("(plan)" for fields outside ``campaigns``)."""
    ra, rb = registered_plan(plan_a), registered_plan(plan_b)
    out: dict[str, list[str]] = {}
    ca, cb = ra.pop("campaigns", {}) or {}, rb.pop("campaigns", {}) or {}
    top = diff_manifests(ra, rb, ignored=())
    if top:
        out["(plan)"] = top
    for name in sorted(set(ca) | set(cb)):
        if name not in ca or name not in cb:
            out[name] = [f"campaign {name} only in {'B' if name not in ca else 'A'}"]
            continue
        d = diff_manifests(ca[name], cb[name], ignored=())
        if d:
            out[name] = d
    return out


def pinned(line_key: str) -> bool:
    """Whether a flattened manifest field is a pinned input."""
    m = _DEP.match(line_key)
    if m:
        role, rest = m.group(1), m.group(2)
        if role == "pkg":  # pkg:pypi/<name>: the package set is its names and versions
            return rest in ("annotations.version", "")
        return role in PINNED_ROLES and rest == "digest.sha256"
    if line_key.startswith(_CONFIG):
        return line_key[len(_CONFIG) :].split(".", 1)[0].split("[", 1)[0] not in UNPINNED_CONFIG
    return False


def _field_of(line: str) -> str:
    """The flattened field a ``diff_manifests`` line names."""
    for verb in ("changed ", "removed ", "added "):
        if line.startswith(verb):
            rest = line[len(verb) :]
            return re.split(r"(?:: | \(was | = )", rest, maxsplit=1)[0]
    return line


def manifest_differences(ma: dict[str, Any], mb: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(pinned differences, other differences) of two manifests."""
    lines = diff_manifests(ma, mb, ignored=("runDetails.metadata", "buildDefinition.externalParameters.config_sha256"))
    pinned_lines, other = [], []
    for line in lines:
        f = _field_of(line)
        # a dependency present on one side only: pinned when its role is
        m = re.match(r"^buildDefinition\.resolvedDependencies\[([^\]:]+):", f)
        whole = m is not None and "]." not in f
        if pinned(f) or (whole and (m.group(1) in PINNED_ROLES or m.group(1) == "pkg")):
            pinned_lines.append(line)
        else:
            other.append(line)
    return pinned_lines, other


def bootstrap_of(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan's bootstrap settings ``{seed, draws, threshold}``, the statistics' defaults where absent."""
    b = plan.get("bootstrap") if isinstance(plan, dict) else None
    b = b if isinstance(b, dict) else {}
    return {
        "seed": int(b.get("seed", stats.DEFAULT_SEED)),
        "draws": int(b.get("draws", stats.DEFAULT_DRAWS)),
        "threshold": float(b.get("threshold", stats.DEFAULT_THRESHOLD)),
    }


def compare_inputs(a: ArchiveData, b: ArchiveData) -> InputsComparison:
    pinned_lines, other = manifest_differences(a.manifest, b.manifest)
    return InputsComparison(
        plan_a=registered_plan_sha256(a.plan),
        plan_b=registered_plan_sha256(b.plan),
        plan_differences=plan_differences(a.plan, b.plan),
        pinned_differences=pinned_lines,
        other_differences=other,
        bootstrap_a=bootstrap_of(a.plan),
        bootstrap_b=bootstrap_of(b.plan),
    )
