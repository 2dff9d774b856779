"""Time per generated token: refspec's Python speculative transaction versus llama.cpp's
own C++ ``llama-speculative-simple``, built from the same pinned source, with the same
models, k, prompts, thread count and greedy sampling, measured side by side in one run.

Each (task, repeat) runs the C++ program and then the Python transaction, alternating
which goes first, so that drifts of a shared machine hit both. Time per token is the
whole request (prompt processing of target and draft plus generation) divided by the
generated tokens. The script prints the medians and the ratio Python / C++.

    python bench/spec_python_vs_cpp.py --tasks 0-3 --cap 128 --k 3 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from refspec.core.arms import load_arms  # noqa: E402
from refspec.core.panels import humaneval_tasks, parse_range, prompt_tokens  # noqa: E402
from refspec.engine.transaction import ArmRunner  # noqa: E402
from refspec.native import build as native
from refspec.native import runtime
from refspec.native.models import ensure_family  # noqa: E402

ENC = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
DEC = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")


def run_cpp(
    tool: Path,
    lib_dir: Path,
    target: Path,
    draft: Path,
    prompt: str,
    cap: int,
    k: int,
    threads: int,
    gpu_layers: int = 0,
) -> tuple[float, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
        pfile = f.name
    try:
        cmd = [
            str(tool),
            "-m",
            str(target),
            "-md",
            str(draft),
            "-f",
            pfile,
            "-n",
            str(cap),
            "-c",
            "2048",
            "-t",
            str(threads),
            "-td",
            str(threads),
            "-fa",
            "off",
            "-ngl",
            str(gpu_layers),
            "-ngld",
            str(gpu_layers),
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            str(k),
            "--spec-draft-p-min",
            "0",
            "--temp",
            "0",
            "--top-k",
            "1",
            "--seed",
            "1",
        ]
        env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir))
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    finally:
        os.unlink(pfile)
    out = r.stdout + r.stderr
    enc, dec = ENC.search(out), DEC.search(out)
    if r.returncode != 0 or not enc or not dec:
        raise RuntimeError(f"llama-speculative-simple failed (exit {r.returncode}):\n{out[-3000:]}")
    return float(enc.group(2)) + float(dec.group(2)), int(dec.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="0-3")
    ap.add_argument("--cap", type=int, default=128)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft", default="q4_1")
    ap.add_argument("--config", help="workflow config (its native backend and gpu_layers; default config/config.yaml)")
    ap.add_argument("--gpu-layers", type=int, help="n_gpu_layers of both programs (default: the config's gpu_layers)")
    args = ap.parse_args()

    from refspec.core.config import gpu_layers, load_config

    cfg = load_config(args.config)
    ngl = args.gpu_layers if args.gpu_layers is not None else gpu_layers(cfg)
    build = native.current(cfg)
    llama_cpp = runtime.load(build.lib_dir)
    del llama_cpp
    fam = ensure_family("smollm2-135m")
    d = fam.draft(args.draft)
    tm = runtime.Model(fam.target.path, sha256=fam.target.sha256, n_gpu_layers=ngl)
    dm = runtime.Model(d.path, sha256=d.sha256, n_gpu_layers=ngl)
    print(
        f"both programs: n_gpu_layers {ngl}; the Python target is on {tm.placement['device']} "
        f"({tm.placement['offloaded']}/{tm.placement['offloadable']} layers)",
        flush=True,
    )
    # the C++ program's recipe: default micro-batch, native attention, k drafted tokens
    arm = load_arms()["C0"].with_(ub=512, k=args.k, cap=args.cap, threads=args.threads, gpu_layers=ngl)
    tasks = humaneval_tasks(parse_range(args.tasks))
    tool = build.tool("llama-speculative-simple")

    cpp_tpt, py_tpt = [], []
    with ArmRunner(arm, tm, dm) as runner:
        runner.run(prompt_tokens(tm, tasks[0]), cap=8)  # warm the contexts once
        for rep in range(args.repeats):
            for i, task in enumerate(tasks):
                text = tm.chat_prompt(task.text)
                order = ("cpp", "py") if (rep + i) % 2 == 0 else ("py", "cpp")
                for which in order:
                    if which == "cpp":
                        sec, n = run_cpp(
                            tool, build.lib_dir, fam.target.path, d.path, text, args.cap, args.k, args.threads, ngl
                        )
                        cpp_tpt.append(sec / max(n, 1))
                    else:
                        t0 = time.perf_counter()
                        res = runner.run(prompt_tokens(tm, task))
                        sec = time.perf_counter() - t0
                        py_tpt.append(sec / max(res.endpoint.n, 1))
                print(
                    f"rep {rep} {task.task_id}: cpp {cpp_tpt[-1] * 1e3:7.2f} ms/token  "
                    f"python {py_tpt[-1] * 1e3:7.2f} ms/token",
                    flush=True,
                )
    mc, mp = statistics.median(cpp_tpt), statistics.median(py_tpt)
    print(
        f"\nmedian time per generated token over {len(cpp_tpt)} requests each "
        f"(k={args.k}, cap={args.cap}, threads={args.threads}, draft={args.draft}):"
    )
    print(f"  llama-speculative-simple (C++): {mc * 1e3:.2f} ms")
    print(f"  refspec transaction (Python):   {mp * 1e3:.2f} ms")
    print(f"  ratio Python / C++:             {mp / mc:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
