"""Bitwise comparison of float32 arrays: the distance in units in the last place
(:func:`ulp_distance`) and one comparison's summary (:class:`ArrayComparison`, :func:`compare`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .operands import OperandError


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|ordered(a) - ordered(b)| for float32 via their bit patterns (sign-magnitude -> two's order).

    +0 and -0 are 0 apart; a NaN on either side gives -1 (no distance).
    """
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    oa = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ob = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    d = np.abs(oa - ob)
    return np.where(np.isnan(a) | np.isnan(b), -1, d)


@dataclass
class ArrayComparison:
    bitwise_equal: bool
    n_elements: int
    n_diff: int
    max_abs_diff: float
    max_ulp: int
    first_diff: tuple[int, ...] | None
    a_first: float | None
    b_first: float | None
    nan_mismatch: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "bitwise_equal": self.bitwise_equal,
            "n_elements": self.n_elements,
            "n_diff": self.n_diff,
            "max_abs_diff": self.max_abs_diff,
            "max_ulp": self.max_ulp,
            "first_diff": list(self.first_diff) if self.first_diff is not None else None,
            "a_first": self.a_first,
            "b_first": self.b_first,
            "nan_mismatch": self.nan_mismatch,
        }


def compare(a: np.ndarray, b: np.ndarray) -> ArrayComparison:
    """Bitwise comparison of two float32 arrays of the same logical shape."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    if a.shape != b.shape:
        raise OperandError(f"cannot compare shapes {a.shape} and {b.shape}")
    diff = a.view(np.uint32) != b.view(np.uint32)
    n_diff = int(diff.sum())
    first = None
    af = bf = None
    if n_diff:
        idx = np.unravel_index(int(np.flatnonzero(diff.ravel())[0]), a.shape)
        first = tuple(int(i) for i in idx)
        af, bf = float(a[idx]), float(b[idx])
    both = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        ad = np.abs(a.astype(np.float64) - b.astype(np.float64))
    max_abs = float(ad[both].max()) if both.any() else 0.0
    # infinities of the same sign are equal; of different signs or vs finite: infinite difference
    inf_mis = (np.isinf(a) | np.isinf(b)) & ~np.isnan(a) & ~np.isnan(b) & (a != b)
    if inf_mis.any():
        max_abs = float("inf")
    u = ulp_distance(a, b)
    nan_mis = int((np.isnan(a) != np.isnan(b)).sum())
    return ArrayComparison(
        n_diff == 0, int(a.size), n_diff, max_abs, int(u.max()) if u.size else 0, first, af, bf, nan_mis
    )
