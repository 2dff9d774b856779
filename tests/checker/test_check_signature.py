"""report/check.py verifies the seal's Ed25519 signature itself (RFC 8032, standard library only).

Its verifier is compared with the ``cryptography`` package on RFC 8032's test vectors (section
7.1), on signatures of random messages and keys, on the archives sealed here, and on malformed
signatures: non-canonical S, points that do not decode, small-order points, wrong lengths, and a
garbage signature labelled with the real key id."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from refspec.core.hashing import canonical_json
from refspec.provenance.keys import fingerprint
from refspec.reporting import render as report
from support.synthetic_archive import check_module, make_results, run_check, seal_archive, signer

CHECK = check_module()

L = 2**252 + 27742317777372353535851937790883648493

# RFC 8032 section 7.1: (name, SECRET KEY, PUBLIC KEY, MESSAGE, SIGNATURE), hex
RFC8032 = [
    (
        "TEST 1",
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "TEST 2",
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "TEST 3",
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
    (
        "TEST 1024",
        "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
        "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
        "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12ee50f8f54e9f77b1e355f6c50544e23fb1433ddf73be84d879de7c0046dc4996d9e773f4bc9efe5738829adb26c81b37c93a1b270b20329d658675fc6ea534e0810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a7363c344fe6b199ee5d02e82d522c4feba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e06203b33890cc9b832f79ef80560ccb9a39ce767967ed628c6ad573cb116dbefefd75499da96bd68a8a97b928a8bbc103b6621fcde2beca1231d206be6cd9ec7aff6f6c94fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed185ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5d0532ed8a5aa3fb2d17ba70eb6248e594e1a2297acbbb39d502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6079cad88425de6bde1a9187ebb6092cf67bf2b13fd65f27088d78b7e883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc2732e69485bbc9c90bfbd62481d9089beccf80cfe2df16a2cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a569d80c3414a8d0859dc65a46128bab27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae0784504df543af8969be3ea7082ff7fc9888c144da2af58429ec96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9b47acdb751fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c42f58c30c04aafdb038dda0847dd988dcda6f3bfd15c4b4c4525004aa06eeff8ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34dff7310fdc82aebfd904b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7984a74d37145986780fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e488acba6b965610b5480109c8b17b80e1b7b750dfc7598d5d5011fd2dcc5600a32ef5b52a1ecc820e308aa342721aac0943bf6686b64b2579376504ccc493d97e6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5fb93246f6b1116398a346f1a641f3b041e989f7914f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f1610e4eafe595f6d9d90d11faa933a15ef1369546868a7f3a45a96768d40fd9d03412c091c6315cf4fde7cb68606937380db2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac86aba41c0618983f8741c5ef68d3a101e8a3b8cac60c905c15fc910840b94c00a0b9d0",
        "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a6ac00a9704a188a03",
    ),
    (
        "TEST SHA(abc)",
        "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
    ),
]

# Encodings of the eight points of small order (the identity, the point of order 2, the two of
# order 4 and the four of order 8), each with y < p.
SMALL_ORDER = [
    "0100000000000000000000000000000000000000000000000000000000000000",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000080",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
]


def crypto_accepts(pub: bytes, msg: bytes, sig: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
        return True
    except (InvalidSignature, ValueError):
        return False


def raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@pytest.mark.parametrize("name,secret,public,message,signature", RFC8032, ids=[v[0] for v in RFC8032])
def test_rfc8032_vectors(name, secret, public, message, signature):
    sk = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    pub, msg, sig = bytes.fromhex(public), bytes.fromhex(message), bytes.fromhex(signature)
    # the vectors as typed here are the RFC's: the cryptography package derives the same key and signature
    assert raw(sk) == pub and sk.sign(msg) == sig
    assert len(msg) == {"TEST 1": 0, "TEST 2": 1, "TEST 3": 2, "TEST 1024": 1023, "TEST SHA(abc)": 64}[name]
    if name == "TEST SHA(abc)":
        assert msg == hashlib.sha512(b"abc").digest()
    assert CHECK.ed25519_problem(pub, msg, sig) is None
    # one changed bit anywhere (message, R, S, key) is refused by both
    for which in ("msg", "R", "S", "key"):
        m, s, k = bytearray(msg or b"\0"), bytearray(sig), bytearray(pub)
        target = {"msg": m, "R": s, "S": s, "key": k}[which]
        at = {"msg": len(m) // 2, "R": 5, "S": 40, "key": 7}[which]
        target[at] ^= 0x10
        m = bytes(m) if (msg or which == "msg") else b""
        assert CHECK.ed25519_problem(bytes(k), m, bytes(s)) is not None, which
        assert not crypto_accepts(bytes(k), m, bytes(s)), which


def test_agrees_with_cryptography_on_random_signatures():
    rng = random.Random(8032)
    for i in range(40):
        sk = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
        msg = rng.randbytes(rng.choice((0, 1, 31, 64, 257)))
        sig = sk.sign(msg)
        assert CHECK.ed25519_problem(raw(sk), msg, sig) is None
        bad = bytearray(sig)
        bad[rng.randrange(64)] ^= 1 << rng.randrange(8)
        mine, theirs = CHECK.ed25519_problem(raw(sk), msg, bytes(bad)) is None, crypto_accepts(raw(sk), msg, bytes(bad))
        assert not mine and not theirs, i


def test_malformed_signatures_are_refused():
    sk = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    pub, msg = raw(sk), b"DSSEv1 28 application/vnd.in-toto+json 2 {}"
    sig = sk.sign(msg)
    cases = {}
    # non-canonical S: S + L verifies the same group equation, and must be refused
    s = int.from_bytes(sig[32:], "little")
    assert s + L < 2**256
    cases["S + L"] = (pub, sig[:32] + (s + L).to_bytes(32, "little"), "S >= L")
    cases["S = 2^256 - 1"] = (pub, sig[:32] + b"\xff" * 32, "S >= L")
    # wrong lengths
    cases["signature 63 bytes"] = (pub, sig[:63], "not 64")
    cases["signature 65 bytes"] = (pub, sig + b"\0", "not 64")
    cases["empty signature"] = (pub, b"", "not 64")
    cases["public key 31 bytes"] = (pub[:31], sig, "not 32")
    cases["public key 33 bytes"] = (pub + b"\0", sig, "not 32")
    # points that do not decode: y = p (non-canonical) and a y with no x on the curve
    y_p = (2**255 - 19).to_bytes(32, "little")
    no_x = next(y.to_bytes(32, "little") for y in range(2, 100) if CHECK._ed_decode(y.to_bytes(32, "little")) is None)
    cases["public key y = p"] = (y_p, sig, "not the encoding of a curve point")
    cases["public key y off the curve"] = (no_x, sig, "not the encoding of a curve point")
    cases["R y = p"] = (pub, y_p + sig[32:], "R is not the encoding")
    cases["R y off the curve"] = (pub, no_x + sig[32:], "R is not the encoding")
    cases["R: x = 0 with the sign bit set"] = (pub, b"\x01" + bytes(30) + b"\x80" + sig[32:], "R is not the encoding")
    # small-order public keys with R = identity and S = 0: [0]B = R + [k]A holds whenever [k]A is
    # the identity, i.e. for every message when A is the identity; a strict verifier refuses them
    identity = bytes.fromhex(SMALL_ORDER[0])
    for h in SMALL_ORDER:
        cases[f"small-order key {h[:8]}"] = (
            bytes.fromhex(h),
            identity + bytes(32),
            "public key is a point of small order",
        )
        cases[f"small-order R {h[:8]}"] = (pub, bytes.fromhex(h) + sig[32:], "R is a point of small order")
    # garbage
    rng = random.Random(1)
    for i in range(5):
        cases[f"garbage {i}"] = (pub, rng.randbytes(64), "")
    lax = []
    for name, (k, sg, why) in cases.items():
        problem = CHECK.ed25519_problem(k, msg, sg)
        assert problem is not None and why in problem, (name, problem)
        if crypto_accepts(k, msg, sg):
            lax.append(name)  # accepted by the cofactorless check without the small-order rule
    # the strict rules only refuse more: what cryptography refuses, check.py refuses; the one
    # signature both equations accept (identity key, R = identity, S = 0) is refused here
    assert set(lax) <= {n for n in cases if n.startswith("small-order")}, lax
    for h in SMALL_ORDER:
        assert CHECK._ed_equal(CHECK._ed_mul(8, CHECK._ed_decode(bytes.fromhex(h))), CHECK._IDENTITY)
    print(f"{len(cases)} malformed signatures refused; accepted by cryptography: {lax}")


def test_one_verification_is_fast():
    sk = signer()
    msg = os.urandom(4096)
    sig = sk.sign(msg)
    t0 = time.perf_counter()
    assert CHECK.ed25519_problem(raw(sk), msg, sig) is None
    elapsed = time.perf_counter() - t0
    print(f"one Ed25519 verification: {elapsed * 1000:.1f} ms")
    assert elapsed < 0.5


def test_public_key_files(tmp_path):
    sk = signer()
    pem = tmp_path / "k.pub"
    pem.write_bytes(
        sk.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    ssh = tmp_path / "k.ssh"
    ssh.write_bytes(
        sk.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b" me@host\n"
    )
    assert CHECK.read_public_key(str(pem)) == CHECK.read_public_key(str(ssh)) == raw(sk)
    assert CHECK.key_fingerprint(raw(sk)) == fingerprint(sk.public_key())
    other = tmp_path / "rsa.pub"
    other.write_text("-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAK==\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ValueError):
        CHECK.read_public_key(str(other))


# --------------------------------------------------------------------------- on sealed archives


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("sig")
    results = make_results(base / "results", draws=300)
    report.render(results, pdf=False)
    return seal_archive(results, base / "archive")


def _copy(archive: Path, dst: Path) -> Path:
    shutil.copytree(archive, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _with_sig(archive: Path, dst: Path, sig: bytes | None = None, keyid: str | None = None) -> Path:
    """A copy whose seal carries ``sig`` (and ``keyid``) instead of the signer's, in canonical form."""
    d = _copy(archive, dst)
    env = json.loads((d / "SEAL.dsse.json").read_bytes())
    if sig is not None:
        env["signatures"][0]["sig"] = base64.b64encode(sig).decode()
    if keyid is not None:
        env["signatures"][0]["keyid"] = keyid
    (d / "SEAL.dsse.json").write_bytes(canonical_json(env) + b"\n")
    return d


