"""Verification of a sealed archive (a folder or a tar).

Order of checks, all problems collected rather than stopping at the first
(like RECORD validation in pypa/installer):

1. the archive's structure: only regular files (and, in a folder, folders),
   safe member paths, no duplicates; ``SEAL.dsse.json`` present. A tar must be
   uncompressed and byte for byte in the canonical form ``seal --tar`` writes
   (every header regenerated and compared, sorted regular members, one mtime,
   zero padding, two end blocks, record padding, nothing after); a compressed
   tar is refused;
2. the envelope: canonical JSON of exactly ``payload``, ``payloadType`` and one
   signature ``{keyid, sig}``, canonical base64, payload type
   ``application/vnd.in-toto+json``, keyid equal to the given key's fingerprint
   (and, with ``--expect-keyid``, that fingerprint equal to the pinned one),
   and the Ed25519 signature over the DSSE pre-authentication encoding. Nothing
   in the payload is parsed before the signature verifies; a bad signature ends
   verification;
3. the statement: in-toto Statement v1 with the refspec seal predicate;
   ``--expect-previous`` against the previous seal's sha256; a tar's mtime
   equals the seal's creation time;
4. closed world: every subject exists with its size and sha256, no other file
   (or empty folder) exists besides ``SEAL.dsse.json``;
5. every Parquet file carries the archive id and campaign in its key-value
   metadata;
6. the ledger's hash chain, its line count and its last line's sha256;
7. every CSV copy (``x.csv`` next to ``x.parquet``) equals, byte for byte, the CSV
   its table gives under the one CSV encoding (:func:`refspec.core.tables.parquet_csv_text`);
   whether a copy was compared is computed here, never taken from the seal.

Everything printed is passed through :func:`printable`: a signed string (an
archive id, a creation time, a member name) cannot move the cursor or rewrite
a line on the terminal.

``refspec verify`` prints ``OK: PATH (N files) key K archive A created T seal S
previous P`` (and a ``NOTE:`` line per table without a CSV copy) or
one ``FAIL:`` line per problem; it exits 0 when verified, 1 when not, 2 on a
usage error (:mod:`refspec.core.errors`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import stat
import sys
import tarfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..core.errors import EXIT_FAILED, EXIT_OK, UsageError
from ..core.hashing import canonical_json, sha256_bytes
from .keys import fingerprint, load_public_key
from .ledger import verify_lines
from .seal import (
    ARCHIVE_ID_KEY,
    CAMPAIGN_KEY,
    MAX_SEAL_BYTES,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    SEAL_FORMAT,
    SEAL_NAME,
    STATEMENT_TYPE,
    TAR_ENCODING,
    b64decode_strict,
    canonical_header,
    created_mtime,
    default_workers,
    pae,
    parent_dirs,
    sha256_stream,
    unsafe_name,
)

_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass
class VerifyResult:
    path: Path
    problems: list[str] = field(default_factory=list)
    files: int = 0
    statement: dict[str, Any] | None = None
    seal_sha256: str | None = None
    keyid: str | None = None
    notes: list[str] = field(default_factory=list)
    csv_checked: dict[str, bool] = field(default_factory=dict)  # table -> its CSV copy was compared equal

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self, shown: str | Path | None = None) -> list[str]:
        """``OK: PATH (N files) key K archive A created T seal S previous P`` and any
        ``NOTE:`` lines, or one ``FAIL:`` line per problem; every line :func:`printable`."""
        where = shown if shown is not None else self.path
        if not self.ok:
            return [printable(f"FAIL: {p}") for p in self.problems]
        pred = (self.statement or {}).get("predicate") or {}
        return [
            printable(
                f"OK: {where} ({self.files} files) key {self.keyid} archive {pred.get('archive_id')} "
                f"created {pred.get('created')} seal {self.seal_sha256} "
                f"previous {pred.get('previous_seal_sha256') or 'none'}"
            )
        ] + [printable(f"NOTE: {n}") for n in self.notes]


def printable(text: str) -> str:
    """``text`` with every character that is not printable (terminal controls such as ESC
    and CR, other C0/C1 controls, Unicode format characters such as bidirectional
    overrides, line and paragraph separators) and the backslash escaped as in Python's
    string literals (``\\x1b``, ``\\u202e``, ``\\\\``), so a signed string cannot
    rewrite what a terminal shows."""
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)


_KEYID = re.compile(r"SHA256:[0-9a-f]{64}")


def parse_keyid(text: str) -> str:
    """A pinned key id ``SHA256:<64 hex>`` (hex case is ignored) or a usage error."""
    if isinstance(text, str) and text[:7].upper() == "SHA256:" and _KEYID.fullmatch("SHA256:" + text[7:].lower()):
        return "SHA256:" + text[7:].lower()
    raise UsageError(f"--expect-keyid {text!r} is not a key id of the form SHA256:<64 hex digits>")


def parse_expect_previous(text: str | None) -> str | None:
    if text is None:
        return None
    t = text.lower()
    if t != "none" and not _HEX64.fullmatch(t):
        raise UsageError(f"--expect-previous {text!r} is not a sha256 or 'none'")
    return t


# --------------------------------------------------------------------------- sources


class _Source:
    """Read access to the members of an archive folder or tar."""

    files: dict[str, int]  # member path -> size
    dirs: set[str]
    problems: list[str]

    def read(self, name: str, limit: int) -> bytes:
        raise NotImplementedError

    def open(self, name: str) -> BinaryIO:
        raise NotImplementedError

    def hash_all(self, names: list[str], workers: int) -> dict[str, str | Exception]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class DirSource(_Source):
    def __init__(self, root: Path):
        self.root = root
        self.files, self.dirs, self.problems = {}, set(), []
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            base = Path(dirpath)
            for d in list(dirnames):
                rel = (base / d).relative_to(root).as_posix()
                st = os.lstat(base / d)
                if stat.S_ISLNK(st.st_mode):
                    self.problems.append(f"{rel}: symbolic link in archive")
                    dirnames.remove(d)
                else:
                    self.dirs.add(rel)
            for fn in filenames:
                full = base / fn
                rel = full.relative_to(root).as_posix()
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    self.problems.append(f"{rel}: symbolic link in archive")
                elif not stat.S_ISREG(st.st_mode):
                    self.problems.append(f"{rel}: not a regular file")
                else:
                    why = unsafe_name(rel)
                    if why:
                        self.problems.append(f"{rel!r}: {why}")
                    else:
                        self.files[rel] = st.st_size

    def read(self, name: str, limit: int) -> bytes:
        with open(self.root / name, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"larger than {limit} bytes")
        return data

    def open(self, name: str) -> BinaryIO:
        return open(self.root / name, "rb")

    def hash_all(self, names: list[str], workers: int) -> dict[str, str | Exception]:
        def one(n: str) -> str | Exception:
            try:
                with open(self.root / n, "rb", buffering=0) as f:
                    return sha256_stream(f)
            except OSError as e:
                return e

        with ThreadPoolExecutor(max_workers=workers) as ex:
            return dict(zip(names, ex.map(one, names)))


class _RangeReader(io.RawIOBase):
    """A read-only window (offset, size) on a file, read with pread."""

    def __init__(self, fd: int, offset: int, size: int):
        self.fd, self.offset, self.size, self.pos = fd, offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        data = os.pread(self.fd, n, self.offset + self.pos)
        b[: len(data)] = data
        self.pos += len(data)
        return len(data)


class TarSource(_Source):
    """An uncompressed tar in the canonical form ``seal --tar`` writes, read in place."""

    def __init__(self, path: Path):
        self.path = path
        self.files, self.dirs, self.problems = {}, set(), []
        self.members: dict[str, tarfile.TarInfo] = {}
        self.mtime: int | None = None
        self.fd = -1
        try:
            tf = open_tar(path)
        except TarReadError as e:
            self.problems.append(str(e))
            return
        with tf:
            members, problem = read_members(tf, path)
        if problem:
            self.problems.append(problem)
        self.problems.extend(member_problems(members))
        self.fd = os.open(path, os.O_RDONLY)
        canon, self.mtime = canonical_problems(self.fd, members, path)
        self.problems.extend(canon)
        for m in members:
            name = member_name(m)
            if name is None or unsafe_name(name) or not (m.isreg() or m.isdir()) or m.issparse():
                continue
            if m.isdir():
                self.dirs.add(name)
            elif name not in self.files:
                self.files[name] = m.size
                self.members[name] = m

    def _reader(self, name: str) -> _RangeReader:
        m = self.members[name]
        return _RangeReader(self.fd, m.offset_data, m.size)

    def read(self, name: str, limit: int) -> bytes:
        m = self.members[name]
        if m.size > limit:
            raise ValueError(f"larger than {limit} bytes")
        return os.pread(self.fd, m.size, m.offset_data)

    def open(self, name: str) -> BinaryIO:
        return io.BufferedReader(self._reader(name))  # type: ignore[arg-type]

    def hash_all(self, names: list[str], workers: int) -> dict[str, str | Exception]:
        def one(n: str) -> str | Exception:
            try:
                return sha256_stream(self._reader(n), self.members[n].size)
            except OSError as e:
                return e

        with ThreadPoolExecutor(max_workers=workers) as ex:
            return dict(zip(names, ex.map(one, names)))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class TarReadError(Exception):
    """A tar that cannot be opened (its message is a problem line)."""


TAR_ERRORS: tuple[type[BaseException], ...] = (tarfile.TarError, EOFError, OSError, UnicodeError)

# Leading bytes of the compressed formats a ``.tar.*`` may use.
_COMPRESSED = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"LZIP", "lzip"),
    (b"\x1f\x9d", "compress"),
)


def compression_of(head: bytes) -> str | None:
    """The compressed format whose magic ``head`` starts with, or None."""
    for magic, kind in _COMPRESSED:
        if head.startswith(magic):
            return kind
    return None


def open_tar(path: Path) -> tarfile.TarFile:
    """Open an uncompressed tar for reading; a compressed one is refused (see ``anc/seal.md``).

    A compressed stream has bytes (header fields, padding bits of the last deflate
    block, further members) that its own checksums do not cover, so only the
    uncompressed tar, whose every byte is checked, is accepted.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as e:
        raise TarReadError(f"{path}: cannot read ({e.strerror})") from None
    kind = compression_of(head)
    if kind is not None:
        raise TarReadError(
            f"{path}: {kind}-compressed tar refused: only the uncompressed tar that `refspec seal --tar` "
            f"writes is accepted; decompress it first (e.g. `{kind} -dc FILE > archive.tar`) and verify that"
        )
    try:
        return tarfile.open(path, "r:", encoding=TAR_ENCODING, errors="surrogateescape")
    except TAR_ERRORS as e:
        raise TarReadError(f"{path}: not a readable tar ({e})") from None


