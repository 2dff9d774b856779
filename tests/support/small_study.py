"""A small real study, run and sealed by the real workflow, for the tests that need a sealed
archive (``refspec compare``, ``refspec reproduce``) and for the workflow tests.

:func:`run_small_study` writes a config (:func:`small_study_config`) and runs ``refspec main`` on it
(Snakemake, as ``./run main`` does): the native build and the embedded family's model files from
the shared cache, real workers on the real SmolLM2 files, the assembled results sealed
(``sealed-data``), reported, sealed again (``archive``) and checked. The study is

* ``implementation``: R, M_qb, M_pq and C_pq on HumanEval/0 at cap 32, paired, sized by the cost
  model to a budget of :data:`SIZING_BUDGET_S` (two processes serving every arm, one pass: the
  qualified ratios, their intervals and the sizing row);
* ``replication``: the five E2 arms and the A/A twin ``C_qb_aa`` of C_qb on HumanEval/0 at cap 16,
  sized to three sessions (the session contrasts, the estimates and the A/A noise floor);
* the divergence screen: R on HumanEval/0-2 at cap 34, the unrepaired arms on at most two of them
  (:data:`SCREEN`);
* the state stages: the partition screen of HumanEval/2 (prefill only; A and U1 differ there, so
  it is the study input, :data:`PARTITION_SCREEN`), the prefill partition of the screen's input at
  cap 34 (U1 leaves A's endpoint at index 32) and the crosses of A and U1 on it in two processes.

The study runs into a temporary folder of the test session (nothing is cached between sessions:
every session tests the pipeline of its own checkout); a parallel run's processes share one
(:func:`shared_small_study`). The signing key is a throwaway one of that folder
(``REFSPEC_KEY_DIR``).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from .paths import REPO_ROOT

#: the campaigns of the small study, as changes of their definitions in config/campaigns/
CAMPAIGNS: dict[str, dict] = {
    "implementation": {
        "arms": ["R", "M_qb", "M_pq", "C_pq"],
        "panel": {"source": "humaneval", "tasks": "0"},
        "cap": 32,
        "sessions": 1,
        "warmup_cap": 2,
        "aa_arm": None,
    },
    "replication": {
        "panel": {"source": "humaneval", "tasks": "0"},
        "block_tasks": 1,
        "references_per_session": 1,
        "cap": 16,
        "gap_s": 0,
        "warmup_cap": 2,
        "aa_arm": "C_qb",
    },
}

#: the seconds each sized campaign of the small study may spend, as its cost model reckons them
#: (the default definitions' budgets, 240-300 s, buy the most processes and passes they can; these
#: buy the smallest designs that still give every interval: implementation 2 processes x 1 pass,
#: replication 3 sessions x 1 pass)
SIZING_BUDGET_S = {"implementation": 20, "replication": 40}


def sized_to(defn: dict, budget_s: float) -> dict:
    """A campaign definition whose cost model (``sizing``) may spend ``budget_s`` seconds (a
    definition without sizing is returned unchanged)."""
    if defn.get("sizing"):
        defn["sizing"] = dict(defn["sizing"], budget_s=budget_s)
    return defn


#: the state stages of the small study (the config's ``state``)
STATE = {
    "tasks": "screen",
    "cap": 34,
    "splits": [-1],
    "ub_sweep": [1],
    "repeats": 1,
    "pair": ["A", "U1"],
    "divergent": 1,
    "stable": 0,
    "cross_repeats": 2,
}


# the partition screen: HumanEval/2 prefilled by A, B, C, Sn-1 and U1; the study runs where A and U1 differ
PARTITION_SCREEN = {"tasks": "2", "ub_sweep": [1], "inputs": 1, "controls": 0}

# the divergence screen: R on HumanEval/0-2 at cap 34, then M0, C0 and R_prod in R's order of
# smallest margin until one task diverges (two tried at most), plus one stable control
SCREEN = {
    "panel": {"source": "humaneval", "tasks": "0-2"},
    "cap": 34,
    "arms": ["M0", "C0", "R_prod"],
    "want": 1,
    "budget": 2,
    "controls": 1,
}


def study_env(tmp: Path, without_tex: bool = False) -> dict[str, str]:
    """The environment of a workflow run in ``tmp``: this interpreter's folder first on PATH and a
    throwaway signing key under ``tmp/keys`` (outside the repository); ``without_tex``: the
    machine as it is before TeX is installed (no pdflatex on PATH)."""
    env = dict(os.environ)
    path = env.get("PATH", "")
    if without_tex:
        path = path_without(tmp / "no-tex-bin", "pdflatex", path)
    env["PATH"] = f"{Path(sys.executable).parent}:{path}"
    env["REFSPEC_KEY_DIR"] = str(tmp / "keys")
    return env


def path_without(shadow: Path, hidden: str, path: str) -> str:
    """A PATH of one folder linking every program of ``path`` (first wins) but ``hidden``."""
    shadow.mkdir(parents=True, exist_ok=True)
    for d in path.split(os.pathsep):
        if not d or not Path(d).is_dir():
            continue
        for exe in Path(d).iterdir():
            link = shadow / exe.name
            if exe.name != hidden and not link.exists() and not link.is_symlink():
                link.symlink_to(exe)
    return str(shadow)


def run_main(cfg_args: list[str], tmp: Path, without_tex: bool = False, timeout: int = 1200):
    """``./run main ARGS --cores 2`` (the same entry point, in this environment)."""
    return subprocess.run(
        [sys.executable, "-m", "refspec.cli", "main", *cfg_args, "--cores", "2"],
        cwd=REPO_ROOT,
        env=study_env(tmp, without_tex),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def small_study_config(tmp: Path) -> Path:
    """The small study's config (and its campaign definitions) under ``tmp``, results in ``tmp/res``."""
    defs = tmp / "defs"
    defs.mkdir(parents=True, exist_ok=True)
    for name, change in CAMPAIGNS.items():
        d = yaml.safe_load((REPO_ROOT / "config" / "campaigns" / f"{name}.yaml").read_text())
        d.update(change)
        sized_to(d, SIZING_BUDGET_S[name])
        (defs / f"{name}.yaml").write_text(yaml.safe_dump(d))
    cfg = {
        "family": "smollm2-135m",
        "threads": 1,
        "results": str(tmp / "res"),
        "panel": {"source": "humaneval", "tasks": "0-2"},
        "campaigns": {"run": list(CAMPAIGNS), "preset": "default", "definitions": str(defs)},
        "stages": {
            "audit": False,
            "replay": False,
            "partition": True,
            "crosses": True,
            "admission": False,
            "screen": True,
            "partition_screen": True,
        },
        "state": dict(STATE),
        "partition_screen": dict(PARTITION_SCREEN),
        "screen": dict(SCREEN),
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@dataclass(frozen=True)
class SmallStudy:
    """A sealed small study: its config, results folder and the numbers of its run."""

    tmp: Path
    config: Path
    results: Path
    seconds: float

    @property
    def sealed(self) -> Path:
        """The sealed data archive (what ``refspec compare`` and ``refspec reproduce`` read)."""
        return self.results / "sealed-data"

    @property
    def signer(self) -> Path:
        return self.results / "provenance" / "signer.pub"

    @property
    def env(self) -> dict[str, str]:
        return study_env(self.tmp)

    def size(self) -> tuple[int, int]:
        """Files and bytes of the sealed data archive."""
        files = [p for p in self.sealed.rglob("*") if p.is_file()]
        return len(files), sum(p.stat().st_size for p in files)

    def summary(self) -> str:
        n, b = self.size()
        return f"small study: sealed in {self.seconds:.0f} s, sealed-data {n} files, {b} bytes"


def run_small_study(tmp: Path) -> SmallStudy:
    """Run and seal the small study under ``tmp``; a failed run raises with the log's tail."""
    cfg = small_study_config(tmp)
    t0 = time.monotonic()
    r = run_main(["--configfile", str(cfg)], tmp)
    seconds = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"the small study failed (exit {r.returncode}):\n" + (r.stdout + r.stderr)[-6000:])
    study = SmallStudy(tmp, cfg, tmp / "res", seconds)
    if not (study.sealed / "SEAL.dsse.json").is_file():
        raise RuntimeError(f"the small study made no sealed archive at {study.sealed}")
    return study


def shared_small_study(tmp_path_factory) -> SmallStudy:
    """The session's small study, run once however many processes the suite runs in: the processes
    of a parallel run (pytest-xdist) share the parent of their temporary folders, and the first to
    take the lock there runs the study while the others wait and read it (a failed study raises in
    each, with its log's tail)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return run_small_study(tmp_path_factory.mktemp("small-study"))
    shared = tmp_path_factory.getbasetemp().parent
    folder = shared / "small-study"
    with open(shared / "small-study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        failed = shared / "small-study.failed"
        if failed.is_file():
            raise RuntimeError(failed.read_text())
        done = folder / "done.json"
        if done.is_file():
            seconds = json.loads(done.read_text())["seconds"]
            return SmallStudy(folder, folder / "config.yaml", folder / "res", seconds)
        try:
            study = run_small_study(folder)
        except RuntimeError as e:
            failed.write_text(str(e))
            raise
        done.write_text(json.dumps({"seconds": study.seconds}))
        return study
