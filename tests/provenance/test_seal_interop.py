"""Interoperability: SEAL.dsse.json verifies with an independent, widely used DSSE
implementation (securesystemslib, the library in-toto uses), and the in-toto
statement's subjects match the files, checked with hashlib alone."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from support.paths import GOLDEN
from support.sealing import copy_archive
from support.tampering import edit_payload_after_signing, resign_other_key_keep_keyid


def _sslib_key(pub_pem: Path) -> SSlibKey:
    """The Ed25519 public key in securesystemslib's form, under refspec's key id."""
    pub = serialization.load_pem_public_key(pub_pem.read_bytes())
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keyid = "SHA256:" + hashlib.sha256(raw).hexdigest()
    return SSlibKey(keyid, "ed25519", "ed25519", {"public": raw.hex()})


def _verify_independently(archive: Path, pub_pem: Path) -> dict:
    env = Envelope.from_dict(json.loads((archive / "SEAL.dsse.json").read_bytes()))
    key = _sslib_key(pub_pem)
    accepted = env.verify([key], 1)  # raises VerificationError unless the signature verifies
    assert list(accepted) == [key.keyid]
    assert env.payload_type == "application/vnd.in-toto+json"
    statement = json.loads(env.payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    on_disk = {p.relative_to(archive).as_posix() for p in archive.rglob("*") if p.is_file()} - {"SEAL.dsse.json"}
    assert {s["name"] for s in statement["subject"]} == on_disk
    for s in statement["subject"]:
        data = (archive / s["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == s["digest"]["sha256"], s["name"]
        assert len(data) == s["annotations"]["size"]
    return statement


def test_securesystemslib_verifies_the_seal_and_the_subjects_match(seal_env):
    st = _verify_independently(seal_env["clean"], seal_env["a"].public_path)
    assert st["predicate"]["archive_id"] == "archive-0"
    st = _verify_independently(seal_env["next"], seal_env["a"].public_path)
    assert (
        st["predicate"]["previous_seal_sha256"]
        == hashlib.sha256((seal_env["clean"] / "SEAL.dsse.json").read_bytes()).hexdigest()
    )


def test_golden_archive_verifies_with_securesystemslib():
    golden = GOLDEN / "v1"
    _verify_independently(golden / "archive", golden / "signer.pub")


@pytest.mark.parametrize("tamper", [edit_payload_after_signing, resign_other_key_keep_keyid])
def test_securesystemslib_refuses_a_tampered_seal(tamper, seal_env, tmp_path):
    d = copy_archive(seal_env["clean"], tmp_path / "a")
    tamper(d, seal_env)
    env = Envelope.from_dict(json.loads((d / "SEAL.dsse.json").read_bytes()))
    with pytest.raises(VerificationError):
        env.verify([_sslib_key(seal_env["a"].public_path)], 1)


def test_securesystemslib_refuses_another_key(seal_env):
    env = Envelope.from_dict(json.loads((seal_env["clean"] / "SEAL.dsse.json").read_bytes()))
    other = _sslib_key(seal_env["b"].public_path)
    # under the archive's key id, so that the signature itself is tried with key B
    impostor = SSlibKey(env.signatures[next(iter(env.signatures))].keyid, "ed25519", "ed25519", other.keyval)
    with pytest.raises(VerificationError):
        env.verify([impostor], 1)
    assert base64.b64decode(json.loads((seal_env["clean"] / "SEAL.dsse.json").read_bytes())["payload"]) == env.payload
