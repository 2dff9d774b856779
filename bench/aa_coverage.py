"""Benchmark: does the paired design's A/A interval hold 1 as often as its 95 % says?

    ./run shell -c 'python bench/aa_coverage.py --out /tmp/aa-coverage [--replays 10] [--recipes M_qb,C_qb]'
    ./run shell -c 'python bench/aa_coverage.py --analyze /tmp/aa-coverage'

On a GPU host ``tests/gpu/check.sh`` runs it with the device check's config (``--config``) on E2's arms.

For every recipe of ``--recipes`` it runs the real implementation campaign (``refspec campaign
implementation`` with a definition of its own, the paired design) with that recipe as ``aa_arm``
beside ``--arms``, for ``--replays`` x ``--per-replay`` processes of one pass over the panel (the
default campaign's size: 3 processes of one pass over HumanEval/0-1 at cap 32). Each consecutive
group of ``--per-replay`` processes is one *replay*: the A/A interval ``X_aa/X`` a campaign of that
size would report (:func:`refspec.core.stats.paired_interval` over its process contrasts).

It reports, per recipe and pooled:

* **coverage**: the fraction of replays whose 95 % interval holds 1, with its exact
  (Clopper-Pearson) 95 % interval ``[B(a/2; k, n-k+1), B(1-a/2; k+1, n-k)]``, ``B`` the beta
  quantile (:func:`beta_quantile`, bisection of the regularized incomplete beta);
* **the systematic part**: the mean process contrast over every process of the recipe with its t
  interval (a bias that a 3-process interval cannot see shows here), and the sign count;
* **where it would come from**: the mean contrast split by which of the two contexts the process
  created first (the first round's order), and the within-round effect of the twin running before
  or after its arm (per process: the mean of ``log t_twin - log t_arm`` over rounds where the twin
  ran first, minus the same over rounds where it ran second; t interval over processes).

The table of replays (``aa_coverage.parquet``: recipe, replay, processes, value, lo, hi, holds) and
the analysis (``aa_coverage.json``) are written into ``OUT``; unless ``--no-seal`` the run is sealed
into ``OUT/archive`` (``refspec verify OUT/archive --pubkey OUT/signer.pub``): the replay table,
each recipe campaign's requests table and plan, the analysis, a ledger and a manifest of the
build's libraries and the models. Machines are shared: run it alone (about 20 s a process on a
2-core VM with the default arms).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from refspec.core import stats as S  # noqa: E402
from refspec.core.arms import twin_name  # noqa: E402
from refspec.core.tables import PARQUET_WRITE  # noqa: E402

FAMILY = "smollm2-135m"


def definition(recipe: str, arms: list[str], processes: int, cap: int, tasks: str, seed: int) -> dict:
    return {
        "campaign": "implementation",
        "description": f"A/A coverage: {recipe} and its twin beside {', '.join(arms)}, {processes} processes",
        "arms": arms,
        "panel": {"source": "humaneval", "tasks": tasks},
        "cap": cap,
        "design": "paired",
        "processes": processes,
        "repeats": 1,
        "sessions": 1,
        "block_by": "arm_repeat",
        "warmup_cap": 4,
        "seed": seed,
        "aa_arm": recipe,
    }


# --------------------------------------------------------------------------- statistics


def beta_quantile(p: float, a: float, b: float) -> float:
    """``x`` with ``I_x(a, b) = p`` (bisection to the last bit of the regularized incomplete beta)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        if S._betai(a, b, mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of ``k`` successes in ``n``."""
    a = 1.0 - level
    lo = 0.0 if k == 0 else beta_quantile(a / 2.0, k, n - k + 1)
    hi = 1.0 if k == n else beta_quantile(1.0 - a / 2.0, k + 1, n - k)
    return lo, hi


def timed_rows(path: Path) -> list[dict]:
    return [
        r for r in pq.read_table(path).to_pylist() if r["status"] == "ok" and r["t_ns"] and r["task_id"] != "warmup"
    ]


def rounds_of(rows: list[dict]) -> dict[str, list[list[dict]]]:
    """Per process (worker), its rounds in order: the requests of one task, cap and repeat."""
    by: dict[str, dict[tuple, list[dict]]] = {}
    for r in sorted(rows, key=lambda r: (r["worker"], r["order_index"])):
        by.setdefault(r["worker"], {}).setdefault((r["cap"], r["repeat"], r["task_id"]), []).append(r)
    return {w: list(rs.values()) for w, rs in by.items()}


def _mean_ci(xs: list[float]) -> dict:
    if len(xs) < 2:
        return {"n": len(xs), "mean": xs[0] if xs else None, "lo": None, "hi": None}
    iv = S.unit_interval(xs, unit="process", units="processes")
    return {"n": len(xs), "mean": iv.log_value, "lo": math.log(iv.lo), "hi": math.log(iv.hi)}


def position_effects(rows: list[dict]) -> dict:
    """The mean residual of ``log t`` (less its arm-and-task mean over every process) by the request's
    position in its round and by the arm that ran just before it in the process ("none": the first
    timed request of the process), each with a t interval over the processes (one mean per process)."""
    cell: dict[tuple, list[float]] = {}
    for r in rows:
        cell.setdefault((r["arm"], r["task_id"]), []).append(math.log(r["t_ns"]))
    mean = {k: sum(v) / len(v) for k, v in cell.items()}
    by_pos: dict[int, dict[str, list[float]]] = {}
    by_prev: dict[str, dict[str, list[float]]] = {}
    for w, rounds in rounds_of(rows).items():
        prev = "none"
        for rd in rounds:
            for i, r in enumerate(rd):
                z = math.log(r["t_ns"]) - mean[(r["arm"], r["task_id"])]
                by_pos.setdefault(i, {}).setdefault(w, []).append(z)
                by_prev.setdefault(prev, {}).setdefault(w, []).append(z)
                prev = r["arm"]

    def per_process(d: dict[str, list[float]]) -> dict:
        return _mean_ci([sum(v) / len(v) for v in d.values()])

    return {
        "position": {str(i): per_process(d) for i, d in sorted(by_pos.items())},
        "after": {a: per_process(d) for a, d in sorted(by_prev.items())},
    }


def analyze_recipe(rows: list[dict], recipe: str, per_replay: int) -> dict:
    twin = twin_name(recipe)
    tup = [(r["worker"], r["arm"], r["task_id"], float(r["t_ns"])) for r in rows]
    c = S.process_contrasts(tup, twin, recipe)
    procs = sorted(c)
    replays = []
    for i in range(len(procs) // per_replay):
        group = procs[i * per_replay : (i + 1) * per_replay]
        iv = S.paired_interval({p: c[p] for p in group})
        replays.append(
            {"replay": i + 1, "processes": ",".join(group), "value": iv.value, "lo": iv.lo, "hi": iv.hi}
            | {"holds": bool(iv.lo <= 1.0 <= iv.hi)}
        )
    first, second, order_effect = [], [], []
    for w, rounds in rounds_of(rows).items():
        if w not in c:
            continue
        created = [r["arm"] for r in rounds[0]]
        (first if created.index(twin) < created.index(recipe) else second).append(c[w])
        d = {True: [], False: []}
        for rd in rounds:
            by = {r["arm"]: r for r in rd}
            if twin in by and recipe in by:
                d[by[twin]["order_index"] < by[recipe]["order_index"]].append(
                    math.log(by[twin]["t_ns"]) - math.log(by[recipe]["t_ns"])
                )
        if d[True] and d[False]:
            order_effect.append(sum(d[True]) / len(d[True]) - sum(d[False]) / len(d[False]))
    k = sum(r["holds"] for r in replays)
    vals = [c[p] for p in procs]
    return {
        "recipe": recipe,
        "processes": len(procs),
        "replays": replays,
        "holds": k,
        "coverage": k / len(replays) if replays else None,
        "coverage_ci": clopper_pearson(k, len(replays)) if replays else None,
        "pooled": _mean_ci(vals),
        "below_one": sum(v < 0 for v in vals),
        "twin_context_first": _mean_ci(first),
        "arm_context_first": _mean_ci(second),
        "twin_runs_first_minus_second": _mean_ci(order_effect),
        **position_effects(rows),
    }


def analyze(out: Path, per_replay: int) -> dict:
    recipes = []
    for d in sorted(p for p in out.iterdir() if (p / "definition.yaml").is_file()):
        recipe = yaml.safe_load((d / "definition.yaml").read_text())["aa_arm"]
        rows = timed_rows(next(d.rglob("requests.parquet")))
        recipes.append(analyze_recipe(rows, recipe, per_replay))
    allrep = [r for x in recipes for r in x["replays"]]
    k = sum(r["holds"] for r in allrep)
    return {
        "per_replay": per_replay,
        "recipes": recipes,
        "replays": len(allrep),
        "holds": k,
        "coverage": k / len(allrep) if allrep else None,
        "coverage_ci": clopper_pearson(k, len(allrep)) if allrep else None,
    }


def _fmt(m: dict) -> str:
    if m["lo"] is None:
        return f"n {m['n']}"
    return f"{math.exp(m['mean']):.4f} [{math.exp(m['lo']):.4f}, {math.exp(m['hi']):.4f}] over {m['n']}"


def report(res: dict) -> str:
    lines = [f"A/A coverage: replays of {res['per_replay']} processes (one pass over the panel each)"]
    for x in res["recipes"]:
        lo, hi = x["coverage_ci"]
        lines += [
            f"{x['recipe']}: {x['holds']}/{len(x['replays'])} replays hold 1 ({x['coverage']:.3f}, exact 95 % [{lo:.3f}, {hi:.3f}])",
            f"  every process pooled: twin/arm {_fmt(x['pooled'])} (below 1: {x['below_one']})",
            f"  twin's context created first: {_fmt(x['twin_context_first'])}; the arm's: {_fmt(x['arm_context_first'])}",
            f"  twin running first in a round, less running second (ratio): {_fmt(x['twin_runs_first_minus_second'])}",
        ]
        lines.append(
            "  log-time residual (as a ratio) by position in the round: "
            + ", ".join(f"{k}: {_fmt(m)}" for k, m in x["position"].items())
        )
        lines.append("  ... by the arm just before: " + ", ".join(f"{k}: {_fmt(m)}" for k, m in x["after"].items()))
        for r in x["replays"]:
            mark = "holds" if r["holds"] else "EXCLUDES 1"
            lines.append(f"    replay {r['replay']:2d}: {r['value']:.4f} [{r['lo']:.4f}, {r['hi']:.4f}] {mark}")
    lo, hi = res["coverage_ci"]
    lines.append(
        f"all: {res['holds']}/{res['replays']} replays hold 1 ({res['coverage']:.3f}, exact 95 % [{lo:.3f}, {hi:.3f}])"
    )
    return "\n".join(lines) + "\n"


def replay_rows(res: dict) -> list[dict]:
    return [{"recipe": x["recipe"], **r} for x in res["recipes"] for r in x["replays"]]


def seal_run(out: Path, res: dict, settings: dict) -> Path:
    """``out`` sealed into ``out/archive`` (:func:`bench_archive.seal_bench`): the replay table, each
    recipe campaign's requests and plan, the analysis and the settings."""
    from bench_archive import json_bytes, seal_bench

    tables = {"aa_coverage": pa.Table.from_pylist(replay_rows(res))}
    files = {
        "aa_coverage.json": json_bytes(res),
        "plan.json": json_bytes({"campaign": "aa_coverage", "settings": settings}),
    }
    for x in res["recipes"]:
        src = out / x["recipe"]
        tables[f"requests_{x['recipe']}"] = pq.read_table(next(src.rglob("requests.parquet")))
        files[f"plan_{x['recipe']}.json"] = next(src.rglob("plan.json")).read_bytes()
    return seal_bench(out, "aa_coverage", FAMILY, tables, files, {"replays": res["replays"]})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder of a new run")
    p.add_argument("--analyze", type=Path, help="folder of an earlier run (prints, writes nothing)")
    p.add_argument("--recipes", default="M_qb,C_qb", help="the arms run with a twin, one campaign each")
    p.add_argument("--arms", default="R,M_qb,C_qb", help="the campaign's arms (each recipe among them)")
    p.add_argument("--replays", type=int, default=10, help="replays per recipe")
    p.add_argument("--per-replay", type=int, default=3, help="processes per replay (the default campaign's)")
    p.add_argument("--cap", type=int, default=32)
    p.add_argument("--tasks", default="0-1", help="HumanEval indices")
    p.add_argument("--seed", type=int, default=20261207)
    p.add_argument("--config", help="workflow config of the campaigns (default config/config.yaml; a GPU host's)")
    p.add_argument("--no-seal", action="store_true")
    a = p.parse_args(argv)
    if (a.out is None) == (a.analyze is None):
        p.error("give --out or --analyze")
    if a.analyze:
        print(report(analyze(a.analyze, a.per_replay)), end="")
        return 0
    arms = a.arms.split(",")
    settings = vars(a) | {"out": str(a.out), "analyze": None}
    a.out.mkdir(parents=True, exist_ok=False)
    for i, recipe in enumerate(a.recipes.split(",")):
        if recipe not in arms:
            p.error(f"recipe {recipe} is not one of --arms")
        d = a.out / recipe
        d.mkdir()
        defn = definition(recipe, arms, a.replays * a.per_replay, a.cap, a.tasks, a.seed + i)
        (d / "definition.yaml").write_text(yaml.safe_dump(defn, sort_keys=False), encoding="utf-8")
        cmd = ["refspec", "campaign", "implementation", "--definition", str(d / "definition.yaml"), "--out", str(d)]
        cmd += ["--config", a.config] if a.config else []
        subprocess.run(cmd, check=True)
    res = analyze(a.out, a.per_replay)
    (a.out / "aa_coverage.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    pq.write_table(pa.Table.from_pylist(replay_rows(res)), a.out / "aa_coverage.parquet", **PARQUET_WRITE)
    print(report(res), end="")
    if not a.no_seal:
        print(f"sealed: {seal_run(a.out, res, settings)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
