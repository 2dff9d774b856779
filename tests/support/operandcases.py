"""Random attention operands for the replay tool: Q (n_q, h, d) f32, K and V (n_kv, h_kv, d) f16
and a causal (or empty) mask (n_q, n_kv); and the ggml devices the tool lists (``--list-devices``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from refspec.core.errors import ReplayToolError


def random_case(n_q: int, n_kv: int, h: int = 8, hkv: int = 2, d: int = 64, seed: int = 0, mask: str = "causal"):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_q, h, d)).astype(np.float32)
    k = rng.standard_normal((n_kv, hkv, d)).astype(np.float16)
    v = rng.standard_normal((n_kv, hkv, d)).astype(np.float16)
    m = np.zeros((n_q, n_kv), np.float32)
    for j in range(n_q):
        if mask == "causal":
            m[j, n_kv - n_q + j + 1 :] = -np.inf
    return q, k, v, m


def list_devices(tool: str | Path) -> list[dict[str, Any]]:
    proc = subprocess.run([str(tool), "--list-devices"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReplayToolError(f"--list-devices failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)["devices"]
