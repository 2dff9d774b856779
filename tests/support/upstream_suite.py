"""llama.cpp's own test suite against the pinned source, patched and stock (anc/native.md), run by
``tests/native/test_upstream_suite.py``.

:func:`build_tests` compiles the generator ``test-llama-archs`` and the state tests of the pinned
source (an optional build of the same source, :func:`refspec.native.build.build_variant` of
:data:`TESTS_BUILD`); the rest runs them: the generator writes one small random-weight model per
architecture and variant, the state tests run on every model with the default layout
(``suite_default``) and once per layout through ``LLAMA_ATTN_LAYOUT`` (``run_state_test``, one
process per model, so that one model's failure cannot hide another's), and ``matrix`` decodes every
model greedily with every layout and micro-batch size ``q`` against its micro-batch-1 reference R.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refspec.core.errors import AdmissionError
from refspec.core.layouts import LAYOUTS
from refspec.native.build import BuildKind, BuildOptions, BuildResult, build_variant
from refspec.native.runtime import Context, ContextSpec, Model, greedy
from support.paths import TESTS

# llama.cpp's own tests of the pinned source (build_tests), in the two variants of every optional
# build: the model generator and the state tests that run on its models
TEST_TARGETS = ["test-llama-archs", "test-save-load-state", "test-recurrent-state-rollback", "test-batch-alloc"]


def tests_flags(options: BuildOptions) -> list[str]:
    """The build's CMake flags with llama.cpp's tests on."""
    flags = [f for f in options.cmake_flags() if not f.startswith("-DLLAMA_BUILD_TESTS=")]
    return flags + ["-DLLAMA_BUILD_TESTS=ON"]


TESTS_BUILD = BuildKind(tests_flags, TEST_TARGETS, "upstream tests")


def build_tests(
    options: BuildOptions | None = None, variant: str = "patched", *, jobs: int | None = None, quiet: bool = False
) -> BuildResult:
    """Build (or find cached) llama.cpp's own tests (:data:`TEST_TARGETS`) of the pinned source,
    ``stock`` or ``patched``, in a folder of their own with their own libraries next to them;
    ``BuildResult.tool(name)`` names each program."""
    return build_variant(TESTS_BUILD, options or BuildOptions(), variant, jobs=jobs, quiet=quiet)


STATE_TESTS = ("test-save-load-state", "test-recurrent-state-rollback")
BATCH_TEST = "test-batch-alloc"
GENERATOR = "test-llama-archs"
# the line the patched library writes to stderr (once per distinct reason) when the variable fails a context
REFUSAL = re.compile(r"LLAMA_ATTN_LAYOUT refused, context not created: (.+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _env(layout: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_ATTN_LAYOUT"}
    if layout is not None:
        env["LLAMA_ATTN_LAYOUT"] = layout
    return env


def _run(cmd: list[str], *, layout: str | None = None, timeout: float = 600) -> tuple[int, str, float]:
    """Run one program in a scratch folder of its own (the state tests write their state files
    to the working folder: two at once in one folder would read each other's)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="upstream-") as cwd:
        p = subprocess.run(
            ["nice", "-n", "10", *cmd],
            cwd=cwd,
            env=_env(layout),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    return p.returncode, ANSI.sub("", p.stdout + p.stderr), time.monotonic() - t0


SEED = 1  # the generator draws a random seed unless given one; with one its files are reproducible


def generate_models(build: BuildResult, out_dir: Path, seed: int = SEED) -> list[Path]:
    """``test-llama-archs -s SEED -o DIR``: one model per architecture and variant (dense, MoE)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rc, out, _ = _run([str(build.tool(GENERATOR)), "-s", str(seed), "-o", str(out_dir)])
    if rc != 0:
        raise RuntimeError(f"{GENERATOR} -o {out_dir} exited {rc}: {out[-2000:]}")
    return sorted(out_dir.glob("*.gguf"))


@dataclass
class Outcome:
    model: str  # file name, e.g. llama-dense.gguf
    test: str
    layout: str  # "" for the default (variable unset)
    status: str  # pass | refused | fail
    reason: str  # the refusal (refused), the last output lines (fail), "" (pass)
    rc: int
    seconds: float


def classify(rc: int, out: str) -> tuple[str, str]:
    """``pass`` (exit 0), ``refused`` (the library's refusal line, whatever the program did with its
    NULL context afterwards) or ``fail`` (anything else: an assertion, an abort, a wrong result)."""
    refusals = REFUSAL.findall(out)
    if rc == 0:
        return "pass", ""
    if refusals:
        return "refused", refusals[0].strip()
    tail = [ln for ln in out.strip().splitlines() if ln.strip()][-3:]
    return "fail", f"exit {rc}: " + " | ".join(tail)


def run_state_test(build: BuildResult, test: str, model: Path, layout: str | None, timeout: float = 300) -> Outcome:
    """One state test on one model (single-model mode), with ``LLAMA_ATTN_LAYOUT=layout`` or unset."""
    rc, out, dt = _run([str(build.tool(test)), "-m", str(model), "-t", "1"], layout=layout, timeout=timeout)
    status, reason = classify(rc, out)
    return Outcome(model.name, test, layout or "", status, reason, rc, round(dt, 2))


TABLE_ROW = re.compile(r"^(\S+\.gguf)((?:\s+(?:PASS|FAIL|SKIP))+)\s*$", re.M)
BATCH_FAILURES = re.compile(r"^failures\s*:\s*(\d+)", re.M)


def suite_default(build: BuildResult, models_dir: Path) -> dict[str, dict]:
    """The state tests over every model (``--models DIR``) and ``test-batch-alloc``, variable unset:
    per test its exit status, its table (model -> the status of each of its sub-tests), the counts
    of PASS, SKIP and FAIL over the table and its time."""
    out: dict[str, dict] = {}
    for test in STATE_TESTS:
        rc, text, dt = _run([str(build.tool(test)), "--models", str(models_dir), "-t", "1"], timeout=1800)
        table = {m: cells.split() for m, cells in TABLE_ROW.findall(text)}
        cells = [c for row in table.values() for c in row]
        counts = {k: cells.count(k) for k in ("PASS", "SKIP", "FAIL")}
        out[test] = {"rc": rc, "table": table, "counts": counts, "seconds": round(dt, 1), "tail": text[-1500:]}
    rc, text, dt = _run([str(build.tool(BATCH_TEST))], timeout=600)
    m = BATCH_FAILURES.search(text)
    out[BATCH_TEST] = {
        "rc": rc,
        "counts": {"failures": int(m.group(1)) if m else None},
        "seconds": round(dt, 1),
        "tail": text[-1500:],
    }
    return out


# --------------------------------------------------------------------------- the refspec matrix

N_PROMPT = 6  # prompt tokens
N_GEN = 8  # greedy tokens of R
QS = (1, 2, 3, 4)
MATRIX_COLUMNS = ("model", "layout", "q", "status", "first_index", "token_differs", "positions", "reason")


def _prompt(n_vocab: int) -> list[int]:
    return [(7 * i + 3) % n_vocab for i in range(N_PROMPT)]


def model_matrix(path: Path, layouts=LAYOUTS, qs=QS) -> list[dict]:
    """One model's rows: R (micro-batch 1, every token its own caller, ``mq``), then every layout and
    q: the same token sequence fed in callers of q tokens with the layout active in every phase
    (``llama_attn_set_layout``, role target, mask 15), every position's logits compared bit for bit
    with R's. ``reproduces``, ``refused`` (the admission message) or ``differs`` (the first position
    whose logits differ, and whether its greedy token does)."""
    m = Model(path)
    seq = _prompt(m.n_vocab)
    try:
        with Context(m, ContextSpec(n_ctx=64, n_batch=1, n_ubatch=1, threads=1)) as c:
            c.begin_request()
            ref = []
            for i in range(N_PROMPT + N_GEN - 1):
                ref.append(c.decode([seq[i]], i)[0].copy())
                if i + 1 >= len(seq):
                    seq.append(greedy(ref[-1]))
    except Exception as e:  # noqa: BLE001 - recorded: a model without a decoder reference
        return [dict(model=path.name, layout="", q=0, status="no reference", reason=f"{type(e).__name__}: {e}")]
    ref_arr = np.stack(ref)
    rows = []
    for layout in layouts:
        for q in qs:
            row = dict(model=path.name, layout=layout, q=q, positions=len(seq))
            try:
                spec = ContextSpec(n_ctx=64, n_batch=q, n_ubatch=q, threads=1, layout=layout, mask=15)
                with Context(m, spec) as c:
                    c.begin_request()
                    got = []
                    for p0 in range(0, len(seq), q):
                        got.extend(c.decode(seq[p0 : p0 + q], p0, outputs="all"))
                        c.set_phase("continuation")
            except AdmissionError as e:
                rows.append({**row, "status": "refused", "reason": str(e).split(": ", 1)[-1]})
                continue
            except Exception as e:  # noqa: BLE001 - recorded as a failure of the layout
                rows.append({**row, "status": "error", "reason": f"{type(e).__name__}: {e}"})
                continue
            diff = [i for i in range(len(ref_arr)) if ref_arr[i].tobytes() != got[i].tobytes()]
            if not diff:
                rows.append({**row, "status": "reproduces"})
            else:
                i = diff[0]
                rows.append(
                    {
                        **row,
                        "status": "differs",
                        "first_index": i,
                        "token_differs": int(greedy(ref_arr[i]) != greedy(got[i])),
                    }
                )
    return rows


def matrix(build: BuildResult, models: list[Path], timeout: float = 600, jobs: int = 2) -> list[dict]:
    """``model_matrix`` of every model, each in a process of its own against ``build``'s libraries
    (an abort is recorded as that model's ``error`` row, never the end of the matrix)."""
    import json
    import sys
    from concurrent.futures import ThreadPoolExecutor

    def one(path: Path) -> list[dict]:
        # the child imports this module as ``support.upstream_suite``: ``tests`` on its path
        path_var = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
        env = _env(None) | build.env() | {"PYTHONPATH": path_var}
        p = subprocess.run(
            ["nice", "-n", "10", sys.executable, "-m", "support.upstream_suite", str(path)],
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            tail = " | ".join(p.stderr.strip().splitlines()[-3:])
            return [dict(model=path.name, layout="", q=0, status="error", reason=f"exit {p.returncode}: {tail}")]
        return [json.loads(ln) for ln in lines]

    with ThreadPoolExecutor(max_workers=jobs) as ex:
        return [r for rows in ex.map(one, models) for r in rows]


def matrix_table(rows: list[dict]) -> str:
    """The matrix as CSV (``MATRIX_COLUMNS``), one row per model, layout and q."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=MATRIX_COLUMNS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k, "") for k in MATRIX_COLUMNS})
    return buf.getvalue()


if __name__ == "__main__":  # one model's matrix rows as JSON lines (run by ``matrix``)
    import json
    import sys

    for r in model_matrix(Path(sys.argv[1])):
        print(json.dumps(r), flush=True)
