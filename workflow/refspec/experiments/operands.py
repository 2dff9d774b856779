"""Frozen attention operands and stage outputs: their container format and the operand set.

The operand file (``.rsop``) and stage file (``.rsst``) share one container, documented in
``anc/operands.md``: 8 magic bytes ``RFSPOPS1``, a little-endian u64 header length, a UTF-8
JSON header, zero padding to 64 bytes, then the raw little-endian tensor blobs, each 64-byte
aligned. Every tensor entry carries ggml's ``ne``/``nb`` (axis 0 first), a byte ``offset`` of the
view inside its blob and the blob's location, size and sha256, so a view of a larger buffer (a
permuted Q inside a fused projection, K/V inside a larger cache, transposed V) is stored as the
runtime saw it.

Logical orders used on the Python side (numpy, row-major):

======== ===================== ===================================
tensor   logical shape         ggml element
======== ===================== ===================================
q        (n_q, h, d)           q[j, a, c] = Q(c, j, a, 0)
k        (n_kv, h_kv, d)       k[t, g, c] = K(c, t, g, 0)
v        (n_kv, h_kv, d_v)     v[t, g, c] = V(t, c, g, 0)  (transposed cache)
mask     (n_q, n_kv)           mask[j, t] = M(t, j, 0, 0)
kq, sm   (n_q, h, n_kv)        stage outputs, whatever the layout
kqv      (n_q, h, d_v)
out      (n_q, h*d_v)          the restored (d_v*h, n_q) output
======== ===================== ===================================
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import IntegrityError, UsageError
from ..core.fsutil import atomic_write_bytes
from ..core.hashing import sha256_bytes

MAGIC = b"RFSPOPS1"
ALIGN = 64
FORMAT_VERSION = 1
STAGES = ("kq", "kq_soft_max", "kqv", "out")

_DTYPES = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2")}
_REQUIRED_TYPES = {"q": "f32", "k": "f16", "v": "f16", "mask": "f32"}


class OperandError(IntegrityError):
    """An operand or stage file that cannot be compared: bad shape, truncated, non-finite..."""


# ------------------------------------------------------------------------------------------
# tensors and the container


def _align(x: int) -> int:
    return (x + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class OperandTensor:
    """One ggml view: element (i0, i1, i2, i3) lies at ``offset + sum(i*nb)`` bytes in ``blob``."""

    type: str
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    offset: int
    blob: bytes
    axes: tuple[str, ...] | None = None  # stage files only

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.type]

    def extent_bytes(self) -> int:
        """One past the last byte the view touches (relative to the blob)."""
        last = self.offset + sum((n - 1) * s for n, s in zip(self.ne, self.nb))
        return last + self.dtype.itemsize

    def check(self, name: str) -> None:
        if self.type not in _DTYPES:
            raise OperandError(f"tensor {name!r}: unsupported type {self.type!r}")
        if len(self.ne) != 4 or len(self.nb) != 4:
            raise OperandError(f"tensor {name!r}: ne and nb need 4 entries")
        if any(int(n) < 1 for n in self.ne):
            raise OperandError(f"tensor {name!r}: non-positive extent in ne={list(self.ne)}")
        isz = self.dtype.itemsize
        if self.nb[0] != isz:
            raise OperandError(f"tensor {name!r}: nb0={self.nb[0]} is not the element size {isz}")
        if self.offset % isz or len(self.blob) % isz:
            raise OperandError(f"tensor {name!r}: offset or blob size not a multiple of {isz}")
        if self.offset < 0 or any(s < 0 for s in self.nb):
            raise OperandError(f"tensor {name!r}: negative offset or stride")
        if self.extent_bytes() > len(self.blob):
            raise OperandError(
                f"tensor {name!r}: view reaches byte {self.extent_bytes()} but the blob has "
                f"{len(self.blob)} bytes (wrong shape/stride or truncated tensor)"
            )

    def array(self) -> np.ndarray:
        """The view as a read-only numpy array in ggml order reversed: shape (ne3, ne2, ne1, ne0)."""
        return np.ndarray(
            shape=tuple(reversed(self.ne)),
            dtype=self.dtype,
            buffer=self.blob,
            offset=self.offset,
            strides=tuple(reversed(self.nb)),
        )

    def header(self, blob_offset: int) -> dict[str, Any]:
        h: dict[str, Any] = {
            "type": self.type,
            "ne": [int(x) for x in self.ne],
            "nb": [int(x) for x in self.nb],
            "offset": int(self.offset),
            "blob": {"offset": blob_offset, "size": len(self.blob), "sha256": sha256_bytes(self.blob)},
        }
        if self.axes is not None:
            h["axes"] = list(self.axes)
        return h


def contiguous_tensor(arr: np.ndarray, type_: str) -> OperandTensor:
    """A contiguous tensor from a numpy array whose last axis is ggml's dim 0."""
    a = np.ascontiguousarray(arr, dtype=_DTYPES[type_])
    shape = list(reversed(a.shape)) + [1] * (4 - a.ndim)
    isz = a.dtype.itemsize
    nb = [isz]
    for n in shape[:3]:
        nb.append(nb[-1] * n)
    return OperandTensor(type_, tuple(shape), tuple(nb), 0, a.tobytes())


