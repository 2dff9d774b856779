"""Sequence KV state: export, payload files, validation, structural parsing and splicing.

The raw sequence state is what ``llama_state_seq_get_data`` writes for one
sequence (src/llama-kv-cache.cpp, ``state_write``; pinned source). For a
single-stream, non-M-RoPE cache it is, little-endian::

    u32 magic (0xaf143cd8)  i32 seq_id  u32 n_stream (= 1)  u32 cell_count
    cell_count x (i32 pos, u32 n_seq_id (= 1), i32 seq_id)
    u32 v_trans  u32 n_layer
    n_layer x (i32 k_type, u64 k_row_size, cell_count * k_row_size bytes)      # token-major K
    v_trans = 0: n_layer x (i32 v_type, u64 v_row_size, cell_count * v_row_size bytes)
    v_trans = 1: n_layer x (i32 v_type, u32 v_el_size, u32 n_embd_v_gqa,
                           n_embd_v_gqa * cell_count * v_el_size bytes)        # feature-major V

(the non-flash-attention cache stores V transposed, so V of one cell is a
strided column). :func:`parse_state` walks that structure with bounds checks
and returns where every region lies; :func:`splice` copies chosen regions
(layers x K/V x cells) of a donor state into a recipient state using the
actual storage strides.

A *payload file* (``.kv`` for KV state, ``.logits`` for an FP32 logits row) is::

    b"REFSPEC-PAYLOAD/1\\n" + <canonical JSON header> + b"\\n" + <body>

The header records the kind, the model's sha256, the context size, the cell
count, the positions, per-layer offsets and sizes (KV), ``n_vocab`` (logits),
``body_size`` and ``body_sha256``. :func:`read_payload` refuses a payload whose
magic, header, length or body hash is wrong; :func:`import_state` further
refuses one made for another model or another context size, or whose body does
not have the structure the header promises -- all before anything reaches
``llama_state_seq_set_data``.
"""

from __future__ import annotations

import ctypes
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.errors import DecodeError, IntegrityError
from ...core.fsutil import atomic_write_bytes
from ...core.hashing import canonical_json, sha256_bytes
from ...native.runtime import last_log_errors

STATE_MAGIC = 0xAF143CD8
PAYLOAD_MAGIC = b"REFSPEC-PAYLOAD/1\n"
PAYLOAD_FORMAT = 1
_MAX_HEADER = 64 << 20
GGML_TYPE_SIZES = {0: 4, 1: 2, 30: 2}  # f32, f16, bf16 (element sizes of the K/V types splicing supports)


# --------------------------------------------------------------------------- structure


@dataclass(frozen=True)
class Region:
    """One K or V tensor of one layer inside the raw state."""

    type: int
    offset: int  # byte offset of the data in the raw state
    size: int  # bytes
    row_size: int  # K / non-transposed V: bytes per cell; transposed V: bytes per feature row
    n_rows: int  # K / non-transposed V: cells; transposed V: features (n_embd_v_gqa)
    el_size: int  # element size in bytes (0 when unknown)


@dataclass(frozen=True)
class StateLayout:
    seq_id: int
    cell_count: int
    positions: tuple[int, ...]
    v_trans: bool
    n_layer: int
    k: tuple[Region, ...]
    v: tuple[Region, ...]
    size: int

    def header(self) -> dict:
        return {
            "cell_count": self.cell_count,
            "positions": list(self.positions),
            "v_trans": self.v_trans,
            "n_layer": self.n_layer,
            "layers": [
                {
                    "k_type": k.type,
                    "k_offset": k.offset,
                    "k_size": k.size,
                    "k_row_size": k.row_size,
                    "v_type": v.type,
                    "v_offset": v.offset,
                    "v_size": v.size,
                    "v_row_size": v.row_size,
                    "v_rows": v.n_rows,
                    "v_el_size": v.el_size,
                }
                for k, v in zip(self.k, self.v)
            ],
        }

    def cells_of(self, p0: int, p1: int | None) -> np.ndarray:
        """Indices of the cells whose position lies in [p0, p1)."""
        pos = np.asarray(self.positions)
        sel = pos >= p0
        if p1 is not None:
            sel &= pos < p1
        return np.nonzero(sel)[0]


