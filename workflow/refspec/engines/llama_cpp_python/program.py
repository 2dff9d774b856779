"""The process of a ``llama_cpp_python`` arm: llama-cpp-python's ``Llama`` on a loopback port.

Run by :mod:`refspec.engines.llama_cpp_python.process` with refspec's own interpreter, as a file
(``python -I program.py ...``), under the scrubbed worker environment: ``LLAMA_CPP_LIB_PATH`` names
the project's patched llama.cpp build, so the library is the pinned package unmodified on the
pinned native code; ``LLAMA_ATTN_LAYOUT`` (set from outside for a repaired arm) reaches every
context the library creates. It imports the standard library, ``numpy`` and ``llama_cpp`` only.

    python -I program.py --model FILE --n-ubatch U --n-ctx N --threads T --eog 0,2
        [--prompt-lookup K] --port P

One ``Llama`` (one sequence, flash attention off, the library's default ``n_batch`` of 512, the
arm's micro-batch ``n_ubatch``), greedy (``top_k`` 1, ``temp`` 0, no repetition penalty). With
``--prompt-lookup K`` it decodes speculatively as a Python user does:
``Llama(..., draft_model=LlamaPromptLookupDecoding(num_pred_tokens=K))``: up to ``K`` tokens
drafted by prompt lookup (an n-gram of the context found earlier in it, ``max_ngram_size`` 2, the
library's default), verified in one multi-row ``llama_decode`` of the target.

The part of llama.cpp's server interface refspec uses (:mod:`refspec.engine.loopback_http`):
``/props`` (one slot, the model file, the vocabulary size, the engine and its settings),
``/tokenize`` and ``/detokenize`` (the library's own tokenizer and pieces), and ``/completion`` with the
prompt as token IDs: the generated IDs (the end-of-generation token included, as llama.cpp's
server returns it), ``stop_type`` (``eos`` | ``limit``), ``tokens_evaluated`` (the prompt length)
and, for a speculative arm, ``timings.draft_n`` (the tokens the draft proposed in that request)
and ``timings.draft_n_accepted`` (of those, the ones the output continues with: the longest prefix
of each proposal that the generated tokens repeat). The library exposes no counters of its own.
"""

from __future__ import annotations

import argparse  # contract: a program of its own, run by refspec's interpreter
import runpy
import sys
import time
from pathlib import Path


class CountingLookup:
    """The library's prompt-lookup draft, with every proposal kept as (its position, its tokens)."""

    def __init__(self, k: int):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.inner = LlamaPromptLookupDecoding(num_pred_tokens=int(k))
        self.proposals: list[tuple[int, list[int]]] = []

    def __call__(self, input_ids, /, **kwargs):
        out = self.inner(input_ids, **kwargs)
        self.proposals.append((len(input_ids), [int(t) for t in out]))
        return out


def accepted(proposals: list[tuple[int, list[int]]], sequence: list[int]) -> int:
    """Draft tokens the output continues with: for each proposal made at position ``p``, the longest
    prefix of it that ``sequence[p:]`` repeats (greedy verification accepts exactly those)."""
    n = 0
    for pos, toks in proposals:
        for j, t in enumerate(toks):
            if pos + j >= len(sequence) or sequence[pos + j] != t:
                break
            n += 1
    return n


class Engine:
    """One loaded ``Llama`` and what a request needs from it."""

    def __init__(self, a: argparse.Namespace):
        import llama_cpp

        self.lc, self.args = llama_cpp, a
        self.draft = CountingLookup(a.prompt_lookup) if a.prompt_lookup else None
        t0 = time.monotonic()
        self.llm = llama_cpp.Llama(
            model_path=a.model,
            n_ctx=int(a.n_ctx),
            n_batch=512,
            n_ubatch=int(a.n_ubatch),
            n_threads=int(a.threads),
            n_threads_batch=int(a.threads),
            flash_attn=False,
            draft_model=self.draft,
            verbose=False,
            seed=0,
        )
        self.load_s = time.monotonic() - t0
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.eog = sorted({int(x) for x in a.eog.split(",") if x.strip()})

    def props(self) -> dict:
        a = self.args
        return {
            "total_slots": 1,
            "model_path": a.model,
            "build_info": f"llama-cpp-python {self.lc.__version__}",
            "n_vocab": int(self.llm.n_vocab()),
            "engine": {
                "name": "llama-cpp-python",
                "version": self.lc.__version__,
                "draft": f"LlamaPromptLookupDecoding(num_pred_tokens={a.prompt_lookup})" if a.prompt_lookup else None,
                "n_ubatch": int(a.n_ubatch),
                "n_batch": 512,
                "n_ctx": int(a.n_ctx),
                "threads": int(a.threads),
                "flash_attn": False,
                "eog": self.eog,
                "load_s": round(self.load_s, 3),
            },
        }

    def tokenize(self, body: dict) -> dict:
        text = str(body.get("content", "")).encode("utf-8")
        ids = self.llm.tokenize(
            text, add_bos=bool(body.get("add_special", True)), special=bool(body.get("parse_special", True))
        )
        return {"tokens": [int(t) for t in ids]}

    def detokenize(self, body: dict) -> dict:
        """Each token's piece by the library's ``llama_token_to_piece`` (special tokens rendered).
        ``Llama.detokenize`` is not used: it reads each piece into a 32-byte buffer and returns a
        longer one (a run of 40 spaces) cut or empty."""
        import ctypes

        buf = ctypes.create_string_buffer(256)
        out = b""
        for t in body.get("tokens") or []:
            n = self.lc.llama_token_to_piece(self.vocab, int(t), buf, len(buf), 0, True)
            out += buf.raw[: max(n, 0)]
        return {"content": out.decode("utf-8", errors="replace")}

    def completion(self, body: dict) -> dict:
        ids = [int(t) for t in body["prompt"]]
        cap = int(body["n_predict"])
        if self.draft is not None:
            self.draft.proposals = []
        self.llm.reset()
        toks, stop = [], "limit"
        t0 = time.perf_counter_ns()
        for t in self.llm.generate(ids, top_k=1, temp=0.0, repeat_penalty=1.0, reset=True):
            toks.append(int(t))
            if int(t) in self.eog:
                stop = "eos"
                break
            if len(toks) >= cap:
                break
        t1 = time.perf_counter_ns()
        timings = {"engine_ns": t1 - t0}
        if self.draft is not None:
            timings["draft_n"] = sum(len(p) for _pos, p in self.draft.proposals)
            timings["draft_n_accepted"] = accepted(self.draft.proposals, ids + toks)
            timings["draft_calls"] = len(self.draft.proposals)
        return {
            "tokens": toks,
            "tokens_predicted": len(toks),
            "tokens_evaluated": len(ids),
            "stop_type": stop,
            "timings": timings,
        }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the target GGUF file")
    p.add_argument("--n-ubatch", type=int, required=True, help="the context's micro-batch (n_ubatch)")
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eog", required=True, help="comma-separated end-of-generation token IDs")
    p.add_argument("--prompt-lookup", type=int, default=0, help="num_pred_tokens of the prompt-lookup draft (0: none)")
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args(argv)
    # the engines' shared HTTP loop, run from its file (refspec/engines is not put on sys.path: its
    # engine folders would shadow the engines' own packages)
    serve_loop = runpy.run_path(str(Path(__file__).resolve().parents[1] / "loopback_http.py"))["serve"]
    return serve_loop(Engine(a), a.port)


if __name__ == "__main__":
    sys.exit(main())
