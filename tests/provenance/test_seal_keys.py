"""Signing keys: generation, permissions, forbidden locations, fingerprints."""

from __future__ import annotations

import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization

from refspec.cli import main
from refspec.core.hashing import sha256_bytes
from refspec.provenance import keys
from refspec.provenance.keys import KeyFileError


def _mode(p):
    return stat.S_IMODE(p.stat().st_mode)


def test_keygen_modes_and_fingerprint(tmp_path):
    kp = keys.generate(tmp_path / "k", name="t")
    assert _mode(kp.private_path) == 0o600
    assert _mode(kp.public_path) == 0o644
    assert _mode(tmp_path / "k") == 0o700
    assert kp.private_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert b"PRIVATE" not in kp.public_path.read_bytes()
    pub = keys.load_public_key(kp.public_path)
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32
    assert kp.fingerprint == "SHA256:" + sha256_bytes(raw)
    assert keys.fingerprint(keys.load_private_key(kp.private_path).public_key()) == kp.fingerprint


def test_keygen_umask_cannot_widen(tmp_path):
    old = os.umask(0)
    try:
        kp = keys.generate(tmp_path, name="t")
    finally:
        os.umask(old)
    assert _mode(kp.private_path) == 0o600


def test_keygen_does_not_overwrite_without_force(tmp_path):
    kp = keys.generate(tmp_path, name="t")
    with pytest.raises(KeyFileError, match="--force"):
        keys.generate(tmp_path, name="t")
    kp2 = keys.generate(tmp_path, name="t", force=True)
    assert kp2.fingerprint != kp.fingerprint
    assert _mode(kp2.private_path) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_default_location_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("REFSPEC_KEY_DIR", str(tmp_path / "kd"))
    kp = keys.generate()
    assert kp.private_path == tmp_path / "kd" / "refspec_ed25519.key"
    assert keys.default_public_key() == kp.public_path
    keys.load_private_key()  # the default private key


def test_refuses_writing_inside_the_repository(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setattr(keys, "REPO_ROOT", repo)
    with pytest.raises(KeyFileError, match="outside the repository"):
        keys.generate(repo / "keys")
    assert not (repo / "keys").exists()
    # also through a symbolic link that points into it
    os.symlink(repo, tmp_path / "alias")
    with pytest.raises(KeyFileError):
        keys.generate(tmp_path / "alias" / "keys")


def test_refuses_writing_inside_the_results_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("REFSPEC_RESULTS", str(tmp_path / "results"))
    with pytest.raises(KeyFileError):
        keys.generate(tmp_path / "results" / "k")
    with pytest.raises(KeyFileError):
        keys.generate(tmp_path / "elsewhere", extra_forbidden=[tmp_path / "elsewhere"])
    assert not (tmp_path / "elsewhere").exists()


def test_refuses_loading_a_key_inside_the_repository(tmp_path, monkeypatch):
    kp = keys.generate(tmp_path / "k")
    monkeypatch.setattr(keys, "REPO_ROOT", tmp_path)
    with pytest.raises(KeyFileError, match="inside"):
        keys.load_private_key(kp.private_path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o620, 0o602, 0o610, 0o601, 0o777])
def test_refuses_group_or_world_accessible_private_key(tmp_path, mode):
    kp = keys.generate(tmp_path, name="t")
    os.chmod(kp.private_path, mode)
    with pytest.raises(KeyFileError, match="group or others"):
        keys.load_private_key(kp.private_path)


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_accepts_owner_only_private_key(tmp_path, mode):
    kp = keys.generate(tmp_path, name="t")
    os.chmod(kp.private_path, mode)
    keys.load_private_key(kp.private_path)


def test_public_key_formats(tmp_path):
    kp = keys.generate(tmp_path, name="t")
    pub = keys.load_public_key(kp.public_path)
    ssh = tmp_path / "t.ssh.pub"
    ssh.write_bytes(pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n")
    assert keys.fingerprint(keys.load_public_key(ssh)) == kp.fingerprint
    with pytest.raises(KeyFileError):
        keys.load_public_key(kp.private_path)
    (tmp_path / "junk").write_text("junk")
    with pytest.raises(KeyFileError):
        keys.load_public_key(tmp_path / "junk")
    with pytest.raises(KeyFileError, match="not found"):
        keys.load_public_key(tmp_path / "missing")


def test_refuses_non_ed25519_keys(tmp_path):
    from cryptography.hazmat.primitives.asymmetric import ec

    k = ec.generate_private_key(ec.SECP256R1())
    p = tmp_path / "ec.key"
    p.write_bytes(
        k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(p, 0o600)
    with pytest.raises(KeyFileError, match="not an Ed25519"):
        keys.load_private_key(p)
    q = tmp_path / "ec.pub"
    q.write_bytes(
        k.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(KeyFileError, match="not an Ed25519"):
        keys.load_public_key(q)


def test_keygen_cli_prints_no_secret(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("REFSPEC_KEY_DIR", str(tmp_path / "kd"))
    assert main(["keygen"]) == 0
    out = capsys.readouterr()
    priv = (tmp_path / "kd" / "refspec_ed25519.key").read_bytes()
    body = b"".join(priv.splitlines()[1:-1]).decode()
    assert body not in out.out + out.err
    assert "fingerprint: SHA256:" in out.out
    assert main(["keygen"]) == 2  # exists, no --force
    capsys.readouterr()
    assert main(["keygen", "--dir", str(tmp_path / "r" / "k"), "--results", str(tmp_path / "r")]) == 2


def test_public_fingerprint_for_reports(tmp_path, monkeypatch):
    monkeypatch.setenv("REFSPEC_KEY_DIR", str(tmp_path))
    kp = keys.generate()
    assert keys.public_fingerprint() == kp.fingerprint == keys.public_fingerprint(kp.public_path)
