"""The DSSE envelope of a seal: ``SEAL.dsse.json``.

The envelope is the canonical JSON of exactly ``payload`` (canonical base64 of the
statement's canonical JSON), ``payloadType`` (``application/vnd.in-toto+json``) and one
signature ``{keyid, sig}``: the Ed25519 signature over the DSSE v1 pre-authentication
encoding (:func:`pae`), by the key whose fingerprint is ``keyid``. Nothing in the payload
is parsed before the signature verifies (:func:`check_envelope`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..core.hashing import canonical_json
from .keys import fingerprint

SEAL_NAME = "SEAL.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode_strict(text: Any) -> bytes:
    """Standard base64 with padding, in canonical form only (re-encodes to the same text)."""
    if not isinstance(text, str):
        raise ValueError("not a string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ValueError(f"invalid base64 ({e})") from e
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("non-canonical base64")
    return raw


def envelope_bytes(statement: dict[str, Any], key: Ed25519PrivateKey) -> bytes:
    """The bytes of ``SEAL.dsse.json``: a canonical-JSON DSSE envelope and a newline."""
    payload = canonical_json(statement)
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    env = {
        "payload": b64(payload),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": fingerprint(key.public_key()), "sig": b64(sig)}],
    }
    return canonical_json(env) + b"\n"


def check_envelope(data: bytes, public_key: Ed25519PublicKey) -> tuple[bytes | None, list[str]]:
    """Authenticate ``SEAL.dsse.json``; return the payload bytes (unparsed) or the problems."""
    try:
        env = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        return None, [f"{SEAL_NAME}: not JSON ({e.__class__.__name__})"]
    problems: list[str] = []
    if not isinstance(env, dict):
        return None, [f"{SEAL_NAME}: not a DSSE envelope (not an object)"]
    if set(env) != {"payload", "payloadType", "signatures"}:
        problems.append(f"{SEAL_NAME}: envelope fields {sorted(env)} are not payload, payloadType, signatures")
    elif canonical_json(env) + b"\n" != data:
        problems.append(f"{SEAL_NAME}: envelope is not in canonical form (modified)")
    ptype = env.get("payloadType")
    if ptype != PAYLOAD_TYPE:
        problems.append(f"{SEAL_NAME}: payload type {ptype!r} is not {PAYLOAD_TYPE!r}")
    try:
        payload = b64decode_strict(env.get("payload"))
    except ValueError as e:
        return None, problems + [f"{SEAL_NAME}: payload: {e}"]
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        return None, problems + [f"{SEAL_NAME}: expected exactly one signature"]
    s = sigs[0]
    if set(s) != {"keyid", "sig"}:
        problems.append(f"{SEAL_NAME}: signature fields {sorted(s)} are not keyid, sig")
    want = fingerprint(public_key)
    if s.get("keyid") != want:
        problems.append(f"{SEAL_NAME}: signed by {s.get('keyid')!r}, expected {want}")
    try:
        sig = b64decode_strict(s.get("sig"))
    except ValueError as e:
        return None, problems + [f"{SEAL_NAME}: signature: {e}"]
    try:
        public_key.verify(sig, pae(ptype if isinstance(ptype, str) else "", payload))
    except InvalidSignature:
        problems.append(f"{SEAL_NAME}: signature does not verify with key {want}")
    if problems:
        return None, problems
    return payload, []
