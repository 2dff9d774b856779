"""Benchmark: does llama-cpp-python's own speculative API reproduce its greedy reference, and refspec's R?

    ./run shell -c 'python bench/llama_cpp_python_lookup.py --out /tmp/lcp-lookup [--tasks 0-23] [--cap 48] [-k 4]'

llama-cpp-python (the project's pinned package) decodes speculatively in Python:
``Llama(..., draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k))`` drafts up to ``k`` tokens
by prompt lookup (an n-gram of the context found earlier in it) and verifies them in one
multi-row ``llama_decode`` of the target, the exposure of llama.cpp's server. Four arms, each a fresh
process on the project's patched llama.cpp (``LLAMA_CPP_LIB_PATH``), greedy (``temp 0``), flash
attention off, one sequence, on the same prompt token IDs refspec's R decodes (the chat template of
:func:`refspec.core.panels.prompt_tokens`):

* ``L_ref``: no draft, the library's default micro-batch (``n_ubatch`` 512): its own reference;
* ``L_pld``: the same with the prompt-lookup draft;
* ``L_ref_qb`` and ``L_pld_qb``: both again with the repair set from outside, unmodified
  (``LLAMA_ATTN_LAYOUT=qb:15``, ``n_ubatch`` 4: the query-to-batch layout for every multi-row
  caller of every context, anc/native.md).

Each arm's endpoints (tokens up to the cap or the end of generation) are compared with
``L_ref``'s and with refspec's R (``ub 1``, target only) decoded here by the project's engine; the
first divergence is the first token index where they differ. It prints the table and writes
``llama_cpp_python_lookup.json`` (every endpoint) into ``--out``. A study in which no arm
leaves R shows nothing (vacuous), and the bench says so.

Measured on a 2-core VM (HumanEval/0-23, cap 48, ``k`` 4, one thread, SmolLM2-135M Q8_0, the
project's pinned llama-cpp-python 0.3.36 on its patched CPU build)::

    arm         = L_ref    = R  first divergence from R (task@token)
    R           16/24   24/24   -
    L_ref       24/24   16/24   2@32, 6@31, 7@31, 14@19, 15@40, 16@32, 17@30, 19@17
    L_pld       13/24   15/24   0@25, 1@22, 2@32, 6@31, 8@26, 14@19, 16@20, 17@30, 23@26
    L_ref_qb    16/24   24/24   -
    L_pld_qb    16/24   24/24   -

The library's prompt-lookup speculation changes its own greedy output on 11 of 24 tasks; its greedy
reference already leaves R on 8 (a 512-row prefill); with ``LLAMA_ATTN_LAYOUT=qb:15`` and
``n_ubatch`` 4 set from outside, both reproduce R on every task: the repair reaches llama-cpp-python
unmodified.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from refspec.core.arms import REFERENCE_ARM, select  # noqa: E402
from refspec.core.panels import humaneval_tasks, parse_range, prompt_tokens  # noqa: E402
from refspec.native import build as native  # noqa: E402
from refspec.native.models import ensure_family  # noqa: E402
from refspec.native.runtime import Model  # noqa: E402

FAMILY = "smollm2-135m"
ARMS = {  # name: (draft, LLAMA_ATTN_LAYOUT or None, n_ubatch)
    "L_ref": (False, None, 512),
    "L_pld": (True, None, 512),
    "L_ref_qb": (False, "qb:15", 4),
    "L_pld_qb": (True, "qb:15", 4),
}

# the arm's process: decode every prompt greedily with llama_cpp.Llama, endpoints as JSON on stdout
CHILD = r"""
import json, sys
import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
job = json.load(sys.stdin)
draft = LlamaPromptLookupDecoding(num_pred_tokens=job["k"]) if job["draft"] else None
llm = llama_cpp.Llama(model_path=job["model"], n_ctx=job["n_ctx"], n_batch=512, n_ubatch=job["n_ubatch"],
                      n_threads=job["threads"], n_threads_batch=job["threads"], flash_attn=False,
                      draft_model=draft, verbose=False, seed=0)
