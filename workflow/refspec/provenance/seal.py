"""Sealing: a results folder becomes a signed, closed-world archive.

``refspec seal RESULTS OUT`` copies every regular file of RESULTS into the fresh
folder OUT, with two changes: every Parquet table is rewritten with zstd
compression and the archive id (and campaign) in its key-value metadata, and a
CSV copy is written next to it for the standard-library checker. It then signs
``SEAL.dsse.json``: a DSSE envelope (payload type ``application/vnd.in-toto+json``)
over an in-toto statement whose subjects are every other file of OUT (path,
sha256, size) and whose predicate holds the archive id, the campaign, the
previous seal's sha256 (a chain of seals), the ledger head and a table index.
Optionally a deterministic ``.tar`` of OUT is written too.

RESULTS must hold ``manifest.json``, ``plan.json`` and ``ledger.jsonl`` (an
intact chain); everything else (report, figures, logs) is carried as is. The
archive format is documented field by field in ``anc/seal.md``; verification is
in :mod:`refspec.provenance.verify`, safe extraction in :mod:`refspec.provenance.restore`.

The private key never enters the archive: the key file must lie outside RESULTS
and OUT, and sealing fails if any archived file contains the key or any PEM
private key block, in its bytes, in the decompressed members of a gzip, bzip2,
xz or zip file (also a zip after a prefix), or in a Parquet table's metadata,
Arrow schema or cells (the forms searched are listed in
:class:`refspec.provenance.keys.KeyLeakScanner` and ``anc/seal.md``); a file the
scan cannot read completely (an encrypted zip member, a damaged stream) is
refused too.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import csv
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .. import __version__
from ..core.clock import utc_now_seconds
from ..core.errors import IntegrityError, UsageError
from ..core.fsutil import atomic_output
from ..core.hashing import canonical_json, sha256_bytes
from ..core.tables import csv_body, csv_text
from .keys import (
    KeyLeakScanner,
    check_private_location,
    default_private_key,
    fingerprint,
    load_private_key,
)
from .ledger import verify_chain

SEAL_NAME = "SEAL.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://refspec.dev/seal/v1"
SEAL_FORMAT = 1
ARCHIVE_ID_KEY = b"refspec.archive_id"
CAMPAIGN_KEY = b"refspec.campaign"
MANIFEST_NAME = "manifest.json"
PLAN_NAME = "plan.json"
LEDGER_NAME = "ledger.jsonl"
REQUIRED = (MANIFEST_NAME, PLAN_NAME, LEDGER_NAME)
MAX_SEAL_BYTES = 256 * 1024 * 1024
MAX_COMPONENT_BYTES = 255  # NAME_MAX of common file systems
MAX_NAME_BYTES = 1024
ZSTD_LEVEL = 9
_CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")
_CTRL = re.compile(r"[\x00-\x1f\x7f]")


# --------------------------------------------------------------------------- DSSE


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
        raise ValueError(f"invalid base64 ({e})") from None
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
    if _CTRL.search(name):
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
    buf = bytearray(_CHUNK)
    mv = memoryview(buf)
    left = size
    while left is None or left > 0:
        want = _CHUNK if left is None else min(_CHUNK, left)
        n = f.readinto(mv[:want])
        if not n:
            break
        h.update(mv[:n])
        if left is not None:
            left -= n
    return h.hexdigest()


def _read_chunks(f: Any, h: Any = None) -> Iterable[bytes]:
    while True:
        block = f.read(_CHUNK)
        if not block:
            return
        if h is not None:
            h.update(block)
        yield block


class Unscannable(Exception):
    """A file, or a part of it, that the key-leak scan cannot read completely (the seal is refused)."""


def _decompressed(path: Path, kind: str, offset: int = 0) -> Iterable[bytes]:
    """The decompressed bytes of every member of a gzip, bzip2 or xz stream that starts
    at ``offset`` and runs to the end of the file; a stream that does not decode to its
    end (damaged, truncated, trailing bytes that are not a further member) is
    :class:`Unscannable`."""
    import bz2
    import lzma
    import zlib

    def new() -> Any:
        return {
            "gzip": lambda: zlib.decompressobj(wbits=31),
            "bzip2": bz2.BZ2Decompressor,
            "xz": lzma.LZMADecompressor,
        }[kind]()

    d, fed, pos = new(), False, offset
    with open(path, "rb") as f:
        f.seek(offset)
        for block in _read_chunks(f):
            pos += len(block)
            while block:
                fed = True
                try:
                    out = d.decompress(block)
                except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as e:
                    raise Unscannable(f"{kind} stream damaged before byte {pos} ({type(e).__name__})") from None
                if out:
                    yield out
                if d.eof:  # a further member may follow
                    block, d, fed = d.unused_data, new(), False
                else:
                    block = b""
    if fed:
        raise Unscannable(f"{kind} stream truncated")


# zipfile reads these methods; any other (or an encrypted member) cannot be scanned
_ZIP_METHODS = {0: "stored", 8: "deflate", 12: "bzip2", 14: "lzma"}
_ZIP_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, RuntimeError, NotImplementedError, ValueError)


def _zip_members(path: Path) -> Iterable[bytes]:
    """Every member of a zip (found by its central directory, also after a prefix such as a
    stub or other bytes), decompressed; an encrypted member, one of another compression
    method or one that does not read to its end makes the file :class:`Unscannable`."""
    import zipfile

    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, *_ZIP_ERRORS) as e:
        raise Unscannable(f"zip central directory unreadable ({type(e).__name__}: {e})") from None
    with z:
        for info in z.infolist():
            if info.flag_bits & 0x1:
                raise Unscannable(f"zip member {info.filename!r} is encrypted")
            if info.compress_type not in _ZIP_METHODS:
                raise Unscannable(
                    f"zip member {info.filename!r}: compression method {info.compress_type} not supported"
                )
            try:
                with z.open(info) as f:
                    yield from _read_chunks(f)
            except (zipfile.BadZipFile, *_ZIP_ERRORS) as e:
                raise Unscannable(f"zip member {info.filename!r} unreadable ({type(e).__name__}: {e})") from None
            yield b"\n"


def _opens_as_zip(path: Path) -> bool:
    """The file's end-of-central-directory record leads to a readable central directory (a
    zip after a prefix); four bytes that only look like that record at the end of other
    data (1 in 65,000 large random files) do not make the file a zip."""
    import zipfile

    try:
        zipfile.ZipFile(path).close()
    except (zipfile.BadZipFile, *_ZIP_ERRORS):
        return False
    return True


_LOCAL_HEADER = b"PK\x03\x04"
_MAX_LOCAL_HEADERS = 4096


def _local_entries(path: Path, offsets: list[int]) -> Iterable[bytes]:
    """Deflate data after every zip local header signature in the file, wherever it is
    (members the central directory does not list, a zip inside other bytes), decoded as
    far as it decodes: a best-effort addition to :func:`_zip_members`, which is strict."""
    import struct
    import zlib

    with open(path, "rb") as f:
        for off in offsets[:_MAX_LOCAL_HEADERS]:
            f.seek(off)
            hdr = f.read(30)
            if len(hdr) < 30:
                continue
            flags, method = struct.unpack("<HH", hdr[6:10])
            nlen, xlen = struct.unpack("<HH", hdr[26:30])
            if method != 8 or flags & 0x1:
                continue
            f.seek(off + 30 + nlen + xlen)
            d = zlib.decompressobj(-15)
            try:
                for block in _read_chunks(f):
                    out = d.decompress(block)
                    if out:
                        yield out
                    if d.eof:
                        break
            except zlib.error:
                pass
            yield b"\n"


def _arrow_fields(fields: Iterable[Any]) -> Iterable[bytes]:
    """Names and metadata of Arrow fields and of their children (struct, list, map ...)."""
    for fld in fields:
        yield fld.name.encode("utf-8", "surrogatepass") + b"\n"
        for k, v in (fld.metadata or {}).items():
            yield k + b"\n" + v + b"\n"
        t = fld.type
        yield from _arrow_fields(t.field(i) for i in range(t.num_fields))


def _parquet_cells(path: Path) -> Iterable[bytes]:
    """A Parquet table's key-value metadata (the Arrow schema it holds also decoded), the
    Arrow schema's fields (names and field metadata, nested ones too) and every cell, as
    CSV cell text; a table that does not read completely is :class:`Unscannable`."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        for k, v in (pf.metadata.metadata or {}).items():
            yield k + b"\n" + v + b"\n"
            if k == b"ARROW:schema":
                yield base64.b64decode(v) + b"\n"
        schema = pf.schema_arrow
        for k, v in (schema.metadata or {}).items():
            yield k + b"\n" + v + b"\n"
        yield from _arrow_fields(schema)
        for i in range(pf.num_row_groups):
            t = pf.read_row_group(i)
            for col in t.columns:
                yield "\n".join(csv_text(v) for v in col.to_pylist()).encode("utf-8", "surrogatepass") + b"\n"
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, binascii.Error, ...
        raise Unscannable(f"Parquet table unreadable ({type(e).__name__}: {e})") from None


