"""The key-leak scan: sealing refuses an archive that holds the private key.

:class:`KeyLeakScanner` finds a private key in a byte stream in the forms listed on it;
:func:`hash_and_scan` hashes one file and runs the scanner over everything the file
holds that the scan can reach: its bytes; the decompressed members of a gzip, bzip2
or xz file; every member of a zip (also one after a prefix) and the deflate data after
every zip local header anywhere in the file; a Parquet table's metadata, Arrow schema
and cells. A part the scan cannot read completely (an encrypted zip member, a damaged
stream or zip entry) is reported, never skipped (:class:`Unscannable`), and the seal is
refused as it is for a leak. The forms and the readers are listed in ``anc/seal.md``.
"""

from __future__ import annotations

import base64
import bz2
import hashlib
import lzma
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..core.tables import csv_text
from .archive import CHUNK

# --------------------------------------------------------------------------- the scanner


_WS = b" \t\r\n\v\f"
# Between two hex bytes: up to 8 non-alphanumeric characters (":", ", ", ":\n    " as
# `openssl pkey -text` prints), then an optional "0x" or "\x".
_HEX_SEP = rb"[^0-9A-Za-z]{0,8}(?:0[xX]|\\x)?"
_DEC_SEP = rb"[^0-9]{1,8}"
_OVERLAP = 2048  # bytes kept between chunks: longer than any match


def _b64_forms(secret: bytes) -> list[bytes]:
    """Base64 text that any base64 stream containing ``secret`` holds, at each of the
    three byte alignments, in the standard and URL-safe alphabets (the groups that
    mix in neighbouring bytes are left out)."""
    out = []
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + secret)
        core = enc[4 if shift else 0 : -4]
        out += [core, core.replace(b"+", b"-").replace(b"/", b"_")]
    return out


class KeyLeakScanner:
    """Finds a private key in a byte stream, in any of these forms:

    - a PEM ``PRIVATE KEY`` block (any key);
    - the raw 32-byte seed;
    - the seed (or the PKCS#8 DER) in base64, standard or URL-safe, at every byte
      offset, also when the text is wrapped (whitespace is ignored);
    - the seed in hex, either case, plain or with separators between the bytes
      (``9d:61:…``, ``0x9d, 0x61``, ``\x9d\x61``, ``openssl pkey -text`` output);
    - the seed as a list of decimal byte values (``[157, 97, …]``).

    ``scan(chunks)`` returns the names of the forms found (never the key itself).
    """

    def __init__(self, key: Ed25519PrivateKey):
        seed = key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        der = key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self.raw = [(b"PRIVATE KEY-----", "PEM private key block"), (seed, "raw seed")]
        self.compact = [(n, "seed in base64") for n in _b64_forms(seed)]
        self.compact += [(n, "PKCS#8 key in base64") for n in _b64_forms(der)]
        hex_re = _HEX_SEP.join(
            b"[%s%s][%s%s]" % (h[0:1].lower(), h[0:1].upper(), h[1:2].lower(), h[1:2].upper())
            for h in (bytes([c]).hex().encode() for c in seed)
        )
        dec_re = rb"(?<![0-9])" + _DEC_SEP.join(b"%d" % c for c in seed) + rb"(?![0-9])"
        self.patterns = [(re.compile(hex_re), "seed in hex"), (re.compile(dec_re), "seed as decimal byte list")]

    def scan(self, chunks: Iterable[bytes]) -> set[str]:
        found: set[str] = set()
        tail = ctail = b""
        for chunk in chunks:
            if not chunk:
                continue
            window = tail + chunk
            cwindow = ctail + chunk.translate(None, _WS)
            for needle, what in self.raw:
                if needle in window:
                    found.add(what)
            for needle, what in self.compact:
                if needle in cwindow:
                    found.add(what)
            for pat, what in self.patterns:
                if what not in found and pat.search(window):
                    found.add(what)
            tail, ctail = window[-_OVERLAP:], cwindow[-_OVERLAP:]
        return found


# --------------------------------------------------------------------------- readers


def _read_chunks(f: Any, h: Any = None) -> Iterable[bytes]:
    while True:
        block = f.read(CHUNK)
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
                    raise Unscannable(f"{kind} stream damaged before byte {pos} ({type(e).__name__})") from e
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
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, *_ZIP_ERRORS) as e:
        raise Unscannable(f"zip central directory unreadable ({type(e).__name__}: {e})") from e
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
                raise Unscannable(f"zip member {info.filename!r} unreadable ({type(e).__name__}: {e})") from e
            yield b"\n"


def _opens_as_zip(path: Path) -> bool:
    """The file's end-of-central-directory record leads to a readable central directory (a
    zip after a prefix); four bytes that only look like that record at the end of other
    data (1 in 65,000 large random files) do not make the file a zip."""
    try:
        zipfile.ZipFile(path).close()
    except (zipfile.BadZipFile, *_ZIP_ERRORS):
        return False
    return True


_LOCAL_HEADER = b"PK\x03\x04"
_MAX_LOCAL_HEADERS = 4096


def _local_entries(path: Path, offsets: list[int]) -> Iterable[bytes]:
    """Deflate data after every zip local header signature in the file, wherever it is
    (members the central directory does not list, a zip inside other bytes), decoded to
    its end or to the end of the file: an addition to :func:`_zip_members`, which reads
    only what the central directory lists. Deflate data that stops decoding (a damaged
    entry) makes the file :class:`Unscannable`."""
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
            except zlib.error as e:
                raise Unscannable(f"zip entry at byte {off}: deflate data damaged ({type(e).__name__}: {e})") from e
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
        raise Unscannable(f"Parquet table unreadable ({type(e).__name__}: {e})") from e


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


def hash_and_scan(path: Path, scanner: KeyLeakScanner) -> tuple[str, int, list[str], list[str]]:
    """SHA-256, size, the private-key forms found in the file and what could not be scanned.

    Looked at: the file's bytes; the decompressed members of a gzip, bzip2 or xz file;
    every member of a zip (also one after a prefix) and the deflate data after every zip
    local header anywhere in the file; a Parquet table's metadata, Arrow schema and cells.
    """
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
