"""Benchmark: the paired design against the fresh design, side by side on the same arms and tasks.

    ./run shell -c 'python bench/paired_vs_fresh.py --out /tmp/paired-vs-fresh [--processes 4] [--repeats 3] [--threads 1]'
    ./run shell -c 'python bench/paired_vs_fresh.py --analyze /tmp/paired-vs-fresh'

Both designs run the same arms (``--arms``, by default R and the target-only layouts M_qb, M_pq,
M_qh, M_gs, plus ``M_qb_aa``, the A/A twin of M_qb: the same recipe under its own name) on the
same HumanEval tasks at the same cap and threads (``--threads``: every arm's compute threads, as a
run's ``threads`` sets its campaigns'; default ``config/arms.yaml``'s), with real workers over
loopback:

* **fresh**: every process serves one arm (``--repeats`` passes over the tasks), as the timed
  campaigns do today; a contrast of two arms carries two processes' start-up luck.
* **paired**: every process loads the models once and serves every arm
  (:mod:`refspec.engines.worker.engine`, one context per arm), request by request. The requests
  come in rounds of one request per arm on one task; the arms' orders come in pairs of rounds, an
  order drawn per process and its reverse, as the campaigns draw them
  (:func:`refspec.campaigns.scheduler.process_orders`), so within each pair every arm takes the same
  mean position. Each arm's first request is the worker's registered warm-up (untimed).

The two designs alternate process by process (one paired process, then one fresh process per
arm, ...), so slow drift of the machine reaches both alike. Every endpoint is compared with R's.

It writes ``requests.parquet`` (one row per timed request) and ``paired_vs_fresh.json`` (the
variance components of log request time per design: between processes, within a process and,
for the paired design, the process-by-arm interaction; every ratio against M_qb and between
layouts with its 95 % interval, 90 % interval, verdict and detectable ratio in both designs;
the A/A twin's interval and each design's floor under the calibration rule,
:func:`refspec.core.stats.decision_floor`), prints the table and seals the run
(``--no-seal``: not) into ``OUT/archive``: a signed archive (``refspec verify OUT/archive
--pubkey OUT/signer.pub``) of the requests, the bridge table (``tables/bridge``: one row per
design and ratio, with ``agree``: whether the two designs' 95 % intervals overlap), the analysis,
the arms file, the settings as its plan, a ledger and a manifest of the build's libraries and the
models. Machines are shared: run it alone (no other heavy job), and never read a
Vulkan-on-CPU run as a GPU speed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from refspec.campaigns.scheduler import derive_rng, process_orders  # noqa: E402
from refspec.core import stats as S  # noqa: E402
from refspec.core.arms import load_arms, twin_name, twin_of  # noqa: E402
from refspec.core.panels import humaneval_tasks, parse_range  # noqa: E402
from refspec.core.paths import config_dir  # noqa: E402
from refspec.engines.worker.process import WorkerProcess, WorkerSpec  # noqa: E402
from refspec.native import build as native  # noqa: E402
from refspec.native.models import ensure_family  # noqa: E402

FAMILY = "smollm2-135m"
DEFAULT_ARMS = "R,M_qb,M_pq,M_qh,M_gs,M_qb_aa"
BASE = "M_qb"
# the contrasts reported: every arm against M_qb, and the layout pairs the paper compares
PAIRS = [("M_pq", "M_qh"), ("M_qh", "M_gs")]


def arms_file(out: Path, names: list[str], threads: int | None = None) -> Path:
    """config/arms.yaml plus the A/A twins named in ``names`` (the same recipe under the twin's name),
    every arm at ``threads`` compute threads where given (as a run's ``threads`` sets its campaigns')."""
    data = yaml.safe_load((config_dir() / "arms.yaml").read_text())
    for n in names:
        if n not in data["arms"] and n.endswith("_aa"):
            data["arms"][n] = dict(data["arms"][twin_of(n)])
    if threads:
        data["defaults"]["threads"] = int(threads)
        for recipe in data["arms"].values():
            recipe.pop("threads", None)
    path = out / "arms.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start(out, files, lib_dir, afile, worker_id, arms, warmup_cap):
    all_arms = load_arms(str(afile))
    spec = WorkerSpec(
        family=FAMILY,
        arm=all_arms[arms[0]],
        also_arms=tuple(all_arms[a] for a in arms[1:]),
        files=files,
        lib_dir=lib_dir,
        worker_id=worker_id,
        run_dir=out,
        arms_file=str(afile),
        warmup_cap=warmup_cap,
    )
    return WorkerProcess.start(spec)


def timed(w, design, process, arm, task, repeat, position, ids, cap) -> dict:
    c = w.complete(ids, cap, request_id=f"{process}/{position}", arm=arm)
    return {
        "design": design,
        "process": process,
        "arm": arm,
        "task_id": task,
        "repeat": repeat,
        "position": position,
        "t_ns": c.t_ns,
        "endpoint_sha256": c.endpoint.sha256,
        "n_tokens": c.endpoint.n,
    }


def run(args) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.arms.split(",")
    afile = arms_file(out, names, args.threads)
    build = native.current()
    files = ensure_family(FAMILY)
    tasks = humaneval_tasks(parse_range(args.tasks))
    rounds = [(t, r) for r in range(args.repeats) for t in range(len(tasks))]
    rows: list[dict] = []
    starts: list[float] = []  # seconds from a paired process's start to its ready file (load and warm-ups)
    prompts: dict[str, list[int]] = {}
    total = args.processes * len(args.designs.split(",")) * len(names) * len(rounds)
    t_start = time.monotonic()
    for p in range(args.processes):
        # the paired process: every arm, its orders drawn per process as the campaigns draw them
        orders = process_orders(names, len(rounds), derive_rng(args.seed, "paired-order", p))
        t0 = time.monotonic()
        # the contexts are created in the order of the process's first round, as a campaign's paired
        # worker creates them (refspec.campaigns.scheduler.paired_schedule), so the order is drawn too
        w = start(out, files, build.lib_dir, afile, f"paired-{p:02d}", orders[0], args.warmup_cap)
        starts.append(time.monotonic() - t0)
        try:
            for t in tasks:
                prompts.setdefault(t.task_id, w.tokenize(t.text, chat=True))
            pos = 0
            for (ti, rep), order in zip(rounds, orders):
                for arm in order:
                    task = tasks[ti].task_id
                    rows.append(timed(w, "paired", f"paired-{p:02d}", arm, task, rep, pos, prompts[task], args.cap))
                    pos += 1
        finally:
            w.stop(timeout=60)
        # the fresh processes of this round: one per arm, in a drawn order
        order = list(names) if "fresh" in args.designs else []
        derive_rng(args.seed, "fresh", p).shuffle(order)
        for arm in order:
            wid = f"fresh-{p:02d}-{arm}"
            w = start(out, files, build.lib_dir, afile, wid, [arm], args.warmup_cap)
            try:
                for pos, (ti, rep) in enumerate(rounds):
                    task = tasks[ti].task_id
                    rows.append(timed(w, "fresh", wid, arm, task, rep, pos, prompts[task], args.cap))
            finally:
                w.stop(timeout=60)
        done = len(rows)
        print(
            f"process round {p + 1}/{args.processes}: {done}/{total} requests, {time.monotonic() - t_start:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    pq.write_table(pa.Table.from_pylist(rows), out / "requests.parquet")
    (out / "settings.json").write_text(
        json.dumps({**vars(args), "paired_start_s": starts}, indent=1, sort_keys=True) + "\n"
    )
    return out


def _interval_record(iv90, iv95, floor) -> dict:
    return {
        "ratio": iv95.value,
        "lo95": iv95.lo,
        "hi95": iv95.hi,
        "lo90": iv90.lo,
        "hi90": iv90.hi,
        "units": iv95.units,
        "df": iv95.df,
        "verdict": S.decide_ratio(iv95, iv90, floor=floor),
        "detectable": S.detectable_ratio(iv95.half_width, floor=floor),
    }


def contrast(rows, design, num, den, floor=1.0) -> dict:
    """One ratio num/den in one design, with its intervals (processes the unit in both)."""
    mine = [r for r in rows if r["design"] == design]
    tasks = sorted({r["task_id"] for r in mine})
    if design == "paired":
        quads = [(r["process"], r["arm"], r["task_id"], r["t_ns"] / 1e9) for r in mine]
        c = list(S.process_contrasts(quads, num, den, tasks).values())
        iv95, iv90 = S.paired_interval(c), S.paired_interval(c, level=0.90)
    else:

        def blocks(arm):
            out: dict[str, list] = {}
            for r in mine:
                if r["arm"] == arm:
                    out.setdefault(r["process"], []).append((r["task_id"], r["t_ns"] / 1e9))
            return out

        iv95 = S.process_interval(blocks(num), blocks(den), tasks)
        iv90 = S.process_interval(blocks(num), blocks(den), tasks, level=0.90)
    return _interval_record(iv90, iv95, floor)


def aa_by_first_context(mine: list[dict], twin: str, base: str) -> dict:
    """The A/A contrast twin/base split by which of the two contexts its process created first (a
    paired worker creates its arms' contexts in the order of its first round): if where a context's
    buffers land made one of two identical recipes faster, the two halves would differ."""
    tasks = sorted({r["task_id"] for r in mine})
    first: dict[str, tuple[int, str]] = {}
    for r in mine:
        if r["arm"] in (twin, base) and (r["process"] not in first or r["position"] < first[r["process"]][0]):
            first[r["process"]] = (r["position"], r["arm"])
    quads = [(r["process"], r["arm"], r["task_id"], r["t_ns"] / 1e9) for r in mine]
    con = S.process_contrasts(quads, twin, base, tasks)
    out = {}
    for who in (twin, base):
        c = [v for proc, v in con.items() if first[proc][1] == who]
        if len(c) >= 2:
            iv = S.paired_interval(c)
            out[f"{who} first"] = {"ratio": iv.value, "lo95": iv.lo, "hi95": iv.hi, "processes": len(c)}
    return out


def analyze(folder: Path) -> dict:
    rows = pq.read_table(folder / "requests.parquet").to_pylist()
    arms = sorted({r["arm"] for r in rows})
    ref = {(r["task_id"]): r["endpoint_sha256"] for r in rows if r["arm"] == "R"}
    # without R among the arms there is nothing to compare with (None, not 0 matches)
    matches = (
        {a: sum(r["endpoint_sha256"] == ref.get(r["task_id"]) for r in rows if r["arm"] == a) for a in arms}
        if ref
        else None
    )
    result: dict = {"requests": len(rows), "matches_R": matches, "designs": {}}
    pairs = [(a, BASE) for a in arms if a != BASE] + [p for p in PAIRS if p[0] in arms and p[1] in arms]
    for design in ("fresh", "paired"):
        mine = [r for r in rows if r["design"] == design]
        if not mine:
            continue
        quads = [(r["process"], r["arm"], r["task_id"], r["t_ns"] / 1e9) for r in mine]
        comps = S.variance_components(quads, design)
        twin = twin_name(BASE)
        aa = contrast(rows, design, twin, BASE) if twin in arms else None
        # the calibration rule the campaigns freeze: F = 1 while the twin's interval holds 1
        floor = S.decision_floor(aa["lo95"], aa["hi95"]) if aa else 1.0
        result["designs"][design] = {
            "components": {
                "between": comps.between,
                "within": comps.within,
                "interaction": comps.interaction,
                "share_between": comps.share_between,
                "processes": comps.n_processes,
            },
            "aa": aa,
            "floor": floor,
            "ratios": {f"{n}/{d}": contrast(rows, design, n, d, floor) for n, d in pairs if n != twin},
            "aa_by_first_context": aa_by_first_context(mine, twin, BASE) if design == "paired" and aa else None,
            "seconds": sum(r["t_ns"] for r in mine) / 1e9,
        }
    return result


def show(res: dict) -> str:
    compared = res["matches_R"]
    said = f"endpoints matching R per arm: {compared}" if compared is not None else "no R among the arms: not compared"
    lines = [f"{res['requests']} timed requests; {said}"]
    for design, d in res["designs"].items():
        c = d["components"]
        inter = "n/a (confounded)" if c["interaction"] is None else f"{math.sqrt(c['interaction']):.4f}"
        lines.append(
            f"\n{design}: sd of log time between processes {math.sqrt(c['between']):.4f}, within "
            f"{math.sqrt(c['within']):.4f}, process x arm {inter}; share between {c['share_between']:.0%}; "
            f"{c['processes']} processes"
        )
        if d["aa"]:
            a = d["aa"]
            lines.append(f"  A/A {twin_name(BASE)}/{BASE} {a['ratio']:.4f} [{a['lo95']:.4f}, {a['hi95']:.4f}]")
        for half, a in (d.get("aa_by_first_context") or {}).items():
            lines.append(
                f"    {half} ({a['processes']} processes): {a['ratio']:.4f} [{a['lo95']:.4f}, {a['hi95']:.4f}]"
            )
        for name, r in d["ratios"].items():
            lines.append(
                f"  {name:14s} {r['ratio']:.4f} [{r['lo95']:.4f}, {r['hi95']:.4f}]  {r['verdict']:15s} "
                f"detectable {r['detectable']:.3f}"
            )
    return "\n".join(lines)


def bridge_rows(res: dict) -> list[dict]:
    """One row per design and ratio; ``agree``: the two designs' 95 % intervals of the ratio overlap."""
    designs = res["designs"]
    out = []
    for design, d in designs.items():
        other = designs.get("paired" if design == "fresh" else "fresh") or {}
        for name, r in d["ratios"].items():
            o = (other.get("ratios") or {}).get(name)
            out.append(
                {
                    "design": design,
                    "ratio_name": name,
                    **{
                        k: r[k]
                        for k in ("ratio", "lo95", "hi95", "lo90", "hi90", "units", "df", "verdict", "detectable")
                    },
                    "floor": d["floor"],
                    "agree": None if o is None else bool(r["lo95"] <= o["hi95"] and o["lo95"] <= r["hi95"]),
                }
            )
    return out


def seal_run(folder: Path, res: dict) -> Path:
    """``folder`` (a finished run) sealed into ``folder/archive`` (:func:`bench_archive.seal_bench`): the
    requests, the bridge table, the analysis, the arms file and the settings as its plan."""
    from bench_archive import json_bytes, seal_bench

    settings = json.loads((folder / "settings.json").read_text())
    tables = {
        "requests": pq.read_table(folder / "requests.parquet"),
        "bridge": pa.Table.from_pylist(bridge_rows(res)),
    }
    files = {
        "paired_vs_fresh.json": json_bytes(res),
        "plan.json": json_bytes({"campaign": "paired_vs_fresh", "settings": settings}),
        "arms.yaml": (folder / "arms.yaml").read_bytes(),  # the recipes, sealed as a file
    }
    return seal_bench(folder, "paired_vs_fresh", FAMILY, tables, files, {"requests": res["requests"]})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder of a new run")
    p.add_argument("--analyze", help="folder of an earlier run (writes nothing else)")
    p.add_argument("--arms", default=DEFAULT_ARMS)
    p.add_argument("--tasks", default="0-1", help="HumanEval indices")
    p.add_argument("--processes", type=int, default=4, help="processes per design (fresh: per arm)")
    p.add_argument("--repeats", type=int, default=3, help="passes over the tasks per arm and process")
    p.add_argument("--cap", type=int, default=32)
    p.add_argument("--warmup-cap", type=int, default=4)
    p.add_argument("--threads", type=int, help="compute threads of every arm (default: config/arms.yaml's)")
    p.add_argument("--seed", type=int, default=20261205)
    p.add_argument("--designs", default="fresh,paired", help="fresh,paired (both, alternating) or paired alone")
    p.add_argument("--no-seal", action="store_true", help="write the analysis, seal nothing")
    args = p.parse_args(argv)
    if not (args.out or args.analyze):
        p.error("--out or --analyze")
    folder = Path(args.analyze) if args.analyze else run(args)
    res = analyze(folder)
    (folder / "paired_vs_fresh.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    print(show(res))
    if not args.no_seal and not (folder / "archive").exists():
        print(f"sealed: {seal_run(folder, res)} (refspec verify it with --pubkey {folder / 'signer.pub'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