def read_members(tf: tarfile.TarFile, path: Path) -> tuple[list[tarfile.TarInfo], str | None]:
    """All members, or those before the damage and a problem line."""
    try:
        return tf.getmembers(), None
    except TAR_ERRORS as e:
        return list(tf.members), f"{path}: corrupt or truncated tar ({e.__class__.__name__}: {e})"


def _header_diff(m: tarfile.TarInfo) -> str:
    """What makes a member's header differ from the canonical one, in words."""
    d = []
    if m.type != tarfile.REGTYPE:
        d.append(f"type {m.type!r}")
    if m.mode != 0o644:
        d.append(f"mode {m.mode:04o}")
    if m.uid or m.gid or m.uname or m.gname:
        d.append(f"owner {m.uid}:{m.gid} {m.uname!r}:{m.gname!r}")
    extra = sorted(k for k in m.pax_headers if k != "path")
    if extra:
        d.append(f"PAX keys {extra}")
    return "; ".join(d) or "header bytes differ: format, magic or field encoding"


def canonical_problems(fd: int, members: list[tarfile.TarInfo], path: Path) -> tuple[list[str], int | None]:
    """Every byte of an uncompressed tar must be what ``seal --tar`` writes.

    Each header (with its PAX extended header, if any) is regenerated from the
    member's name, size and mtime and compared byte for byte; members are regular
    files in strictly ascending name order, all with one mtime, each starting where
    the previous one's zero padding ends; the last is followed by exactly two zero
    blocks and zero padding to a whole 10240-byte record, and nothing else.
    Returns the problems and the members' common mtime (None if there is none).
    """
    problems: list[str] = []
    size = os.fstat(fd).st_size
    pos = 0
    prev: str | None = None
    mtimes: set[int] = set()
    for m in members:
        if m.offset != pos:
            problems.append(f"tar member {m.name!r}: starts at byte {m.offset}, expected {pos} (extra headers or data)")
        if member_name(m) != m.name:
            problems.append(f"tar member {m.name!r}: name not in canonical form (no './' prefix or final '/')")
        if m.isreg():
            try:
                want = canonical_header(m.name, m.size, int(m.mtime))
            except (UnicodeError, ValueError) as e:
                want = None
                problems.append(f"tar member {m.name!r}: no canonical header ({e})")
            if want is not None and os.pread(fd, m.offset_data - m.offset, m.offset) != want:
                problems.append(
                    f"tar member {m.name!r}: header is not the canonical one `seal --tar` writes ({_header_diff(m)})"
                )
        elif m.isdir():
            problems.append(f"tar member {m.name!r}: folder entry (`seal --tar` writes regular files only)")
        if prev is not None and not prev < m.name:
            problems.append(f"tar member {m.name!r}: out of order after {prev!r} (members are sorted by name)")
        prev = m.name
        mtimes.add(int(m.mtime))
        data_end = m.offset_data + (m.size if m.isreg() else 0)
        padded = -(-data_end // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        pad = os.pread(fd, padded - data_end, data_end)
        if pad.count(0) != len(pad):
            problems.append(f"tar member {m.name!r}: non-zero padding after its data")
        pos = max(pos, padded)
    if len(mtimes) > 1:
        problems.append(f"{path}: members have {len(mtimes)} different mtimes (`seal --tar` writes one)")
    # End of archive: two zero blocks, then zeros up to a whole record.
    want_size = -(-(pos + 2 * tarfile.BLOCKSIZE) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE
    if size != want_size:
        problems.append(
            f"{path}: {size} bytes, expected {want_size} (data after the end-of-archive blocks "
            "and record padding, or a truncated tar)"
        )
    at = pos
    while at < size:
        chunk = os.pread(fd, min(1 << 20, size - at), at)
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            problems.append(f"{path}: non-zero bytes after the last member")
            break
        at += len(chunk)
    return problems, (mtimes.pop() if len(mtimes) == 1 else None)


def member_name(m: tarfile.TarInfo) -> str | None:
    """A member's archive path: ``./`` prefixes and a folder's final ``/`` dropped; None for ``.``."""
    name = m.name
    if m.isdir():
        name = name.rstrip("/")
    while name.startswith("./"):
        name = name[2:]
    if m.isdir() and name in (".", ""):
        return None
    return name


def member_problems(members: list[tarfile.TarInfo]) -> list[str]:
    """Every tar member that is not a plain file or folder with a safe relative path."""
    problems = []
    seen: set[str] = set()
    for m in members:
        name = member_name(m)
        if name is None:
            continue
        why = unsafe_name(name)
        if why:
            problems.append(f"tar member {m.name!r}: {why}")
        if m.issym():
            problems.append(f"tar member {m.name!r}: symbolic link (to {m.linkname!r})")
        elif m.islnk():
            problems.append(f"tar member {m.name!r}: hard link (to {m.linkname!r})")
        elif m.ischr() or m.isblk():
            problems.append(f"tar member {m.name!r}: device file")
        elif m.isfifo():
            problems.append(f"tar member {m.name!r}: FIFO")
        elif m.issparse():
            problems.append(f"tar member {m.name!r}: sparse file")
        elif not (m.isreg() or m.isdir()):
            problems.append(f"tar member {m.name!r}: unsupported member type {m.type!r}")
        if name in seen and not m.isdir():
            problems.append(f"tar member {m.name!r}: duplicate")
        seen.add(name)
    return problems


# --------------------------------------------------------------------------- checks


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


def _check_statement(st: Any) -> list[str]:
    if not isinstance(st, dict):
        return ["statement: not a JSON object"]
    p = []
    if st.get("_type") != STATEMENT_TYPE:
        p.append(f"statement: _type {st.get('_type')!r} is not {STATEMENT_TYPE!r}")
    if st.get("predicateType") != PREDICATE_TYPE:
        p.append(f"statement: predicateType {st.get('predicateType')!r} is not {PREDICATE_TYPE!r}")
    pred = st.get("predicate")
    if not isinstance(pred, dict):
        return p + ["statement: no predicate"]
    if pred.get("seal_format") != SEAL_FORMAT:
        p.append(f"statement: seal format {pred.get('seal_format')!r} is not supported")
    for k in ("archive_id", "campaign", "created"):
        if not isinstance(pred.get(k), str):
            p.append(f"statement: predicate.{k} missing")
    prev = pred.get("previous_seal_sha256")
    if prev is not None and not (isinstance(prev, str) and _HEX64.fullmatch(prev)):
        p.append("statement: predicate.previous_seal_sha256 is not a sha256")
    subj = st.get("subject")
    if not isinstance(subj, list):
        return p + ["statement: no subject list"]
    if pred.get("files") != len(subj):
        p.append(f"statement: predicate.files {pred.get('files')!r} != {len(subj)} subjects")
    return p


def _subjects(st: dict[str, Any]) -> tuple[dict[str, tuple[int, str]], list[str]]:
    out: dict[str, tuple[int, str]] = {}
    problems = []
    for i, s in enumerate(st["subject"]):
        try:
            name = s["name"]
            digest = s["digest"]["sha256"]
            size = s["annotations"]["size"]
        except (KeyError, TypeError):
            problems.append(f"statement: subject {i} lacks name, digest.sha256 or annotations.size")
            continue
        why = unsafe_name(name) if isinstance(name, str) else "not a string"
        if why:
            problems.append(f"statement: subject {name!r}: {why}")
            continue
        if name == SEAL_NAME:
            problems.append(f"statement: subject {name!r} is the seal itself")
            continue
        if not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
            problems.append(f"statement: subject {name!r}: bad sha256")
            continue
        if type(size) is not int or size < 0:
            problems.append(f"statement: subject {name!r}: bad size")
            continue
        if name in out:
            problems.append(f"statement: subject {name!r} listed twice")
            continue
        out[name] = (size, digest)
    for name in sorted(set(out) & parent_dirs(out)):
        inner = next(n for n in sorted(out) if n.startswith(name + "/"))
        problems.append(f"statement: subject {name!r} is both a file and the folder of {inner!r}")
    return out, problems


def _csv_twins(subjects: dict[str, Any]) -> dict[str, str | None]:
    """Each Parquet subject and its CSV copy (``x.parquet`` -> ``x.csv``), or None without one."""
    out: dict[str, str | None] = {}
    for name in sorted(n for n in subjects if n.endswith(".parquet")):
        twin = name[: -len(".parquet")] + ".csv"
        out[name] = twin if twin in subjects else None
    return out


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _check_csv(src: _Source, table: str, copy: str, digest: str) -> str | None:
    """Compare a CSV copy with the CSV its Parquet table gives (:func:`refspec.core.tables.parquet_csv_text`,
    the one CSV encoding); the copy's bytes have already been checked against ``digest``."""
    import hashlib
    import itertools

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..core.tables import parquet_csv_text

    try:
        # the member's bytes in an Arrow buffer, never a Python file object: pyarrow reading through
        # a Python file object from worker threads can abort the interpreter at exit
        # ("terminate called without an active exception", seen once in the workflow test)
        with src.open(table) as f:
            pf = pq.ParquetFile(pa.BufferReader(f.read()))
            h = hashlib.sha256()
            for text in parquet_csv_text(pf):
                h.update(text.encode("utf-8"))
            if h.hexdigest() == digest:
                return None
            want = _lines("".join(parquet_csv_text(pf)))
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...; a cell that is not UTF-8
        return f"{copy}: its table {table} cannot be read to compare with it ({type(e).__name__}: {e})"
    with src.open(copy) as f:
        for n, (a, b) in enumerate(itertools.zip_longest(want, f), 1):
            got = b.decode("utf-8", "replace") if b is not None else None
            if a != got:
                if got is None:
                    return f"{copy}: ends after line {n - 1}; its table {table} gives {len(want)} lines"
                if a is None:
                    return f"{copy}: has more lines than its table {table} gives ({len(want)})"
                return f"{copy}: line {n} differs from its table {table}: {got[:120]!r}, the table gives {a[:120]!r}"
    return f"{copy}: differs from the CSV its table {table} gives"


def _check_parquet(src: _Source, name: str, archive_id: str, campaign: str) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with src.open(name) as f:
            md = pq.read_metadata(pa.BufferReader(f.read())).metadata or {}
    except Exception as e:  # ArrowInvalid, OSError: a broken footer
        return [f"{name}: Parquet metadata unreadable ({e.__class__.__name__})"]
    p = []
    got = md.get(ARCHIVE_ID_KEY)
    if got != archive_id.encode("utf-8"):
        p.append(
            f"{name}: Parquet archive id {got.decode('utf-8', 'replace') if got else None!r} is not {archive_id!r}"
        )
    got_c = md.get(CAMPAIGN_KEY)
    if got_c != campaign.encode("utf-8"):
        p.append(
            f"{name}: Parquet campaign {got_c.decode('utf-8', 'replace') if got_c else None!r} is not {campaign!r}"
        )
    return p


def verify_archive(
    path: str | Path,
    public_key: Ed25519PublicKey | str | Path,
    expect_previous: str | None = None,
    workers: int | None = None,
    expect_keyid: str | None = None,
) -> VerifyResult:
    """Verify an archive folder or tar; never raises on a bad archive, only on usage errors.

    ``expect_previous`` is the sha256 the archive's seal must name as its
    predecessor, or ``"none"`` for the first archive of a chain. ``expect_keyid``
    pins the signer: the given public key must have this fingerprint (obtained
    from outside the archive), so a key file swapped next to the archive fails.
    """
    p = Path(path)
    if not isinstance(public_key, Ed25519PublicKey):
        public_key = load_public_key(public_key)
    expect_previous = parse_expect_previous(expect_previous)
    if expect_keyid is not None:
        expect_keyid = parse_keyid(expect_keyid)
    if p.is_dir():
        src: _Source = DirSource(p)
    elif p.is_file():
        src = TarSource(p)
    else:
        raise UsageError(f"{p} not found")
    try:
        return verify_source(src, p, public_key, expect_previous, workers, expect_keyid)
    finally:
        src.close()


def verify_source(
    src: _Source,
    path: Path,
    public_key: Ed25519PublicKey,
    expect_previous: str | None,
    workers: int | None,
    expect_keyid: str | None,
) -> VerifyResult:
    """Verify an opened archive (arguments already parsed); :func:`verify_archive` and restore use it."""
    res = VerifyResult(path=path, keyid=fingerprint(public_key))
    if expect_keyid is not None and res.keyid != expect_keyid:
        res.problems.append(
            f"public key {res.keyid} is not the pinned signer {expect_keyid} "
            "(take the key id from a source outside the archive)"
        )
    _verify(src, public_key, expect_previous, workers or default_workers(), res)
    return res


def _verify(src: _Source, key: Ed25519PublicKey, expect_previous: str | None, workers: int, res: VerifyResult) -> None:
    problems = res.problems
    problems.extend(src.problems)
    if SEAL_NAME not in src.files:
        problems.append(f"{SEAL_NAME}: missing")
        return
    try:
        env = src.read(SEAL_NAME, MAX_SEAL_BYTES)
    except (ValueError, *TAR_ERRORS) as e:
        problems.append(f"{SEAL_NAME}: unreadable ({e})")
        return
    res.seal_sha256 = sha256_bytes(env)
    payload, env_problems = check_envelope(env, key)
    if payload is None:
        problems.extend(env_problems)
        return
    # Authenticated: now the payload may be parsed.
    try:
        st = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        problems.append("statement: signed payload is not JSON")
        return
    st_problems = _check_statement(st)
    problems.extend(st_problems)
    if not isinstance(st, dict) or not isinstance(st.get("subject"), list) or not isinstance(st.get("predicate"), dict):
        return
    res.statement = st
    pred = st["predicate"]
    subjects, subj_problems = _subjects(st)
    problems.extend(subj_problems)
    res.files = len(st["subject"])

    if expect_previous is not None:
        prev = pred.get("previous_seal_sha256")
        want = None if expect_previous == "none" else expect_previous
        if prev != want:
            problems.append(
                f"{SEAL_NAME}: previous seal is {prev or 'none'}, expected {want or 'none'} "
                f"(an older or unrelated seal?)"
            )
    tar_mtime = getattr(src, "mtime", None)
    if tar_mtime is not None and isinstance(pred.get("created"), str) and tar_mtime != created_mtime(pred["created"]):
        problems.append(f"tar members' mtime {tar_mtime} is not the seal's creation time {pred['created']}")

    # Closed world.
    present = dict(src.files)
    present.pop(SEAL_NAME)
    for name in sorted(set(present) - set(subjects)):
        problems.append(f"{name}: not listed in the seal (extra file)")
    for name in sorted(set(subjects) - set(present)):
        problems.append(f"{name}: listed in the seal but missing")
    for d in sorted(src.dirs - parent_dirs(subjects)):
        problems.append(f"{d}/: folder not implied by the seal (extra folder)")
    to_hash = []
    for name in sorted(set(subjects) & set(present)):
        size, _digest = subjects[name]
        if present[name] != size:
            problems.append(f"{name}: size {present[name]} != sealed size {size}")
        else:
            to_hash.append(name)
    hashes = src.hash_all(to_hash, workers)
    for name in to_hash:
        got = hashes[name]
        if isinstance(got, Exception):
            problems.append(f"{name}: unreadable ({got})")
        elif got != subjects[name][1]:
            problems.append(f"{name}: sha256 {got[:16]}... != sealed {subjects[name][1][:16]}...")

    # CSV copies: each compared with its table (csv_checked is computed here, never read from the seal).
    hashed_ok = {n for n in to_hash if hashes[n] == subjects[n][1]}
    pairs = [(t, c) for t, c in _csv_twins(subjects).items() if c is not None and {t, c} <= hashed_ok]
    with ThreadPoolExecutor(max_workers=workers) as ex:
        compared = list(ex.map(lambda tc: _check_csv(src, tc[0], tc[1], subjects[tc[1]][1]), pairs))
    for (table, _copy), problem in zip(pairs, compared):
        res.csv_checked[table] = problem is None
        if problem is not None:
            problems.append(problem)
    for table, copy in _csv_twins(subjects).items():
        if copy is None:
            res.notes.append(f"{table}: no CSV copy (report/check.py cannot read this table)")

    # Parquet stamps.
    aid, camp = pred.get("archive_id"), pred.get("campaign")
    if isinstance(aid, str) and isinstance(camp, str):
        for name in sorted(n for n in subjects if n.endswith(".parquet") and n in present):
            problems.extend(_check_parquet(src, name, aid, camp))

    # Ledger chain.
    led = (pred.get("records") or {}).get("ledger") if isinstance(pred.get("records"), dict) else None
    if not isinstance(led, dict) or not isinstance(led.get("path"), str):
        problems.append("statement: predicate.records.ledger missing")
    elif led["path"] not in subjects:
        problems.append(f"{led['path']}: ledger not among the sealed files")
    elif led["path"] in present:
        try:
            with src.open(led["path"]) as f:
                problems.extend(
                    verify_lines(
                        f,
                        expect_count=led.get("records"),
                        expect_head=led.get("head_sha256"),
                        name=led["path"],
                    )
                )
        except TAR_ERRORS as e:
            problems.append(f"{led['path']}: unreadable ({e})")


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archive", type=Path, metavar="DIR|TAR", help="archive folder or tar")
    add_trust_arguments(parser)
    parser.add_argument("--jobs", type=int, default=None, help="hashing threads")


def add_trust_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pubkey``, ``--expect-keyid`` and ``--expect-previous`` (shared with ``restore``)."""
    parser.add_argument("--pubkey", type=Path, required=True, metavar="KEY", help="the signer's public key (PEM)")
    parser.add_argument(
        "--expect-keyid",
        default=None,
        metavar="SHA256:HEX",
        help="the signer's key id, taken from outside the archive: the public key must have it",
    )
    parser.add_argument(
        "--expect-previous",
        default=None,
        metavar="SHA",
        help="sha256 of the seal this archive must follow ('none' for the first)",
    )


def report(res: VerifyResult, shown: str | Path | None = None, out: Callable[[str], Any] | None = None) -> int:
    emit = out or (lambda s: print(s, file=sys.stdout))
    for line in res.lines(shown):
        emit(line)
    return EXIT_OK if res.ok else EXIT_FAILED


def run(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    res = verify_archive(
        args.archive,
        args.pubkey,
        expect_previous=args.expect_previous,
        workers=args.jobs,
        expect_keyid=args.expect_keyid,
    )
    return report(res, args.archive)
