"""Tiny GGUF models written with the ``gguf`` package, for admission tests.

They are real, loadable llama.cpp models (random weights, a byte-level SPM
vocabulary) that differ from the embedded family in exactly one property:
the architecture, attention biases, or the head layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_EMBD = 64
N_FF = 128
N_LAYER = 2
N_VOCAB = 3 + 256


def _vocab(w) -> None:
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * 256)  # unknown, control, control, byte
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def write_tiny(path: str | Path, *, arch: str = "llama", n_head: int = 4, n_head_kv: int = 2,
               qkv_bias: bool = False, seed: int = 0) -> Path:
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
    _vocab(w)

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
