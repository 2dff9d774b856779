"""Benchmark: ``refspec verify`` against plain ``sha256sum`` over the same archive.

    PYTHONPATH=workflow:report python bench/verify_vs_sha256sum.py [--size-mb 500] [--repeats 7]

Builds a results folder of about SIZE MB in a temporary folder (two Parquet
tables of random float64/int64 columns, several binary blobs, and the usual
manifest, plan, ledger and report), seals it with a throw-away key, then times,
side by side and interleaved (the order alternates every repeat, after one
untimed warm-up of each so both read from the page cache):

- ``refspec verify DIR --pubkey KEY`` (default hashing threads),
- ``refspec verify DIR --pubkey KEY --jobs 1`` (one thread, like sha256sum),
- ``sha256sum`` of every file of the archive (one process, one thread).

Each is a fresh process, so the interpreter start-up and imports are included
in refspec's time, as a user would see it. Prints per-repeat times, medians and
the ratios to sha256sum (target: verify < 1.0 x sha256sum). With ``--csv all`` the
archive also holds the tables' CSV copies, which verify compares with their tables.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(ROOT / "workflow"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from refspec.provenance import keys  # noqa: E402
from refspec.provenance.ledger import Ledger  # noqa: E402
from refspec.provenance.seal import seal  # noqa: E402

MB = 1 << 20


def make_results(root: Path, size_mb: int, seed: int = 20261014) -> None:
    rng = np.random.default_rng(seed)
    (root / "tables").mkdir(parents=True)
    (root / "blobs").mkdir()
    table_mb = max(1, size_mb // 10)  # two tables of ~10% each, random so the seal's GZIP cannot shrink them
    rows = table_mb * MB // 16
    for name in ("replay_operands", "timings"):
        t = pa.table({"value": rng.standard_normal(rows), "index": rng.integers(0, 2**62, rows)})
        pq.write_table(t, root / "tables" / f"{name}.parquet", compression="none")
    rest = size_mb - 2 * table_mb
    n_blobs = 4
    for i in range(n_blobs):
        with open(root / "blobs" / f"capture_{i}.bin", "wb") as f:
            left = rest * MB // n_blobs
            while left > 0:
                n = min(16 * MB, left)
                f.write(rng.bytes(n))
                left -= n
    (root / "manifest.json").write_text('{"_type": "https://refspec.dev/manifest/v1"}\n')
    (root / "plan.json").write_text('{"campaign": "bench"}\n')
    led = Ledger(root / "ledger.jsonl")
    for i in range(100):
        led.append({"event": "attempt", "i": i, "reason": "bench"})
    (root / "report").mkdir()
    (root / "report" / "report.html").write_text("<p>bench</p>\n")


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, check=False)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{cmd[:4]} failed ({r.returncode}):\n{r.stdout.decode()[-2000:]}{r.stderr.decode()[-2000:]}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a new temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument(
        "--csv",
        choices=("none", "all"),
        default="none",
        help="CSV copies of the tables in the archive (all: verify compares each with its table)",
    )
    args = ap.parse_args()
    if shutil.which("sha256sum") is None:
        sys.exit("sha256sum not found")
    work = Path(tempfile.mkdtemp(prefix="refspec-bench-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        make_results(work / "results", args.size_mb)
        kp = keys.generate(work / "keys", name="bench")
        t1 = time.perf_counter()
        r = seal(work / "results", work / "archive", key=kp.private_path, csv_tables=args.csv)
        t2 = time.perf_counter()
        archive = work / "archive"
        files = sorted(str(p) for p in archive.rglob("*") if p.is_file())
        total = sum(os.path.getsize(f) for f in files)
        print(
            f"archive: {archive} ({len(files)} files, {total / MB:.1f} MiB; "
            f"generated in {t1 - t0:.1f} s, sealed in {t2 - t1:.1f} s)"
        )
        print(
            f"host: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
            f"{subprocess.run(['sha256sum', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}"
        )

        env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(ROOT / d) for d in ("workflow", "report")))
        verify = [sys.executable, "-m", "refspec.cli", "verify", str(archive), "--pubkey", str(kp.public_path)]
        cmds = {
            "refspec verify": verify,
            "refspec verify --jobs 1": verify + ["--jobs", "1"],
            "sha256sum": ["sha256sum", *files],
        }
        for cmd in cmds.values():  # warm-up: page cache, bytecode
            timed(cmd, env)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        names = list(cmds)
        for i in range(args.repeats):
            order = names if i % 2 == 0 else names[::-1]
            for k in order:
                times[k].append(timed(cmds[k], env))
        print(f"\n{'command':<26}{'median s':>10}{'MiB/s':>9}   per repeat (s)")
        med = {k: statistics.median(v) for k, v in times.items()}
        for k in names:
            per = " ".join(f"{x:.3f}" for x in times[k])
            print(f"{k:<26}{med[k]:>10.3f}{total / MB / med[k]:>9.0f}   {per}")
        base = med["sha256sum"]
        print()
        for k in names[:-1]:
            print(f"ratio {k} / sha256sum = {med[k] / base:.3f}  (target < 1.0)")
        print(f"seal sha256 {r.seal_sha256}")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
