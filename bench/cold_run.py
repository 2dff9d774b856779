"""Benchmark: the two README commands as a newcomer runs them, step by step.

    python3 bench/cold_run.py run  --command main --out cold-main.json [--cold] [--repo .] [--keep-archive DIR]
    python3 bench/cold_run.py run  --command test --out cold-test.json [--cold]
    python3 bench/cold_run.py table cold-main.json [other.json]

``run`` clones the repository's committed HEAD into a temporary folder (a fresh clone: no
``results/``, no ``.snakemake/``) and runs ``./run main`` or ``./run test`` there, timing the whole
command (wall, and the CPU time of all its child processes from ``getrusage``). With ``--cold`` the
caches start empty: ``REFSPEC_CACHE`` (the virtual environment, the native builds, the model files),
pip's and uv's download caches are fresh temporary folders, as on a new machine; without it the
command uses the caches this machine already has. It then reads:

* ``main``: Snakemake's benchmark file of every rule (``results/<study>/benchmarks/*.tsv``: wall
  seconds ``s`` and ``cpu_time``; rules that share the two cores overlap, so their sum exceeds
  the whole), and the set-up before the workflow (from the command's start to the first job time
  stamp Snakemake prints, to the second);
* ``test``: pytest's ``--durations`` lines (each test's setup, call and teardown seconds), summed per
  test module, the ten slowest tests (``slowest_tests``, the same sums per test), and the set-up
  before pytest (the lint, the Debian packages, the builds: the wall time less pytest's own total).

It writes ``--out`` (JSON: the command, whether cold, the machine's cores, the total wall and CPU
seconds and one row per step) and prints the table. ``table`` prints one run's table, or two runs'
side by side with the ratio after/before of every step both have (a before/after on one machine),
wall and CPU seconds. Both lead with the sums of a main run's timed campaigns (the ``campaign_*``
rules, which run alone and spend their sized budgets) and of its other rules, or of a test run's
modules: what a cut can reach is read there first.
Run nothing else on the machine meanwhile: the steps are timed, not only counted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DURATION = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+((\S+?)::.+?)\s*$")
SLOWEST = 10
PYTEST_TOTAL = re.compile(r"^=*\s*\d+ (?:passed|failed).* in ([0-9.]+)s")
# the time stamp Snakemake prints before each job, in local time: "[Sun Dec  6 21:19:52 2026]"
JOB_STAMP = re.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")


def _setup_step(log: str, started: float) -> dict | None:
    """The set-up before the workflow: from the command's start to Snakemake's first job stamp (whole
    seconds; the virtual environment, the keys, the checks ``./run main`` makes before Snakemake)."""
    for line in log.splitlines():
        m = JOB_STAMP.match(line.strip())
        if m:
            first = time.mktime(time.strptime(" ".join(m.group(1).split()), "%b %d %H:%M:%S %Y"))
            return {"step": "set-up before the workflow", "wall_s": max(0.0, first - started), "cpu_s": None}
    return None


def _clone(repo: Path, dst: Path) -> None:
    subprocess.run(["git", "clone", "-q", str(repo), str(dst)], check=True)


def _env(cache: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if cache is not None:
        env["REFSPEC_CACHE"] = str(cache / "refspec")
        env["PIP_CACHE_DIR"] = str(cache / "pip")
        env["UV_CACHE_DIR"] = str(cache / "uv")
    return env


def _rule_steps(clone: Path) -> list[dict]:
    rows = []
    for tsv in sorted(clone.glob("results/*/benchmarks/*.tsv")):
        lines = tsv.read_text(encoding="utf-8").splitlines()
        if len(lines) < 2:
            continue
        head, vals = lines[0].split("\t"), lines[-1].split("\t")
        rec = dict(zip(head, vals))
        cpu = rec.get("cpu_time", "NA")
        rows.append(
            {
                "step": f"rule {tsv.stem}",
                "wall_s": float(rec["s"]),
                "cpu_s": float(cpu) if cpu not in ("NA", "") else None,
            }
        )
    return rows


def _durations(log: str, group: int) -> list[tuple[str, float]]:
    """pytest's ``--durations`` lines summed (setup, call and teardown) per test (``group`` 3) or per
    test module (``group`` 4), the slowest first."""
    total: dict[str, float] = {}
    for line in log.splitlines():
        m = DURATION.match(line)
        if m:
            total[m.group(group)] = total.get(m.group(group), 0.0) + float(m.group(1))
    return sorted(total.items(), key=lambda kv: -kv[1])


def _test_steps(log: str) -> list[dict]:
    return [{"step": f"tests {mod}", "wall_s": s, "cpu_s": None} for mod, s in _durations(log, 4)]


def _slowest_tests(log: str) -> list[dict]:
    return [{"test": t, "wall_s": s} for t, s in _durations(log, 3)[:SLOWEST]]


def _pytest_setup_step(log: str, wall: float) -> dict | None:
    """The set-up before pytest (lint, Debian packages, builds, models): the command's wall time less
    the seconds pytest's last summary line reports."""
    totals = [float(m.group(1)) for m in map(PYTEST_TOTAL.match, log.splitlines()) if m]
    return {"step": "set-up before pytest", "wall_s": max(0.0, wall - totals[-1]), "cpu_s": None} if totals else None


