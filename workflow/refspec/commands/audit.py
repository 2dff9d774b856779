"""``refspec audit``: the representation audit (:mod:`refspec.experiments.audit`) on the
replay tool; writes the ``audit`` table and ``audit_summary.json`` and prints the summary."""

from __future__ import annotations

import argparse
import sys

from ..core.config import load_config
from ..core.errors import EXIT_FAILED, EXIT_OK
from ..experiments.audit import audit_ok, fixtures, run_audit, write_results
from ..experiments.replay_runner import resolve_tool


def add_tool_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="workflow config (its native: section selects the build and so the tool)")
    p.add_argument("--tool", help="path to refspec-replay (default: $REFSPEC_REPLAY_TOOL, else the configured build's)")
    p.add_argument("--threads", type=int, default=1, help="backend threads (default 1)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="directory for audit.parquet, audit.csv, audit_summary.json")
    p.add_argument("--backend", default="CPU", help="ggml device name (default CPU)")
    p.add_argument("--no-faults", action="store_true", help="skip fault injection")
    p.add_argument("--limit", type=int, help="only the first N fixtures (quick check)")
    add_tool_arguments(p)


def run(args: argparse.Namespace) -> int:
    tool = resolve_tool(args.tool, load_config(args.config) if args.config else None)
    fxs = fixtures()
    if args.limit:
        fxs = fxs[: args.limit]

    def progress(n: int, total: int) -> None:
        print(f"refspec audit: {n}/{total} fixtures", file=sys.stderr)

    res = run_audit(
        tool, fixture_list=fxs, faults=not args.no_faults, backend=args.backend, threads=args.threads, progress=progress
    )
    paths = write_results(res, args.out)
    s = res.summary
    print(
        f"refspec audit: {s['fixtures']} fixtures, {s['geometries']} geometries, {s['clean_evaluations']} clean "
        f"and {s['fault_evaluations']} fault evaluations on {s['backend']} in {s['seconds']} s"
    )
    print(
        f"  crashes {len(s['crashes'])}, clean address failures {len(s['address_failures_clean'])}, "
        f"strict failures {len(s['strict_failures_clean'])}"
    )
    for f, v in s["faults"].items():
        if f in s["faults_not_injected"]:
            print(f"  fault {f}: not applicable to any fixture of this selection")
            continue
        print(
            f"  fault {f}: detected by the address oracle {v['detected_address']}/{v['injected']}, "
            f"changed outputs {v['detected_numeric']}/{v['injected']}"
        )
    print(
        f"  pq == qb bitwise {s['pq_eq_qb_bitwise']['equal']}/{s['pq_eq_qb_bitwise']['of']}; "
        f"pq == qh bitwise {s['pq_eq_qh_bitwise']['equal']}/{s['pq_eq_qh_bitwise']['of']}; "
        f"q=1 mq == pq == qb {s['q1_mq_pq_qb_bitwise']['equal']}/{s['q1_mq_pq_qb_bitwise']['of']}; "
        f"q=2 mq differs from pq at {s['mq_differs_from_pq_q2']['by_stage']} of {s['mq_differs_from_pq_q2']['fixtures']}"
    )
    for st, v in s["max_error_clean"].items():
        print(f"  {st}: max abs err {v['max_abs_err']:.8g}, max rel err {v['max_rel_err']:.8g}")
    for line in (s["crashes"] + s["address_failures_clean"] + s["strict_failures_clean"])[:20]:
        print(f"  FAIL {line}")
    print(f"  wrote {paths['parquet']}, {paths['csv']}, {paths['summary']}")
    return EXIT_OK if audit_ok(s, faults=not args.no_faults) else EXIT_FAILED
