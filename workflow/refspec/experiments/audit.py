"""Representation audit (paper S6.2): synthetic fixtures, an integer address oracle, an FP64
scalar oracle and injected faults, evaluated with the native replay tool.

Fixtures: q in {1, 2}; key extents 127, 128, 129, 255, 256, 257; head pairs (8, 8), (8, 1),
(32, 8); d = 128; compact or legally offset permuted Q (72 geometries), times three
non-empty masks and two data patterns (432 fixtures); MQ, PQ and QB each (1,296 graph
evaluations). The four faults are injected into QB by the tool (``--fault``) on every fixture
where they change the representation. See ``anc/audit.md`` for every definition used here.
"""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import tables
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_json
from ..core.layouts import REPLAYED_LAYOUTS
from ..core.stats import DEFAULT_SEED
from . import bitwise, operands, replay_runner

Q_WIDTHS = (1, 2)
KEY_EXTENTS = (127, 128, 129, 255, 256, 257)
HEAD_PAIRS = ((8, 8), (8, 1), (32, 8))
HEAD_DIM = 128
Q_LAYOUTS = ("compact", "offset")
MASKS = ("causal", "prefix", "single")
PATTERNS = ("dyadic", "onehot")
KV_PAD = 16  # cache cells beyond the key extent (filled with NaN sentinels)

_F32_TINY = float(np.finfo(np.float32).tiny)


# ------------------------------------------------------------------------------------------
# fixtures


@dataclass(frozen=True)
class Geometry:
    n_q: int
    n_kv: int
    n_head: int
    n_head_kv: int
    d: int
    q_layout: str

    @property
    def name(self) -> str:
        return f"d{self.d}-h{self.n_head}/{self.n_head_kv}-q{self.n_q}-kv{self.n_kv}-{self.q_layout}"


@dataclass(frozen=True)
class Fixture:
    geometry: Geometry
    mask: str
    pattern: str

    @property
    def name(self) -> str:
        return f"{self.geometry.name}-{self.mask}-{self.pattern}"

    @property
    def file_stem(self) -> str:
        return self.name.replace("/", "x")

    @property
    def exact_stages(self) -> tuple[str, ...]:
        """Stages with an exact expectation (strict: zero error against the FP64 oracle)."""
        out = []
        if self.pattern == "onehot":
            out.append("kq")
        if self.mask == "single":
            out += ["kq_soft_max", "kqv"]
        return tuple(out)


def geometries() -> list[Geometry]:
    return [
        Geometry(q, n, h, hkv, HEAD_DIM, lay)
        for q in Q_WIDTHS
        for n in KEY_EXTENTS
        for (h, hkv) in HEAD_PAIRS
        for lay in Q_LAYOUTS
    ]


def fixtures(geoms: Iterable[Geometry] | None = None) -> list[Fixture]:
    return [Fixture(g, m, p) for g in (geometries() if geoms is None else geoms) for m in MASKS for p in PATTERNS]


def make_mask(kind: str, n_q: int, n_kv: int) -> np.ndarray:
    """(n_q, n_kv) with 0 for visible and -inf for masked keys; every row non-empty.

    causal: query j is the (n_kv - n_q + j)-th position and sees keys 0..n_kv-n_q+j
    prefix: query j sees keys 0..j only (early prefill positions; the rest is padding)
    single: query j sees exactly one key, (17 + 31 j) mod n_kv (distinct per query)
    """
    m = np.full((n_q, n_kv), -np.inf, dtype=np.float32)
    for j in range(n_q):
        if kind == "causal":
            m[j, : n_kv - n_q + j + 1] = 0
        elif kind == "prefix":
            m[j, : j + 1] = 0
        elif kind == "single":
            m[j, (17 + 31 * j) % n_kv] = 0
        else:
            raise ValueError(f"unknown mask {kind!r}")
    return m


