"""Compare two sealed archives finding by finding (``refspec compare A B``, ``anc/compare.md``).

Each archive is verified first, as ``refspec verify`` does, against its own pinned key
(:func:`load_verified`); an archive that does not verify stops the comparison
(:class:`ArchiveRefused`, exit 3). Then:

* **inputs** (:mod:`.inputs`): the registered plans and the pinned inputs of the two
  manifests; a difference makes the timings it concerns "not comparable";
* **preservation** (:mod:`.preservation`): matching counts, first divergences, endpoints,
  E1, phase-mask minimal masks and state classes, each "same" or "differs" with the rows
  that differ;
* **timings** (:mod:`.timings`): every qualified ratio and E2 estimate of both archives,
  the ratio of the two (B over A) with a bootstrap interval over sessions and tasks, and
  a verdict: "reproduced", "differs" or "not comparable", with the reason.

The noise floor (:class:`.model.ArchiveNoiseFloors`) is an input of the verdict: an archive's
A/A control (:func:`noise_floor_of`) or a value given by hand. Without one, the band is
the practical threshold alone and the comparison says that no A/A control was recorded.

:func:`compare_archives` returns a :class:`.model.ArchiveComparison`; :mod:`.output` prints it and
writes it as JSON and as tables, :mod:`.report` renders its report and :mod:`.archive` seals
it as a comparison archive.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..core import tables as T
from ..core.errors import IntegrityError
from ..provenance.restore import restore
from ..provenance.verify import verify_archive
from .inputs import bootstrap_of, compare_inputs
from .model import ArchiveComparison, ArchiveData, ArchiveNoiseFloors
from .preservation import PRESERVATION_TABLES, compare_preservation
from .timings import compare_timings

#: every table a comparison reads (and the comparison archive carries as CSV for the checker)
TABLES_READ = tuple(dict.fromkeys(PRESERVATION_TABLES + ("requests", "ratios", "estimates", "noise")))


class ArchiveRefused(IntegrityError):
    """An archive that does not verify under its pinned key (exit 3)."""


def noise_floor_of(archive: ArchiveData) -> float | None:
    """The archive's A/A noise floor: how far from 1 the intervals of its A/A controls reach,
    ``max(hi, 1/lo)`` over the rows of its ``noise`` table (anc/campaigns.md: an arm X and its
    twin X_aa, the same recipe run as two arms in the same blocks and sessions), or None when it
    recorded none (an archive from before the control, or a run with ``aa_arm: null``)."""
    floors = [
        max(float(r["hi"]), 1.0 / float(r["lo"]))
        for r in archive.rows("noise")
        if r.get("lo") not in (None, "") and r.get("hi") not in (None, "") and float(r["lo"]) > 0
    ]
    return max(floors) if floors else None


def load_verified(
    path: str | Path,
    pubkey: str | Path,
    label: str,
    expect_keyid: str | None = None,
    workdir: Path | None = None,
) -> ArchiveData:
    """Verify the archive folder or tar at ``path`` under ``pubkey`` (pinned to ``expect_keyid``)
    and read its records and tables. A tar is restored (verified, then written) into ``workdir``."""
    p = Path(path)
    if p.is_file():
        work = Path(workdir or tempfile.mkdtemp(prefix="refspec-compare-"))
        dest = work / f"archive-{label.lower()}"
        rr = restore(p, dest, pubkey, expect_keyid=expect_keyid)
        res = rr.verify
        folder = dest
    else:
        res = verify_archive(p, pubkey, expect_keyid=expect_keyid)
        folder = p
    if not res.ok or res.seal_sha256 is None:
        raise ArchiveRefused(f"archive {label} ({path}) does not verify:\n  " + "\n  ".join(res.problems))
    pred = (res.statement or {}).get("predicate") or {}
    records = pred.get("records") or {}
    plan = _json(folder / str(records.get("plan", "plan.json")))
    manifest = _json(folder / str(records.get("manifest", "manifest.json")))
    tables: dict[str, list[dict[str, Any]]] = {}
    csv: dict[str, Path] = {}
    for name in TABLES_READ:
        pq = T.find_table(name, folder)
        cp = T.find_table(name, folder, ext="csv")
        if pq is not None and cp is not None:
            tables[name] = T.read_records(name, folder)
            csv[name] = cp
    return ArchiveData(
        label=label,
        path=folder,
        shown=str(path),
        seal_sha256=res.seal_sha256,
        keyid=str(res.keyid),
        archive_id=str(pred.get("archive_id")),
        created=str(pred.get("created")),
        plan=plan if isinstance(plan, dict) else {},
        manifest=manifest if isinstance(manifest, dict) else {},
        tables=tables,
        table_csv=csv,
    )


def _json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def compare_archives(a: ArchiveData, b: ArchiveData, noise_floor: float | None = None) -> ArchiveComparison:
    """Compare two verified archives. ``noise_floor`` (a ratio >= 1) overrides the archives' own A/A floors."""
    inputs = compare_inputs(a, b)
    threshold = float(bootstrap_of(a.plan)["threshold"])
    noise = (
        ArchiveNoiseFloors(noise_floor, noise_floor)
        if noise_floor is not None
        else ArchiveNoiseFloors(noise_floor_of(a), noise_floor_of(b))
    )
    band = noise.band(threshold)
    notes = []
    if not noise.recorded:
        notes.append(
            "no A/A control was recorded in either archive: the noise floor is unknown and the band is the "
            f"practical threshold alone (B/A within [{1 / band:.6f}, {band:.6f}])"
        )
    findings = compare_preservation(a, b)
    timings = compare_timings(a, b, inputs, band)
    return ArchiveComparison(a, b, inputs, findings, timings, noise, threshold, band, notes, noise_given=noise_floor)


def cleanup(*archives: ArchiveData) -> None:
    """Remove the folders tars were restored into (never a folder the user gave)."""
    for x in archives:
        if Path(x.shown) != x.path and x.path.name.startswith("archive-"):
            shutil.rmtree(x.path.parent, ignore_errors=True)
