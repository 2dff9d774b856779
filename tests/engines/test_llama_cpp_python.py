"""The fourth engine: llama-cpp-python's ``Llama`` and its own speculative decoding
(``LlamaPromptLookupDecoding``), qualified against the same ``Llama`` decoding greedily at
micro-batch 1, with the repair set from outside (``LLAMA_ATTN_LAYOUT``), and against refspec's R, on
the project's patched build and the default GGUF files: ``refspec qualify llama-cpp-python``,
sealed and checked by report/check.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from refspec.engines.llama_cpp_python.program import accepted
from support.paths import REPO_ROOT as REPO

CHECK = REPO / "report" / "check.py"


def test_accepted_draft_tokens_are_the_prefix_of_each_proposal_the_output_repeats():
    seq = [5, 6, 7, 8, 9, 10]
    # proposals made when the sequence had 2, 3 and 5 tokens
    assert accepted([(2, [7, 8, 1]), (3, [8, 9, 10, 11]), (5, [3])], seq) == 2 + 3 + 0
    assert accepted([(6, [1, 2])], seq) == 0  # past the end of the output: nothing verified
    assert accepted([], seq) == 0


@pytest.fixture(scope="module")
def qualified(tmp_path_factory, family_files):
    out = tmp_path_factory.mktemp("lcp") / "q"
    p = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "qualify", "llama-cpp-python", "--model", str(family_files.target.path),
         "--panel", "humaneval:0-1", "--cap", "32", "--out", str(out), "--json", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    return out, p


def test_prompt_lookup_changes_the_greedy_output_and_the_repair_keeps_it(qualified):
    out, p = qualified
    doc = json.loads(p.stdout)
    vs = {v["arm"]: v for v in doc["verdicts"]}
    assert doc["reference"] == "L_ref" and doc["engine"] == "llama-cpp-python"
    assert set(vs) == {"L_ub512", "L_pld", "L_qb", "L_pld_qb", "R"}
    # the library's prompt-lookup speculation leaves its own greedy output (HumanEval/1, cap 32):
    # if it stopped diverging, the repair's verdicts below would be vacuous
    assert not vs["L_pld"]["reproduces"] and vs["L_pld"]["first_divergence"]["task_id"] == "HumanEval/1"
    # the repair, set from outside the unmodified package, keeps it; the engine's micro-batch-1
    # reference is refspec's R on the same native code, token for token
    for a in ("L_qb", "L_pld_qb", "R"):
        assert vs[a]["reproduces"] and vs[a]["matching"] == vs[a]["required"] == 2, vs[a]
    assert p.returncode == 1 == doc["exit"]  # one candidate does not reproduce its reference


def test_the_repair_reaches_the_process_from_outside_and_the_draft_ran(qualified):
    out, _p = qualified
    ready = {}
    for f in (out / "campaigns" / "confirmation" / "workers").glob("*.ready.json"):
        r = json.loads(f.read_text())
        ready[r["arm"]] = r
    assert ready["L_qb"]["env"]["LLAMA_ATTN_LAYOUT"] == "qb:15" and "--n-ubatch" in ready["L_qb"]["command"]
    assert "LLAMA_ATTN_LAYOUT" not in ready["L_pld"]["env"]
    assert ready["L_pld"]["engine"]["draft"] == "LlamaPromptLookupDecoding(num_pred_tokens=4)"
    assert ready["L_ref"]["engine"]["n_ubatch"] == 1 and ready["L_ref"]["engine"]["draft"] is None
    summary = json.loads((out / "campaigns" / "confirmation" / "summary.json").read_text())
    acc = {a["arm"]: a.get("acceptance") for a in summary["arms"]}
    assert acc["L_pld"] is not None and 0 < acc["L_pld"] < 1


def test_the_sealed_archive_passes_the_checker_and_names_the_engine(qualified):
    out, _p = qualified
    archive = out / "archive"
    c = subprocess.run(
        [sys.executable, "-I", "-S", str(CHECK), str(archive), "--pubkey", str(out / "signer.pub"), "--quiet"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert c.returncode == 0, c.stdout + c.stderr
    html = (archive / "report.html").read_text(encoding="utf-8")
    assert "llama-cpp-python" in html and "L_pld_qb" in html
    manifest = json.loads((archive / "manifest.json").read_text())
    names = json.dumps(manifest)
    assert "llama-cpp-python/llama_cpp/llama_speculative.py" in names  # the package's files are pinned
