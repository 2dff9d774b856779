"""Benchmark: where an A/A difference comes from, as a designed experiment on the real engine.

    ./run shell -c 'python bench/aa_cause.py --out /tmp/aa-cause [--repeats 8] [--cap 32]'
    ./run shell -c 'python bench/aa_cause.py --analyze /tmp/aa-cause'

One recipe (``M_qb``) runs as two arms, ``M_qb`` and its twin ``M_qb_aa``, beside ``R`` and the
speculative ``C_qb`` (which loads the draft model), in ``--repeats`` rounds of fresh workers (one
block per arm and round, each block a new process serving the panel once). The arm order is drawn
afresh per pair of rounds, so the same recipe runs at many schedule positions and after different
arms. The campaign is the real one (``refspec campaign implementation`` with this definition).

From the ``requests`` table it reports, for the recipe's blocks (both names pooled):

* the variance components of ``log t``: between workers (block means, after the task means) and
  within a worker (requests around their block mean), and the share between workers;
* the effect of the schedule position (slope of the block residual per position);
* the effect of the arm that ran before (after ``C_qb``, after ``R``, after the other name);
* the first request of a block against the later ones;
* the A/A contrast itself with its worker-level interval, in wall time and in CPU time.

Machines are shared: run it alone. It prints a table and writes ``aa_cause.json`` into the folder of
its own run (``--out``); ``--analyze`` reads a campaign folder (for example a default run's
``results/default/campaigns/implementation``) and writes nothing there (``--json PATH`` to keep it).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from refspec.core.stats import process_interval, t_quantile  # noqa: E402

RECIPE = ("M_qb", "M_qb_aa")


def definition(repeats: int, cap: int) -> dict:
    return {
        "campaign": "implementation",
        "description": "A/A cause: one recipe under two names beside R and C_qb, many fresh workers",
        "arms": ["R", "M_qb", "C_qb"],
        "panel": {"source": "humaneval", "tasks": "0-2"},
        "cap": cap,
        "repeats": repeats,
        "sessions": 1,
        "block_by": "arm_repeat",
        "warmup_cap": 4,
        "aa_arm": "M_qb",
    }


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its 95 % Welch interval."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
    d = statistics.fmean(a) - statistics.fmean(b)
    q = t_quantile(0.975, df)
    return d, d - q * se, d + q * se


def analyze(out: Path) -> dict:
    path = next(out.rglob("requests.parquet"))
    rows = [r for r in pq.read_table(path).to_pylist() if r["status"] == "ok" and r["t_ns"]]
    # the session's block order: position and predecessor of every block
    blocks = sorted({(r["session"], r["block"], r["arm"], r["worker"]) for r in rows})
    pos = {}
    prev = {}
    for i, (s, b, arm, w) in enumerate(blocks):
        pos[w] = b
        prev[w] = blocks[i - 1][2] if i and blocks[i - 1][0] == s else None
    res: dict = {"requests": path.as_posix(), "blocks": len(blocks)}
    for col in ("t_ns", "cpu_ns"):
        rec = [r for r in rows if r["arm"] in RECIPE and r.get(col)]
        if not rec:
            continue
        task_mean = defaultdict(list)
        for r in rec:
            task_mean[r["task_id"]].append(math.log(r[col]))
        tm = {t: statistics.fmean(v) for t, v in task_mean.items()}
        by_w = defaultdict(list)
        for r in rec:
            by_w[r["worker"]].append((r["order_index"], math.log(r[col]) - tm[r["task_id"]]))
        bm = {w: statistics.fmean(x for _, x in v) for w, v in by_w.items()}
        within = [x - bm[w] for w, v in by_w.items() for _, x in v]
        k = statistics.fmean(len(v) for v in by_w.values())
        s2_within = sum(x * x for x in within) / (len(within) - len(by_w))
        s2_means = statistics.variance(list(bm.values()))
        s2_between = max(0.0, s2_means - s2_within / k)
        ws = sorted(bm)
        xs = [pos[w] for w in ws]
        ys = [bm[w] for w in ws]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        resid = [y - my - slope * (x - mx) for x, y in zip(xs, ys)]
        se_slope = math.sqrt(sum(e * e for e in resid) / (len(xs) - 2) / sxx)
        after_spec = [bm[w] for w in ws if prev[w] == "C_qb"]
        after_other = [bm[w] for w in ws if prev[w] != "C_qb"]
        first = [x for v in by_w.values() for o, x in v if o == min(oo for oo, _ in v)]
        later = [x for v in by_w.values() for o, x in v if o != min(oo for oo, _ in v)]
        arm_blocks = {
            a: {
                w: [(r["task_id"], float(r[col])) for r in rec if r["worker"] == w]
                for w in {r["worker"] for r in rec if r["arm"] == a}
            }
            for a in RECIPE
        }
        iv = process_interval(arm_blocks["M_qb_aa"], arm_blocks["M_qb"], sorted(tm))
        out_c = {
            "workers": len(bm),
            "sd_between_workers": math.sqrt(s2_between),
            "sd_within_worker": math.sqrt(s2_within),
            "share_between": s2_between / (s2_between + s2_within) if s2_between + s2_within else 0.0,
            "position_slope_per_block": slope,
            "position_slope_ci": [
                slope - t_quantile(0.975, len(xs) - 2) * se_slope,
                slope + t_quantile(0.975, len(xs) - 2) * se_slope,
            ],
            "aa": {"value": iv.value, "lo": iv.lo, "hi": iv.hi, "workers_per_arm": iv.units},
        }
        if len(after_spec) >= 2 and len(after_other) >= 2:
            d, lo, hi = welch(after_spec, after_other)
            out_c["after_C_qb_minus_after_other"] = {"log": d, "ci": [lo, hi], "n": [len(after_spec), len(after_other)]}
        if len(first) >= 2 and len(later) >= 2:
            d, lo, hi = welch(first, later)
            out_c["first_request_minus_later"] = {"log": d, "ci": [lo, hi], "n": [len(first), len(later)]}
        res[col] = out_c
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="run the experiment into this folder")
    ap.add_argument("--analyze", type=Path, help="only analyze an earlier run's folder")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--cap", type=int, default=32)
    ap.add_argument("--json", type=Path, help="also write the analysis as JSON here")
    a = ap.parse_args()
    out = a.analyze or a.out
    if out is None:
        ap.error("give --out or --analyze")
    if a.analyze is None:
        out.mkdir(parents=True, exist_ok=False)
        d = out / "definition.yaml"
        d.write_text(yaml.safe_dump(definition(a.repeats, a.cap), sort_keys=False), encoding="utf-8")
        subprocess.run(
            ["refspec", "campaign", "implementation", "--definition", str(d), "--out", str(out), "--no-progress"],
            check=True,
        )
    res = analyze(out)
    if a.analyze is None:  # its own folder; an analyzed results folder is never written to
        (out / "aa_cause.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    for col in ("t_ns", "cpu_ns"):
        if col not in res:
            continue
        c = res[col]
        print(f"{col}: {c['workers']} workers of one recipe")
        print(
            f"  sd between workers {c['sd_between_workers']:.4f}, within a worker {c['sd_within_worker']:.4f} (log), share between {c['share_between']:.2f}"
        )
        lo, hi = c["position_slope_ci"]
        print(f"  position: {c['position_slope_per_block']:+.5f} per block [{lo:+.5f}, {hi:+.5f}]")
        for k in ("after_C_qb_minus_after_other", "first_request_minus_later"):
            if k in c:
                print(f"  {k}: {c[k]['log']:+.4f} [{c[k]['ci'][0]:+.4f}, {c[k]['ci'][1]:+.4f}] n={c[k]['n']}")
        aa = c["aa"]
        print(
            f"  A/A M_qb_aa/M_qb {aa['value']:.4f} [{aa['lo']:.4f}, {aa['hi']:.4f}], {aa['workers_per_arm']} workers per arm"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
