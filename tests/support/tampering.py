"""What the seal tests do to a sealed archive (``seal_env`` of tests/conftest.py): its envelope and
statement read and rewritten, the mutations made after signing, the unsafe tars and the
non-canonical rewrites of the clean tar (``TAR_CASES``, ``CANONICAL_CASES``), and folders and tars
signed again with the real key; shared by the tamper, restore and interoperability tests."""

from __future__ import annotations

import base64
import bz2
import json
import lzma
import tarfile
from pathlib import Path

from refspec.core.hashing import canonical_json, sha256_bytes
from refspec.provenance.dsse import PAYLOAD_TYPE, SEAL_NAME, envelope_bytes, pae
from refspec.provenance.keys import load_private_key


def envelope(d: Path) -> dict:
    return json.loads((d / SEAL_NAME).read_bytes())


def statement(d: Path) -> dict:
    return json.loads(base64.b64decode(envelope(d)["payload"]))


def write_envelope(d: Path, env: dict) -> None:
    (d / SEAL_NAME).write_bytes(canonical_json(env) + b"\n")


def edit_payload_after_signing(d, env_):
    env = envelope(d)
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["campaign"] = "confirm"
    env["payload"] = base64.b64encode(canonical_json(stmt)).decode()
    write_envelope(d, env)


def resign_other_key_keep_keyid(d, env):
    """Another key's signature presented under the expected key id."""
    env_ = envelope(d)
    payload = base64.b64decode(env_["payload"])
    sig = load_private_key(env["b"].private_path).sign(pae(PAYLOAD_TYPE, payload))
    env_["signatures"][0]["sig"] = base64.b64encode(sig).decode()
    write_envelope(d, env_)


def tar_with(path: Path, base: Path, extra) -> Path:
    with tarfile.open(path, "w") as tf:
        for f in sorted(base.rglob("*")):
            if f.is_file():
                tf.add(f, arcname=f.relative_to(base).as_posix())
        extra(tf)
    return path


def _add_bytes(tf, name, data=b"x", type_=tarfile.REGTYPE, linkname=""):
    import io

    ti = tarfile.TarInfo(name)
    ti.type = type_
    ti.linkname = linkname
    ti.size = len(data) if type_ == tarfile.REGTYPE else 0
    tf.addfile(ti, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)


TAR_CASES = [
    ("dotdot", lambda tf: _add_bytes(tf, "../x"), "'..' in path"),
    ("absolute", lambda tf: _add_bytes(tf, "/tmp/refspec-evil"), "absolute path"),  # abspath: the refused member
    ("symlink", lambda tf: _add_bytes(tf, "link", type_=tarfile.SYMTYPE, linkname="/etc/passwd"), "symbolic link"),
    ("hardlink", lambda tf: _add_bytes(tf, "hard", type_=tarfile.LNKTYPE, linkname="plan.json"), "hard link"),
    ("device", lambda tf: _add_bytes(tf, "dev", type_=tarfile.CHRTYPE), "device file"),
    ("fifo", lambda tf: _add_bytes(tf, "fifo", type_=tarfile.FIFOTYPE), "FIFO"),
    ("duplicate", lambda tf: _add_bytes(tf, "plan.json", b"{}"), "duplicate"),
]