def write_container(path: str | Path, header: Mapping[str, Any], tensors: Mapping[str, OperandTensor]) -> None:
    hdr = dict(header)
    entries: dict[str, Any] = {}
    blobs: list[bytes] = []
    off = 0
    for name, t in tensors.items():
        entries[name] = t.header(off)
        blobs.append(t.blob)
        off = _align(off + len(t.blob))
    hdr["tensors"] = entries
    hdr["version"] = FORMAT_VERSION
    text = json.dumps(hdr, sort_keys=False, separators=(",", ":")).encode("utf-8")
    out = bytearray(MAGIC + struct.pack("<Q", len(text)) + text)
    out.extend(b"\0" * (_align(len(out)) - len(out)))
    for b in blobs:
        out.extend(b)
        out.extend(b"\0" * (_align(len(out)) - len(out)))
    atomic_write_bytes(path, bytes(out))


def read_container(path: str | Path, *, verify_hashes: bool = True) -> tuple[dict[str, Any], dict[str, OperandTensor]]:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise OperandError(f"{p}: cannot read: {e}") from e
    if len(data) < 16 or data[:8] != MAGIC:
        raise OperandError(f"{p}: not a refspec operand/stage file (bad magic)")
    (hlen,) = struct.unpack("<Q", data[8:16])
    if 16 + hlen > len(data):
        raise OperandError(f"{p}: truncated header ({hlen} bytes announced, {len(data) - 16} present)")
    try:
        header = json.loads(data[16 : 16 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OperandError(f"{p}: header is not valid JSON: {e}") from e
    if header.get("version") != FORMAT_VERSION:
        raise OperandError(f"{p}: unsupported format version {header.get('version')!r}")
    start = _align(16 + hlen)
    tensors: dict[str, OperandTensor] = {}
    for name, e in header.get("tensors", {}).items():
        try:
            boff, bsize = int(e["blob"]["offset"]), int(e["blob"]["size"])
            t_type, ne, nb, voff = (
                e["type"],
                tuple(int(x) for x in e["ne"]),
                tuple(int(x) for x in e["nb"]),
                int(e["offset"]),
            )
        except (KeyError, TypeError, ValueError) as ex:
            raise OperandError(f"{p}: tensor {name!r}: malformed entry ({ex})") from ex
        end = start + boff + bsize
        if end > len(data):
            raise OperandError(
                f"{p}: tensor {name!r} is truncated: its blob needs bytes up to {end}, the file has {len(data)}"
            )
        blob = data[start + boff : end]
        if verify_hashes and "sha256" in e["blob"] and sha256_bytes(blob) != e["blob"]["sha256"]:
            raise OperandError(f"{p}: tensor {name!r}: blob sha256 does not match the header")
        t = OperandTensor(t_type, ne, nb, voff, blob, tuple(e["axes"]) if "axes" in e else None)  # type: ignore[arg-type]
        t.check(name)
        tensors[name] = t
    return header, tensors


# ------------------------------------------------------------------------------------------
# operands


def _f32_bits(x: float) -> str:
    return struct.pack("<f", float(x))[::-1].hex()


def _f32_from_bits(s: str) -> float:
    return struct.unpack("<f", bytes.fromhex(s)[::-1])[0]


@dataclass
class Operands:
    q: OperandTensor
    k: OperandTensor
    v: OperandTensor
    mask: OperandTensor
    scale: float
    max_bias: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, OperandTensor] = field(default_factory=dict)  # optional captured stage outputs

    # shapes ---------------------------------------------------------------------------
    @property
    def d(self) -> int:
        return self.q.ne[0]

    @property
    def n_q(self) -> int:
        return self.q.ne[1]

    @property
    def n_head(self) -> int:
        return self.q.ne[2]

    @property
    def n_kv(self) -> int:
        return self.k.ne[1]

    @property
    def n_head_kv(self) -> int:
        return self.k.ne[2]

    @property
    def d_v(self) -> int:
        return self.v.ne[1]

    def attention_header(self) -> dict[str, Any]:
        s32 = float(np.float32(self.scale))
        mb32 = float(np.float32(self.max_bias))
        return {
            "scale": s32,
            "scale_f32_bits": _f32_bits(s32),
            "max_bias": mb32,
            "max_bias_f32_bits": _f32_bits(mb32),
            "n_q": self.n_q,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "head_dim": self.d,
            "head_dim_v": self.d_v,
            "n_kv": self.n_kv,
            "gqa": "contiguous",
        }

    # logical views ----------------------------------------------------------------------
    def logical_q(self) -> np.ndarray:
        return self.q.array()[0].transpose(1, 0, 2)  # (h, n_q, d) -> (n_q, h, d)

    def logical_k(self) -> np.ndarray:
        return self.k.array()[0].transpose(1, 0, 2)  # (h_kv, n_kv, d) -> (n_kv, h_kv, d)

    def logical_v(self) -> np.ndarray:
        return self.v.array()[0].transpose(2, 0, 1)  # (h_kv, d_v, n_kv) -> (n_kv, h_kv, d_v)

    def logical_mask(self) -> np.ndarray:
        return self.mask.array()[0, 0, : self.n_q, :]  # (n_q, n_kv)


def make_operands(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    scale: float | None = None,
    *,
    q_layout: str = "compact",
    kv_size: int | None = None,
    mask_rows: int | None = None,
    sentinel: float = float("nan"),
    meta: Mapping[str, Any] | None = None,
) -> Operands:
    """Operands laid out as llama.cpp's non-flash attention sees them after its permutes.

    ``q`` (n_q, h, d) f32, ``k`` (n_kv, h_kv, d) f16, ``v`` (n_kv, h_kv, d_v) f16, ``mask``
    (n_q, n_kv) f32 (0 or -inf). ``q_layout='compact'`` stores Q as the contiguous
    (d, h, n_q) projection output seen through the (0, 2, 1, 3) permute; ``'offset'`` stores it
    inside a wider fused-projection row at a non-zero offset (padding filled with
    ``sentinel``). K sits in a (kv_size, h_kv, d) cache, V in a transposed
    (h_kv, d_v, kv_size) cache; unused cells hold ``sentinel``.
    """
    q = np.asarray(q, dtype=np.float32)
    k = np.asarray(k, dtype=np.float16)
    v = np.asarray(v, dtype=np.float16)
    mask = np.asarray(mask, dtype=np.float32)
    n_q, h, d = q.shape
    n_kv, h_kv, dk = k.shape
    n_kv_v, h_kv_v, d_v = v.shape
    if dk != d or n_kv_v != n_kv or h_kv_v != h_kv or mask.shape != (n_q, n_kv):
        raise UsageError(f"inconsistent operand shapes q{q.shape} k{k.shape} v{v.shape} mask{mask.shape}")
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    kv_size = n_kv if kv_size is None else kv_size
    if kv_size < n_kv:
        raise UsageError("kv_size must be at least n_kv")
    rows = n_q if mask_rows is None else mask_rows
    if rows < n_q:
        raise UsageError("mask_rows must be at least n_q")

    # Q
    if q_layout == "compact":
        qt = OperandTensor("f32", (d, n_q, h, 1), (4, 4 * d * h, 4 * d, 4 * d * h * n_q), 0, q.tobytes())
    elif q_layout == "offset":
        pre = d * h_kv  # Q follows a K block inside a fused [K | Q | V] projection row
        row = d * h + 2 * d * h_kv
        base = np.full((n_q, row), sentinel, dtype=np.float32)
        base[:, pre : pre + d * h] = q.reshape(n_q, d * h)
        qt = OperandTensor("f32", (d, n_q, h, 1), (4, 4 * row, 4 * d, 4 * row * n_q), 4 * pre, base.tobytes())
    else:
        raise UsageError(f"unknown q_layout {q_layout!r} (compact, offset)")
    # K: cache (kv_size, h_kv, d), view (d, n_kv, h_kv)
    kb = np.full((kv_size, h_kv, d), sentinel, dtype=np.float16)
    kb[:n_kv] = k
    kt = OperandTensor("f16", (d, n_kv, h_kv, 1), (2, 2 * d * h_kv, 2 * d, 2 * d * h_kv * kv_size), 0, kb.tobytes())
    # V: transposed cache (h_kv, d_v, kv_size), view (n_kv, d_v, h_kv)
    vb = np.full((h_kv, d_v, kv_size), sentinel, dtype=np.float16)
    vb[:, :, :n_kv] = v.transpose(1, 2, 0)
    vt = OperandTensor(
        "f16", (n_kv, d_v, h_kv, 1), (2, 2 * kv_size, 2 * kv_size * d_v, 2 * kv_size * d_v * h_kv), 0, vb.tobytes()
    )
    # mask (n_kv, rows)
    mb = np.full((rows, n_kv), -np.inf, dtype=np.float32)
    mb[:n_q] = mask
    mt = OperandTensor("f32", (n_kv, rows, 1, 1), (4, 4 * n_kv, 4 * n_kv * rows, 4 * n_kv * rows), 0, mb.tobytes())
    return Operands(qt, kt, vt, mt, float(np.float32(scale)), 0.0, dict(meta or {}))


def write_operands(path: str | Path, ops: Operands, *, validate: bool = True) -> None:
    if validate:
        validate_operands(ops)
    header = {
        "format": "refspec-operands",
        "attention": ops.attention_header(),
        "meta": ops.meta,
    }
    tensors = {"q": ops.q, "k": ops.k, "v": ops.v, "mask": ops.mask}
    for name, t in ops.refs.items():
        tensors[f"ref.{name}"] = t
    write_container(path, header, tensors)


def read_operands(path: str | Path, *, validate: bool = True) -> Operands:
    header, tensors = read_container(path)
    if header.get("format") != "refspec-operands":
        raise OperandError(f"{path}: not an operand file (format {header.get('format')!r})")
    missing = [n for n in ("q", "k", "v", "mask") if n not in tensors]
    if missing:
        raise OperandError(f"{path}: missing tensors {missing}")
    att = header.get("attention", {})
    scale = _f32_from_bits(att["scale_f32_bits"]) if "scale_f32_bits" in att else float(att.get("scale", "nan"))
    mb = _f32_from_bits(att["max_bias_f32_bits"]) if "max_bias_f32_bits" in att else float(att.get("max_bias", 0.0))
    refs = {n[4:]: t for n, t in tensors.items() if n.startswith("ref.")}
    ops = Operands(tensors["q"], tensors["k"], tensors["v"], tensors["mask"], scale, mb, header.get("meta", {}), refs)
    if validate:
        validate_operands(ops, declared=att, where=str(path))
    return ops


def validate_operands(ops: Operands, *, declared: Mapping[str, Any] | None = None, where: str = "operands") -> None:
    """Raise :class:`OperandError` for anything that would make a comparison meaningless."""
    for name in ("q", "k", "v", "mask"):
        t = getattr(ops, name)
        t.check(name)
        if t.type != _REQUIRED_TYPES[name]:
            raise OperandError(f"{where}: {name} must be {_REQUIRED_TYPES[name]}, got {t.type}")
    q, k, v, m = ops.q, ops.k, ops.v, ops.mask
    probs = []
    if q.ne[3] != 1 or k.ne[3] != 1 or v.ne[3] != 1 or m.ne[2] != 1 or m.ne[3] != 1:
        probs.append("one sequence/stream only: dim 3 of q/k/v and dims 2-3 of the mask must be 1")
    if k.ne[0] != q.ne[0]:
        probs.append(f"wrong shape: k head dim {k.ne[0]} != q head dim {q.ne[0]}")
    if v.ne[0] != k.ne[1]:
        probs.append(f"wrong shape: v key extent {v.ne[0]} != k key extent {k.ne[1]}")
    if v.ne[2] != k.ne[2]:
        probs.append(f"wrong shape: v has {v.ne[2]} kv heads, k has {k.ne[2]}")
    if k.ne[2] == 0 or q.ne[2] % k.ne[2]:
        probs.append(f"wrong shape: {q.ne[2]} query heads are not a multiple of {k.ne[2]} kv heads")
    if m.ne[0] != k.ne[1]:
        probs.append(f"wrong shape: mask key extent {m.ne[0]} != k key extent {k.ne[1]}")
    if m.ne[1] < q.ne[1]:
        probs.append(f"wrong shape: mask has {m.ne[1]} rows for {q.ne[1]} queries")
    if m.nb[1] != 4 * m.ne[0]:
        probs.append("mask rows must be contiguous (nb1 == 4*n_kv)")
    if not np.isfinite(ops.scale) or ops.scale <= 0:
        probs.append(f"scale {ops.scale!r} is not a positive finite number")
    if declared:
        for key, val in (
            ("n_q", ops.n_q),
            ("n_head", ops.n_head),
            ("n_head_kv", ops.n_head_kv),
            ("n_kv", ops.n_kv),
            ("head_dim", ops.d),
            ("head_dim_v", ops.d_v),
        ):
            if key in declared and int(declared[key]) != val:
                probs.append(f"wrong shape: header says {key}={declared[key]}, the tensors give {val}")
        if declared.get("gqa", "contiguous") != "contiguous":
            probs.append("only contiguous-group GQA is supported")
    if probs:
        raise OperandError(f"{where}: " + "; ".join(probs))

    mask = ops.logical_mask()
    if np.isnan(mask).any() or np.isposinf(mask).any():
        j, t = np.argwhere(np.isnan(mask) | np.isposinf(mask))[0]
        raise OperandError(f"{where}: mask has NaN or +inf at query {j}, key {t} (allowed: finite or -inf)")
    visible = np.isfinite(mask)  # (n_q, n_kv)
    empty = np.flatnonzero(~visible.any(axis=1))
    if empty.size:
        raise OperandError(f"{where}: query {int(empty[0])} has no visible key (empty mask row)")
    qa = ops.logical_q()
    if not np.isfinite(qa).all():
        j, a, c = np.argwhere(~np.isfinite(qa))[0]
        raise OperandError(f"{where}: non-finite q value at query {j}, head {a}, channel {c}")
    used = visible.any(axis=0)  # keys masked in for at least one query
    for name, arr in (("k", ops.logical_k()), ("v", ops.logical_v())):
        bad = ~np.isfinite(arr) & used[:, None, None]
        if bad.any():
            t, g, c = np.argwhere(bad)[0]
            j = int(np.flatnonzero(visible[:, t])[0])
            raise OperandError(
                f"{where}: non-finite {name} value at key {t}, kv head {g}, channel {c}, "
                f"which is masked in for query {j}"
            )


# ------------------------------------------------------------------------------------------
# stage files


def _canonical(t: OperandTensor, name: str) -> np.ndarray:
    if t.axes is None or len(t.axes) != 4:
        raise OperandError(f"stage tensor {name!r} has no axes description")
    arr = np.array(t.array(), dtype=np.float32, copy=True)  # axes reversed: (ne3, ne2, ne1, ne0)
    names = list(reversed(t.axes))
    keep = [i for i, n in enumerate(names) if n != "one"]
    for i, n in enumerate(names):
        if n == "one" and arr.shape[i] != 1:
            raise OperandError(f"stage tensor {name!r}: axis 'one' has extent {arr.shape[i]}")
    arr = arr.reshape([arr.shape[i] for i in keep])
    names = [names[i] for i in keep]
    inner = "key" if "key" in names else "chan"
    order = [names.index("query"), names.index("head"), names.index(inner)]
    return arr.transpose(order)


def read_stages(path: str | Path) -> dict[str, np.ndarray]:
    """Stage outputs in logical order: kq/kq_soft_max (n_q, h, n_kv), kqv (n_q, h, d_v), out (n_q, h*d_v)."""
    header, tensors = read_container(path)
    if header.get("format") != "refspec-stages":
        raise OperandError(f"{path}: not a stage file")
    out = {}
    for name in STAGES:
        if name not in tensors:
            raise OperandError(f"{path}: missing stage {name!r}")
        arr = _canonical(tensors[name], name)
        if name == "out":
            arr = arr.reshape(arr.shape[0], -1)
        out[name] = arr
    return out
