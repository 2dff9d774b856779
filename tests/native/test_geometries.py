"""The attention layouts in the attention geometries of the paper's three families, on the CPU.

Random-weight Q8_0 models (:func:`support.tinygguf.write_geometry`) with the embedded SmolLM2's
tokenizer and the heads of Llama-3.1-8B (llama, 32 query / 8 KV heads, head dim 128),
Qwen3-8B (qwen3, 32/8, head dim 128, Q/K norms) and SmolLM2-1.7B (llama, 32/32, head
dim 64): a 2-layer target and a 1-layer draft per family (the draft shares the target's
embeddings, output matrix and first layer). They are placed in a models folder and pinned
with ``refspec models --pin`` into a families file that every test reads.

Checked per family: the layouts are admitted (pin check, native guard, backend
admission); PQ and QB give bitwise identical ``kq``, ``kq_soft_max`` and ``kqv`` outputs
and logits for q = 2..4 in both target phases; the arms M3 and C3 reproduce R's complete
endpoints on a few prompts, with counters that show the layout really acted.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from refspec import cli
from refspec.core.errors import EXIT_INTEGRITY, EXIT_OK
from refspec.core.layouts import REPLAYED_LAYOUTS, ROW_LAYOUTS
from refspec.core.panels import Task, prompt_tokens
from refspec.engine.decode import decode_panel
from refspec.experiments import admission
from refspec.native import build as native
from refspec.native import runtime
from refspec.native.runtime import Context
from support.layoutcapture import STAGES, bits, run_layout, spec
from support.tinygguf import GEOMETRIES, write_geometry, write_tiny

SEED = 20240917
TARGET_LAYERS, DRAFT_LAYERS = 2, 1
LAYERS = tuple(range(TARGET_LAYERS))
PREFIX = 20
CAP = 32
PROMPTS = (
    Task("geo-0", text="Write a Python function that returns the n-th Fibonacci number."),
    Task(
        "geo-1",
        text="Complete the following Python function.\n\n```python\ndef is_palindrome(s: str) -> bool:\n"
        '    """Return True if s reads the same backwards."""\n```',
    ),
    Task("geo-2", text="List three prime numbers greater than 100 and explain how you checked them."),
)
CODE = (
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'
    "        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"
)
FAMILIES = tuple(GEOMETRIES)


def _fam(name: str) -> str:
    return f"geo-{name}"


@pytest.fixture(scope="module")
def placed(tmp_path_factory, family_files):
    """(models folder, pinned families file) with every geometry's target and draft."""
    runtime.load(native.current().lib_dir)
    d = tmp_path_factory.mktemp("geometries")
    tokenizer = family_files.target.path
    fams = {}
    for name, geo in GEOMETRIES.items():
        write_geometry(d / f"{name}-target.gguf", geo, n_layer=TARGET_LAYERS, tokenizer_from=tokenizer, seed=SEED)
        write_geometry(d / f"{name}-draft.gguf", geo, n_layer=DRAFT_LAYERS, tokenizer_from=tokenizer, seed=SEED)
        fams[_fam(name)] = {
            "description": f"random weights in the attention geometry of {name}",
            "target": {"file": f"{name}-target.gguf", "sha256": None},
            "drafts": {"d1": {"file": f"{name}-draft.gguf", "sha256": None}},
            "default_draft": "d1",
        }
    unpinned = d / "families.yaml"
    unpinned.write_text(yaml.safe_dump({"families": fams}, sort_keys=False))
    pinned = d / "pinned.yaml"
    for fam in fams:
        code = cli.main(
            [
                "models",
                "--pin",
                "--family",
                fam,
                "--models-dir",
                str(d),
                "--out",
                str(pinned),
                "--families-file",
                str(unpinned),
            ]
        )
        assert code == EXIT_OK
    return d, pinned


@pytest.fixture(scope="module")
def targets(placed):
    d, _ = placed
    ms = {name: runtime.Model(d / f"{name}-target.gguf") for name in FAMILIES}
    yield ms
    for m in ms.values():
        m.close()


@pytest.fixture(scope="module")
def tokens(targets):
    toks = targets[FAMILIES[0]].tokenize(CODE, add_special=True)
    assert len(toks) >= PREFIX + 4
    return toks