def make_data(pattern: str, g: Geometry, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q (n_q, h, d) f32, k (n_kv, h_kv, d) f16, v (n_kv, h_kv, d) f16.

    dyadic: integers in [-8, 8] divided by 8 (exact in f16 and f32)
    onehot: q[j, a] = s * e_{(3j + 5a) mod d}, k[t, g] = w_t * e_{(t + 7g) mod d},
            v[t, g] = u_t * e_{(5t + g) mod d} with dyadic weights s, w_t, u_t
    """
    rng = np.random.default_rng(seed)
    n_q, n_kv, h, hkv, d = g.n_q, g.n_kv, g.n_head, g.n_head_kv, g.d
    if pattern == "dyadic":
        q = rng.integers(-8, 9, size=(n_q, h, d)) / 8.0
        k = rng.integers(-8, 9, size=(n_kv, hkv, d)) / 8.0
        v = rng.integers(-8, 9, size=(n_kv, hkv, d)) / 8.0
    elif pattern == "onehot":
        q = np.zeros((n_q, h, d))
        k = np.zeros((n_kv, hkv, d))
        v = np.zeros((n_kv, hkv, d))
        wq = rng.choice([0.5, 1.0, 2.0, 4.0], size=(n_q, h))
        wk = rng.choice([-2.0, -1.0, 0.5, 1.0, 2.0], size=(n_kv, hkv))
        wv = rng.choice([-1.0, 0.25, 0.5, 1.0], size=(n_kv, hkv))
        for j in range(n_q):
            for a in range(h):
                q[j, a, (3 * j + 5 * a) % d] = wq[j, a]
        for t in range(n_kv):
            for gg in range(hkv):
                k[t, gg, (t + 7 * gg) % d] = wk[t, gg]
                v[t, gg, (5 * t + gg) % d] = wv[t, gg]
    else:
        raise ValueError(f"unknown data pattern {pattern!r}")
    return q.astype(np.float32), k.astype(np.float16), v.astype(np.float16)


def fixture_seed(fx: Fixture) -> int:
    return int(sha256_json({"seed": DEFAULT_SEED, "fixture": fx.name})[:8], 16)


def build_fixture(fx: Fixture) -> operands.Operands:
    g = fx.geometry
    q, k, v = make_data(fx.pattern, g, fixture_seed(fx))
    mask = make_mask(fx.mask, g.n_q, g.n_kv)
    return operands.make_operands(
        q,
        k,
        v,
        mask,
        1.0 / np.sqrt(g.d),
        q_layout=g.q_layout,
        kv_size=g.n_kv + KV_PAD,
        meta={"fixture": fx.name, "geometry": g.name, "mask": fx.mask, "pattern": fx.pattern},
    )


def applicable_faults(g: Geometry) -> list[str]:
    """Faults that change the QB representation for this geometry (the others are identities)."""
    out = []
    if 1 < g.n_head_kv < g.n_head:
        out.append("gqa_interleaved")
    if g.n_q >= 2:
        out += ["mask_shared", "output_swapped", "stride_off_by_one"]
    return out


# ------------------------------------------------------------------------------------------
# integer address oracle

_VIEW_OPS = {"VIEW", "PERMUTE", "RESHAPE", "TRANSPOSE"}
_COPY_OPS = {"CONT", "CPY", "DUP"}
_TSIZE = {"f32": 4, "f16": 2}


def _ravel(idx: np.ndarray, ne: Sequence[int]) -> np.ndarray:
    return idx[0] + ne[0] * (idx[1] + ne[1] * (idx[2] + ne[2] * idx[3]))


def _unravel(flat: np.ndarray, ne: Sequence[int]) -> np.ndarray:
    out = np.empty((4,) + flat.shape, dtype=np.int64)
    r = flat
    for i in range(3):
        out[i] = r % ne[i]
        r = r // ne[i]
    out[3] = r
    return out


class _Graph:
    """The tool-reported graph of one evaluation, read with ggml's documented semantics only."""

    def __init__(self, ev: dict[str, Any]):
        self.nodes = {n["id"]: n for n in ev["nodes"]}
        self.problems: list[str] = []

    def node(self, nid: int) -> dict[str, Any]:
        return self.nodes[nid]

    def resolve(self, nid: int, idx: np.ndarray, pos: np.ndarray) -> list[tuple[str, Any, np.ndarray, np.ndarray]]:
        """Follow data movement (views, copies, repeat, concat) back from element ``idx`` of node
        ``nid``. Returns (``"operand"``, name, byte addresses, pos) or (``"node"``, id, index, pos)
        for a computing node."""
        out = []
        stack = [(nid, idx.astype(np.int64), pos)]
        while stack:
            nid, idx, pos = stack.pop()
            n = self.nodes[nid]
            ne = np.asarray(n["ne"], dtype=np.int64)
            nb = np.asarray(n["nb"], dtype=np.int64)
            oob = ((idx < 0) | (idx >= ne[:, None])).any(axis=0)
            if oob.any():
                self.problems.append(f"index outside node {n['name']!r} (ne={n['ne']}) for {int(oob.sum())} probe(s)")
                idx, pos = idx[:, ~oob], pos[~oob]
                if not pos.size:
                    continue
            op = n["op"]
            if op == "NONE":
                if n.get("operand") is None:
                    self.problems.append(f"leaf {n['name']!r} is not an operand")
                    continue
                out.append(("operand", n["operand"], (idx * nb[:, None]).sum(axis=0), pos))
            elif op in _VIEW_OPS:
                src = self.nodes[n["view_src"]]
                addr = int(n["view_offs"]) + (idx * nb[:, None]).sum(axis=0)
                if src["op"] == "NONE":
                    if src.get("operand") is None:
                        self.problems.append(f"view {n['name']!r} of a non-operand leaf")
                        continue
                    out.append(("operand", src["operand"], addr, pos))
                else:
                    if not src["contiguous"]:
                        self.problems.append(f"view {n['name']!r} of non-contiguous node {src['name']!r}")
                        continue
                    ts = _TSIZE[src["type"]]
                    stack.append((src["id"], _unravel(addr // ts, src["ne"]), pos))
            elif op in _COPY_OPS:
                src = self.nodes[n["src"][0]]
                stack.append((src["id"], _unravel(_ravel(idx, n["ne"]), src["ne"]), pos))
            elif op == "REPEAT":
                src = self.nodes[n["src"][0]]
                stack.append((src["id"], idx % np.asarray(src["ne"], dtype=np.int64)[:, None], pos))
            elif op == "CONCAT":
                dim = int(n["op_params"]["dim"])
                a, b = self.nodes[n["src"][0]], self.nodes[n["src"][1]]
                sel = idx[dim] < a["ne"][dim]
                if sel.any():
                    stack.append((a["id"], idx[:, sel], pos[sel]))
                if (~sel).any():
                    i2 = idx[:, ~sel].copy()
                    i2[dim] -= a["ne"][dim]
                    stack.append((b["id"], i2, pos[~sel]))
            else:
                out.append(("node", nid, idx, pos))
        return out

    def gather(self, nid: int, idx: np.ndarray, n_total: int, want: str, what: str):
        """Resolve and require every probe to land on ``want`` (an op name, or ``operand:NAME``).

        Returns (ids, idx_or_addr) arrays aligned with probe order; ids = -1 where not found."""
        ids = np.full(n_total, -1, dtype=np.int64)
        res = np.zeros((4, n_total) if not want.startswith("operand:") else (n_total,), dtype=np.int64)
        for kind, tgt, val, pos in self.resolve(nid, idx, np.arange(n_total)):
            if want.startswith("operand:"):
                if kind == "operand" and tgt == want.split(":", 1)[1]:
                    ids[pos] = 0
                    res[pos] = val
                    continue
            elif kind == "node" and self.nodes[tgt]["op"] == want:
                ids[pos] = tgt
                res[:, pos] = val
                continue
            name = tgt if kind == "operand" else f"{self.nodes[tgt]['op']} {self.nodes[tgt]['name']!r}"
            self.problems.append(f"{what}: {pos.size} probe(s) reach {kind} {name}, expected {want}")
        return ids, res


def _first_mismatch(got: np.ndarray, exp: np.ndarray, labels: dict[str, np.ndarray], what: str) -> str | None:
    bad = got != exp
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    where = ", ".join(f"{k}={int(v[i])}" for k, v in labels.items())
    return f"{what}: {int(bad.sum())} of {bad.size} probe(s) read the wrong address; first at {where}: got byte {int(got[i])}, expected {int(exp[i])}"


class _Oracle:
    """The operands' address maps and the probes (element, key) of one address-oracle check."""

    def __init__(self, ops: operands.Operands, G: _Graph, nq: int, h: int, dv: int):
        self.ops, self.G, self.P = ops, G, G.problems
        self.nkv, self.d, self.dv = ops.n_kv, ops.d, dv
        self.r = h // ops.n_head_kv
        J, A, C = (x.ravel() for x in np.meshgrid(np.arange(nq), np.arange(h), np.arange(dv), indexing="ij"))
        self.J, self.A, self.C = J, A, C
        N = J.size
        nkv = self.nkv
        # probes (element, key): all elements at the first/last key; elements at the first/last channel at all keys
        edge_t = np.array(sorted({0, nkv - 1}), dtype=np.int64)
        e1 = np.repeat(np.arange(N), edge_t.size)
        t1 = np.tile(edge_t, N)
        sel_c = np.flatnonzero((C == 0) | (C == dv - 1))
        e2 = np.repeat(sel_c, nkv)
        t2 = np.tile(np.arange(nkv, dtype=np.int64), sel_c.size)
        self.edge_t = edge_t
        self.pe = np.concatenate([e1, e2])
        self.pt = np.concatenate([t1, t2])
        self.M = self.pe.size

    def q_addr(self, j, a, c):
        qd = self.ops.q
        return qd.offset + c * qd.nb[0] + j * qd.nb[1] + a * qd.nb[2]

    def k_addr(self, t, g, c):
        kd = self.ops.k
        return kd.offset + c * kd.nb[0] + t * kd.nb[1] + g * kd.nb[2]

    def v_addr(self, t, g, c):
        vd = self.ops.v
        return vd.offset + t * vd.nb[0] + c * vd.nb[1] + g * vd.nb[2]

    def m_addr(self, j, t):
        md = self.ops.mask
        return md.offset + t * md.nb[0] + j * md.nb[1]


def _check_av(o: _Oracle, av_id: np.ndarray, av_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The AV products: the V side and the probabilities side; returns the softmax element of each probe."""
    G, P, J, A, C, pe, pt, M, r, nkv = o.G, o.P, o.J, o.A, o.C, o.pe, o.pt, o.M, o.r, o.nkv
    v_addr = o.v_addr
    sm_id = np.full(M, -1, dtype=np.int64)
    sm_idx = np.zeros((4, M), dtype=np.int64)
    for nid in np.unique(av_id):
        n = G.node(int(nid))
        s0, s1 = G.node(n["src"][0]), G.node(n["src"][1])
        if s0["ne"][0] != nkv or s1["ne"][0] != nkv:
            P.append(f"AV product {n['name']!r} contracts over {s0['ne'][0]}/{s1['ne'][0]} keys, expected {nkv}")
            continue
        r2, r3 = s1["ne"][2] // s0["ne"][2], s1["ne"][3] // s0["ne"][3]
        sel = np.flatnonzero(av_id[pe] == nid)
        if not sel.size:
            continue
        ii = av_idx[:, pe[sel]]
        tt = pt[sel]
        ee = pe[sel]
        ids, addr = G.gather(
            s0["id"], np.stack([tt, ii[0], ii[2] // r2, ii[3] // r3]), sel.size, "operand:v", "AV value side"
        )
        ok = ids >= 0
        msg = _first_mismatch(
            addr[ok],
            v_addr(tt, A[ee] // r, C[ee])[ok],
            {"query": J[ee][ok], "head": A[ee][ok], "channel": C[ee][ok], "key": tt[ok]},
            "V",
        )
        if msg:
            P.append(msg)
        ids, sidx = G.gather(s1["id"], np.stack([tt, ii[1], ii[2], ii[3]]), sel.size, "SOFT_MAX", "AV probability side")
        sm_id[sel] = ids
        sm_idx[:, sel] = sidx
    return sm_id, sm_idx


def _check_softmax(o: _Oracle, sm_id: np.ndarray, sm_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The softmax nodes: mask column and parameters; returns the QK product element of each probe."""
    G, P, J, A, pe, M, nkv, ops = o.G, o.P, o.J, o.A, o.pe, o.M, o.nkv, o.ops
    m_addr = o.m_addr
    kq_id = np.full(M, -1, dtype=np.int64)
    kq_idx = np.zeros((4, M), dtype=np.int64)
    scale_bits = struct.pack("<f", ops.scale)[::-1].hex()
    for nid in np.unique(sm_id):
        n = G.node(int(nid))
        prm = n["op_params"]
        if prm.get("scale_f32_bits") != scale_bits or float(prm.get("max_bias", 0.0)) != float(ops.max_bias):
            P.append(
                f"softmax {n['name']!r} parameters {prm} differ from the operands' scale {ops.scale!r} / max_bias {ops.max_bias!r}"
            )
        if n["ne"][0] != nkv:
            P.append(f"softmax {n['name']!r} normalises over {n['ne'][0]} keys, expected {nkv}")
            continue
        sel = np.flatnonzero(sm_id == nid)
        si = sm_idx[:, sel]
        ee = pe[sel]
        if len(n["src"]) < 2 or n["src"][1] is None:
            P.append(f"softmax {n['name']!r} has no mask")
        else:
            mk = G.node(n["src"][1])
            mi = np.stack([si[0], si[1], si[2] % mk["ne"][2], si[3] % mk["ne"][3]])
            ids, addr = G.gather(mk["id"], mi, sel.size, "operand:mask", "mask")
            ok = ids >= 0
            msg = _first_mismatch(
                addr[ok],
                m_addr(J[ee], si[0])[ok],
                {"query": J[ee][ok], "head": A[ee][ok], "key": si[0][ok]},
                "mask column",
            )
            if msg:
                P.append(msg)
        ids, kidx = G.gather(n["src"][0], si, sel.size, "MUL_MAT", "softmax input")
        kq_id[sel] = ids
        kq_idx[:, sel] = kidx
    return kq_id, kq_idx


def _check_qk(o: _Oracle, kq_id: np.ndarray, kq_idx: np.ndarray) -> None:
    """The QK products: the K side (all keys at the first/last channel, all channels at the first/last
    key) and the Q side."""
    G, P, J, A, C, pe, pt, r, d, edge_t = o.G, o.P, o.J, o.A, o.C, o.pe, o.pt, o.r, o.d, o.edge_t
    q_addr, k_addr = o.q_addr, o.k_addr
    base = np.flatnonzero(C[pe] == 0)  # one probe per (j, a, key)
    edge_c = np.array(sorted({0, d - 1}), dtype=np.int64)
    kb = np.repeat(base, edge_c.size)
    kc = np.tile(edge_c, base.size)
    at_edge_t = base[np.isin(pt[base], edge_t)]
    kb = np.concatenate([kb, np.repeat(at_edge_t, d)])
    kc = np.concatenate([kc, np.tile(np.arange(d, dtype=np.int64), at_edge_t.size)])
    for nid in np.unique(kq_id):
        n = G.node(int(nid))
        s0, s1 = G.node(n["src"][0]), G.node(n["src"][1])
        if s0["ne"][0] != d or s1["ne"][0] != d:
            P.append(f"QK product {n['name']!r} contracts over {s0['ne'][0]}/{s1['ne'][0]} channels, expected {d}")
            continue
        if not n["op_params"].get("prec_f32", False):
            P.append(f"QK product {n['name']!r} lost its F32 accumulation request")
        r2, r3 = s1["ne"][2] // s0["ne"][2], s1["ne"][3] // s0["ne"][3]
        sel = np.flatnonzero(kq_id[kb] == nid)
        if not sel.size:
            continue
        ki = kq_idx[:, kb[sel]]
        cc = kc[sel]
        ee = pe[kb[sel]]
        ids, addr = G.gather(
            s0["id"], np.stack([cc, ki[0], ki[2] // r2, ki[3] // r3]), sel.size, "operand:k", "QK key side"
        )
        ok = ids >= 0
        msg = _first_mismatch(
            addr[ok],
            k_addr(ki[0], A[ee] // r, cc)[ok],
            {"query": J[ee][ok], "head": A[ee][ok], "key": ki[0][ok], "channel": cc[ok]},
            "K (GQA group)",
        )
        if msg:
            P.append(msg)
        ids, addr = G.gather(s1["id"], np.stack([cc, ki[1], ki[2], ki[3]]), sel.size, "operand:q", "QK query side")
        ok = ids >= 0
        msg = _first_mismatch(
            addr[ok], q_addr(J[ee], A[ee], cc)[ok], {"query": J[ee][ok], "head": A[ee][ok], "channel": cc[ok]}, "Q"
        )
        if msg:
            P.append(msg)


def address_oracle(ops: operands.Operands, ev: dict[str, Any]) -> list[str]:
    """Check, from the operand descriptors and the tool-reported graph alone, that every logical
    output element (query j, head a, channel c) is computed from Q(j, a), the K/V of kv head
    a // (h/h_kv) and mask column j, with unchanged operator parameters, and lands at
    output position (row j, column a*d_v + c). Returns the problems (empty: pass).

    Coverage: every (j, a, c) of the output; for each (j, a) all keys at the first and last
    channel and all channels at the first and last key (K and V), all keys of the mask and all
    channels of Q.
    """
    G = _Graph(ev)
    P = G.problems
    nq, h, dv = ops.n_q, ops.n_head, ops.d_v
    out_id = ev["roles"]["out"]
    out = G.node(out_id)
    if list(out["ne"]) != [dv * h, nq, 1, 1] or not out["contiguous"]:
        P.append(
            f"restored output has ne={out['ne']} (contiguous={out['contiguous']}), expected [{dv * h}, {nq}, 1, 1]"
        )
        return P
    o = _Oracle(ops, G, nq, h, dv)
    # 1. output recovery: out(a*dv + c, j) -> AV product element
    N = o.J.size
    z = np.zeros(N, dtype=np.int64)
    av_id, av_idx = G.gather(out_id, np.stack([o.A * dv + o.C, o.J, z, z]), N, "MUL_MAT", "output")
    if (av_id < 0).any():
        return P
    # 2. AV, 3. softmax, 4. QK
    sm_id, sm_idx = _check_av(o, av_id, av_idx)
    if (sm_id < 0).any():
        return P
    kq_id, kq_idx = _check_softmax(o, sm_id, sm_idx)
    if (kq_id < 0).any():
        return P
    _check_qk(o, kq_id, kq_idx)
    return P


# ------------------------------------------------------------------------------------------
# FP64 scalar oracle


def fp64_oracle(ops: operands.Operands) -> dict[str, np.ndarray]:
    """Expected stage values in float64 from the stored inputs (logical orders as in replay)."""
    q = ops.logical_q().astype(np.float64)
    k = ops.logical_k().astype(np.float64)
    v = ops.logical_v().astype(np.float64)
    mask = ops.logical_mask().astype(np.float64)
    g = np.arange(ops.n_head) // (ops.n_head // ops.n_head_kv)
    kq = np.einsum("jac,tac->jat", q, k[:, g, :])
    z = float(np.float32(ops.scale)) * kq + mask[:, None, :]
    zmax = z.max(axis=2, keepdims=True)
    e = np.exp(z - zmax)
    p = e / e.sum(axis=2, keepdims=True)
    kqv = np.einsum("jat,tac->jac", p, v[:, g, :])
    return {"kq": kq, "kq_soft_max": p, "kqv": kqv, "out": kqv.reshape(ops.n_q, -1)}


def stage_error(got: np.ndarray, exp: np.ndarray) -> tuple[float, float, bool]:
    """(max abs error, max relative error, all finite). Errors over finite elements; relative
    error over elements with |expected| >= the smallest normal float32."""
    g = got.astype(np.float64)
    finite = np.isfinite(g)
    if not finite.any():
        return 0.0, 0.0, False
    err = np.abs(g - exp)
    max_abs = float(err[finite].max())
    rel_sel = finite & (np.abs(exp) >= _F32_TINY)
    max_rel = float((err[rel_sel] / np.abs(exp[rel_sel])).max()) if rel_sel.any() else 0.0
    return max_abs, max_rel, bool(finite.all())


# ------------------------------------------------------------------------------------------
# running the audit


@dataclass
class AuditResult:
    rows: list[dict[str, Any]]
    summary: dict[str, Any]


def _numeric_rows(
    fx: Fixture,
    layout: str,
    stages: dict[str, np.ndarray],
    exp: dict[str, np.ndarray],
    fixture_name: str,
    fault: str | None,
    detected: bool | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    rows, strict = [], []
    for stage in ("kq", "kq_soft_max", "kqv"):
        ea, er, fin = stage_error(stages[stage], exp[stage])
        ok = fin
        if stage == "kqv":  # AV product and the restored output together
            oa, orr, ofin = stage_error(stages["out"], exp["out"])
            ea, er, ok = max(ea, oa), max(er, orr), ok and ofin
        if not ok:
            strict.append(f"{fixture_name} {layout} {stage}: non-finite output")
        if stage in fx.exact_stages and ea != 0.0:
            ok = False
            strict.append(f"{fixture_name} {layout} {stage}: exact expectation missed by {ea!r}")
        rows.append(
            {
                "geometry": fx.geometry.name,
                "fixture": fixture_name,
                "layout": layout,
                "stage": stage,
                "oracle_ok": bool(ok),
                "fault": fault,
                "detected": detected,
                "max_abs_err": ea,
                "max_rel_err": er,
            }
        )
    return rows, strict


@dataclass
class _Tally:
    """What the audit's evaluations add up to, chunk by chunk."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    strict_failures: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    addr_failures_clean: list[str] = field(default_factory=list)
    fault_stats: dict[str, dict[str, int]] = field(
        default_factory=lambda: {
            f: {"injected": 0, "detected_address": 0, "detected_numeric": 0} for f in replay_runner.FAULTS
        }
    )
    rel: dict[str, list[int]] = field(
        default_factory=lambda: {"pq_eq_qb": [0, 0], "pq_eq_qh": [0, 0], "q1_all_equal": [0, 0]}
    )
    mq_diff: dict[str, int] = field(default_factory=lambda: {s: 0 for s in operands.STAGES})
    mq_diff_q2: int = 0
    maxerr: dict[str, list[float]] = field(
        default_factory=lambda: {s: [0.0, 0.0] for s in ("kq", "kq_soft_max", "kqv")}
    )
    n_eval: int = 0


def _address_row(fx: Fixture, name: str, layout: str, problems: list[str], fault, detected) -> dict[str, Any]:
    return {
        "geometry": fx.geometry.name,
        "fixture": name,
        "layout": layout,
        "stage": "address",
        "oracle_ok": not problems,
        "fault": fault,
        "detected": detected,
        "max_abs_err": 0.0,
        "max_rel_err": 0.0,
    }


def _chunk_jobs(part: Sequence[Fixture], d: Path, faults: bool) -> tuple[dict, list[replay_runner.ReplayRun]]:
    """Write a chunk's operand files; its replay jobs (clean, then each applicable fault on QB)."""
    ops_by = {}
    jobs = []
    for fx in part:
        ops = build_fixture(fx)
        path = d / f"{fx.file_stem}.rsop"
        operands.write_operands(path, ops)
        ops_by[str(path)] = (fx, ops)
        jobs.append(replay_runner.ReplayRun(path, REPLAYED_LAYOUTS, "none", d / fx.file_stem))
        if faults:
            for f in applicable_faults(fx.geometry):
                jobs.append(replay_runner.ReplayRun(path, ("qb",), f, d / fx.file_stem))
    return ops_by, jobs


def _clean_evaluation(
    t: _Tally, fx: Fixture, ops: operands.Operands, ev: dict, problems: list[str], stages, exp
) -> None:
    layout = ev["layout"]
    if problems:
        t.addr_failures_clean.append(f"{fx.name} {layout}: {problems[0]}")
    t.rows.append(_address_row(fx, fx.name, layout, problems, None, None))
    nrows, strict = _numeric_rows(fx, layout, stages, exp, fx.name, None, None)
    t.strict_failures += strict
    t.rows += nrows
    for r_ in nrows:
        m = t.maxerr[r_["stage"]]
        m[0], m[1] = max(m[0], r_["max_abs_err"]), max(m[1], r_["max_rel_err"])


def _fault_evaluation(t: _Tally, fx: Fixture, fault: str, ev: dict, problems: list[str], stages, exp, clean) -> None:
    layout = ev["layout"]
    st = t.fault_stats[fault]
    st["injected"] += 1
    det_addr = bool(problems)
    ref = clean.get(fx.name, {}).get("qb")
    det_num = ref is not None and any(not bitwise.compare(stages[s], ref[s]).bitwise_equal for s in operands.STAGES)
    st["detected_address"] += det_addr
    st["detected_numeric"] += det_num
    name = f"{fx.name}+{fault}"
    t.rows.append(_address_row(fx, name, layout, problems, fault, det_addr))
    nrows, _ = _numeric_rows(fx, layout, stages, exp, name, fault, det_num)
    t.rows += nrows


def _evaluate_report(t: _Tally, report: dict, ops_by: dict) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Every evaluation of a chunk's replay report through both oracles; the clean stages by fixture."""
    clean: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for job in sorted(report["jobs"], key=lambda j: j["fault"] != "none"):  # clean first
        fx, ops = ops_by[job["input"]]
        fault = job["fault"]
        if job["status"] != "ok" and "error" in job:
            t.crashes.append(f"{fx.name} [{fault}]: {job['error']}")
            continue
        exp = fp64_oracle(ops)
        for ev in job["evaluations"]:
            t.n_eval += 1
            layout = ev["layout"]
            if ev["status"] != "ok":
                t.crashes.append(f"{fx.name} {layout} [{fault}]: {ev.get('error')}")
                continue
            problems = address_oracle(ops, ev)
            stages = operands.read_stages(ev["stages"])
            if fault == "none":
                clean.setdefault(fx.name, {})[layout] = stages
                _clean_evaluation(t, fx, ops, ev, problems, stages, exp)
            else:
                _fault_evaluation(t, fx, fault, ev, problems, stages, exp, clean)
    return clean


def _relations(t: _Tally, clean: dict[str, dict[str, dict[str, np.ndarray]]]) -> None:
    """Cross-layout relations on the clean evaluations."""
    for name, by in clean.items():
        if not all(lay in by for lay in REPLAYED_LAYOUTS):
            continue
        nq = by["qb"]["out"].shape[0]
        eq_pq_qb = all(bitwise.compare(by["pq"][s], by["qb"][s]).bitwise_equal for s in operands.STAGES)
        t.rel["pq_eq_qb"][0] += eq_pq_qb
        t.rel["pq_eq_qb"][1] += 1
        if not eq_pq_qb:
            t.strict_failures.append(f"{name}: pq and qb differ bitwise")
        eq_pq_qh = all(bitwise.compare(by["pq"][s], by["qh"][s]).bitwise_equal for s in operands.STAGES)
        t.rel["pq_eq_qh"][0] += eq_pq_qh
        t.rel["pq_eq_qh"][1] += 1
        if not eq_pq_qh:
            t.strict_failures.append(f"{name}: pq and qh differ bitwise")
        mq_eq = {s: bitwise.compare(by["mq"][s], by["pq"][s]).bitwise_equal for s in operands.STAGES}
        if nq == 1:
            t.rel["q1_all_equal"][0] += all(mq_eq.values()) and eq_pq_qb
            t.rel["q1_all_equal"][1] += 1
            if not all(mq_eq.values()):
                t.strict_failures.append(f"{name}: q=1 but mq differs from pq")
        else:
            for s, eq in mq_eq.items():
                t.mq_diff[s] += not eq
            t.mq_diff_q2 += 1


def _summary(t: _Tally, fxs: list[Fixture], backend: str, faults: bool, seconds: float) -> dict[str, Any]:
    rows, fault_stats, rel = t.rows, t.fault_stats, t.rel
    return {
        "fixtures": len(fxs),
        "geometries": len({fx.geometry for fx in fxs}),
        "clean_evaluations": sum(1 for r in rows if r["fault"] is None and r["stage"] == "address"),
        "fault_evaluations": sum(v["injected"] for v in fault_stats.values()),
        "evaluations_total": t.n_eval,
        "backend": backend,
        "crashes": t.crashes,
        "address_failures_clean": t.addr_failures_clean,
        "strict_failures_clean": t.strict_failures,
        "faults": fault_stats,
        "all_faults_detected": faults and all(v["detected_address"] == v["injected"] for v in fault_stats.values()),
        "faults_not_injected": [f for f, v in fault_stats.items() if faults and v["injected"] == 0],
        "pq_eq_qb_bitwise": {"equal": rel["pq_eq_qb"][0], "of": rel["pq_eq_qb"][1]},
        "pq_eq_qh_bitwise": {"equal": rel["pq_eq_qh"][0], "of": rel["pq_eq_qh"][1]},
        "q1_mq_pq_qb_bitwise": {"equal": rel["q1_all_equal"][0], "of": rel["q1_all_equal"][1]},
        "mq_differs_from_pq_q2": {"fixtures": t.mq_diff_q2, "by_stage": t.mq_diff},
        "max_error_clean": {s: {"max_abs_err": v[0], "max_rel_err": v[1]} for s, v in t.maxerr.items()},
        "seconds": round(seconds, 2),
    }


def run_audit(
    tool: str | Path,
    *,
    fixture_list: Sequence[Fixture] | None = None,
    faults: bool = True,
    backend: str = "CPU",
    threads: int = 1,
    chunk: int = 72,
    workdir: str | Path | None = None,
    progress=None,
) -> AuditResult:
    fxs = list(fixtures() if fixture_list is None else fixture_list)
    t = _Tally()
    t0 = time.monotonic()
    tmp = tempfile.TemporaryDirectory(prefix="refspec-audit-") if workdir is None else None
    root = Path(tmp.name if tmp else workdir)  # type: ignore[arg-type]
    try:
        for c0 in range(0, len(fxs), chunk):
            part = fxs[c0 : c0 + chunk]
            d = root / f"chunk{c0 // chunk:03d}"
            d.mkdir(parents=True, exist_ok=True)
            ops_by, jobs = _chunk_jobs(part, d, faults)
            report = replay_runner.run_replay(tool, jobs, backend=backend, threads=threads, workdir=d)
            _relations(t, _evaluate_report(t, report, ops_by))
            if progress:
                progress(min(c0 + chunk, len(fxs)), len(fxs))
            if tmp is not None:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return AuditResult(t.rows, _summary(t, fxs, backend, faults, time.monotonic() - t0))


def audit_ok(summary: dict[str, Any], *, faults: bool = True) -> bool:
    return (
        not summary["crashes"]
        and not summary["address_failures_clean"]
        and not summary["strict_failures_clean"]
        and (summary["all_faults_detected"] or not faults)
    )


def write_results(result: AuditResult, out_dir: str | Path) -> dict[str, Path]:
    """The ``audit`` table (Parquet + CSV through :mod:`refspec.core.tables`) and ``audit_summary.json``."""
    out = Path(out_dir)
    paths = tables.write_table(result.rows, "audit", out)
    summ = out / "audit_summary.json"
    atomic_write_text(summ, json.dumps(result.summary, indent=2, sort_keys=True) + "\n")
    paths["summary"] = summ
    return paths
