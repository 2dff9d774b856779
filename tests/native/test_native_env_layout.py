"""LLAMA_ATTN_LAYOUT in an unmodified llama.cpp program (anc/native.md).

``llama-speculative-simple`` of the patched build, run as a user would run it (no refspec code in
the process): with ``LLAMA_ATTN_LAYOUT=qb`` its greedy speculative output is refspec's
micro-batch-1 reference R token for token, where the same command without the variable diverges
on some prompt; a malformed value fails the context with the documented log line.
"""

from __future__ import annotations

import ctypes
import os
import subprocess

import pytest

CAP = 128
TASKS = range(0, 4)


def _spec_simple(build, files, prompt: str, *, layout: str | None, n: int = CAP, timeout: float = 600):
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_ATTN_LAYOUT"}
    if layout is not None:
        env["LLAMA_ATTN_LAYOUT"] = layout
    cmd = [
        str(build.tool("llama-speculative-simple")),
        "-m",
        str(files.target.path),
        "-md",
        str(files.draft(files.default_draft).path),
        "-p",
        prompt,
        "--no-escape",
        "-n",
        str(n),
        "--temp",
        "0",
        "--top-k",
        "1",
        "--seed",
        "0",
        "-t",
        "2",
        "-tb",
        "2",
        "-c",
        "2048",
        "-ub",
        "4",
        "-fa",
        "off",
        "-fit",
        "off",
        "-ngl",
        "0",
        "-ngld",
        "0",
        "-lv",
        "4",
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        "3",
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        "0",
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout)


@pytest.fixture(scope="module")
def references(native_build, family_files):
    """(prompt text, R's generated text) per task: refspec's own micro-batch-1 greedy reference."""
    from refspec.core.arms import load_arms
    from refspec.core.panels import humaneval_tasks
    from refspec.engine.transaction import ArmRunner
    from refspec.native.runtime import Model

    target = Model(family_files.target.path, sha256=family_files.target.sha256, lib_dir=native_build.lib_dir)
    buf = ctypes.create_string_buffer(256)

    def piece(t: int) -> bytes:  # what the program prints for a token (special tokens rendered)
        n = target._l.llama_token_to_piece(target.vocab, t, buf, len(buf), 0, True)
        return buf.raw[:n]

    arm = load_arms()["R"].with_(cap=CAP, threads=2)
    out = []
    with ArmRunner(arm, target, None) as runner:
        for task in humaneval_tasks(list(TASKS)):
            # the program takes text: a prompt without a trailing newline (the -p path keeps it as is)
            text = target.chat_prompt(task.text).rstrip("\n")
            ids = target.tokenize(text, add_special=True, parse_special=True)
            res = runner.run(ids)
            gen = [t for t in res.endpoint.tokens if not target.is_eog(t)]
            out.append((task.task_id, text, b"".join(piece(t) for t in gen).decode("utf-8")))
    return out


def test_env_qb_reproduces_reference_where_stock_diverges(native_build, family_files, references):
    stock_diverged = []
    for task_id, prompt, want in references:
        qb = _spec_simple(native_build, family_files, prompt, layout="qb")
        assert qb.returncode == 0, qb.stderr[-2000:]
        assert "LLAMA_ATTN_LAYOUT='qb': attention layout set" in qb.stderr
        assert want in qb.stdout, f"{task_id}: llama-speculative-simple with LLAMA_ATTN_LAYOUT=qb is not R"
        if stock_diverged:  # one prompt on which the stock layout leaves R is all the assertion below needs
            continue
        stock = _spec_simple(native_build, family_files, prompt, layout=None)
        assert stock.returncode == 0, stock.stderr[-2000:]
        assert "LLAMA_ATTN_LAYOUT" not in stock.stderr
        if want not in stock.stdout:
            stock_diverged.append(task_id)
    # the repair is not vacuous: the stock layout of the same command leaves R on some prompt
    assert stock_diverged, "the stock layout reproduced R on every prompt: nothing to repair here"


MALFORMED = ["xx", "QB", "qb:16", "qb:", "qb:3x", ""]

# A host that never calls the refspec API: plain llama.cpp C calls through the bindings.
HOST = """
import sys, llama_cpp
m = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), llama_cpp.llama_model_default_params())
assert m, "model did not load"
p = llama_cpp.llama_context_default_params()
p.n_ubatch = 4
p.flash_attn_type = 0  # disabled
ctx = llama_cpp.llama_init_from_model(m, p)
print("CONTEXT", "created" if ctx else "NULL", flush=True)
"""


@pytest.mark.parametrize("value", MALFORMED)
def test_malformed_value_fails_the_context(native_build, family_files, value):
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LLAMA_ATTN_LAYOUT"}
    env.update(LLAMA_CPP_LIB_PATH=str(native_build.lib_dir), LLAMA_ATTN_LAYOUT=value)
    r = subprocess.run(
        [sys.executable, "-c", HOST, str(family_files.target.path)],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
    )
    assert "CONTEXT NULL" in r.stdout, r.stdout + r.stderr[-2000:]
    assert (f"LLAMA_ATTN_LAYOUT refused, context not created: malformed LLAMA_ATTN_LAYOUT='{value}'") in r.stderr, (
        r.stderr[-2000:]
    )
    # the same host with a well-formed value gets its context
    env["LLAMA_ATTN_LAYOUT"] = "qb:15"
    ok = subprocess.run(
        [sys.executable, "-c", HOST, str(family_files.target.path)],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=120,
    )
    assert "CONTEXT created" in ok.stdout, ok.stderr[-2000:]


@pytest.mark.parametrize("value", ["xx", "qb:16"])
def test_malformed_value_stops_an_unmodified_program(native_build, family_files, value):
    """llama-speculative-simple cannot run without its target context: it fails and generates nothing
    (it does not check for the NULL context; the log line is the library's, see the test above)."""
    r = _spec_simple(native_build, family_files, "def f():", layout=value, n=4, timeout=120)
    assert r.returncode != 0
    assert "encoded" not in r.stderr and "decoded" not in r.stderr


def test_refused_by_admission_fails_the_context(native_build, family_files):
    """A well-formed value the context cannot run (qb with micro-batch 512) fails it, naming admission."""
    r = _spec_simple(native_build, family_files, "def f():", layout="qb", n=4, timeout=120)
    assert r.returncode == 0  # -ub 4: admitted
    env = {k: v for k, v in os.environ.items()}
    env["LLAMA_ATTN_LAYOUT"] = "qb"
    cmd = [
        str(native_build.tool("llama-speculative-simple")),
        "-m",
        str(family_files.target.path),
        "-md",
        str(family_files.draft(family_files.default_draft).path),
        "-p",
        "def f():",
        "-n",
        "4",
        "-fa",
        "off",
        "-fit",
        "off",
        "-ub",
        "512",
        "-t",
        "2",
    ]
    bad = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=120)
    assert bad.returncode != 0
    assert (
        "LLAMA_ATTN_LAYOUT refused, context not created: attention layout supports at most 4 occupied queries"
        in bad.stdout + bad.stderr
    )
