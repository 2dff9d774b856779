"""llama.cpp's own test suite against the patched library, and the same suite on the stock library.

Opt-in (``./run test -m upstream_suite``): two builds of llama.cpp's tests from the pinned source
(``support.upstream_suite.build_tests``, stock and patched, each cached by key), then

- ``test-llama-archs -o DIR`` writes one random-weight model per architecture and variant; the
  stock and the patched generator write the same files;
- with the default layout (the variable unset) ``test-save-load-state`` and
  ``test-recurrent-state-rollback`` over every model and ``test-batch-alloc`` pass on both
  libraries with the same counts;
- once per layout through ``LLAMA_ATTN_LAYOUT``, one process per model and test: every
  architecture passes or is refused with the library's one-line reason (layout, architecture,
  reason), never an abort; ``mq`` passes everywhere; ``gs`` on a hybrid memory with
  recurrent-state rollback is refused, not aborted;
- the refspec matrix (architecture x layout x q against the micro-batch-1 reference R, logits bit
  for bit) never has ``pq``, ``qb``, ``qh`` or ``gs`` differ or fail, and is written as a CSV table.

Cost on 2 shared cores: two test builds (about 3 min each when nothing else runs), then a few
minutes of runs; the outcomes land in ``$REFSPEC_CACHE/upstream/<key16>/``.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import pytest

from refspec.core.layouts import LAYOUTS

pytestmark = [pytest.mark.upstream_suite, pytest.mark.slow]


@pytest.fixture(scope="module")
def suites():
    from refspec.native import build as native
    from support import upstream_suite as upstream

    opts = native.BuildOptions()
    return {v: upstream.build_tests(opts, v, quiet=True) for v in native.SERVER_VARIANTS}


@pytest.fixture(scope="module")
def out_dir(suites):
    from refspec.core.paths import cache_dir

    d = cache_dir() / "upstream" / suites["patched"].key[:16]
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def models(suites, out_dir, tmp_path_factory):
    from refspec.core.hashing import sha256_file
    from support import upstream_suite as upstream

    paths = upstream.generate_models(suites["patched"], out_dir / "models")
    stock = upstream.generate_models(suites["stock"], tmp_path_factory.mktemp("stock-models"))
    assert [p.name for p in paths] == [p.name for p in stock]
    assert [sha256_file(p) for p in paths] == [sha256_file(p) for p in stock], "the patch changed a generated model"
    assert len(paths) > 100
    return paths


def test_default_layout_passes_as_on_stock(suites, models):
    from support import upstream_suite as upstream

    res = {v: upstream.suite_default(b, models[0].parent) for v, b in suites.items()}
    for v, r in res.items():
        for test, o in r.items():
            assert o["rc"] == 0, f"{v} {test}: exit {o['rc']}\n{o['tail']}"
    names = sorted(p.name for p in models)
    for test in upstream.STATE_TESTS:
        # every model in the table, the same status of every sub-test on both libraries
        assert sorted(res["patched"][test]["table"]) == names, test
        assert res["patched"][test]["table"] == res["stock"][test]["table"], test
        assert res["patched"][test]["counts"]["FAIL"] == 0, test
    assert res["patched"]["test-save-load-state"]["counts"]["SKIP"] == 0
    assert res["patched"]["test-recurrent-state-rollback"]["counts"]["PASS"] > 0
    for v in res:
        assert res[v][upstream.BATCH_TEST]["counts"] == {"failures": 0}, v
    (models[0].parent.parent / "default.json").write_text(json.dumps(res, indent=2) + "\n")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_passes_or_is_refused_with_a_reason(suites, models, out_dir, layout):
    from support import upstream_suite as upstream

    build = suites["patched"]
    jobs = [(t, m) for m in models for t in upstream.STATE_TESTS]
    with ThreadPoolExecutor(max_workers=2) as ex:
        outcomes = list(ex.map(lambda tm: upstream.run_state_test(build, tm[0], tm[1], layout), jobs))
    (out_dir / f"layout-{layout}.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")

    failed = [o for o in outcomes if o.status == "fail"]
    assert not failed, "\n".join(f"{o.model} {o.test}: {o.reason}" for o in failed[:10])
    refused = [o for o in outcomes if o.status == "refused"]
    for o in refused:
        assert f"(layout {layout}, architecture " in o.reason, o.reason
    if layout == "mq":
        assert not refused
    elif layout == "gs":
        # refused: the recurrent and hybrid memories in the rollback test (n_rs_seq > 0), and the
        # models without a KV cache (diffusion) in any test; everything else passes
        rollback = [o for o in refused if "recurrent-state rollback (n_rs_seq = " in o.reason]
        no_memory = [o for o in refused if "gs needs a decoder memory" in o.reason]
        assert len(rollback) + len(no_memory) == len(refused), {o.reason for o in refused}
        assert {o.test for o in rollback} == {"test-recurrent-state-rollback"}
        assert "bailingmoe3-moe.gguf" in {o.model for o in rollback}, "the hybrid-memory rollback case was not reached"
        assert "llada-dense.gguf" in {o.model for o in no_memory}
    else:
        # pq/qb/qh: the save/load test asks for two sequences (and flash attention where it is
        # available), refused on every model
        sl = [o for o in outcomes if o.test == "test-save-load-state"]
        assert all(o.status == "refused" for o in sl), [o for o in sl if o.status != "refused"][:3]


def test_refspec_matrix(suites, models, out_dir):
    from support import upstream_suite as upstream

    rows = upstream.matrix(suites["patched"], models)
    (out_dir / "matrix.csv").write_text(upstream.matrix_table(rows))
    by = {}
    for r in rows:
        by.setdefault((r["layout"], r["status"]), []).append(r)
    assert len(rows) == len(LAYOUTS) * len(upstream.QS) * len(models), "a model without a reference or a row missing"
    bad = [r for r in rows if r["status"] not in ("reproduces", "refused", "differs")]
    assert not bad, bad[:5]
    # a layout that claims to preserve R never differs: it reproduces or is refused with a reason
    differs = [r for r in rows if r["layout"] != "mq" and r["status"] == "differs"]
    assert not differs, differs[:5]
    for r in rows:
        if r["status"] == "refused":
            assert f"(layout {r['layout']}, architecture " in r["reason"], r
    # the comparison is not vacuous: native attention at q = 1 is R, at q > 1 it leaves R somewhere
    assert all(r["status"] == "reproduces" for r in rows if r["layout"] == "mq" and r["q"] == 1)
    assert any(r["status"] == "differs" for r in rows if r["layout"] == "mq" and r["q"] > 1)
    # gs reproduces R on every model with a decoder memory
    gs = [r for r in rows if r["layout"] == "gs"]
    assert all(r["status"] == "reproduces" or "gs needs a decoder memory" in r["reason"] for r in gs), gs
    assert sum(r["status"] == "reproduces" for r in gs) > 0.9 * len(gs)


HOST_MUTED = """
import ctypes, os, sys, llama_cpp
@llama_cpp.llama_log_callback
def mute(level, text, user):
    pass
