"""Benchmark: how long ``report/check.py`` takes on a sealed synthetic archive, as an auditor runs it.

    PYTHONPATH=workflow:tests:report python bench/check_time.py [--repeats 7] [--draws 300]

Builds the checker tests' synthetic results folder (six sessions, the dishonest signer's draws,
rendered without report.pdf), seals it with the synthetic test key, then runs the checker in a
fresh isolated interpreter (``python -I -S report/check.py ARCHIVE --pubkey KEY``) ``--repeats``
times after one untimed warm-up, so the archive is read from the page cache. Prints every
repeat's wall time and their median. Each run must exit 0 (a clean archive); a run that does not
stops the benchmark with its output. The time is the checker's full recomputation: interpreter
start, signature, every table, every figure and every text of the report.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--draws", type=int, default=300, help="bootstrap draws of the synthetic archive")
    args = ap.parse_args(argv)

    from refspec.reporting import render as report
    from support.synthetic_archive import make_results, run_check, seal_archive

    with tempfile.TemporaryDirectory(prefix="refspec-check-time-") as tmp:
        results = make_results(Path(tmp) / "results", evil=True, draws=args.draws)
        report.render(results, pdf=False)
        archive = seal_archive(results, Path(tmp) / "archive")
        code, out = run_check(archive)  # warm-up: the page cache and the interpreter's files
        if code != 0:
            print(out[-3000:], file=sys.stderr)
            return 1
        times = []
        for i in range(args.repeats):
            t0 = time.perf_counter()
            code, out = run_check(archive)
            times.append(time.perf_counter() - t0)
            if code != 0:
                print(out[-3000:], file=sys.stderr)
                return 1
            print(f"repeat {i + 1}: {times[-1]:.3f} s")
    print(f"report/check.py on the synthetic archive: median {statistics.median(times):.3f} s over {len(times)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