@pytest.mark.parametrize("name", FAMILIES)
def test_geometry_files_are_what_they_claim(placed, targets, name):
    d, pinned = placed
    geo = GEOMETRIES[name]
    shape = admission.gguf_attention_shape(d / f"{name}-target.gguf", n_kv=64)
    assert (shape.n_head, shape.n_head_kv, shape.head_dim) == (geo.n_head, geo.n_head_kv, geo.head_dim)
    assert shape.source.endswith(f":{geo.arch}")
    m = targets[name]
    assert m.n_layer == TARGET_LAYERS and m.n_vocab == 49152  # SmolLM2's vocabulary
    fam = yaml.safe_load(pinned.read_text())["families"][_fam(name)]
    assert fam["target"]["sha256"] and fam["drafts"]["d1"]["sha256"]


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_are_not_degenerate(targets, tokens, name):
    """The random weights give context-dependent greedy choices, not one argmax everywhere."""
    with Context(targets[name], spec("mq", mask=0, ub=64)) as ctx:
        ctx.begin_request()
        logits = ctx.decode(tokens, 0, outputs="all")
    assert np.isfinite(logits).all()
    top = np.sort(logits, axis=1)
    arg = logits.argmax(axis=1)
    distinct = len(set(arg.tolist()))
    print(
        f"{name}: {distinct} distinct argmax over {len(tokens)} positions, logit sd {logits.std():.2f}, "
        f"median top-2 margin {np.median(top[:, -1] - top[:, -2]):.3f}"
    )
    assert distinct >= len(tokens) // 2
    assert logits.std() > 0.5


@pytest.mark.parametrize("name", FAMILIES)
def test_layouts_are_admitted(placed, targets, replay_tool, name):
    d, _ = placed
    m = targets[name]
    for layout in ROW_LAYOUTS:  # the native guard accepts the geometry (it refuses qwen2, bias, experts)
        with Context(m, spec(layout)) as ctx:
            assert ctx.active_layout() == layout
    shape = admission.gguf_attention_shape(d / f"{name}-target.gguf", n_kv=64)
    res = admission.run_admission(replay_tool, "CPU", shape, queries=(1, 2, 3, 4))
    assert not res["errors"], res["errors"]
    got = {(r["layout"], r["q"]) for r in res["rows"]}
    assert got == {(lay, q) for lay in REPLAYED_LAYOUTS for q in (1, 2, 3, 4)}
    refused = [r for r in res["rows"] if r["verdict"] != "unknown" or r["fallback"]]
    assert not refused, refused


@pytest.mark.parametrize("phase", ["prefill", "continuation"])
@pytest.mark.parametrize("q", [2, 3, 4])
@pytest.mark.parametrize("name", FAMILIES)
def test_pq_and_qb_stages_are_bitwise_identical(targets, tokens, name, q, phase):
    geo = GEOMETRIES[name]
    m = targets[name]
    pq, pq_logits, pq_c = run_layout(m, tokens, "pq", q, phase, LAYERS, PREFIX)
    qb, qb_logits, qb_c = run_layout(m, tokens, "qb", q, phase, LAYERS, PREFIX)
    assert set(pq) == set(qb) == {(s, il) for s in STAGES for il in LAYERS}
    n_kv = q if phase == "prefill" else PREFIX + q
    equal = 0
    for key in sorted(qb):
        assert pq[key].shape == qb[key].shape, key
        assert pq[key].shape[:2] == (q, geo.n_head), (key, pq[key].shape)
        if key[0] == "kqv":
            assert pq[key].shape[2] == geo.head_dim, (key, pq[key].shape)
        else:
            assert pq[key].shape[2] >= n_kv, (key, pq[key].shape)
        assert np.array_equal(bits(pq[key]), bits(qb[key])), f"{key} differs between pq and qb ({name}, q={q}, {phase})"
        equal += 1
    assert np.array_equal(bits(pq_logits), bits(qb_logits))
    # the layout really acted: one q-row micrograph with pq (resp. qb), none with mq
    for c, layout in ((pq_c, "pq"), (qb_c, "qb")):
        assert c[f"micrographs_{layout}"] >= 1 and c["micrographs_mq"] == 0, (layout, c)
    assert qb_c["rows"] - (PREFIX if phase == "continuation" else 0) == q
    print(f"{name} q={q} {phase}: {equal}/{len(qb)} stage outputs bit-equal")