_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"PK\x03\x04", "zip"),
    (b"PK\x05\x06", "zip"),
)


class _Offsets:
    """Where a byte signature occurs in a stream of chunks (it may straddle two chunks)."""

    def __init__(self, chunks: Iterable[bytes], needle: bytes):
        self.chunks, self.needle, self.found = chunks, needle, []

    def __iter__(self) -> Any:
        pos, tail, n = 0, b"", len(self.needle)
        for chunk in self.chunks:
            window = tail + chunk
            base = pos - len(tail)
            i = window.find(self.needle)
            while i >= 0:
                self.found.append(base + i)
                i = window.find(self.needle, i + 1)
            pos += len(chunk)
            tail = window[-(n - 1) :]
            yield chunk


def _hash_and_scan(path: Path, scanner: KeyLeakScanner) -> tuple[str, int, list[str], list[str]]:
    """SHA-256, size, the private-key forms found in the file and what could not be scanned.

    Looked at: the file's bytes; the decompressed members of a gzip, bzip2 or xz file;
    every member of a zip (also one after a prefix) and the deflate data after every zip
    local header anywhere in the file; a Parquet table's metadata, Arrow schema and cells.
    """
    import zipfile

    h = hashlib.sha256()
    with open(path, "rb") as f:
        head = f.read(8)
        f.seek(0)
        locals_ = _Offsets(_read_chunks(f, h), _LOCAL_HEADER)
        found = scanner.scan(locals_)
        size = f.tell()
    unscannable: list[str] = []

    def scan(what: str, chunks: Iterable[bytes]) -> None:
        try:
            found.update(f"{w} ({what})" for w in scanner.scan(chunks))
        except Unscannable as e:
            unscannable.append(str(e))

    kind = next((k for m, k in _MAGIC if head.startswith(m)), None)
    if kind is None and zipfile.is_zipfile(path) and _opens_as_zip(path):
        kind = "zip"  # a zip after a prefix: found by its end-of-central-directory record
    if kind == "zip":
        scan("in a zip member", _zip_members(path))
    elif kind is not None:
        scan(f"after {kind} decompression", _decompressed(path, kind))
    if locals_.found:
        scan("in zip data", _local_entries(path, locals_.found))
    if path.name.endswith(".parquet"):
        scan("in a Parquet table", _parquet_cells(path))
    return h.hexdigest(), size, sorted(found), unscannable


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


