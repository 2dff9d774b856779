"""The archive: safe member names, the canonical tar, and read access to an archive.

Shared by sealing (:mod:`refspec.provenance.seal`), verification
(:mod:`refspec.provenance.verify`) and restore (:mod:`refspec.provenance.restore`):

- member names (:func:`unsafe_name`, :func:`parent_dirs`) and the regular files of a
  folder (:func:`scan_folder`, :func:`archive_files`);
- the canonical tar that ``seal --tar`` writes (:func:`canonical_tarinfo`,
  :func:`canonical_header`, :func:`write_tar`, the mtime :func:`created_mtime`) and the
  check that a tar is byte for byte in that form (:func:`canonical_problems`);
- the readers of an archive folder (:class:`DirSource`) or tar (:class:`TarSource`,
  read in place with ``pread``), with parallel hashing (:func:`sha256_stream`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import os
import re
import stat
import tarfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import IntegrityError
from ..core.fsutil import atomic_output

MAX_COMPONENT_BYTES = 255  # NAME_MAX of common file systems
MAX_NAME_BYTES = 1024
TAR_ENCODING = "utf-8"
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
CHUNK = 1 << 20  # read and hash buffer size


# --------------------------------------------------------------------------- names


def unsafe_name(name: str) -> str | None:
    """Why ``name`` cannot be an archive member path, or None if it can.

    A member path is relative, uses ``/``, has no empty, ``.`` or ``..``
    component, no backslash, no control character, is valid UTF-8, and fits
    every common file system (components of at most 255 bytes, the whole path
    at most 1024).
    """
    if not isinstance(name, str) or not name:
        return "empty name"
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        return "absolute path"
    if "\\" in name:
        return "backslash in path"
    if CONTROL_CHARS.search(name):
        return "control character in path"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "path is not valid UTF-8"
    parts = name.split("/")
    if ".." in parts:
        return "'..' in path"
    if any(p in ("", ".") for p in parts):
        return "empty or '.' path component"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return f"path longer than {MAX_NAME_BYTES} bytes"
    if any(len(p.encode("utf-8")) > MAX_COMPONENT_BYTES for p in parts):
        return f"path component longer than {MAX_COMPONENT_BYTES} bytes"
    return None


def parent_dirs(names: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for n in names:
        parts = n.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return out


# --------------------------------------------------------------------------- hashing


def sha256_stream(f: Any, size: int | None = None) -> str:
    """SHA-256 of a binary stream (``size`` bytes, or to EOF) with a reused buffer."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    mv = memoryview(buf)
    left = size
    while left is None or left > 0:
        want = CHUNK if left is None else min(CHUNK, left)
        n = f.readinto(mv[:want])
        if not n:
            break
        h.update(mv[:n])
        if left is not None:
            left -= n
    return h.hexdigest()


def hashing_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def scan_folder(results: Path) -> tuple[list[str], list[str]]:
    """Relative POSIX paths of the regular files under ``results``, and problems."""
    files: list[str] = []
    problems: list[str] = []
    for dirpath, dirnames, filenames in os.walk(results, followlinks=False):
        base = Path(dirpath)
        for d in list(dirnames):
            if (base / d).is_symlink():
                problems.append(f"{(base / d).relative_to(results).as_posix()}: symbolic link")
                dirnames.remove(d)
        dirnames.sort()
        for fn in sorted(filenames):
            full = base / fn
            rel = full.relative_to(results).as_posix()
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                problems.append(f"{rel}: symbolic link")
            elif not stat.S_ISREG(st.st_mode):
                problems.append(f"{rel}: not a regular file")
            else:
                why = unsafe_name(rel)
                if why:
                    problems.append(f"{rel!r}: {why}")
                else:
                    files.append(rel)
    return sorted(files), problems


def archive_files(folder: Path) -> list[str]:
    files, problems = scan_folder(folder)
    if problems:
        raise IntegrityError(f"{folder}: " + "; ".join(problems))
    return files


# --------------------------------------------------------------------------- canonical tar


def created_mtime(created: str) -> int:
    try:
        return int(_dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp())
    except ValueError:
        return 0


def canonical_tarinfo(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    """The header ``seal --tar`` writes for one member: regular file, mode 0644,
    owner 0:0 without names, the seal's creation time as mtime."""
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = mtime
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


def canonical_header(name: str, size: int, mtime: int) -> bytes:
    """The exact header bytes (a PAX extended header when one is needed, then the
    ustar block) that :func:`write_tar` writes for this member."""
    return canonical_tarinfo(name, size, mtime).tobuf(tarfile.PAX_FORMAT, TAR_ENCODING, "strict")


def write_tar(folder: str | Path, tar_path: str | Path, mtime: int = 0) -> int:
    """Write a deterministic tar of an archive folder (members at the top level); return the count.

    Members are sorted, regular files only (no directory entries), mode 0644,
    owner 0:0 without names, the given mtime, PAX format.
    """
    folder = Path(folder)
    tar_path = Path(tar_path)
    names = archive_files(folder)
    with (
        atomic_output(tar_path) as tmp,
        open(tmp, "wb") as raw,
        tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT, encoding=TAR_ENCODING, errors="strict") as tf,
    ):
        for n in names:
            full = folder / n
            ti = canonical_tarinfo(n, full.stat().st_size, mtime)
            with open(full, "rb") as f:
                tf.addfile(ti, f)
    return len(names)


# --------------------------------------------------------------------------- sources


class Source:
    """Read access to the members of an archive folder or tar."""

    files: dict[str, int]  # member path -> size
    dirs: set[str]
    problems: list[str]

    def read(self, name: str, limit: int) -> bytes:
        raise NotImplementedError

    def open(self, name: str) -> BinaryIO:
        raise NotImplementedError

    def hash_all(self, names: list[str], threads: int) -> dict[str, str | Exception]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class DirSource(Source):
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

    def hash_all(self, names: list[str], threads: int) -> dict[str, str | Exception]:
        def one(n: str) -> str | Exception:
            try:
                with open(self.root / n, "rb", buffering=0) as f:
                    return sha256_stream(f)
            except OSError as e:
                return e

        with ThreadPoolExecutor(max_workers=threads) as ex:
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


class TarSource(Source):
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

    def hash_all(self, names: list[str], threads: int) -> dict[str, str | Exception]:
        def one(n: str) -> str | Exception:
            try:
                return sha256_stream(self._reader(n), self.members[n].size)
            except OSError as e:
                return e

        with ThreadPoolExecutor(max_workers=threads) as ex:
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
        raise TarReadError(f"{path}: cannot read ({e.strerror})") from e
    kind = compression_of(head)
    if kind is not None:
        raise TarReadError(
            f"{path}: {kind}-compressed tar refused: only the uncompressed tar that `refspec seal --tar` "
            f"writes is accepted; decompress it first (e.g. `{kind} -dc FILE > archive.tar`) and verify that"
        )
    try:
        return tarfile.open(path, "r:", encoding=TAR_ENCODING, errors="surrogateescape")
    except TAR_ERRORS as e:
        raise TarReadError(f"{path}: not a readable tar ({e})") from e


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
