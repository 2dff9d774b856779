"""Probe: does OpenVINO GenAI's speculative decoding reproduce its own greedy reference, token for token?

    python3 -m venv OVENV && OVENV/bin/pip install openvino-genai
    ./run shell -c 'python bench/openvino_probe.py --write-panel /tmp/ov-panel.json --tasks 0-7'
    OVENV/bin/python bench/openvino_probe.py --panel /tmp/ov-panel.json --out /tmp/ov-probe.json [--cap 128]

A measurement ahead of a second engine behind ``refspec.engine.process``, not that engine: nothing
here is audited or sealed. It runs in a virtual environment of its own that has only
``openvino-genai``, so ``--write-panel`` (run in refspec's environment) writes the HumanEval prompts
first. The embedded default's two GGUF files (target Q8_0, draft Q4_1, from ``$REFSPEC_CACHE/models``)
are copied into folders of their own under ``--work`` (a GGUF's folder receives the OpenVINO IR the
reader converts it to: ``enable_save_ov_model``), and the IR folders are served by three arms of one
process:

* ``greedy``: ``LLMPipeline(target)``, the stateful single-sequence pipeline, greedy (the reference);
* ``cb_greedy``: the same model in the continuous-batching pipeline (``scheduler_config``), greedy,
  no draft: the control that separates the pipeline's geometry (paged attention, its KV cache)
  from speculation;
* ``spec``: the continuous-batching pipeline with ``draft_model`` (``--proposals`` tokens a step).

Each task's prompt is tokenized once and given to every arm as token ids (no chat template), with
``max_new_tokens = --cap``. It prints one line per task (lengths and the first differing index of
each pair) and the tally, and writes ``--out`` (JSON: versions, the IR files' sha256, every arm's
tokens per task).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

TARGET, DRAFT = "SmolLM2-135M-Instruct.Q8_0.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"


def write_panel(path: str, tasks: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
    from refspec.core.panels import humaneval_tasks, parse_range

    rows = [{"task_id": t.task_id, "text": t.text} for t in humaneval_tasks(parse_range(tasks))]
    Path(path).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(f"{len(rows)} tasks -> {path}")


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where two token lists differ (the shorter one's length when one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def stage_ir(ov, gguf: Path, folder: Path) -> dict[str, str]:
    """``gguf`` copied into ``folder`` and converted there to OpenVINO IR once; the IR files' sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "openvino_model.xml").is_file():
        shutil.copy2(gguf, folder / gguf.name)
        ov.LLMPipeline(str(folder / gguf.name), "CPU", enable_save_ov_model=True)
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("openvino_*")) if p.is_file()
    }


def probe(args) -> int:
    import openvino_genai as ov

    models = Path(os.environ.get("REFSPEC_CACHE", Path.home() / ".cache" / "refspec")) / "models" / "smollm2-135m"
    work = Path(args.work)
    ir = {
        "target": stage_ir(ov, models / TARGET, work / "target"),
        "draft": stage_ir(ov, models / DRAFT, work / "draft"),
    }
    tok = ov.Tokenizer(str(work / "target"))
    arms = {
        "greedy": ov.LLMPipeline(str(work / "target"), "CPU"),
        "cb_greedy": ov.LLMPipeline(str(work / "target"), "CPU", scheduler_config=ov.SchedulerConfig()),
        "spec": ov.LLMPipeline(str(work / "target"), "CPU", draft_model=ov.draft_model(str(work / "draft"), "CPU")),
    }

    def config(arm: str):
        c = ov.GenerationConfig()
        c.max_new_tokens, c.do_sample = args.cap, False
        if arm == "spec":
            c.num_assistant_tokens = args.proposals
        return c

    panel = json.loads(Path(args.panel).read_text(encoding="utf-8"))
    pairs = (("greedy", "cb_greedy"), ("greedy", "spec"), ("cb_greedy", "spec"))
    same = {f"{a}={b}": 0 for a, b in pairs}
    rows = []
    for t in panel:
        ids = tok.encode(t["text"])
        out = {arm: [int(x) for x in p.generate(ids, config(arm)).tokens[0]] for arm, p in arms.items()}
        diffs = {f"{a}={b}": first_difference(out[a], out[b]) for a, b in pairs}
        for k, d in diffs.items():
            same[k] += d is None
        rows.append({"task_id": t["task_id"], "tokens": out, "first_difference": diffs})
        lens = " ".join(f"{a} {len(v)}" for a, v in out.items())
        print(
            f"{t['task_id']:14s} {lens}  " + "  ".join(f"{k}: {'same' if d is None else d}" for k, d in diffs.items())
        )
    print(f"identical on {len(panel)} tasks: " + ", ".join(f"{k} {v}" for k, v in same.items()))
    doc = {
        "openvino_genai": ov.get_version() if hasattr(ov, "get_version") else getattr(ov, "__version__", None),
        "cap": args.cap,
        "proposals": args.proposals,
        "ir_sha256": ir,
        "identical": same,
        "tasks": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write-panel", help="write the HumanEval prompts of --tasks to this JSON file and stop")
    p.add_argument("--tasks", default="0-7", help="HumanEval indices (with --write-panel)")
    p.add_argument("--panel", help="the prompts written by --write-panel")
    p.add_argument("--work", default="/tmp/refspec-openvino", help="folder of the GGUF copies and their IR")
    p.add_argument("--cap", type=int, default=128)
    p.add_argument("--proposals", type=int, default=4, help="draft tokens a speculative step")
    p.add_argument("--out", help="JSON file of the tokens and the tally")
    args = p.parse_args(argv)
    if args.write_panel:
        write_panel(args.write_panel, args.tasks)
        return 0
    if not args.panel:
        p.error("--panel (or --write-panel) is required")
    return probe(args)


if __name__ == "__main__":
    sys.exit(main())