# --------------------------------------------------------------------------- tables


class _HashSink:
    """A text sink that only hashes what is written (UTF-8)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def write(self, text: str) -> int:
        self.h.update(text.encode("utf-8"))
        return len(text)


def _stamp_metadata(md: dict[bytes, bytes] | None, archive_id: str, campaign: str) -> dict[bytes, bytes]:
    out = dict(md or {})
    out[ARCHIVE_ID_KEY] = archive_id.encode("utf-8")
    out[CAMPAIGN_KEY] = campaign.encode("utf-8")
    return out


def rewrite_parquet(
    src: Path,
    dst: Path,
    archive_id: str,
    campaign: str,
    table: str,
    csv_path: Path | None = None,
    csv_compare: Path | None = None,
) -> dict[str, Any]:
    """Copy a Parquet table with zstd and the archive stamp (other metadata kept).

    ``csv_path``: also write its CSV copy there. ``csv_compare``: an existing CSV
    copy that must be byte-identical to the CSV this table produces.
    """
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(src)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise IntegrityError(f"{table}: not a readable Parquet file ({e})") from None
    schema = pf.schema_arrow.with_metadata(_stamp_metadata(pf.schema_arrow.metadata, archive_id, campaign))
    rows = 0
    cf: Any = None
    sink: _HashSink | None = None
    if csv_path is not None:
        cf = open(csv_path, "w", encoding="utf-8", newline="")
    elif csv_compare is not None:
        cf = sink = _HashSink()
    writer_csv = csv.writer(cf, lineterminator="\n") if cf is not None else None
    if writer_csv is not None:
        writer_csv.writerow(schema.names)
    try:
        with pq.ParquetWriter(
            dst, schema, compression="zstd", compression_level=ZSTD_LEVEL, write_statistics=True
        ) as w:
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i).replace_schema_metadata(schema.metadata)
                w.write_table(t)
                rows += t.num_rows
                if cf is not None:
                    cf.write(csv_body(t))
    finally:
        if csv_path is not None:
            cf.close()
    if sink is not None and csv_compare is not None:
        with open(csv_compare, "rb") as f:
            if sha256_stream(f) != sink.h.hexdigest():
                raise IntegrityError(
                    f"{csv_compare.name}: the CSV copy does not match {table} "
                    "(write both with refspec.core.tables.write_table, or seal with --no-csv-check)"
                )
    return {"rows": rows, "columns": list(schema.names)}


# --------------------------------------------------------------------------- seal


@dataclass
class SealResult:
    out: Path
    archive_id: str
    campaign: str
    seal_sha256: str
    files: int
    total_bytes: int
    keyid: str
    previous_seal_sha256: str | None
    tar: Path | None = None
    tables: list[dict[str, Any]] = field(default_factory=list)


def seal_sha256_of(path: str | Path) -> str:
    """SHA-256 of the seal of an archive folder, a ``SEAL.dsse.json`` file or an archive tar."""
    p = Path(path)
    if p.is_dir():
        p = p / SEAL_NAME
        if not p.is_file():
            raise UsageError(f"{path}: no {SEAL_NAME}")
        return sha256_bytes(p.read_bytes())
    if not p.is_file():
        raise UsageError(f"{path} not found")
    if tarfile.is_tarfile(p):
        with tarfile.open(p, "r:*") as tf:
            try:
                m = tf.getmember(SEAL_NAME)
            except KeyError:
                raise UsageError(f"{path}: no {SEAL_NAME} member") from None
            f = tf.extractfile(m)
            if f is None or m.size > MAX_SEAL_BYTES:
                raise UsageError(f"{path}: {SEAL_NAME} is not a regular member")
            return sha256_bytes(f.read())
    return sha256_bytes(p.read_bytes())


def verified_previous(previous: str | Path, public_key: Any) -> str:
    """The seal sha256 of the archive this one follows, once it verifies under the signing key.

    A folder or tar is verified completely (``refspec verify`` with this key pinned; a
    compressed tar is refused like everywhere else); a lone ``SEAL.dsse.json`` has its
    envelope and signature checked. Anything else is an :class:`IntegrityError`.
    """
    from .verify import check_envelope, verify_archive

    p = Path(previous)
    if not p.exists():
        raise UsageError(f"previous archive {previous} not found")
    if p.is_dir() or p.name != SEAL_NAME:
        res = verify_archive(p, public_key, expect_keyid=fingerprint(public_key))
        if not res.ok or res.seal_sha256 is None:
            raise IntegrityError(
                f"the previous archive {previous} does not verify under the signing key "
                f"{fingerprint(public_key)}:\n  " + "\n  ".join(res.problems)
            )
        return res.seal_sha256
    data = p.read_bytes()
    _payload, problems = check_envelope(data, public_key)
    if problems:
        raise IntegrityError(
            f"the previous seal {previous} does not verify under the signing key "
            f"{fingerprint(public_key)}:\n  " + "\n  ".join(problems)
        )
    return sha256_bytes(data)


def _scan_results(results: Path) -> tuple[list[str], list[str]]:
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


def _csv_selected(rel: str, csv_tables: str | Sequence[str] | None) -> bool:
    if csv_tables is None or csv_tables == "none":
        return False
    if csv_tables == "all":
        return True
    stem = rel[: -len(".parquet")]
    return rel in csv_tables or stem in csv_tables or Path(stem).name in csv_tables


def seal(
    results: str | Path,
    out: str | Path,
    *,
    key: Ed25519PrivateKey | str | Path | None = None,
    campaign: str | None = None,
    previous: str | Path | None = None,
    previous_sha256: str | None = None,
    archive_id: str | None = None,
    tar: bool | str | Path = False,
    csv_tables: str | Sequence[str] | None = "all",
    check_csv: bool = True,
    created: str | None = None,
    workers: int | None = None,
) -> SealResult:
    """Seal ``results`` into the fresh folder ``out`` (see the module docstring).

    ``key`` is a private key or the path of one (default: the key directory's key).
    ``previous`` (an archive folder, seal file or tar) or ``previous_sha256`` links
    this seal to the one before it; without either the seal starts a chain.
    ``csv_tables`` selects the Parquet tables without a CSV copy in ``results``
    that get one written: ``"all"``, ``"none"``/None or a list of table paths or
    names. A CSV copy already in ``results`` is carried and, with ``check_csv``,
    must equal the CSV its table produces.
    """
    results = Path(results)
    out = Path(out)
    if not results.is_dir():
        raise UsageError(f"results folder {results} not found")
    res_real = Path(os.path.realpath(results))
    out_real = Path(os.path.realpath(out))
    if out_real == res_real or res_real in out_real.parents or out_real in res_real.parents:
        raise UsageError("the archive folder and the results folder must not contain each other")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder")

    if isinstance(key, Ed25519PrivateKey):
        skey = key
    else:
        kpath = Path(key) if key is not None else default_private_key()
        check_private_location(kpath, extra_forbidden=(results, out))
        skey = load_private_key(kpath)
    keyid = fingerprint(skey.public_key())

    if previous is not None and previous_sha256 is not None:
        raise UsageError("give either a previous archive or its seal sha256, not both")
    if previous is not None:
        previous_sha256 = verified_previous(previous, skey.public_key())
    if previous_sha256 is not None:
        previous_sha256 = previous_sha256.lower()
        if not _HEX64.fullmatch(previous_sha256):
            raise UsageError(f"previous seal sha256 {previous_sha256!r} is not 64 hex digits")

    files, problems = _scan_results(results)
    if SEAL_NAME in files:
        problems.append(f"{SEAL_NAME}: the results folder is already an archive")
    for req in REQUIRED:
        if req not in files:
            problems.append(f"{req}: required record missing")
    if problems:
        raise IntegrityError(f"cannot seal {results}:\n  " + "\n  ".join(problems))

    if campaign is None:
        try:
            plan = json.loads((results / PLAN_NAME).read_bytes())
            campaign = plan.get("campaign") if isinstance(plan, dict) else None
        except ValueError:
            campaign = None
        if not campaign:
            raise UsageError(f"no campaign given and {PLAN_NAME} names none")
    if not isinstance(campaign, str) or _CTRL.search(campaign):
        raise UsageError(f"bad campaign name {campaign!r}")

    ledger_problems = verify_chain(results / LEDGER_NAME)
    if ledger_problems:
        raise IntegrityError("the ledger is broken; refusing to seal it:\n  " + "\n  ".join(ledger_problems))
    with open(results / LEDGER_NAME, "rb") as f:
        lines = f.read().splitlines()
    ledger_info = {
        "path": LEDGER_NAME,
        "records": len(lines),
        "head_sha256": sha256_bytes(lines[-1]) if lines else "0" * 64,
    }

    archive_id = archive_id or str(uuid.uuid4())
    if _CTRL.search(archive_id) or not archive_id.strip():
        raise UsageError(f"bad archive id {archive_id!r}")
    created = created or utc_now_seconds()

    # Plan every output path first. A table's CSV copy is carried when the results
    # folder has one (and checked against the table), otherwise written if selected.
    fileset = set(files)
    targets: dict[str, tuple[str, str]] = {}  # out rel -> (kind, source rel)
    for rel in files:
        if rel.endswith(".parquet"):
            targets[rel] = ("parquet", rel)
            crel = rel[: -len(".parquet")] + ".csv"
            if crel not in fileset and _csv_selected(rel, csv_tables):
                targets[crel] = ("csv", rel)
        else:
            targets[rel] = ("copy", rel)

    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.sealing-", dir=out.parent))
    try:
        tables = []
        for rel, (kind, src) in sorted(targets.items()):
            if kind == "csv":
                continue
            dst = stage / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if kind == "copy":
                shutil.copyfile(results / src, dst, follow_symlinks=False)
            else:
                crel = rel[: -len(".parquet")] + ".csv"
                written = targets.get(crel) == ("csv", rel)
                carried = crel in fileset
                info = rewrite_parquet(
                    results / src,
                    dst,
                    archive_id,
                    campaign,
                    rel,
                    csv_path=stage / crel if written else None,
                    csv_compare=results / crel if carried and check_csv else None,
                )
                tables.append(
                    {
                        "path": rel,
                        "csv": crel if written or carried else None,
                        "csv_origin": "sealed" if written else "results" if carried else None,
                        "csv_checked": bool(written or (carried and check_csv)),
                        **info,
                    }
                )

        names = sorted(targets)
        scanner = KeyLeakScanner(skey)
        with ThreadPoolExecutor(max_workers=workers or default_workers()) as ex:
            hashed = list(ex.map(lambda n: _hash_and_scan(stage / n, scanner), names))
        leaks = [f"{n} ({'; '.join(found)})" for n, (_d, _s, found, _u) in zip(names, hashed) if found]
        blind = [f"{n} ({'; '.join(u)})" for n, (_d, _s, _f, u) in zip(names, hashed) if u]
        refusals = []
        if leaks:
            refusals.append("private key material found in " + ", ".join(leaks))
        if blind:
            refusals.append("cannot scan every part of " + ", ".join(blind) + " for private key material (anc/seal.md)")
        if refusals:
            raise IntegrityError("refusing to seal: " + "; ".join(refusals))
        subjects = [
            {"annotations": {"size": size}, "digest": {"sha256": digest}, "name": n}
            for n, (digest, size, _f, _u) in zip(names, hashed)
        ]
        total = sum(s["annotations"]["size"] for s in subjects)
        statement = {
            "_type": STATEMENT_TYPE,
            "subject": subjects,
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "seal_format": SEAL_FORMAT,
                "archive_id": archive_id,
                "campaign": campaign,
                "previous_seal_sha256": previous_sha256,
                "created": created,
                "files": len(subjects),
                "total_bytes": total,
                "signer": {"keyid": keyid},
                "sealed_by": {"refspec": __version__},
                "records": {"manifest": MANIFEST_NAME, "plan": PLAN_NAME, "ledger": ledger_info},
                "tables": tables,
            },
        }
        env = envelope_bytes(statement, skey)
        seal_path = stage / SEAL_NAME
        with open(seal_path, "wb") as f:
            f.write(env)
            f.flush()
            os.fsync(f.fileno())
        for dirpath, _dirs, _files in os.walk(stage):
            os.chmod(dirpath, 0o755)
        for n in names + [SEAL_NAME]:
            os.chmod(stage / n, 0o644)
        if out.exists():
            out.rmdir()
        os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise

    tar_path: Path | None = None
    if tar:
        tar_path = Path(str(out) + ".tar") if tar is True else Path(tar)
        write_tar(out, tar_path, mtime=created_mtime(created))
    return SealResult(
        out=out,
        archive_id=archive_id,
        campaign=campaign,
        seal_sha256=sha256_bytes(env),
        files=len(subjects),
        total_bytes=total,
        keyid=keyid,
        previous_seal_sha256=previous_sha256,
        tar=tar_path,
        tables=tables,
    )


def created_mtime(created: str) -> int:
    try:
        return int(_dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp())
    except ValueError:
        return 0


def archive_files(folder: Path) -> list[str]:
    files, problems = _scan_results(folder)
    if problems:
        raise IntegrityError(f"{folder}: " + "; ".join(problems))
    return files


TAR_ENCODING = "utf-8"


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


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results", type=Path, help="results folder (manifest.json, plan.json, ledger.jsonl, tables, report)"
    )
    parser.add_argument("out", type=Path, help="archive folder to create (must not exist or be empty)")
    parser.add_argument("--campaign", default=None, help="campaign name (default: plan.json's 'campaign')")
    parser.add_argument(
        "--key", type=Path, default=None, help="private key (default $REFSPEC_KEY_DIR/refspec_ed25519.key)"
    )
    g = parser.add_mutually_exclusive_group()
    g.add_argument(
        "--previous",
        type=Path,
        default=None,
        metavar="ARCHIVE",
        help="the previous archive (folder, uncompressed tar or seal file) this one follows; "
        "it must verify under the signing key",
    )
    g.add_argument(
        "--previous-sha256", default=None, metavar="SHA", help="sha256 of the previous seal this one follows"
    )
    parser.add_argument("--archive-id", default=None, help="archive id (default: a random UUID)")
    parser.add_argument(
        "--tar", nargs="?", const=True, default=False, metavar="PATH", help="also write a tar (default OUT.tar)"
    )
    parser.add_argument(
        "--csv",
        default="all",
        metavar="all|none|T1,T2",
        help="which Parquet tables without a CSV copy get one written (default all)",
    )
    parser.add_argument(
        "--no-csv-check",
        action="store_true",
        help="carry existing CSV copies without checking them against their tables",
    )
    parser.add_argument("--jobs", type=int, default=None, help="hashing threads")


def run(args: argparse.Namespace) -> int:
    csv_sel: str | list[str]
    csv_sel = args.csv if args.csv in ("all", "none") else [t for t in args.csv.split(",") if t]
    r = seal(
        args.results,
        args.out,
        key=args.key,
        campaign=args.campaign,
        previous=args.previous,
        previous_sha256=args.previous_sha256,
        archive_id=args.archive_id,
        tar=args.tar if args.tar is True or args.tar is False else Path(args.tar),
        csv_tables=csv_sel,
        check_csv=not args.no_csv_check,
        workers=args.jobs,
    )
    print(f"sealed {r.out}: {r.files} files, {r.total_bytes} bytes")
    print(f"archive id:  {r.archive_id}")
    print(f"campaign:    {r.campaign}")
    print(f"previous:    {r.previous_seal_sha256 or '(none: first in chain)'}")
    print(f"seal sha256: {r.seal_sha256}")
    print(f"key:         {r.keyid}")
    if r.tar is not None:
        print(f"tar:         {r.tar}")
    return 0
