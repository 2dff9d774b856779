"""Write a golden archive ``tests/golden/<version>/`` with the current sealing code.

    PYTHONPATH=workflow:report python tests/golden/make_golden.py v2

Golden archives are never regenerated: each one records what an earlier version
of ``refspec seal`` wrote, and ``tests/provenance/test_seal_golden.py`` checks that every one
of them keeps verifying. The signing key is generated in a temporary folder and
deleted afterwards; only its public key (``signer.pub``) is kept, so nobody can
sign anything else with it.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from refspec import __version__
from refspec.provenance import keys
from refspec.provenance.ledger import Ledger
from refspec.provenance.manifest import Artifact, build_manifest
from refspec.provenance.seal import seal

HERE = Path(__file__).resolve().parent


def results(root: Path) -> Path:
    (root / "tables").mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "family": ["smollm2-135m"] * 4,
                "task": ["HumanEval/0", "HumanEval/0", "HumanEval/1", "HumanEval/1"],
                "arm": ["R", "C_qb", "R", "C_qb"],
                "qualified": [True, True, True, False],
                "n_tokens": pa.array([12, 12, 30, 29], type=pa.int32()),
                "latency_s": [0.125, 0.0625, 0.3, 1 / 3],
            }
        ),
        root / "tables" / "qualification.parquet",
    )
    panel = root.parent / "humaneval-probe.jsonl"
    panel.write_text('{"task": "HumanEval/0"}\n{"task": "HumanEval/1"}\n')
    m = build_manifest(
        [Artifact("humaneval-probe", "panel", panel)],
        {"family": "smollm2-135m", "k": 3, "cap": 32},
        include_source=False,
        include_environment=False,
        include_host=False,
        created="2026-01-01T00:00:00Z",
    )
    (root / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    (root / "plan.json").write_text(json.dumps({"campaign": "golden", "arms": ["R", "C_qb"]}, indent=2) + "\n")
    led = Ledger(root / "ledger.jsonl")
    led.append({"event": "attempt", "arm": "R", "outcome": "ok", "reason": "planned"})
    led.append({"event": "attempt", "arm": "C_qb", "outcome": "ok", "reason": "planned"})
    (root / "report").mkdir()
    (root / "report" / "report.html").write_text("<!doctype html><title>golden</title><p>golden archive</p>\n")
    return root


def main(version: str) -> None:
    out = HERE / version
    if out.exists():
        sys.exit(f"{out} exists: golden archives are never regenerated")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        kp = keys.generate(t / "keys", name="golden")
        res = results(t / "results")
        out.mkdir()
        r = seal(
            res,
            out / "archive",
            key=kp.private_path,
            archive_id=f"golden-{version}",
            created="2026-01-02T00:00:00Z",
            tar=out / "archive.tar",
        )
        shutil.copy(kp.public_path, out / "signer.pub")
    expected = {
        "archive_id": r.archive_id,
        "campaign": r.campaign,
        "files": r.files,
        "keyid": r.keyid,
        "previous_seal_sha256": r.previous_seal_sha256,
        "seal_sha256": r.seal_sha256,
        "sealed_by": f"refspec {__version__}",
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}: {r.files} files, seal sha256 {r.seal_sha256}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
