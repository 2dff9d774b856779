"""Endpoints and their comparison.

An endpoint is the complete result of a request: every generated token ID (an
EOG token that ended the request included), the EOG flag, the length, the last
token and the stop reason. An arm *qualifies* on a task when its endpoint equals
the reference endpoint exactly; otherwise the first differing index is the
divergence point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .hashing import sha256_json

STOP_REASONS = ("eog", "cap")


@dataclass(frozen=True)
class Endpoint:
    tokens: tuple[int, ...]
    eog: bool
    stop_reason: str

    def __post_init__(self):
        if self.stop_reason not in STOP_REASONS:
            raise ValueError(f"stop reason {self.stop_reason!r} not in {STOP_REASONS}")

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def last_token(self) -> int | None:
        return self.tokens[-1] if self.tokens else None

    def record(self) -> dict:
        return {
            "tokens": list(self.tokens),
            "eog": self.eog,
            "n": self.n,
            "last_token": self.last_token,
            "stop_reason": self.stop_reason,
        }

    @property
    def sha256(self) -> str:
        return sha256_json(self.record())

    @classmethod
    def from_record(cls, rec: dict) -> Endpoint:
        ep = cls(tuple(int(t) for t in rec["tokens"]), bool(rec["eog"]), str(rec["stop_reason"]))
        if "n" in rec and int(rec["n"]) != ep.n:
            raise ValueError("endpoint record: n does not match the token count")
        if "last_token" in rec and rec["last_token"] != ep.last_token:
            raise ValueError("endpoint record: last_token does not match the tokens")
        return ep


def first_divergence(
    ref_tokens: Sequence[int], ref_eog: bool, ref_stop: str, tokens: Sequence[int], eog: bool, stop: str
) -> int | None:
    """Zero-based index of the first difference between two endpoints given by their fields,
    None if equal.

    The first differing token position; if one token list is a prefix of the other, the
    shorter length; if the tokens agree but EOG or stop reason differ, the common length.
    """
    n = min(len(ref_tokens), len(tokens))
    for i in range(n):
        if int(ref_tokens[i]) != int(tokens[i]):
            return i
    if len(ref_tokens) != len(tokens) or bool(ref_eog) != bool(eog) or ref_stop != stop:
        return n
    return None


def first_difference(a: Endpoint, b: Endpoint) -> int | None:
    """:func:`first_divergence` of two endpoints."""
    return first_divergence(a.tokens, a.eog, a.stop_reason, b.tokens, b.eog, b.stop_reason)


@dataclass(frozen=True)
class EndpointComparison:
    qualified: bool
    first_diff_index: int | None
    ref_token: int | None
    arm_token: int | None

    def record(self) -> dict:
        return asdict(self)


def compare_endpoints(reference: Endpoint, arm: Endpoint) -> EndpointComparison:
    i = first_difference(reference, arm)
    if i is None:
        return EndpointComparison(True, None, None, None)
    ref_tok = reference.tokens[i] if i < reference.n else None
    arm_tok = arm.tokens[i] if i < arm.n else None
    return EndpointComparison(False, i, ref_tok, arm_tok)