class _Reader:
    def __init__(self, data: bytes | memoryview):
        self.b = data
        self.o = 0

    def take(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        if self.o + n > len(self.b):
            raise IntegrityError(f"KV state truncated: {what} at byte {self.o} runs past the end ({len(self.b)} bytes)")
        v = struct.unpack_from(fmt, self.b, self.o)
        self.o += n
        return v

    def skip(self, n: int, what: str) -> int:
        if n < 0 or self.o + n > len(self.b):
            raise IntegrityError(
                f"KV state truncated: {what} ({n} bytes at byte {self.o}) runs past the end ({len(self.b)} bytes)"
            )
        o = self.o
        self.o += n
        return o


def parse_state(raw: bytes | memoryview) -> StateLayout:
    """Walk a raw sequence state (see the module docstring) and locate every region."""
    r = _Reader(raw)
    magic, seq_id = r.take("<Ii", "magic")
    if magic != STATE_MAGIC:
        raise IntegrityError(f"not a llama.cpp sequence state (magic {magic:#x}, expected {STATE_MAGIC:#x})")
    (n_stream,) = r.take("<I", "stream count")
    if n_stream != 1:
        raise IntegrityError(f"KV state has {n_stream} streams; only single-stream states are supported")
    (cell_count,) = r.take("<I", "cell count")
    if cell_count == 0:
        raise IntegrityError("KV state holds no cells")
    positions = []
    for i in range(cell_count):
        pos, n_seq = r.take("<iI", f"cell {i} metadata")
        if n_seq != 1:
            raise IntegrityError(f"KV state cell {i} belongs to {n_seq} sequences (expected 1)")
        r.take("<i", f"cell {i} sequence id")
        positions.append(pos)
    v_trans, n_layer = r.take("<II", "layer header")
    if v_trans not in (0, 1) or not 0 < n_layer < 100000:
        raise IntegrityError(f"KV state has an implausible layer header (v_trans {v_trans}, n_layer {n_layer})")
    ks, vs = [], []
    for il in range(n_layer):
        ktype, krow = r.take("<iQ", f"layer {il} K header")
        off = r.skip(cell_count * krow, f"layer {il} K data")
        el = GGML_TYPE_SIZES.get(ktype, 0)
        ks.append(Region(ktype, off, cell_count * krow, krow, cell_count, el))
    for il in range(n_layer):
        if not v_trans:
            vtype, vrow = r.take("<iQ", f"layer {il} V header")
            off = r.skip(cell_count * vrow, f"layer {il} V data")
            vs.append(Region(vtype, off, cell_count * vrow, vrow, cell_count, GGML_TYPE_SIZES.get(vtype, 0)))
        else:
            vtype, el, n_embd = r.take("<iII", f"layer {il} V header")
            off = r.skip(n_embd * cell_count * el, f"layer {il} V data")
            vs.append(Region(vtype, off, n_embd * cell_count * el, cell_count * el, n_embd, el))
    if r.o != len(raw):
        raise IntegrityError(f"KV state has {len(raw) - r.o} trailing bytes after the last layer")
    return StateLayout(seq_id, cell_count, tuple(positions), bool(v_trans), n_layer, tuple(ks), tuple(vs), len(raw))


# --------------------------------------------------------------------------- context I/O


def export_state(ctx, seq_id: int = 0) -> bytes:
    """The raw sequence state of ``seq_id`` (``llama_state_seq_get_data``)."""
    lc = ctx._l
    n = int(lc.llama_state_seq_get_size(ctx._ptr, seq_id))
    if n <= 0:
        raise DecodeError("llama_state_seq_get_size returned 0")
    buf = (ctypes.c_uint8 * n)()
    got = int(lc.llama_state_seq_get_data(ctx._ptr, buf, n, seq_id))
    if got != n:
        raise DecodeError(f"llama_state_seq_get_data wrote {got} bytes, expected {n}")
    return bytes(buf)


# --------------------------------------------------------------------------- payloads


@dataclass
class Payload:
    header: dict
    body: bytes

    @property
    def kind(self) -> str:
        return self.header["kind"]

    @property
    def sha256(self) -> str:
        return self.header["body_sha256"]

    def to_bytes(self) -> bytes:
        return PAYLOAD_MAGIC + canonical_json(self.header) + b"\n" + self.body

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        atomic_write_bytes(p, self.to_bytes())
        return p

    def logits(self) -> np.ndarray:
        if self.kind != "logits":
            raise IntegrityError(f"payload is {self.kind}, not logits")
        return np.frombuffer(self.body, dtype="<f4").astype(np.float32)


def kv_payload(raw: bytes, *, model_sha256: str, n_ctx: int, meta: dict | None = None) -> Payload:
    """Wrap a raw sequence state with its header (structure, model, context, body hash)."""
    layout = parse_state(raw)
    header = {
        "format": PAYLOAD_FORMAT,
        "kind": "kv",
        "model_sha256": model_sha256,
        "n_ctx": int(n_ctx),
        **layout.header(),
        "body_size": len(raw),
        "body_sha256": sha256_bytes(raw),
        "meta": meta or {},
    }
    return Payload(header, bytes(raw))


def logits_payload(row: np.ndarray, *, model_sha256: str, meta: dict | None = None) -> Payload:
    body = np.ascontiguousarray(row, dtype="<f4").tobytes()
    header = {
        "format": PAYLOAD_FORMAT,
        "kind": "logits",
        "model_sha256": model_sha256,
        "n_vocab": int(row.shape[-1]),
        "dtype": "float32-le",
        "body_size": len(body),
        "body_sha256": sha256_bytes(body),
        "meta": meta or {},
    }
    return Payload(header, body)


def logits_sha256(row: np.ndarray) -> str:
    return sha256_bytes(np.ascontiguousarray(row, dtype="<f4").tobytes())


def parse_payload(data: bytes, *, source: str = "payload") -> Payload:
    """Split and check a payload: magic, header, body length and body sha256."""
    if not data.startswith(PAYLOAD_MAGIC):
        raise IntegrityError(f"{source}: not a refspec payload (bad magic)")
    start = len(PAYLOAD_MAGIC)
    end = data.find(b"\n", start, start + _MAX_HEADER)
    if end < 0:
        raise IntegrityError(f"{source}: payload header is not terminated")
    try:
        header = json.loads(data[start:end].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IntegrityError(f"{source}: payload header is not JSON ({e})") from None
    if (
        not isinstance(header, dict)
        or header.get("format") != PAYLOAD_FORMAT
        or header.get("kind") not in ("kv", "logits")
    ):
        raise IntegrityError(f"{source}: payload header has an unknown format or kind")
    for key in ("model_sha256", "body_size", "body_sha256"):
        if key not in header:
            raise IntegrityError(f"{source}: payload header lacks {key}")
    body = data[end + 1 :]
    if len(body) != header["body_size"]:
        raise IntegrityError(
            f"{source}: wrong length: body has {len(body)} bytes, the header records {header['body_size']}"
        )
    got = sha256_bytes(body)
    if got != header["body_sha256"]:
        raise IntegrityError(
            f"{source}: corrupted: body sha256 {got} differs from the {header['body_sha256']} recorded at export"
        )
    if header["kind"] == "logits" and header.get("n_vocab", -1) * 4 != len(body):
        raise IntegrityError(
            f"{source}: logits body of {len(body)} bytes does not hold n_vocab {header.get('n_vocab')} float32 values"
        )
    return Payload(header, body)


def read_payload(path: str | Path) -> Payload:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise IntegrityError(f"{p}: payload not found") from None
    return parse_payload(data, source=str(p))


def check_kv_payload(pl: Payload, *, model_sha256: str, n_ctx: int, source: str = "payload") -> StateLayout:
    """Everything :func:`import_state` checks before it touches the context."""
    h = pl.header
    if pl.kind != "kv":
        raise IntegrityError(f"{source}: is a {pl.kind} payload, not a KV state")
    if h["model_sha256"] != model_sha256:
        raise IntegrityError(
            f"{source}: wrong model: payload exported from model sha256 {h['model_sha256']}, "
            f"the receiving model is {model_sha256}"
        )
    if h.get("n_ctx") != n_ctx:
        raise IntegrityError(
            f"{source}: exported from a context of n_ctx {h.get('n_ctx')}, the receiving context has n_ctx {n_ctx}"
        )
    layout = parse_state(pl.body)
    want = {k: h.get(k) for k in ("cell_count", "positions", "v_trans", "n_layer", "layers")}
    if layout.header() != want:
        raise IntegrityError(f"{source}: body structure (cells, positions, layer offsets) differs from its header")
    if layout.cell_count > n_ctx:
        raise IntegrityError(f"{source}: {layout.cell_count} cells do not fit a context of {n_ctx}")
    if sorted(layout.positions) != list(range(layout.cell_count)):
        raise IntegrityError(f"{source}: positions are not 0..{layout.cell_count - 1}")
    return layout


def import_state(ctx, pl: Payload, *, model_sha256: str, seq_id: int = 0, source: str = "payload") -> StateLayout:
    """Validate a KV payload against this context, then restore it into ``seq_id``."""
    layout = check_kv_payload(pl, model_sha256=model_sha256, n_ctx=ctx.spec.n_ctx, source=source)
    if layout.n_layer != ctx.model.n_layer:
        raise IntegrityError(f"{source}: {layout.n_layer} layers, the model has {ctx.model.n_layer}")
    lc = ctx._l
    buf = (ctypes.c_uint8 * len(pl.body)).from_buffer_copy(pl.body)
    got = int(lc.llama_state_seq_set_data(ctx._ptr, buf, len(pl.body), seq_id))
    if got == 0:
        raise IntegrityError(f"{source}: llama_state_seq_set_data refused the state: {last_log_errors()}")
    if got != len(pl.body):
        raise IntegrityError(f"{source}: llama_state_seq_set_data consumed {got} of {len(pl.body)} bytes")
    pm = int(lc.llama_memory_seq_pos_max(ctx.mem, seq_id))
    if pm != max(layout.positions):
        raise IntegrityError(
            f"{source}: after restore the sequence ends at position {pm}, expected {max(layout.positions)}"
        )
    return layout


# --------------------------------------------------------------------------- selectors and splicing


@dataclass(frozen=True)
class Selector:
    """Which regions to take from the donor: layers x parts (K and/or V) x positions [p0, p1)."""

    name: str
    layers: tuple[int, ...]
    parts: tuple[str, ...]  # subset of ("K", "V")
    p0: int = 0
    p1: int | None = None  # None: to the end

    def record(self) -> dict:
        return {"name": self.name, "layers": list(self.layers), "parts": list(self.parts), "p0": self.p0, "p1": self.p1}


SELECTOR_NAMES = (
    "EMPTY",
    "ALL",
    "L0_K",
    "L0_V",
    "L0_KV",
    "K_ALL",
    "V_ALL",
    "EARLY",
    "MIDDLE",
    "LATE",
    "PREFIX",
    "TAIL",
)


def layer_groups(n_layer: int) -> dict[str, tuple[int, ...]]:
    """Early / middle / late: the first and last quarter (rounded down) and the half between."""
    q = n_layer // 4
    return {
        "EARLY": tuple(range(0, q)),
        "MIDDLE": tuple(range(q, n_layer - q)),
        "LATE": tuple(range(n_layer - q, n_layer)),
    }


def make_selector(name: str, n_layer: int, boundary: int) -> Selector:
    """The named selectors; ``boundary`` splits PREFIX [0, boundary) from TAIL [boundary, end)."""
    everything = tuple(range(n_layer))
    kv = ("K", "V")
    groups = layer_groups(n_layer)
    table = {
        "EMPTY": Selector("EMPTY", (), ()),
        "ALL": Selector("ALL", everything, kv),
        "L0_K": Selector("L0_K", (0,), ("K",)),
        "L0_V": Selector("L0_V", (0,), ("V",)),
        "L0_KV": Selector("L0_KV", (0,), kv),
        "K_ALL": Selector("K_ALL", everything, ("K",)),
        "V_ALL": Selector("V_ALL", everything, ("V",)),
        "EARLY": Selector("EARLY", groups["EARLY"], kv),
        "MIDDLE": Selector("MIDDLE", groups["MIDDLE"], kv),
        "LATE": Selector("LATE", groups["LATE"], kv),
        "PREFIX": Selector("PREFIX", everything, kv, 0, boundary),
        "TAIL": Selector("TAIL", everything, kv, boundary, None),
    }
    if name not in table:
        raise KeyError(f"unknown selector {name!r} (known: {', '.join(SELECTOR_NAMES)})")
    return table[name]


def _same_structure(a: StateLayout, b: StateLayout) -> None:
    if (a.cell_count, a.positions, a.v_trans, a.n_layer) != (b.cell_count, b.positions, b.v_trans, b.n_layer):
        raise IntegrityError("donor and recipient states differ in cells, positions or layers; cannot splice")
    for x, y in zip(a.k + a.v, b.k + b.v):
        if (x.type, x.offset, x.size, x.row_size, x.n_rows) != (y.type, y.offset, y.size, y.row_size, y.n_rows):
            raise IntegrityError("donor and recipient states differ in a tensor's type or size; cannot splice")


def selection_mask(layout: StateLayout, sel: Selector) -> np.ndarray:
    """A boolean mask over the raw state's bytes: True where the selector takes the donor's byte."""
    mask = np.zeros(layout.size, dtype=bool)
    cells = layout.cells_of(sel.p0, sel.p1)
    all_cells = len(cells) == layout.cell_count
    for il in sel.layers:
        if "K" in sel.parts:
            k = layout.k[il]
            m = mask[k.offset : k.offset + k.size].reshape(k.n_rows, k.row_size)  # token-major: one row per cell
            m[cells, :] = True
        if "V" in sel.parts:
            v = layout.v[il]
            if not layout.v_trans:
                m = mask[v.offset : v.offset + v.size].reshape(v.n_rows, v.row_size)
                m[cells, :] = True
            else:  # feature-major: each feature row holds one element per cell
                if v.el_size <= 0 and not all_cells:
                    raise IntegrityError(f"layer {il}: V type {v.type} has no known element size for a cell subset")
                m = mask[v.offset : v.offset + v.size].reshape(v.n_rows, layout.cell_count, v.el_size)
                m[:, cells, :] = True
    return mask


def splice(recipient: Payload, donor: Payload, sel: Selector, *, meta: dict | None = None) -> tuple[Payload, dict]:
    """The recipient's state with the selected regions copied from the donor.

    Returns the new payload (same header fields as the recipient, new body hash)
    and facts: bytes selected, bytes that actually changed, and per-part counts.
    """
    ra, da = parse_state(recipient.body), parse_state(donor.body)
    _same_structure(ra, da)
    if recipient.header["model_sha256"] != donor.header["model_sha256"]:
        raise IntegrityError("donor and recipient payloads come from different models")
    mask = selection_mask(ra, sel)
    r = np.frombuffer(recipient.body, dtype=np.uint8)
    d = np.frombuffer(donor.body, dtype=np.uint8)
    out = r.copy()
    out[mask] = d[mask]
    body = out.tobytes()
    changed = int(np.count_nonzero(out != r))
    header = dict(recipient.header)
    header["body_sha256"] = sha256_bytes(body)
    header["meta"] = {**recipient.header.get("meta", {}), **(meta or {}), "selector": sel.record()}
    facts = {
        "selected_bytes": int(mask.sum()),
        "changed_bytes": changed,
        "value_bytes": int(sum(x.size for x in ra.k + ra.v)),
    }
    return Payload(header, body), facts


# --------------------------------------------------------------------------- differences


def tensor_views(layout: StateLayout, raw: bytes) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-layer K (cells x features) and V (cells x features) as float arrays (F16/F32/BF16 states)."""
    buf = np.frombuffer(raw, dtype=np.uint8)

    def as_float(region: Region, shape: Sequence[int]) -> np.ndarray:
        chunk = buf[region.offset : region.offset + region.size]
        if region.type == 1:
            return chunk.view("<f2").reshape(shape).astype(np.float32)
        if region.type == 0:
            return chunk.view("<f4").reshape(shape).astype(np.float32)
        if region.type == 30:
            return (chunk.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
        raise IntegrityError(f"KV type {region.type} is not a float type")

    ks, vs = [], []
    n = layout.cell_count
    for k, v in zip(layout.k, layout.v):
        ks.append(as_float(k, (n, k.row_size // max(k.el_size, 1))))
        if layout.v_trans:
            vs.append(as_float(v, (v.n_rows, n)).T)
        else:
            vs.append(as_float(v, (n, v.row_size // max(v.el_size, 1))))
    return ks, vs


def layer_differences(a_raw: bytes, b_raw: bytes) -> list[dict]:
    """Per layer and part: cells, elements and bytes that differ, max |a-b| and the relative Frobenius norm."""
    la, lb = parse_state(a_raw), parse_state(b_raw)
    _same_structure(la, lb)
    ka, va = tensor_views(la, a_raw)
    kb, vb = tensor_views(lb, b_raw)
    ab = np.frombuffer(a_raw, dtype=np.uint8)
    bb = np.frombuffer(b_raw, dtype=np.uint8)
    rows = []
    for il in range(la.n_layer):
        for part, (x, y, reg) in (("K", (ka[il], kb[il], la.k[il])), ("V", (va[il], vb[il], la.v[il]))):
            diff = x != y
            cells = np.nonzero(diff.any(axis=1))[0]
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            norm = float(np.linalg.norm(x.astype(np.float64)))
            rows.append(
                {
                    "layer": il,
                    "part": part,
                    "cells_differing": int(len(cells)),
                    "first_cell": int(cells[0]) if len(cells) else None,
                    "first_position": int(la.positions[cells[0]]) if len(cells) else None,
                    "elements_differing": int(diff.sum()),
                    "bytes_differing": int(
                        np.count_nonzero(
                            ab[reg.offset : reg.offset + reg.size] != bb[reg.offset : reg.offset + reg.size]
                        )
                    ),
                    "max_abs": float(d.max()) if d.size else 0.0,
                    "rel_frobenius": float(np.linalg.norm(d) / norm) if norm > 0 else 0.0,
                }
            )
    return rows