llama_cpp.llama_log_set(mute, ctypes.c_void_p(0))
lib = llama_cpp.llama_cpp._lib
lib.llama_attn_env_error.argtypes = []
lib.llama_attn_env_error.restype = ctypes.c_char_p
m = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), llama_cpp.llama_model_default_params())
assert m
for layout, n_seq in (("qb", 2), ("qb", 2), ("qb", 1), ("gs", 2), ("qb", 2)):
    os.environ["LLAMA_ATTN_LAYOUT"] = layout
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_ubatch, p.n_seq_max, p.flash_attn_type = 256, 4, n_seq, 0
    ctx = llama_cpp.llama_init_from_model(m, p)
    print("CONTEXT", "created" if ctx else "NULL", "|", lib.llama_attn_env_error().decode(), flush=True)
"""


def test_refusal_visible_when_the_log_is_muted(suites, models):
    """A host that mutes llama.cpp's log still sees why its context is NULL: one stderr line per
    distinct reason, and ``llama_attn_env_error()`` (cleared by the next creation it does not fail)."""
    import os
    import subprocess
    import sys

    model = next(p for p in models if p.name == "smollm3-dense.gguf")
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_ATTN_LAYOUT"}
    env.update(suites["patched"].env())
    r = subprocess.run(
        [sys.executable, "-c", HOST_MUTED, str(model)], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    seq2 = (
        "attention layout supports one sequence/stream, the context has n_seq_max = 2 (layout qb, architecture smollm3)"
    )
    arch = (
        "attention layout supports dense llama-family and qwen3 models, not 'smollm3' (layout qb, architecture smollm3)"
    )
    assert r.stdout.splitlines() == [
        f"CONTEXT NULL | {seq2}",
        f"CONTEXT NULL | {seq2}",
        f"CONTEXT NULL | {arch}",
        "CONTEXT created | ",  # gs admits two sequences; the error of the thread is cleared
        f"CONTEXT NULL | {seq2}",
    ], r.stdout
    prefix = "llama_init_from_model: LLAMA_ATTN_LAYOUT refused, context not created: "
    lines = [ln for ln in r.stderr.splitlines() if "LLAMA_ATTN_LAYOUT" in ln]
    assert lines == [prefix + seq2, prefix + arch], r.stderr  # once per distinct reason, the log muted