vocab = llama_cpp.llama_model_get_vocab(llm.model)
out = {}
for task, ids in job["prompts"].items():
    toks, eog = [], False
    for t in llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
        if llama_cpp.llama_vocab_is_eog(vocab, t):
            eog = True
            break
        toks.append(int(t))
        if len(toks) >= job["cap"]:
            break
    llm.reset()
    out[task] = {"tokens": toks, "eog": eog}
print(json.dumps(out))
"""


def first_divergence(a: dict, b: dict) -> int | None:
    """The first token index where two endpoints differ (a shorter one ends there), None when equal."""
    ta, tb = a["tokens"], b["tokens"]
    for i in range(min(len(ta), len(tb))):
        if ta[i] != tb[i]:
            return i
    if len(ta) != len(tb) or a["eog"] != b["eog"]:
        return min(len(ta), len(tb))
    return None


def reference_endpoints(files, tasks, cap: int, threads: int) -> tuple[dict, dict]:
    """refspec's R on every task: (prompt token IDs, endpoints) by task id."""
    target = Model(files.target.path, sha256=files.target.sha256, n_gpu_layers=0)
    from refspec.engine.transaction import ArmRunner

    arm = select([REFERENCE_ARM])[0].with_(cap=cap, threads=threads)
    prompts, eps = {}, {}
    with ArmRunner(arm, target, None) as runner:
        for t in tasks:
            prompts[t.task_id] = prompt_tokens(target, t)
            e = runner.run(prompts[t.task_id]).endpoint
            eps[t.task_id] = {"tokens": [int(x) for x in e.tokens], "eog": bool(e.eog)}
    return prompts, eps


def run_arm(name: str, model: Path, prompts: dict, cap: int, k: int, threads: int, lib_dir: str) -> dict:
    draft, layout, ub = ARMS[name]
    env = {k_: v for k_, v in os.environ.items() if k_ != "LLAMA_ATTN_LAYOUT"}
    env["LLAMA_CPP_LIB_PATH"] = lib_dir
    if layout:
        env["LLAMA_ATTN_LAYOUT"] = layout
    n_ctx = max(len(p) for p in prompts.values()) + cap + k + 16
    job = {"model": str(model), "prompts": prompts, "cap": cap, "k": k, "draft": draft, "n_ubatch": ub}
    job |= {"n_ctx": n_ctx, "threads": threads}
    r = subprocess.run(
        [sys.executable, "-c", CHILD], input=json.dumps(job), capture_output=True, text=True, env=env, check=False
    )
    if r.returncode != 0:
        raise SystemExit(f"arm {name} failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def table(res: dict) -> str:
    tasks = list(res["R"])
    lines = [f"{'arm':10s} {'= L_ref':>8s} {'= R':>6s}  first divergence from R (task@token)"]
    for name in ["R", *ARMS]:
        eps = res[name]
        own = sum(first_divergence(eps[t], res["L_ref"][t]) is None for t in tasks)
        vs_r = [(t, first_divergence(eps[t], res["R"][t])) for t in tasks]
        same = sum(d is None for _t, d in vs_r)
        where = ", ".join(f"{t.split('/')[-1]}@{d}" for t, d in vs_r if d is not None)
        lines.append(f"{name:10s} {own:>3d}/{len(tasks):<4d} {same:>2d}/{len(tasks):<3d}  {where or '-'}")
    if all(first_divergence(res[n][t], res["R"][t]) is None for n in ARMS for t in tasks):
        lines.append("vacuous: no arm leaves R on this panel (nothing shows whether the repair is needed)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tasks", default="0-23", help="HumanEval indices")
    p.add_argument("--cap", type=int, default=48)
    p.add_argument("-k", type=int, default=4, help="num_pred_tokens of the prompt-lookup draft")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    files = ensure_family(FAMILY)
    lib_dir = str(native.current().lib_dir)
    tasks = humaneval_tasks(parse_range(a.tasks))
    prompts, r_eps = reference_endpoints(files, tasks, a.cap, a.threads)
    res = {"R": r_eps}
    for name in ARMS:
        print(f"arm {name} ...", file=sys.stderr, flush=True)
        res[name] = run_arm(name, files.target.path, prompts, a.cap, a.k, a.threads, lib_dir)
    doc = {"settings": {k: str(v) for k, v in vars(a).items()}, "prompts": prompts, "endpoints": res}
    (a.out / "llama_cpp_python_lookup.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
