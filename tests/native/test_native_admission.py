"""Admission guards of the layouts and integrity checks of model files.

Every refusal must be a clear error raised before any compute; nothing falls
back silently to the native layout.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from refspec.core.errors import AdmissionError, DecodeError, IntegrityError
from refspec.native import build as native
from refspec.native import models, runtime
from refspec.native.runtime import Context, ContextSpec
from support.tinygguf import write_tiny


@pytest.fixture(scope="module")
def fam():
    runtime.load(native.current().lib_dir)
    return models.ensure_family("smollm2-135m")


def _spec(**kw) -> ContextSpec:
    base = dict(n_ctx=256, n_batch=64, n_ubatch=4, threads=1, layout="qb", mask=3)
    base.update(kw)
    return ContextSpec(**base)


@pytest.mark.parametrize("layout", ["qb", "pq"])
@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"flash_attn": True}, "flash attention"),
        ({"n_seq_max": 2}, "one sequence"),
        ({"n_ubatch": 8}, "at most 4 occupied queries"),
        ({"kv_type": "f32"}, "F16 K/V"),
    ],
)
def test_context_guards(target, layout, kw, needle):
    with pytest.raises(AdmissionError, match=needle):
        Context(target, _spec(layout=layout, **kw))


def test_guards_do_not_apply_to_native_layout(target):
    # the same contexts are fine with mq, and with a layout whose mask leaves this role off
    for kw in ({"flash_attn": True}, {"n_seq_max": 2}, {"n_ubatch": 8}, {"kv_type": "f32"}):
        Context(target, _spec(layout="mq", mask=0, **kw)).close()
    Context(target, _spec(layout="qb", mask=3, role="draft", n_ubatch=8)).close()


def test_arch_guard_tiny_qwen2(tmp_path):
    path = write_tiny(tmp_path / "tiny-qwen2.gguf", arch="qwen2", qkv_bias=True)
    m = runtime.Model(path)
    try:
        with pytest.raises(AdmissionError, match="dense llama-family and qwen3 models, not 'qwen2'"):
            Context(m, _spec())
        Context(m, _spec(layout="mq", mask=0)).close()  # the model itself is fine
    finally:
        m.close()


def test_attention_bias_guard_tiny_llama(tmp_path):
    plain = runtime.Model(write_tiny(tmp_path / "tiny-llama.gguf"))
    biased = runtime.Model(write_tiny(tmp_path / "tiny-llama-bias.gguf", qkv_bias=True))
    try:
        with Context(plain, _spec()) as ctx:  # admitted, and it runs
            ctx.begin_request()
            out = ctx.decode([1, 40, 41, 42], 0, outputs="all")
            assert out.shape == (4, plain.n_vocab) and np.isfinite(out).all()
            assert ctx.counters()["micrographs_qb"] == 1
        with pytest.raises(AdmissionError, match="attention bias"):
            Context(biased, _spec())
    finally:
        plain.close()
        biased.close()


def test_set_layout_refusal_keeps_previous_layout(target):
    with Context(target, _spec(layout="mq", mask=0, n_ubatch=8)) as ctx:
        with pytest.raises(AdmissionError, match="occupied queries"):
            ctx.set_layout("qb", mask=3)
        assert ctx.active_layout() == "mq"


def test_decode_refuses_context_overflow(target):
    with Context(target, _spec(n_ctx=256)) as ctx:
        ctx.begin_request()
        with pytest.raises(DecodeError, match="context full"):
            ctx.decode([1] * 60, 200)


# ---------------------------------------------------------------- model file integrity


def test_truncated_gguf_is_refused(fam, tmp_path):
    bad = tmp_path / "truncated.gguf"
    data = fam.target.path.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(IntegrityError, match="truncated"):
        runtime.Model(bad)


def test_flipped_byte_is_refused_by_pin(fam, tmp_path):
    bad = tmp_path / "flipped.gguf"
    shutil.copyfile(fam.target.path, bad)
    with open(bad, "r+b") as f:
        f.seek(bad.stat().st_size - 4096)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))
    with pytest.raises(IntegrityError, match="does not match the pinned"):
        runtime.Model(bad, sha256=fam.target.sha256)


def test_wrong_pinned_hash_is_refused(fam):
    with pytest.raises(IntegrityError, match="does not match the pinned"):
        runtime.Model(fam.target.path, sha256="0" * 64)


def test_not_a_gguf_is_refused(tmp_path):
    bad = tmp_path / "text.gguf"
    bad.write_text("not a model")
    with pytest.raises(IntegrityError, match="not a GGUF"):
        runtime.Model(bad)


def test_derived_family_files_match_pins(fam):
    from refspec.core.hashing import sha256_file

    for f in fam.all():
        assert sha256_file(f.path) == f.sha256
    assert set(fam.drafts) == {"q4_1", "q2_k"}


@pytest.mark.parametrize("key", ["target", "q2_k"])
def test_library_quantization_reproduces_the_pinned_files(fam, key, tmp_path):
    """The derived files come from the patched library's ``llama_model_quantize`` with the
    parameters of ``llama-quantize --allow-requantize``: re-deriving them gives the pinned
    bytes, and another type gives other bytes."""
    from refspec.core.hashing import sha256_file

    want = fam.target if key == "target" else fam.drafts[key]
    qtype = {"target": "Q8_0", "q2_k": "Q2_K"}[key]
    out = tmp_path / f"{key}.gguf"
    models._quantize(fam.drafts["q4_1"].path, out, qtype)
    assert sha256_file(out) == want.sha256
    # a wrong type gives other bytes, so the pin check above can fail
    other = tmp_path / "other.gguf"
    models._quantize(fam.drafts["q4_1"].path, other, "Q4_1" if qtype == "Q8_0" else "Q8_0")
    assert sha256_file(other) != want.sha256


def test_library_quantization_refuses_an_unknown_type_and_leaves_nothing(fam, tmp_path):
    from refspec.core.errors import ConfigError

    out = tmp_path / "x.gguf"
    with pytest.raises(ConfigError, match="unknown quantization type"):
        models._quantize(fam.drafts["q4_1"].path, out, "Q9_9")
    with pytest.raises(IntegrityError, match="llama_model_quantize"):
        models._quantize(tmp_path / "missing.gguf", out, "Q8_0")
    assert list(tmp_path.iterdir()) == []


def test_gs_refuses_a_non_causal_decode(target):
    """gs runs one-token micro-batches: a host that switches the context to non-causal attention after
    creation gets a refused decode (-3 with the reason), not a batch attended one token at a time."""
    with Context(target, _spec(layout="gs", mask=3, n_ubatch=8)) as ctx:
        ctx.begin_request()
        ctx.decode([1, 40], 0)
        assert ctx.counters()["micrographs_gs"] == 2
        ctx._l.llama_set_causal_attn(ctx._ptr, False)
        with pytest.raises(AdmissionError, match="attention layout gs: non-causal attention"):
            ctx.decode([41, 42], 2)
        ctx._l.llama_set_causal_attn(ctx._ptr, True)
        ctx.decode([41, 42], 2)  # causal again: admitted
