"""The sealed comparison archive (``anc/compare.md``).

It holds ``tables/comparisons`` and ``tables/differences`` (Parquet + CSV, specs in
``report/refspec_check/schemas/compare``), the records the checker recomputes them from (``inputs/a``
and ``inputs/b``: each archive's ``SEAL.dsse.json``, ``plan.json``, ``manifest.json`` and the
CSV copies of the tables the comparison read, byte for byte as sealed), ``plan.json`` (the
comparison's settings), ``manifest.json`` (the two archives compared), ``ledger.jsonl``, and
``report.html``, ``report.tex`` and ``numbers.json``. Its seal's predicate names both
archives (``compares: {a: {seal_sha256, keyid, archive_id}, b: ...}``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from refspec_check.render.comparison import comparison_files

from .. import __version__
from ..core.fsutil import atomic_write_bytes, atomic_write_text
from ..provenance.ledger import Ledger
from ..provenance.seal import SealResult, seal
from .model import ArchiveComparison, ArchiveData
from .output import COMPARE_CAMPAIGN, COMPARE_FORMAT, comparison_rows, difference_rows, write_rows


def _carry(c: ArchiveComparison, root: Path) -> None:
    """The records the checker recomputes the comparison from, byte for byte as sealed."""
    for x, lab in ((c.a, "a"), (c.b, "b")):
        d = root / "inputs" / lab
        (d / "tables").mkdir(parents=True)
        shutil.copyfile(x.path / "SEAL.dsse.json", d / "SEAL.dsse.json")
        for rec in ("plan.json", "manifest.json"):
            if (x.path / rec).is_file():
                shutil.copyfile(x.path / rec, d / rec)
        for name, p in sorted(x.table_csv.items()):
            shutil.copyfile(p, d / "tables" / f"{name}.csv")


def write_results(c: ArchiveComparison, root: Path) -> None:
    """Everything the comparison archive holds but its seal, into the empty folder ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    write_rows(comparison_rows(c), "comparisons", root / "tables")
    write_rows(difference_rows(c), "differences", root / "tables")
    _carry(c, root)
    plan = {
        "campaign": COMPARE_CAMPAIGN,
        "format": COMPARE_FORMAT,
        "bootstrap": dict(c.inputs.bootstrap_a),
        "noise_floor": {"recorded": c.noise.recorded, "a": c.noise.a, "b": c.noise.b, "given": c.noise_given},
        "band": c.band,
        "a": c.a.ref(),
        "b": c.b.ref(),
    }
    atomic_write_text(root / "plan.json", json.dumps(plan, indent=1, sort_keys=True) + "\n", mode=0o644)
    manifest = {
        "_type": "https://refspec.dev/compare-manifest/v1",
        "compared": {"a": c.a.ref(), "b": c.b.ref()},
        "registered_plan_sha256": {"a": c.inputs.plan_a, "b": c.inputs.plan_b},
        "refspec": __version__,
    }
    atomic_write_text(root / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n", mode=0o644)
    led = Ledger(root / "ledger.jsonl")
    for x in (c.a, c.b):
        led.append({"event": "verified", "archive": x.label, "seal_sha256": x.seal_sha256, "keyid": x.keyid})
    led.append({"event": "compared", "preservation_same": c.preservation_same, "exit_code": c.exit_code})
    files = comparison_files(root, {"a": _sealref(c.a), "b": _sealref(c.b)}, COMPARE_FORMAT)
    for name, data in files.items():
        atomic_write_bytes(root / name, data, mode=0o644)


def write_archive(c: ArchiveComparison, out: Path, key: Any = None, created: str | None = None) -> SealResult:
    """Write and seal the comparison archive into ``out`` (a fresh folder); returns the SealResult."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.results-", dir=out.parent))
    try:
        write_results(c, stage / "results")
        return seal(
            stage / "results",
            out,
            key=key,
            campaign=COMPARE_CAMPAIGN,
            created=created,
            predicate_extra={"compares": {"a": _sealref(c.a), "b": _sealref(c.b)}},
        )
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _sealref(x: ArchiveData) -> dict[str, Any]:
    return {"seal_sha256": x.seal_sha256, "keyid": x.keyid, "archive_id": x.archive_id}