@pytest.mark.parametrize("name", FAMILIES)
def test_m3_and_c3_reproduce_the_reference(placed, name):
    d, pinned = placed
    rows = decode_panel(
        _fam(name),
        list(PROMPTS),
        ["R", "M3", "C3"],
        cap=CAP,
        threads=1,
        models_dir=d,
        families_file=pinned,
        progress=False,
    )
    by = {(r["arm"], r["task_id"]): r for r in rows}
    for t in PROMPTS:
        ref = by[("R", t.task_id)]
        assert ref["n"] >= 8, f"{name} {t.task_id}: R generated only {ref['n']} tokens"
        assert ref["micrographs_qb"] == 0 and ref["rows"] == ref["micrographs"]  # R: one row per micrograph
        m3, c3 = by[("M3", t.task_id)], by[("C3", t.task_id)]
        for r in (m3, c3):
            assert r["qualified"], (
                f"{name} {t.task_id}: {r['arm']} differs from R at index "
                f"{r['first_diff_index']} (R's margin there {r['ref_margin']})"
            )
            assert r["n"] == ref["n"] and r["stop_reason"] == ref["stop_reason"]
            # every target micrograph ran with qb, and several held more than one row
            assert r["micrographs_qb"] == r["micrographs"] > 0 and r["micrographs_mq"] == 0
            assert r["rows"] > r["micrographs"]
        assert c3["proposals"] > 0 and c3["cycles"] > 0 and c3["draft_micrographs"] > 0
    summary = []
    for arm in ("R", "M3", "C3"):
        rs = [by[(arm, t.task_id)] for t in PROMPTS]
        acc = [r["acceptance"] for r in rs if r["acceptance"] is not None]
        summary.append(
            f"{arm} {sum(r['qualified'] for r in rs)}/{len(rs)} match R, tokens "
            f"{[r['n'] for r in rs]}, micrographs {sum(r['micrographs'] for r in rs)}, rows "
            f"{sum(r['rows'] for r in rs)}" + (f", acceptance {np.mean(acc):.2f}" if acc else "")
        )
    print(f"{name}: " + "; ".join(summary))


def test_reference_endpoints_differ_between_prompts(placed, targets):
    """Different prompts lead to different greedy continuations (the models are not constant)."""
    d, pinned = placed
    name = FAMILIES[0]
    m = targets[name]
    conts = set()
    for t in PROMPTS:
        with Context(m, spec("mq", mask=0, ub=1)) as ctx:
            ctx.begin_request()
            toks = prompt_tokens(m, t)
            logits = ctx.decode(toks, 0, outputs="last")
            out = []
            for i in range(8):
                nxt = int(np.argmax(np.asarray(logits).reshape(-1, m.n_vocab)[-1]))
                out.append(nxt)
                logits = ctx.decode([nxt], len(toks) + i, outputs="last")
        conts.add(tuple(out))
    assert len(conts) == len(PROMPTS)


def test_pin_refuses_a_draft_vocabulary_of_another_size(placed, tmp_path, capsys):
    d, _ = placed
    write_tiny(tmp_path / "byte-draft.gguf")
    (tmp_path / "t.gguf").symlink_to(d / "llama31-8b-target.gguf")
    fams = tmp_path / "families.yaml"
    fams.write_text(
        yaml.safe_dump(
            {
                "families": {
                    "mixed": {
                        "target": {"file": "t.gguf", "sha256": None},
                        "drafts": {"bytes": {"file": "byte-draft.gguf", "sha256": None}},
                        "default_draft": "bytes",
                    }
                }
            }
        )
    )
    code = cli.main(
        [
            "models",
            "--pin",
            "--family",
            "mixed",
            "--models-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "p.yaml"),
            "--families-file",
            str(fams),
        ]
    )
    err = capsys.readouterr().err
    assert code == EXIT_INTEGRITY
    assert "byte-draft.gguf" in err and "259 tokens" in err and "49152" in err
