"""Tiny GGUF models written with the ``gguf`` package, for admission and geometry tests.

:func:`write_tiny` writes real, loadable llama.cpp models (random weights, a byte-level
SPM vocabulary) that differ from the embedded family in exactly one property: the
architecture, attention biases, or the head layout.

:func:`write_geometry` writes random-weight models in the attention geometry of a paper
family (:data:`GEOMETRIES`: query heads, KV heads, head dimension, Q/K norms) with few
layers, a small hidden size and the tokenizer of another GGUF (the embedded SmolLM2's).
Every tensor's weights are drawn from a generator seeded by the seed and the tensor's
name, so a draft written with fewer layers shares the target's embeddings, output
matrix and first layers.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

N_EMBD = 64
N_FF = 128
N_LAYER = 2
N_VOCAB = 3 + 256


def _vocab(w, rename_token: tuple[int, str] | None = None) -> None:
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    if rename_token is not None:  # same size, one token string differs
        tokens[rename_token[0]] = rename_token[1].encode()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * 256)  # unknown, control, control, byte
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def write_tiny(
    path: str | Path,
    *,
    arch: str = "llama",
    n_head: int = 4,
    n_head_kv: int = 2,
    qkv_bias: bool = False,
    seed: int = 0,
    rename_token: tuple[int, str] | None = None,
) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    head_dim = N_EMBD // n_head
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_block_count(N_LAYER)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    _vocab(w, rename_token)

    def t(name: str, *shape: int) -> None:
        # gguf takes numpy shapes (row-major): (rows, cols) = (out, in)
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    t("token_embd.weight", N_VOCAB, N_EMBD)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    t("output.weight", N_VOCAB, N_EMBD)
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", n_head * head_dim, N_EMBD)
        t(f"blk.{i}.attn_k.weight", n_head_kv * head_dim, N_EMBD)
        t(f"blk.{i}.attn_v.weight", n_head_kv * head_dim, N_EMBD)
        t(f"blk.{i}.attn_output.weight", N_EMBD, n_head * head_dim)
        if qkv_bias:
            t(f"blk.{i}.attn_q.bias", n_head * head_dim)
            t(f"blk.{i}.attn_k.bias", n_head_kv * head_dim)
            t(f"blk.{i}.attn_v.bias", n_head_kv * head_dim)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


# --------------------------------------------------------------------------- paper geometries

GEO_EMBD = 256  # hidden size: Q/K/V widths come from the heads (key_length), not from n_embd
GEO_FF = 512


@dataclass(frozen=True)
class Geometry:
    family: str  # the paper family whose attention geometry this is
    arch: str
    n_head: int
    n_head_kv: int
    head_dim: int
    qk_norm: bool = False
    rope_base: float = 10000.0
    rms_eps: float = 1e-5


GEOMETRIES = {
    "llama31-8b": Geometry("llama31-8b", "llama", 32, 8, 128, rope_base=500000.0),
    "qwen3-8b": Geometry("qwen3-8b", "qwen3", 32, 8, 128, qk_norm=True, rope_base=1000000.0, rms_eps=1e-6),
    "smollm2-1.7b": Geometry("smollm2-1.7b", "llama", 32, 32, 64, rope_base=130000.0),
}


@functools.lru_cache(maxsize=4)
def _tokenizer_fields(source: str) -> tuple:
    """Every ``tokenizer.*`` key of ``source`` as (name, value, type, sub-type), read once per process."""
    from gguf import GGUFReader, GGUFValueType

    r = GGUFReader(source)
    out = []
    for f in r.fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == GGUFValueType.ARRAY else None
        out.append((f.name, f.contents(), vtype, sub))
    return tuple(out)


def _copy_tokenizer(w, source: str | Path) -> int:
    """Copy every ``tokenizer.*`` key of ``source`` (vocabulary, merges, special IDs, chat template)."""
    n_vocab = 0
    for name, value, vtype, sub in _tokenizer_fields(str(source)):
        w.add_key_value(name, value, vtype, sub_type=sub)
        if name == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    if not n_vocab:
        raise ValueError(f"{source}: no tokenizer.ggml.tokens")
    return n_vocab


@functools.lru_cache(maxsize=32)
def _q8_tensor(seed: int, name: str, rows: int, cols: int, scale: float) -> np.ndarray:
    """The Q8_0 bytes of one random tensor: a function of its seed, name, shape and scale only, so
    the files that share a tensor (every geometry's embeddings and output matrix, a draft's first
    layer) draw and quantize it once per process."""
    import gguf

    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    a = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
    q.setflags(write=False)
    return q


def write_geometry(
    path: str | Path,
    geo: Geometry,
    *,
    n_layer: int,
    tokenizer_from: str | Path,
    seed: int = 0,
    n_embd: int = GEO_EMBD,
    n_ff: int = GEO_FF,
) -> Path:
    """A random-weight Q8_0 model of ``geo`` with ``n_layer`` layers (norm weights F32).

    Projections are scaled by 1/sqrt(fan-in), so every layer's contribution is of the
    size of the embedding and the next token depends on the context; the output matrix
    gives logits of standard deviation about 3.
    """
    import gguf
    from gguf import GGMLQuantizationType as T

    w = gguf.GGUFWriter(str(path), geo.arch)
    w.add_name(f"random {geo.family} geometry, {n_layer} layers")
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(geo.n_head)
    w.add_head_count_kv(geo.n_head_kv)
    w.add_key_length(geo.head_dim)
    w.add_value_length(geo.head_dim)
    w.add_rope_dimension_count(geo.head_dim)
    w.add_rope_freq_base(geo.rope_base)
    w.add_layer_norm_rms_eps(geo.rms_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    n_vocab = _copy_tokenizer(w, tokenizer_from)

    def q8(name: str, rows: int, cols: int, scale: float) -> None:
        w.add_tensor(name, _q8_tensor(seed, name, rows, cols, scale), raw_dtype=T.Q8_0)

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    q_width, kv_width = geo.n_head * geo.head_dim, geo.n_head_kv * geo.head_dim
    q8("token_embd.weight", n_vocab, n_embd, 1.0)
    ones("output_norm.weight", n_embd)
    q8("output.weight", n_vocab, n_embd, 3.0 / np.sqrt(n_embd))
    for i in range(n_layer):
        ones(f"blk.{i}.attn_norm.weight", n_embd)
        q8(f"blk.{i}.attn_q.weight", q_width, n_embd, 1.0 / np.sqrt(n_embd))
        q8(f"blk.{i}.attn_k.weight", kv_width, n_embd, 1.0 / np.sqrt(n_embd))
        q8(f"blk.{i}.attn_v.weight", kv_width, n_embd, 1.0 / np.sqrt(n_embd))
        q8(f"blk.{i}.attn_output.weight", n_embd, q_width, 1.0 / np.sqrt(q_width))
        if geo.qk_norm:
            ones(f"blk.{i}.attn_q_norm.weight", geo.head_dim)
            ones(f"blk.{i}.attn_k_norm.weight", geo.head_dim)
        ones(f"blk.{i}.ffn_norm.weight", n_embd)
        q8(f"blk.{i}.ffn_gate.weight", n_ff, n_embd, 1.0 / np.sqrt(n_embd))
        q8(f"blk.{i}.ffn_up.weight", n_ff, n_embd, 1.0 / np.sqrt(n_embd))
        q8(f"blk.{i}.ffn_down.weight", n_embd, n_ff, 1.0 / np.sqrt(n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