def run(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    with tempfile.TemporaryDirectory(prefix="refspec-cold-") as tmp:
        clone = Path(tmp) / "clone"
        _clone(repo, clone)
        cache = Path(tmp) / "cache" if args.cold else None
        extra = ["--durations", "0"] if args.command == "test" else []
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        t0 = time.monotonic()
        p = subprocess.run(
            ["./run", args.command, *extra],
            cwd=clone,
            env=_env(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        (Path(args.out).with_suffix(".log")).write_text(p.stdout, encoding="utf-8")
        steps = _rule_steps(clone) if args.command == "main" else _test_steps(p.stdout)
        setup = _setup_step(p.stdout, started) if args.command == "main" else _pytest_setup_step(p.stdout, wall)
        steps = ([setup] if setup else []) + steps
        inner = sum(s["wall_s"] for s in steps if s["step"].startswith("rule ")) if args.command == "main" else None
        if args.keep_archive and args.command == "main":  # the sealed archive, for its tables
            for archive in clone.glob("results/*/archive"):
                shutil.copytree(archive, Path(args.keep_archive) / archive.parent.name, symlinks=True)
        doc = {
            "command": f"./run {args.command}",
            "cold": bool(args.cold),
            "commit": subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True
            ).stdout.strip(),
            "cores": len(os.sched_getaffinity(0)),
            "exit": p.returncode,
            "wall_s": wall,
            "cpu_s": cpu,
            "rules_wall_s": inner,
            "steps": steps,
        }
        if args.command == "test":
            doc["slowest_tests"] = _slowest_tests(p.stdout)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(table([doc]))
    return 0 if p.returncode == 0 else 1


def _read_run(path: Path) -> dict:
    """A run's JSON; a test run written before ``slowest_tests`` and the set-up row existed gets them
    from its log, which ``run`` writes beside it."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    log = path.with_suffix(".log")
    if doc["command"] == "./run test" and log.is_file():
        text = log.read_text(encoding="utf-8", errors="replace")
        doc.setdefault("slowest_tests", _slowest_tests(text))
        if not any(s["step"] == "set-up before pytest" for s in doc["steps"]):
            setup = _pytest_setup_step(text, doc["wall_s"])
            doc["steps"] = ([setup] if setup else []) + doc["steps"]
    return doc


def _sums(steps: list[dict]) -> list[dict]:
    """The sums of the steps by kind: a main run's timed campaigns and its other rules, a test run's
    modules (rules overlap on the cores, so a sum is work, not wall time)."""
    kinds = (
        ("sum: timed campaigns (rules campaign_*)", lambda n: n.startswith("rule campaign_")),
        ("sum: other rules", lambda n: n.startswith("rule ") and not n.startswith("rule campaign_")),
        ("sum: test modules", lambda n: n.startswith("tests ")),
    )
    out = []
    for label, member in kinds:
        mine = [s for s in steps if member(s["step"])]
        if mine:
            cpus = [s["cpu_s"] for s in mine]
            cpu = None if any(c is None for c in cpus) else sum(cpus)
            out.append({"step": label, "wall_s": sum(s["wall_s"] for s in mine), "cpu_s": cpu})
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def table(docs: list[dict]) -> str:
    """One run's steps, or two runs' side by side with the ratio after/before."""
    lines = []
    for d in docs:
        lines.append(
            f"{d['command']} ({'cold' if d['cold'] else 'warm caches'}, {d['cores']} cores, commit "
            f"{d['commit'][:10]}, exit {d['exit']}): wall {d['wall_s']:.0f} s, CPU {d['cpu_s']:.0f} s"
        )
    if len(docs) == 1:
        lines.append(f"{'step':<48} {'wall s':>9} {'cpu s':>9}")
        for s in _sums(docs[0]["steps"]) + docs[0]["steps"]:
            lines.append(f"{s['step']:<48} {_fmt(s['wall_s']):>9} {_fmt(s['cpu_s']):>9}")
        for t in docs[0].get("slowest_tests", []):
            lines.append(f"slowest test {t['wall_s']:>8.1f}  {t['test']}")
        return "\n".join(lines)
    a, b = docs
    a_steps, b_steps = _sums(a["steps"]) + a["steps"], _sums(b["steps"]) + b["steps"]
    bs = {s["step"]: s for s in b_steps}
    lines.append(
        f"{'step':<48} {'before s':>9} {'after s':>9} {'after/before':>13} {'before cpu':>11} {'after cpu':>10}"
    )
    rows = [("whole command", a["wall_s"], b["wall_s"], a["cpu_s"], b["cpu_s"])]
    rows += [
        (s["step"], s["wall_s"], bs[s["step"]]["wall_s"], s["cpu_s"], bs[s["step"]]["cpu_s"])
        for s in a_steps
        if s["step"] in bs
    ]
    for name, x, y, cx, cy in rows:
        ratio = y / x if x else float("nan")
        lines.append(f"{name:<48} {x:>9.1f} {y:>9.1f} {ratio:>13.3f} {_fmt(cx):>11} {_fmt(cy):>10}")
    only = [s["step"] for s in b["steps"] if s["step"] not in {t["step"] for t in a["steps"]}]
    if only:
        lines.append("only after: " + ", ".join(only))
    for label, d in (("before", a), ("after", b)):
        if d.get("slowest_tests"):
            lines.append(f"the {len(d['slowest_tests'])} slowest tests {label} (setup + call + teardown, s):")
            lines += [f"  {t['wall_s']:>8.1f}  {t['test']}" for t in d["slowest_tests"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("--command", choices=("main", "test"), required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--cold", action="store_true", help="empty caches (a new machine)")
    r.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    r.add_argument("--keep-archive", metavar="DIR", help="main: copy each sealed archive into DIR/<study>")
    t = sub.add_parser("table")
    t.add_argument("runs", nargs="+")
    args = ap.parse_args(argv)
    if args.what == "run":
        return run(args)
    if len(args.runs) > 2:
        ap.error("table takes one run or two (before, after)")
    print(table([_read_run(Path(p)) for p in args.runs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
