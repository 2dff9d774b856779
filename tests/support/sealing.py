"""Keys, a small results folder and sealed archives for the sealing tests (:func:`make_seal_env`, the
session fixture ``seal_env`` of tests/conftest.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from refspec.provenance import keys
from refspec.provenance.dsse import SEAL_NAME
from refspec.provenance.ledger import Ledger
from refspec.provenance.manifest import Artifact, build_manifest
from refspec.provenance.seal import seal
from refspec.provenance.statement import MAX_SEAL_BYTES


def make_key(directory: Path, name: str = "test_ed25519") -> keys.KeyPair:
    return keys.generate(directory, name=name)


def make_results(root: Path, campaign: str = "probe", seed: int = 0) -> Path:
    """A small but complete results folder: two tables, manifest, plan, ledger, report."""
    root.mkdir(parents=True)
    (root / "tables").mkdir()
    qual = pa.table(
        {
            "family": ["smollm2-135m"] * 3,
            "task": [f"HumanEval/{seed + i}" for i in range(3)],
            "arm": ["R", "C_qb", "C_pq"],
            "qualified": [True, False, None],
            "tokens": pa.array([[1, 2, 3], [4, 5], []], type=pa.list_(pa.int32())),
            "latency_s": [0.1, 1 / 3, float("nan")],
        }
    )
    pq.write_table(qual, root / "tables" / "qualification.parquet", compression="snappy")
    timings = pa.table({"session": [0, 0, 1, 1], "t": [1.5e-3, 2.25e-3, 1e20, -0.0]})
    pq.write_table(timings, root / "tables" / "timings.parquet")
    panel = root.parent / f"{root.name}-panel.jsonl"
    panel.write_text('{"task": "HumanEval/0"}\n')
    manifest = build_manifest(
        [Artifact("humaneval-probe", "panel", panel)],
        {"campaign": campaign, "seed": seed},
        include_source=False,
        include_environment=False,
        include_host=False,
        created="2026-01-01T00:00:00Z",
    )
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (root / "plan.json").write_text(json.dumps({"campaign": campaign, "arms": ["R", "C_qb"]}) + "\n")
    led = Ledger(root / "ledger.jsonl")
    led.append({"event": "attempt", "arm": "R", "outcome": "ok", "reason": "planned"})
    led.append({"event": "attempt", "arm": "C_qb", "outcome": "failed", "reason": "worker died"})
    led.append({"event": "attempt", "arm": "C_qb", "outcome": "ok", "reason": "retry of attempt 1"})
    (root / "report").mkdir()
    (root / "report" / "report.html").write_text("<html><body>refspec report</body></html>\n")
    (root / "report" / "figures").mkdir()
    (root / "report" / "figures" / "ratios.svg").write_text("<svg/>\n")
    return root


def copy_archive(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def make_seal_env(base: Path) -> dict:
    """Under ``base``: keys A and B, a clean archive (and its tar), a chained successor and an
    archive of another campaign (the session fixture ``seal_env`` of tests/conftest.py)."""
    a = make_key(base / "keys", "a")
    b = make_key(base / "keys", "b")
    res = make_results(base / "results")
    clean = base / "clean"
    r0 = seal(res, clean, key=a.private_path, archive_id="archive-0", created="2026-01-02T00:00:00Z", tar=True)
    nxt = base / "next"
    r1 = seal(res, nxt, key=a.private_path, previous=clean, archive_id="archive-1", created="2026-01-03T00:00:00Z")
    other_res = make_results(base / "results-other", campaign="confirm", seed=7)
    other = base / "other"
    seal(other_res, other, key=a.private_path, archive_id="archive-9")
    return {
        "base": base,
        "a": a,
        "b": b,
        "results": res,
        "clean": clean,
        "clean_tar": r0.tar,
        "clean_result": r0,
        "next": nxt,
        "next_result": r1,
        "other": other,
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal_sha256_of(path: str | Path) -> str:
    """SHA-256 of the seal of an archive folder, a ``SEAL.dsse.json`` file or an archive tar."""
    p = Path(path)
    if p.is_dir():
        p = p / SEAL_NAME
        if not p.is_file():
            raise ValueError(f"{path}: no {SEAL_NAME}")
        return _sha256(p.read_bytes())
    if not p.is_file():
        raise ValueError(f"{path} not found")
    if tarfile.is_tarfile(p):
        with tarfile.open(p, "r:*") as tf:
            try:
                m = tf.getmember(SEAL_NAME)
            except KeyError:
                raise ValueError(f"{path}: no {SEAL_NAME} member") from None
            f = tf.extractfile(m)
            if f is None or m.size > MAX_SEAL_BYTES:
                raise ValueError(f"{path}: {SEAL_NAME} is not a regular member")
            return _sha256(f.read())
    return _sha256(p.read_bytes())
