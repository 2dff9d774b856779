"""Ed25519 signature verification (RFC 8032), standard library only."""

from __future__ import annotations

import hashlib

# Verification as RFC 8032 section 5.1.7 specifies it, with the strict rules of this checker:
# the public key and R must be 32 bytes that decode to a curve point (y < p; x = 0 with the sign
# bit set is refused) and must not have small order ([8]P is not the identity); S must be
# canonical (S < L); the signature must be 64 bytes; the group equation is the cofactorless
# [S]B = R + [k]A (k = SHA-512(R || A || M) mod L), as OpenSSL and the ``cryptography`` package
# check it. The strictness only refuses more: a signature that passes here passes there.
_P = 2**255 - 19

_L = 2**252 + 27742317777372353535851937790883648493

_D = -121665 * pow(121666, _P - 2, _P) % _P

_SQRT_M1 = pow(2, (_P - 1) // 4, _P)

_IDENTITY = (0, 1, 1, 0)


def _ed_add(p1: tuple, p2: tuple) -> tuple:
    """Sum of two points in extended coordinates (X, Y, Z, T) of the twisted Edwards curve."""
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = 2 * t1 * t2 * _D % _P
    d = 2 * z1 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _ed_mul(s: int, p: tuple) -> tuple:
    q = _IDENTITY
    while s > 0:
        if s & 1:
            q = _ed_add(q, p)
        p = _ed_add(p, p)
        s >>= 1
    return q


def _ed_equal(p1: tuple, p2: tuple) -> bool:
    return (p1[0] * p2[2] - p2[0] * p1[2]) % _P == 0 and (p1[1] * p2[2] - p2[1] * p1[2]) % _P == 0


def _ed_decode(b: bytes) -> tuple | None:
    """The point a 32-byte encoding names, or None (RFC 8032 5.1.3, non-canonical y refused)."""
    if len(b) != 32:
        return None
    n = int.from_bytes(b, "little")
    sign, y = n >> 255, n & ((1 << 255) - 1)
    if y >= _P:
        return None
    u, v = (y * y - 1) % _P, (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    if (v * x * x - u) % _P != 0:
        x = x * _SQRT_M1 % _P
        if (v * x * x - u) % _P != 0:
            return None
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


_BASE = _ed_decode((4 * pow(5, _P - 2, _P) % _P).to_bytes(32, "little"))


def ed25519_problem(public: bytes, message: bytes, signature: bytes) -> str | None:
    """Why ``signature`` is not a valid Ed25519 signature of ``message`` by ``public``, or None."""
    if len(public) != 32:
        return f"public key is {len(public)} bytes, not 32"
    if len(signature) != 64:
        return f"signature is {len(signature)} bytes, not 64"
    a = _ed_decode(public)
    if a is None:
        return "public key is not the encoding of a curve point"
    if _ed_equal(_ed_mul(8, a), _IDENTITY):
        return "public key is a point of small order"
    r = _ed_decode(signature[:32])
    if r is None:
        return "signature's R is not the encoding of a curve point"
    if _ed_equal(_ed_mul(8, r), _IDENTITY):
        return "signature's R is a point of small order"
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return "signature's S is not reduced modulo the group order (S >= L)"
    k = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % _L
    if not _ed_equal(_ed_mul(s, _BASE), _ed_add(r, _ed_mul(k, a))):
        return "signature does not verify"
    return None
