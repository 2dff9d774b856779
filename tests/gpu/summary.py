"""The device check's summary block, read from the sealed archive's tables.

    python tests/gpu/summary.py ARCHIVE [--build-seconds S] [--total-seconds S]

Prints where the arms ran (device and offloaded layers from the ``requests`` table),
matches of R per arm with the first divergences, the qualified ratios, the E2
estimates with their intervals and decisions, and the E1 counts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workflow"))

from refspec.core import tables as T


def _rows(name: str, root: Path) -> list[dict]:
    for d in (root, root / "tables"):
        if T.find_table(name, d) is not None:
            return T.read_records(name, d)
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archive")
    ap.add_argument("--build-seconds")
    ap.add_argument("--total-seconds")
    args = ap.parse_args(argv)
    root = Path(args.archive)
    out = ["=" * 78, "refspec device check: summary", "=" * 78]
    if args.build_seconds:
        out.append(f"CUDA build: {args.build_seconds} s")
    req = _rows("requests", root)
    ok = [r for r in req if r["status"] == "ok"]
    placed = defaultdict(set)
    for r in req:
        if r["status"] in ("ok", "excluded_warmup"):
            placed[(r["campaign"], r["arm"])].add(
                (r.get("device"), r.get("device_description"), r.get("gpu_layers"), r.get("draft_gpu_layers"))
            )
    devices = sorted({(d, desc, g, dg) for s in placed.values() for (d, desc, g, dg) in s}, key=str)
    out.append(f"requests: {len(req)} attempts, {len(ok)} ok, {sum(r['status'] == 'failed' for r in req)} failed")
    for d, desc, g, dg in devices:
        arms = sorted({f"{c}/{a}" for (c, a), s in placed.items() if (d, desc, g, dg) in s})
        out.append(
            f"device {d} ({desc}): target layers offloaded {g}, draft {dg if dg is not None else '-'}: "
            f"{len(arms)} campaign arms"
        )
    med = defaultdict(list)
    for r in ok:
        med[(r["campaign"], r["arm"])].append(r["t_ns"])
    q = _rows("qualification", root)
    by = defaultdict(list)
    for r in q:
        by[(r["campaign"], r["arm"])].append(r)
    out.append("")
    out.append(
        f"{'campaign':15s} {'arm':7s} {'tasks matching R':>17s} {'median ms':>10s}  first divergences (task@index)"
    )
    for (camp, arm), rs in sorted(by.items()):
        n_ok = sum(bool(r["qualified"]) for r in rs)
        div = ", ".join(
            f"{r['task_id'].split('/')[-1]}@{r['first_diff_index']}"
            for r in rs
            if not r["qualified"] and r["first_diff_index"] is not None
        )
        m = med.get((camp, arm))
        ms = f"{statistics.median(m) / 1e6:.1f}" if m else "-"
        out.append(f"{camp:15s} {arm:7s} {n_ok:>8d}/{len(rs):<8d} {ms:>10s}  {div or '-'}")
    rat = _rows("ratios", root)
    if rat:
        out.append("")
        out.append("qualified ratios (numerator/denominator, median over tasks; > 1: numerator faster):")
        for r in rat:
            v = f"{r['ratio']:.3f}" if r["ratio"] is not None else "withheld"
            ci = (
                f"[{r['lo']:.3f}, {r['hi']:.3f}] {r['design']} {r['verdict']}, detectable {r['detectable']:.3f}"
                if r.get("lo") is not None
                else ""
            )
            out.append(
                f"  {r['campaign']:15s} {r['numerator']:>6s}/{r['denominator']:<6s} {v:>9s}  {ci}  "
                f"{r.get('reason') or ''}".rstrip()
            )
    var = _rows("variance", root)
    if var:
        out.append("")
        out.append("variance components of log request time (sd between processes / within / process x arm):")
        for r in var:
            if r["sd_between"] is None:
                out.append(f"  {r['campaign']:15s} {r['design']:6s} {r['reason']}")
                continue
            inter = f"{r['sd_interaction']:.4f}" if r["sd_interaction"] is not None else "confounded"
            out.append(
                f"  {r['campaign']:15s} {r['design']:6s} {r['sd_between']:.4f} / {r['sd_within']:.4f} / {inter}"
                f"  ({r['processes']} processes, {r['requests']} requests)"
            )
    aa = _rows("noise", root)
    if aa:
        out.append("")
        out.append("A/A controls (twin/arm [95% interval], floor, minimum detectable ratio):")
        for r in aa:
            if r["lo"] is None:
                out.append(f"  {r['campaign']:15s} {r['twin']}/{r['arm']}: {r['verdict']}")
                continue
            out.append(
                f"  {r['campaign']:15s} {r['twin']}/{r['arm']} {r['value']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}]"
                f" floor {r['floor']:.4f}, detectable {r['mde']:.4f}"
            )
    est = _rows("estimates", root)
    if est:
        out.append("")
        out.append("E2 estimates (bootstrap over sessions):")
        for r in est:
            ci = f"[{r['lo']:.3f}, {r['hi']:.3f}]" if r["lo"] is not None else "[-]"
            e = f"{r['estimate']:.3f}" if r["estimate"] is not None else "-"
            out.append(
                f"  {r['path']:7s} {r['comparison']:10s} {e} {ci} over {r['n_sessions']} sessions: {r['decision']}"
            )
    rp = _rows("replay", root)
    if rp:
        out.append("")
        pq_qb = sum(bool(r["pq_eq_qb"]) for r in rp)
        pq_qh = sum(bool(r.get("pq_eq_qh")) for r in rp)
        mq = sum(bool(r["mq_eq_pq"]) for r in rp)
        ctl = sum(bool(r["control_ok"]) for r in rp)
        q1 = [r for r in rp if r["q"] == 1]
        out.append(
            f"E1 replay: {len(rp)} stage comparisons; PQ = QB bitwise {pq_qb}/{len(rp)}; PQ = QH {pq_qh}/{len(rp)}; "
            f"MQ = PQ {mq}/{len(rp)} (q=1: {sum(bool(r['mq_eq_pq']) for r in q1)}/{len(q1)}); "
            f"controls ok {ctl}/{len(rp)}"
        )
    if args.total_seconds:
        out.append("")
        out.append(f"total: {args.total_seconds} s")
    out.append("=" * 78)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
