"""A benchmark's run sealed as an archive: its tables (Parquet, with CSV copies), its analysis and its
settings as the plan, a ledger line and a manifest of the build's libraries and the family's model
files, signed with the machine's key (created once, as ``./run main`` does; its public key copied to
``OUT/signer.pub``): ``refspec verify OUT/archive --pubkey OUT/signer.pub``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def seal_bench(out: Path, bench: str, family: str, tables: dict[str, pa.Table], files: dict[str, bytes], ledger: dict):
    """``tables`` (name: table) and ``files`` (name: bytes; ``plan.json`` among them) sealed into
    ``out/archive`` under the campaign name ``bench``; returns the archive folder."""
    from refspec.core.tables import PARQUET_WRITE
    from refspec.native import build as native
    from refspec.native.models import ensure_family
    from refspec.pipeline.provenance_inputs import ensure_keys
    from refspec.provenance.ledger import Ledger
    from refspec.provenance.manifest import Artifact, build_manifest, write_manifest
    from refspec.provenance.seal import seal

    stage = out / "sealed-input"
    (stage / "tables").mkdir(parents=True, exist_ok=False)
    for name, table in tables.items():
        pq.write_table(table, stage / "tables" / f"{name}.parquet", **PARQUET_WRITE)
    for name, data in files.items():
        (stage / name).write_bytes(data)
    build = native.current()
    arts = [Artifact(f.name, "model", f.path) for f in ensure_family(family).all()]
    arts += [Artifact(n, "library", Path(build.lib_dir) / n) for n in sorted(build.record["files"])]
    write_manifest(build_manifest(arts, {"bench": bench}), stage / "manifest.json")
    Ledger(stage / "ledger.jsonl").append({"event": "bench", "bench": bench, **ledger})
    ensure_keys(out / "signer.pub")
    return seal(stage, out / "archive", campaign=bench, csv_tables="all").out


def json_bytes(doc) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")
