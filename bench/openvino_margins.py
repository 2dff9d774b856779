"""Margins at the first divergences of a ``refspec qualify openvino`` run, read from the engine's own IR.

    ./run shell -c 'python bench/openvino_margins.py RESULTS [--out margins.json]'

OpenVINO GenAI's ``generate`` returns token IDs and a cumulative score, never per-token logits, so
``refspec qualify openvino`` records no margins. The IR it loaded does expose them: this script
replays each diverging task's reference path through the target's IR with the OpenVINO runtime (the
stateful model: the prompt in one inference, then one token a step, the reference pipeline's
geometry) and reads, at the first differing index, the reference token's logit, the runner-up's and
the logit of the token the diverging arm produced there.

The replay is a reconstruction of the reference, not the reference itself (its compiled-model
settings are the runtime's defaults with the arm's threads, not the pipeline's), so it is checked:
every replayed step before the divergence must pick the reference's token (``replay_agrees``). A
task where it does not has its margin printed but marked.

Two halves: run under refspec's environment, the script reads RESULTS (``campaigns/confirmation``:
the panel, the journal's endpoints, ``summary.json``'s divergences), tokenizes each prompt with the
pinned tokenizer exactly as the campaign did, then runs itself under the engine's interpreter
(``--engine-side``, which imports only numpy and openvino) on the IR recorded in the reference
worker's ready file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def engine_side(job_path: str) -> int:
    import numpy as np
    import openvino as ov

    job = json.loads(Path(job_path).read_text())
    core = ov.Core()
    props = {"INFERENCE_NUM_THREADS": 2}
    if job.get("execution_mode") == "accuracy":
        props["EXECUTION_MODE_HINT"] = ov.properties.hint.ExecutionMode.ACCURACY
    model = core.compile_model(core.read_model(job["ir"] + "/openvino_model.xml"), "CPU", props)
    req = model.create_infer_request()
    if job.get("geometries"):
        return geometries(job, req, np)
    out = []
    for t in job["tasks"]:
        p, ref, i = list(t["prompt_ids"]), t["reference"], t["index"]
        # the prompt in one inference, then the reference one token a step up to the divergence
        steps = np.array(_logits(req, np, p + ref[:i], [len(p)] + [1] * i)[len(p) - 1 :], dtype=np.float64)
        agrees = bool(np.all(steps[:i].argmax(-1) == np.array(ref[:i], dtype=np.int64)))
        logits = steps[i]
        order = np.argsort(-logits)
        top, second = int(order[0]), int(order[1])
        out.append(
            {
                "task_id": t["task_id"],
                "index": i,
                "replay_agrees": bool(agrees and top == t["ref_token"]),
                "ref_token": t["ref_token"],
                "arm_token": t["arm_token"],
                "top": top,
                "margin_top2": float(logits[order[0]] - logits[order[1]]),
                "ref_minus_arm": float(logits[t["ref_token"]] - logits[t["arm_token"]]),
                "arm_rank": int(np.where(order == t["arm_token"])[0][0]) + 1,
                "second": second,
            }
        )
    Path(job["out"]).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _logits(req, np, ids: list[int], chunks: list[int]) -> list:
    """The logits after each token of ``ids`` (from its prompt's last on), fed in ``chunks`` (sizes)."""
    req.reset_state()
    out, fed = [], 0
    for n in chunks:
        new = ids[fed : fed + n]
        req.infer(
            {
                "input_ids": np.array([new], dtype=np.int64),
                "attention_mask": np.ones((1, fed + n), dtype=np.int64),
                "position_ids": np.arange(fed, fed + n, dtype=np.int64)[None, :],
                "beam_idx": np.zeros((1,), dtype=np.int32),
            }
        )
        fed += n
        out.extend(np.array(req.get_tensor("logits").data[0], dtype=np.float32))
    return out


def geometries(job, req, np) -> int:
    """Per task: the reference path's logits fed one token a step (the reference's geometry) and in
    chunks of ``k + 1`` (a verification step's), after the same prompt inference; how many positions
    differ in any bit, the largest difference and whether any argmax differs."""
    rows = []
    k1 = int(job["k"]) + 1
    for t in job["tasks"]:
        p, ref = list(t["prompt_ids"]), list(t["reference"])
        ids = p + ref[:-1]
        gen = len(ref) - 1
        one = _logits(req, np, ids, [len(p)] + [1] * gen)[len(p) - 1 :]
        chunked = _logits(req, np, ids, [len(p)] + [min(k1, gen - i) for i in range(0, gen, k1)])[len(p) - 1 :]
        a, b = np.stack(one), np.stack(chunked)
        differ = [bool(np.any(x.view(np.uint32) != y.view(np.uint32))) for x, y in zip(a, b)]
        rows.append(
            {
                "task_id": t["task_id"],
                "positions": len(a),
                "positions_differing": int(sum(differ)),
                "max_abs_diff": float(np.max(np.abs(a - b))),
                "argmax_differs": int(np.sum(a.argmax(-1) != b.argmax(-1))),
                "one_step_follows_reference": bool(np.all(a.argmax(-1)[: len(ref)] == np.array(ref[: len(a)]))),
            }
        )
    Path(job["out"]).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def driver_side(args) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # refspec_check, which refspec imports
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
    from refspec.core.config import load_config
    from refspec.native import build as native
    from refspec.native.runtime import Model

    camp = Path(args.results) / "campaigns" / "confirmation"
    summary = json.loads((camp / "summary.json").read_text())
    reference = summary["reference"]["arm"]
    ready = next(json.loads(p.read_text()) for p in sorted((camp / "workers").glob(f"*-{reference}.ready.json")))
    ir = ready["ir"]["target"]["folder"]
    panel = {json.loads(x)["task_id"]: json.loads(x)["text"] for x in (camp / "panel-confirm.jsonl").open()}
    ends = {}
    for line in (camp / "journal.jsonl").open():
        r = json.loads(line)
        e = r.get("endpoint")
        if r.get("type") == "request" and e and e["arm"] == reference:
            ends.setdefault(e["task_id"], e["tokens"])
    divs = [d for d in summary["divergences"] if d["first_diff_index"] is not None and d["ref_token"] is not None]
    mode = ready["engine"].get("execution_mode", "performance")
    if args.geometries:
        divs = [
            {"task_id": t, "arm": reference, "first_diff_index": 0, "ref_token": ends[t][0], "arm_token": ends[t][0]}
            for t in sorted(ends, key=lambda x: int(x.split("/")[-1]))
        ]
    gguf = ready["props"]["model_path"]
    m = Model(gguf, lib_dir=native.current(load_config(None)).lib_dir)
    try:
        tasks = [
            {
                "task_id": d["task_id"],
                "arm": d["arm"],
                "index": d["first_diff_index"],
                "ref_token": d["ref_token"],
                "arm_token": d["arm_token"],
                "reference": ends[d["task_id"]],
                "prompt_ids": m.tokenize(m.chat_prompt(panel[d["task_id"]]), add_special=True, parse_special=True),
            }
            for d in divs
        ]
        piece = {t: m.detokenize([t], special=True) for d in tasks for t in (d["ref_token"], d["arm_token"])}
    finally:
        m.close()
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.json"
        res = Path(tmp) / "margins.json"
        k = max((a.get("k", 4) for a in summary["arms"] if a.get("mode") == "spec"), default=4)
        job.write_text(
            json.dumps(
                {
                    "ir": ir,
                    "tasks": tasks,
                    "out": str(res),
                    "execution_mode": mode,
                    "geometries": args.geometries,
                    "k": k,
                }
            )
        )
        python = Path(ready["engine"]["python"])
        subprocess.run([str(python), "-I", __file__, "--engine-side", str(job)], check=True)
        rows = json.loads(res.read_text())
    if args.geometries:
        print(f"execution mode {mode}: the reference path one token a step against chunks of k+1 = {k + 1}")
        for r in rows:
            print(
                f"{r['task_id']:14s} {r['positions_differing']:4d}/{r['positions']} positions differ, "
                f"max |diff| {r['max_abs_diff']:.3g}, argmax differs at {r['argmax_differs']}, "
                f"one-step replay follows the reference: {r['one_step_follows_reference']}"
            )
        if args.out:
            Path(args.out).write_text(
                json.dumps({"ir": ir, "execution_mode": mode, "k": k, "rows": rows}, indent=1) + "\n"
            )
        return 0
    arms = {t["task_id"] + t["arm"]: t["arm"] for t in tasks}
    print(
        f"{'arm':8s} {'task':14s} {'index':>5s}  {'reference':>22s} {'arm':>22s} {'ref-arm':>8s} {'top1-top2':>9s} rank replay"
    )
    for r, t in zip(rows, tasks):
        print(
            f"{arms[t['task_id'] + t['arm']]:8s} {r['task_id']:14s} {r['index']:5d}  "
            f"{r['ref_token']:6d} {piece[r['ref_token']]!r:>15s} {r['arm_token']:6d} {piece[r['arm_token']]!r:>15s} "
            f"{r['ref_minus_arm']:8.3f} {r['margin_top2']:9.3f} {r['arm_rank']:4d} {'ok' if r['replay_agrees'] else 'DIFFERS'}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"ir": ir, "rows": rows}, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="?", help="the results folder of refspec qualify openvino")
    p.add_argument("--out", help="write the margins as JSON")
    p.add_argument(
        "--geometries",
        action="store_true",
        help="on every task, compare the reference path's logits one token a step with chunks of k+1",
    )
    p.add_argument("--engine-side", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.engine_side:
        return engine_side(args.engine_side)
    if not args.results:
        p.error("RESULTS is required")
    return driver_side(args)


if __name__ == "__main__":
    sys.exit(main())