def test_sealed_archive_signature_agrees_with_cryptography(archive):
    env = json.loads((archive / "SEAL.dsse.json").read_bytes())
    payload = base64.b64decode(env["payload"])
    sig = base64.b64decode(env["signatures"][0]["sig"])
    msg = CHECK.dsse_pae(env["payloadType"], payload)
    assert crypto_accepts(raw(signer()), msg, sig)
    assert CHECK.ed25519_problem(raw(signer()), msg, sig) is None
    code, out = run_check(archive)
    assert code == 0, out
    keyid = fingerprint(signer().public_key())
    code, out = run_check(archive, "--expect-keyid", keyid)
    assert code == 0, out


def test_forged_signatures_fail_the_checker(archive, tmp_path):
    keyid = fingerprint(signer().public_key())
    env = json.loads((archive / "SEAL.dsse.json").read_bytes())
    sig = base64.b64decode(env["signatures"][0]["sig"])
    s = int.from_bytes(sig[32:], "little")
    other = Ed25519PrivateKey.from_private_bytes(b"\x07" * 32)
    msg = CHECK.dsse_pae(env["payloadType"], base64.b64decode(env["payload"]))
    forged = {
        "garbage labelled with the real keyid": (b"\x13\x37" * 4, keyid, "signature is 8 bytes, not 64"),
        "64 random bytes": (os.urandom(64), keyid, "Ed25519 signature refused"),
        "non-canonical S": (sig[:32] + (s + L).to_bytes(32, "little"), keyid, "S >= L"),
        "small-order R": (bytes.fromhex(SMALL_ORDER[4]) + sig[32:], keyid, "R is a point of small order"),
        "another key's signature, real keyid": (other.sign(msg), keyid, "signature does not verify"),
        "another key's signature and keyid": (other.sign(msg), fingerprint(other.public_key()), "signed by"),
    }
    for i, (name, (sg, kid, why)) in enumerate(forged.items()):
        d = _with_sig(archive, tmp_path / f"f{i}", sg, kid)
        code, out = run_check(d)
        assert code == 1 and out.splitlines()[-1].startswith("FAIL: "), (name, out)
        assert any(l.startswith("MISMATCH SEAL.dsse.json: ") and why in l for l in out.splitlines()), (name, out)
    # without a key the checker cannot check the signature: it says so and fails
    code, out = run_check(archive, pubkey=False)
    assert code == 1 and "signature not checked: give the signer's public key with --pubkey" in out, out
    # another public key, or a pinned key id that is not the key's
    pub2 = tmp_path / "other.pub"
    pub2.write_bytes(
        other.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    code, out = run_check(archive, pubkey=pub2)
    assert code == 1 and f"expected {fingerprint(other.public_key())}" in out, out
    code, out = run_check(archive, "--expect-keyid", "SHA256:" + "0" * 64)
    assert code == 1 and "is not the pinned signer" in out, out
    # usage errors: exit 2
    assert run_check(archive, "--expect-keyid", "nope")[0] == 2
    assert run_check(archive, "--expect-previous", "xyz")[0] == 2
    bad = tmp_path / "bad.pub"
    bad.write_text("not a key\n")
    assert run_check(archive, pubkey=bad)[0] == 2
    # a seal not in canonical form, or with two signatures
    d = _copy(archive, tmp_path / "two")
    env2 = json.loads((d / "SEAL.dsse.json").read_bytes())
    env2["signatures"].append(dict(env2["signatures"][0]))
    (d / "SEAL.dsse.json").write_bytes(canonical_json(env2) + b"\n")
    code, out = run_check(d)
    assert code == 1 and "expected exactly one signature" in out, out
    d = _copy(archive, tmp_path / "spaced")
    (d / "SEAL.dsse.json").write_text(json.dumps(env, indent=1) + "\n")
    code, out = run_check(d)
    assert code == 1 and "not in canonical form" in out, out


def test_symlinks_anywhere_in_the_archive_are_refused(archive, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.csv").write_text("a\n1\n")
    for i, (rel, target) in enumerate(
        (
            ("campaigns/linked-folder", outside),  # a folder the closed-world walk would not enter
            ("tables/linked.csv", outside / "x.csv"),
            ("campaigns/inside-link", "../tables"),  # even a link that stays inside
        )
    ):
        d = _copy(archive, tmp_path / f"l{i}")
        (d / rel).symlink_to(target)
        code, out = run_check(d)
        assert code == 1 and f"MISMATCH {rel}: symbolic link" in out, out
    # a sealed file replaced by a link to an identical copy outside is refused as well
    d = _copy(archive, tmp_path / "swap")
    real = d / "tables" / "ratios.csv"
    copy = outside / "ratios.csv"
    shutil.copy(real, copy)
    real.unlink()
    real.symlink_to(copy)
    code, out = run_check(d)
    assert code == 1 and "MISMATCH tables/ratios.csv: symbolic link" in out, out