def _members(tar: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(tar) as tf:
        return [(m, tf.extractfile(m).read()) for m in tf.getmembers()]


def retar(path: Path, src: Path, fmt=tarfile.PAX_FORMAT, edit=None, order=None, extra=None) -> Path:
    """Rewrite the clean tar with tarfile, changing one thing: ``edit(ti)`` on each header,
    another member ``order``, ``extra(tf)`` members added at the end."""
    import io

    items = _members(src)
    if order:
        items = order(items)
    with tarfile.open(path, "w", format=fmt) as tf:
        for m, data in items:
            ti = tarfile.TarInfo(m.name)
            ti.size, ti.mtime, ti.mode, ti.type = m.size, m.mtime, m.mode, m.type
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            if edit:
                edit(ti)
            tf.addfile(ti, io.BytesIO(data))
        if extra:
            extra(tf)
    return path


def _patch_bytes(path: Path, src: Path, patch) -> Path:
    data = bytearray(src.read_bytes())
    patch(data)
    path.write_bytes(bytes(data))
    return path


def _first_offset(src: Path, name: str) -> int:
    with tarfile.open(src) as tf:
        return tf.getmember(name).offset


def _oldgnu_with_prefix(data: bytearray, off: int) -> None:
    """OLDGNU magic on a ustar header that carries a prefix (GNU tar and Python read the name differently)."""
    hdr = data[off : off + 512]
    hdr[257:265] = b"ustar  \x00"
    hdr[345 : 345 + 16] = b"campaigns/c1\x00\x00\x00\x00"
    hdr[148:156] = b"        "
    hdr[148:156] = b"%06o\x00 " % sum(hdr)
    data[off : off + 512] = hdr


def _append_member_after_end(path: Path, src: Path) -> Path:
    """A complete member after the end-of-archive blocks: GNU `tar -i` extracts it."""
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo("hidden.txt")
        ti.size = 6
        tf.addfile(ti, io.BytesIO(b"hidden"))
    path.write_bytes(src.read_bytes() + buf.getvalue())
    return path


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def gzip_tar(path: Path, src: Path, extra: bytes = b"", members: int = 1) -> Path:
    import gzip

    path.write_bytes(b"".join(gzip.compress(src.read_bytes(), mtime=0) for _ in range(members)) + extra)
    return path


# (case id, build(path, clean tar) -> tar, a substring one of the problems must contain)
CANONICAL_CASES = [
    ("junk-after-end-blocks", lambda p, s: _patch_bytes(p, s, lambda d: d.extend(b"junk")), "expected"),
    ("zero-record-after-end", lambda p, s: _patch_bytes(p, s, lambda d: d.extend(bytes(10240))), "expected"),
    ("member-after-end-marker", _append_member_after_end, "non-zero bytes after the last member"),
    (
        "pax-comment-hidden-data",
        lambda p, s: retar(p, s, edit=lambda ti: ti.pax_headers.update(comment="hidden " * 50)),
        "PAX keys ['comment']",
    ),
    (
        "schily-xattr",
        lambda p, s: retar(p, s, edit=lambda ti: ti.pax_headers.update({"SCHILY.xattr.user.note": "x"})),
        "PAX keys ['SCHILY.xattr.user.note']",
    ),
    ("mode-4777", lambda p, s: retar(p, s, edit=lambda ti: setattr(ti, "mode", 0o4777)), "mode 4777"),
    ("owner-names", lambda p, s: retar(p, s, edit=lambda ti: setattr(ti, "uname", "root")), "owner"),
    ("gnu-format", lambda p, s: retar(p, s, fmt=tarfile.GNU_FORMAT), "header bytes differ"),
    (
        "oldgnu-magic-with-prefix",
        lambda p, s: _patch_bytes(p, s, lambda d: _oldgnu_with_prefix(d, _first_offset(s, "ledger.jsonl"))),
        "ledger.jsonl': header is not the canonical one",
    ),
    (
        "other-mtime",
        lambda p, s: retar(p, s, edit=lambda ti: setattr(ti, "mtime", ti.mtime + 1)),
        "is not the seal's creation time",
    ),
    (
        "two-mtimes",
        lambda p, s: retar(p, s, edit=lambda ti: setattr(ti, "mtime", ti.mtime + (ti.name == "plan.json"))),
        "different mtimes",
    ),
    ("unsorted-members", lambda p, s: retar(p, s, order=lambda items: items[::-1]), "out of order"),
    (
        "dot-slash-names",
        lambda p, s: retar(p, s, edit=lambda ti: setattr(ti, "name", "./" + ti.name)),
        "name not in canonical form",
    ),
    (
        "folder-entry",
        lambda p, s: retar(p, s, extra=lambda tf: _add_bytes(tf, "zzz", type_=tarfile.DIRTYPE)),
        "folder entry",
    ),
    (
        "global-pax-header",
        lambda p, s: _patch_bytes(
            p,
            s,
            lambda d: d.__setitem__(
                slice(0, 0), tarfile.TarInfo._create_pax_generic_header({"comment": "g"}, tarfile.XGLTYPE, "utf-8")
            ),
        ),
        "starts at byte",
    ),
    ("truncated-end-blocks", lambda p, s: _patch_bytes(p, s, lambda d: d.__delitem__(slice(-10240, None))), "expected"),
    ("gzip", lambda p, s: gzip_tar(p, s), "gzip-compressed tar refused"),
    ("gzip-second-member", lambda p, s: gzip_tar(p, s, members=2), "gzip-compressed tar refused"),
    ("gzip-trailing-junk", lambda p, s: gzip_tar(p, s, extra=b"junk"), "gzip-compressed tar refused"),
    ("bzip2", lambda p, s: _write(p, bz2.compress(s.read_bytes())), "bzip2-compressed tar refused"),
    ("xz", lambda p, s: _write(p, lzma.compress(s.read_bytes())), "xz-compressed tar refused"),
]


def _subjects_of(files: dict[str, bytes]) -> list[dict]:
    return [
        {"annotations": {"size": len(data)}, "digest": {"sha256": sha256_bytes(data)}, "name": n}
        for n, data in sorted(files.items())
    ]


def folder_files(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file() and p.name != SEAL_NAME}


def signed_statement(stmt: dict, files: dict[str, bytes], edit=None) -> dict:
    stmt["subject"] = _subjects_of(files)
    stmt["predicate"]["files"] = len(files)
    stmt["predicate"]["total_bytes"] = sum(len(v) for v in files.values())
    if edit is not None:
        edit(stmt)
    return stmt


def signed_tar(path: Path, d: Path, env: dict, extra: dict[str, bytes]) -> Path:
    """A canonical tar of the folder ``d`` plus ``extra`` members, every one of them signed by the real key."""
    import io

    from refspec.provenance.archive import canonical_tarinfo, created_mtime

    files = {**folder_files(d), **extra}
    stmt = signed_statement(statement(d), files)
    seal = envelope_bytes(stmt, load_private_key(env["a"].private_path))
    mtime = created_mtime(stmt["predicate"]["created"])
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tf:
        for n, data in sorted({**files, SEAL_NAME: seal}.items()):
            tf.addfile(canonical_tarinfo(n, len(data), mtime), io.BytesIO(data))
    return path
