"""The seal: the public key and its id, the DSSE envelope, the Ed25519 signature, the chain, every subject's
digest, the archive's tree (no links), and the exit status a check ends with."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat

from refspec_check import jsonio
from refspec_check.contract import posix_rel
from refspec_check.digests import canonical, sha256_file
from refspec_check.ed25519 import ed25519_problem
from refspec_check.problems import EXIT_MISMATCH, EXIT_OK, EXIT_UNREADABLE, Checker


def _inside(path: str, root: str) -> bool:
    rp, rr = os.path.realpath(path), os.path.realpath(root)
    return rp == rr or rp.startswith(rr + os.sep)


# SubjectPublicKeyInfo of an Ed25519 key (RFC 8410): this DER prefix, then the 32 key bytes.
_SPKI_ED25519 = bytes.fromhex("302a300506032b6570032100")


def read_public_key(path: str) -> bytes:
    """The 32 raw bytes of an Ed25519 public key file: PEM SubjectPublicKeyInfo or OpenSSH one-line
    ``ssh-ed25519 BASE64 [comment]`` (the formats ``refspec keygen`` and ssh-keygen write)."""
    with open(path, "rb") as f:
        data = f.read(64 * 1024)
    text = data.decode("ascii", "strict").strip()
    if text.startswith("ssh-ed25519 "):
        blob = base64.b64decode(text.split()[1], validate=True)
        parts, pos = [], 0
        while pos < len(blob):
            n = int.from_bytes(blob[pos : pos + 4], "big")
            parts.append(blob[pos + 4 : pos + 4 + n])
            pos += 4 + n
        if pos != len(blob) or len(parts) != 2 or parts[0] != b"ssh-ed25519" or len(parts[1]) != 32:
            raise ValueError("not an OpenSSH Ed25519 public key")
        return parts[1]
    lines = text.splitlines()
    if not lines or lines[0].strip() != "-----BEGIN PUBLIC KEY-----" or lines[-1].strip() != "-----END PUBLIC KEY-----":
        raise ValueError("not a PEM public key (BEGIN/END PUBLIC KEY) or an OpenSSH ssh-ed25519 line")
    der = base64.b64decode("".join(l.strip() for l in lines[1:-1]), validate=True)
    if len(der) != 44 or not der.startswith(_SPKI_ED25519):
        raise ValueError("not an Ed25519 SubjectPublicKeyInfo")
    return der[12:]


def key_fingerprint(public: bytes) -> str:
    """``SHA256:`` + hex sha256 of the raw 32-byte public key (the seal's keyid)."""
    return "SHA256:" + hashlib.sha256(public).hexdigest()


def dsse_pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding, the bytes the seal's signature covers."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


PAYLOAD_TYPE = "application/vnd.in-toto+json"

_KEYID_RE = re.compile(r"SHA256:[0-9a-f]{64}")

_HEX64_RE = re.compile(r"[0-9a-f]{64}")


class Trust:
    """What the auditor brings from outside the archive: the signer's public key (``--pubkey``), its key
    id (``--expect-keyid``), the seal this archive must follow (``--expect-previous``) and, for a
    comparison archive, the public keys of the compared archives' signers (``--input-pubkey a=KEY.pub``;
    an input signed with ``--pubkey``'s key needs none)."""

    def __init__(self, pubkey: str | None = None, expect_keyid: str | None = None, expect_previous: str | None = None):
        self.pubkey, self.expect_keyid, self.expect_previous = pubkey, expect_keyid, expect_previous
        self.public: bytes | None = None
        self.inputs: dict[str, bytes] = {}


def b64_strict(text) -> bytes:
    """Standard padded base64 in canonical form only (it re-encodes to the same text)."""
    if not isinstance(text, str):
        raise ValueError("not a string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as e:
        raise ValueError(f"invalid base64 ({e})") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("non-canonical base64")
    return raw


def check_signature(c: Checker, data: bytes, env, trust: Trust, w: str = "SEAL.dsse.json") -> None:
    """The envelope as ``refspec verify`` checks it: canonical JSON of exactly ``payload``,
    ``payloadType`` and one signature ``{keyid, sig}``, canonical base64, the in-toto payload type,
    the keyid equal to the fingerprint of ``--pubkey`` (itself equal to ``--expect-keyid`` when
    given), and the Ed25519 signature over the DSSE pre-authentication encoding (``ed25519_problem``).
    Without ``--pubkey`` the signature cannot be checked, which is a mismatch. ``w``: the seal's
    path in the archive (a comparison's carried seals are ``inputs/a/SEAL.dsse.json``, ...)."""
    if not isinstance(env, dict):
        c.bad(w, "not a DSSE envelope (not a JSON object)")
        return
    if set(env) != {"payload", "payloadType", "signatures"}:
        c.bad(w, f"envelope fields {sorted(env)} are not payload, payloadType, signatures")
    elif canonical(env) + b"\n" != data:
        c.bad(w, "envelope is not in canonical form (modified)")
    ptype = env.get("payloadType")
    if ptype != PAYLOAD_TYPE:
        c.bad(w, f"payload type {ptype!r} is not {PAYLOAD_TYPE!r}")
    try:
        payload = b64_strict(env.get("payload"))
    except ValueError as e:
        c.bad(w, f"payload: {e}")
        return
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        c.bad(w, "expected exactly one signature")
        return
    s = sigs[0]
    if set(s) != {"keyid", "sig"}:
        c.bad(w, f"signature fields {sorted(s)} are not keyid, sig")
    if trust.public is None:
        c.bad(w, "signature not checked: give the signer's public key with --pubkey KEY.pub (from outside the archive)")
        return
    fp = key_fingerprint(trust.public)
    if trust.expect_keyid is not None and fp != trust.expect_keyid:
        c.bad(
            w,
            f"public key {fp} is not the pinned signer {trust.expect_keyid} (take the key id from outside the archive)",
        )
    if s.get("keyid") != fp:
        c.bad(w, f"signed by {s.get('keyid')!r}, expected {fp}")
    try:
        sig = b64_strict(s.get("sig"))
    except ValueError as e:
        c.bad(w, f"signature: {e}")
        return
    c.compared += 1
    why = ed25519_problem(trust.public, dsse_pae(ptype if isinstance(ptype, str) else "", payload), sig)
    if why is None:
        c.matched += 1
    else:
        c.bad(w, f"Ed25519 signature refused with key {fp}: {why}")


def check_seal(c: Checker, sp: str, trust: Trust) -> None:
    """The seal: its signature (``check_signature``), the chain (``--expect-previous``), every
    statement subject's sha256 and size, and the closed world (every archive file is a subject)."""
    try:
        with open(sp, "rb") as f:
            data = f.read()
        env = jsonio.loads(data)
        check_signature(c, data, env, trust)
        statement = jsonio.loads(base64.b64decode(env["payload"], validate=True))
        subjects = statement["subject"]
        if not isinstance(subjects, list):
            raise ValueError("subject is not a list")
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        c.unread("SEAL.dsse.json", f"not a DSSE envelope over a statement ({e})")
        return
    except RecursionError:
        c.unread("SEAL.dsse.json", "not a DSSE envelope over a statement (JSON nested too deeply)")
        return
    if trust.expect_previous is not None:
        pred = statement.get("predicate") if isinstance(statement, dict) else None
        prev = pred.get("previous_seal_sha256") if isinstance(pred, dict) else None
        want = None if trust.expect_previous == "none" else trust.expect_previous
        if prev != want:
            c.bad(
                "SEAL.dsse.json",
                f"previous seal is {prev or 'none'}, expected {want or 'none'} (an older or unrelated seal?)",
            )
    check_reproduces(c, statement)
    listed = set()
    for j, s in enumerate(subjects):
        try:
            name = s["name"]
            digest = s["digest"]["sha256"]
        except (KeyError, TypeError):
            c.unread(f"SEAL.dsse.json: subject[{j}]", "no name or sha256")
            continue
        size = s.get(
            "size", (s.get("annotations") or {}).get("size") if isinstance(s.get("annotations"), dict) else None
        )
        listed.add(name)
        where = f"SEAL.dsse.json: subject {name!r}"
        p = os.path.normpath(os.path.join(c.archive, name))
        if not _inside(p, c.archive):
            c.bad(where, "names a path outside the archive")
            continue
        if not os.path.isfile(p):
            c.bad(where, "file is missing")
            continue
        c.files.add(p)
        c.compared += 1
        got = sha256_file(p)
        if got != digest:
            c.bad(where, f"sha256 {got[:16]}... != sealed {str(digest)[:16]}... (file changed after sealing)")
        else:
            c.matched += 1
        if size is not None and os.path.getsize(p) != size:
            c.bad(where, f"size {os.path.getsize(p)} != sealed {size}")
    for rel in sorted(c.tree):
        if rel != "SEAL.dsse.json" and rel not in listed:
            c.bad("SEAL.dsse.json", f"{rel} is in the archive but not covered by the seal")


def check_reproduces(c: Checker, statement) -> None:
    """A reproduction's seal names the archive it reproduces (``predicate.reproduces``:
    seal_sha256, keyid, archive_id; refspec reproduce). Its format is checked and it is shown;
    the reproduced archive itself is not needed here (refspec compare compares the two)."""
    pred = statement.get("predicate") if isinstance(statement, dict) else None
    if not isinstance(pred, dict) or "reproduces" not in pred:
        return
    r = pred["reproduces"]
    where = "SEAL.dsse.json: predicate.reproduces"
    if not isinstance(r, dict):
        c.bad(where, "is not an object")
        return
    seal, keyid, aid = r.get("seal_sha256"), r.get("keyid"), r.get("archive_id")
    if not (isinstance(seal, str) and _HEX64_RE.fullmatch(seal)):
        c.bad(where, "seal_sha256 is not a sha256")
    if not (isinstance(keyid, str) and _KEYID_RE.fullmatch(keyid)):
        c.bad(where, "keyid is not of the form SHA256:<64 hex digits>")
    if not isinstance(aid, str):
        c.bad(where, "archive_id is not a string")
    c.reproduces = f"seal {seal} key {keyid} archive {aid}"


def check_tree(c: Checker) -> None:
    """Walk the whole archive (never following a link): a symbolic link anywhere (to a file or a
    folder, inside or outside the archive) and anything but regular files and folders are
    mismatches; the regular files are recorded in ``c.tree`` for the seal's closed world."""
    for dirpath, dirs, files in os.walk(c.archive, followlinks=False):
        for name in sorted(dirs + files):
            full = os.path.join(dirpath, name)
            rel = posix_rel(full, c.archive)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                c.bad(rel, f"symbolic link (to {os.readlink(full)!r}) in the archive")
            elif stat.S_ISREG(st.st_mode):
                c.tree.add(rel)
            elif not stat.S_ISDIR(st.st_mode):
                c.bad(rel, "not a regular file or folder")


def check_sealed(c: Checker, unsealed: bool, trust: Trust) -> tuple[int, Checker]:
    """The archive's seal (SEAL.dsse.json), a mismatch when missing unless ``unsealed``; then the exit status
    of the whole check."""
    sp = os.path.join(c.archive, "SEAL.dsse.json")
    if os.path.isfile(sp):
        check_seal(c, sp, trust)
    elif not unsealed:
        c.bad(
            "SEAL.dsse.json",
            "missing: the archive is not sealed (pass --unsealed to check a results folder before sealing)",
        )
    return exit_status(c), c


def exit_status(c: Checker) -> int:
    return EXIT_UNREADABLE if c.unreadable else EXIT_MISMATCH if c.problems else EXIT_OK
