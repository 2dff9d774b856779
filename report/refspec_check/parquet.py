"""Parquet, read with the standard library: the subset the project writes, so that the checker can hold each
sealed ``tables/NAME.parquet`` against its CSV copy (``parquet_copies``).

The project writes every Parquet table (``refspec.core.tables.to_parquet_bytes`` and the seal's copy,
``refspec.provenance.seal.rewrite_parquet``) with GZIP compression, without dictionaries and with version 1
data pages, so each column chunk is a run of ``DATA_PAGE`` pages whose values are PLAIN-encoded and whose
repetition and definition levels are the RLE/bit-packed hybrid with its 4-byte length prefix. This module
reads exactly that, and a little more where it costs nothing (uncompressed pages; a ``DICTIONARY_PAGE``
followed by ``RLE_DICTIONARY``/``PLAIN_DICTIONARY`` data pages):

* the file: magic ``PAR1`` at both ends, the 4-byte little-endian footer length, the ``FileMetaData``
  struct in the Thrift compact protocol (:class:`_Compact`, a generic decoder with limits on nesting,
  sizes and counts);
* the schema: top-level columns of physical type BOOLEAN, INT32, INT64 (no annotation, or a signed
  integer of the type's own width), DOUBLE, BYTE_ARRAY annotated as a UTF-8 string, each required or
  optional, and Arrow's 3-level list of int32: ``<required|optional> group NAME (LIST) { repeated group
  list { <required|optional> int32 element } }``;
* the codecs UNCOMPRESSED and GZIP (zlib, gzip or zlib header); any other codec is an
  :class:`UnsupportedCodec` naming it (archives of releases before GZIP tables hold ZSTD).

Anything else (another type or annotation, a nested or repeated column, DATA_PAGE_V2, another encoding,
an encrypted file, a column chunk in another file) is refused with a :class:`ParquetError` that names it,
as is every inconsistency a reader could resolve in more than one way (page sizes that do not add up to
the column chunk, value counts that differ from the metadata, a page that does not decompress to its
stated size): what this module returns is what a Parquet reader such as pyarrow (and pandas on it) reads.

Values come back as Python values: None for null, ``bool``, ``int``, ``float``, ``str`` and a list of ints
(None for a null element) for a list column.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAGIC = b"PAR1"
#: limits that keep a malformed file from taking the checker's memory or stack: a footer, a page and the
#: number of values of one file the reader accepts, and the Thrift nesting it follows
MAX_FOOTER_BYTES = 64 * 1024 * 1024
MAX_PAGE_BYTES = 256 * 1024 * 1024
MAX_VALUES = 50_000_000
MAX_DEPTH = 32

# parquet.thrift's enums (the names a message shows)
TYPES = ("BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")
CODECS = ("UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW")
ENCODINGS = {
    0: "PLAIN",
    2: "PLAIN_DICTIONARY",
    3: "RLE",
    4: "BIT_PACKED",
    5: "DELTA_BINARY_PACKED",
    6: "DELTA_LENGTH_BYTE_ARRAY",
    7: "DELTA_BYTE_ARRAY",
    8: "RLE_DICTIONARY",
    9: "BYTE_STREAM_SPLIT",
}
PAGE_TYPES = ("DATA_PAGE", "INDEX_PAGE", "DICTIONARY_PAGE", "DATA_PAGE_V2")
CONVERTED = (
    "UTF8 MAP MAP_KEY_VALUE LIST ENUM DECIMAL DATE TIME_MILLIS TIME_MICROS TIMESTAMP_MILLIS TIMESTAMP_MICROS "
    "UINT_8 UINT_16 UINT_32 UINT_64 INT_8 INT_16 INT_32 INT_64 JSON BSON INTERVAL"
).split()
LOGICAL = {
    1: "STRING",
    2: "MAP",
    3: "LIST",
    4: "ENUM",
    5: "DECIMAL",
    6: "DATE",
    7: "TIME",
    8: "TIMESTAMP",
    10: "INTEGER",
    11: "UNKNOWN",
    12: "JSON",
    13: "BSON",
    14: "UUID",
    15: "FLOAT16",
    16: "VARIANT",
    17: "GEOMETRY",
    18: "GEOGRAPHY",
}
BOOLEAN, INT32, INT64, DOUBLE, BYTE_ARRAY = 0, 1, 2, 5, 6
REQUIRED, OPTIONAL, REPEATED = 0, 1, 2
PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY = 0, 2, 3, 8
UNCOMPRESSED, GZIP = 0, 2
DATA_PAGE, DICTIONARY_PAGE = 0, 2


class ParquetError(ValueError):
    """A file this reader cannot read as the project writes Parquet: malformed, or outside the subset."""


class UnsupportedCodec(ParquetError):
    """A column chunk compressed with a codec the standard library cannot decompress (``codec``: its name)."""

    def __init__(self, codec: str, where: str):
        super().__init__(f"{where}: compressed with {codec}, a codec this reader cannot decompress")
        self.codec = codec


def _name(table, i: Any) -> str:
    if isinstance(table, dict):
        return table.get(i, f"#{i}")
    return table[i] if isinstance(i, int) and 0 <= i < len(table) else f"#{i}"


# --------------------------------------------------------------------------- Thrift compact protocol

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


class _Compact:
    """A reader of Thrift's compact protocol over ``data[pos:end]``, generic: a struct is a dict of field id ->
    value (a bool, an int, a float, bytes, a list or a dict of ...). Every size and count is checked against
    the bytes left before anything is allocated, and nesting stops at :data:`MAX_DEPTH`."""

    def __init__(self, data: bytes, pos: int, end: int, what: str):
        self.data, self.pos, self.end, self.what = data, pos, end, what

    def fail(self, msg: str) -> ParquetError:
        return ParquetError(f"{self.what}: {msg} (Thrift compact protocol, byte {self.pos})")

    def byte(self) -> int:
        if self.pos >= self.end:
            raise self.fail("ends in the middle of a value")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out = shift = 0
        for _ in range(10):
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
        raise self.fail("a variable-length integer longer than 10 bytes")

    def zigzag(self, bits: int) -> int:
        u = self.varint()
        v = (u >> 1) ^ -(u & 1)
        if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
            raise self.fail(f"an integer out of the i{bits} range")
        return v

    def size(self, what: str, unit: int = 1) -> int:
        n = self.varint()
        if n * unit > self.end - self.pos:
            raise self.fail(f"a {what} of {n} items or bytes, more than the {self.end - self.pos} bytes left")
        return n

    def value(self, t: int, depth: int) -> Any:
        if t in (_TRUE, _FALSE):
            return t == _TRUE
        if t == _BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if t == _I16:
            return self.zigzag(16)
        if t == _I32:
            return self.zigzag(32)
        if t == _I64:
            return self.zigzag(64)
        if t == _DOUBLE:
            if self.end - self.pos < 8:
                raise self.fail("ends in the middle of a double")
            self.pos += 8
            return struct.unpack_from("<d", self.data, self.pos - 8)[0]
        if t == _BINARY:
            n = self.size("binary")
            self.pos += n
            return bytes(self.data[self.pos - n : self.pos])
        if depth >= MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        if t in (_LIST, _SET):
            h = self.byte()
            n, et = h >> 4, h & 0x0F
            if n == 15:
                n = self.size("list")
            elif n > self.end - self.pos:
                raise self.fail(f"a list of {n} items, more than the {self.end - self.pos} bytes left")
            if et in (_TRUE, _FALSE):  # a bool element is one byte of its own
                return [self.byte() == _TRUE for _ in range(n)]
            self._type_ok(et)
            return [self.value(et, depth + 1) for _ in range(n)]
        if t == _MAP:
            n = self.size("map", 2)
            if n == 0:
                return {}
            kv = self.byte()
            kt, vt = kv >> 4, kv & 0x0F
            self._type_ok(kt)
            self._type_ok(vt)
            out = {}
            for _ in range(n):
                k = self.value(kt, depth + 1)
                out[k if not isinstance(k, (list, dict)) else repr(k)] = self.value(vt, depth + 1)
            return out
        if t == _STRUCT:
            return self.struct(depth + 1)
        raise self.fail(f"unknown value type {t}")

    def _type_ok(self, t: int) -> None:
        if not _TRUE <= t <= _STRUCT:
            raise self.fail(f"unknown value type {t}")

    def struct(self, depth: int = 0) -> dict[int, Any]:
        if depth >= MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        out: dict[int, Any] = {}
        last = 0
        while True:
            h = self.byte()
            t = h & 0x0F
            if t == _STOP:
                if h:
                    raise self.fail(f"a stop byte {h:#04x}")
                return out
            delta = h >> 4
            fid = last + delta if delta else self.zigzag(16)
            self._type_ok(t)
            if fid in out:
                raise self.fail(f"field {fid} given twice")
            out[fid] = self.value(t, depth)
            last = fid


def _field(s: dict, fid: int, kind: type | tuple, what: str, required: bool = True, default: Any = None) -> Any:
    """Field ``fid`` of a decoded struct, of Python type ``kind`` (an int is never a bool here)."""
    if fid not in s:
        if required:
            raise ParquetError(f"{what}: required field {fid} missing")
        return default
    v = s[fid]
    if not isinstance(v, kind) or (isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))):
        raise ParquetError(f"{what}: field {fid} is a {type(v).__name__}, not {kind}")
    return v


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class Column:
    """A top-level column: its name, its kind (``bool``, ``int32``, ``int64``, ``double``, ``string``,
    ``list<int32>``), the physical type and path of its one leaf, its levels and whether it (and, of a list,
    its element) may be null."""

    name: str
    kind: str
    physical: int
    path: tuple[str, ...]
    optional: bool
    element_optional: bool = False

    @property
    def max_rep(self) -> int:
        return 1 if self.kind == "list<int32>" else 0

    @property
    def max_def(self) -> int:
        if self.kind == "list<int32>":
            return int(self.optional) + 1 + int(self.element_optional)
        return int(self.optional)


def _repetition(e: dict, where: str) -> int:
    r = _field(e, 3, int, where, required=False)
    if r not in (REQUIRED, OPTIONAL, REPEATED):
        raise ParquetError(f"{where}: repetition type {r} (a column is required or optional)")
    return r


def _annotations(e: dict, where: str) -> tuple[str | None, str | None, dict]:
    """(converted type name, logical type name, the logical type's own struct) of a schema element."""
    ct = _field(e, 6, int, where, required=False)
    lt = _field(e, 10, dict, where, required=False)
    lname = lbody = None
    if lt is not None:
        if len(lt) != 1:
            raise ParquetError(f"{where}: a logical type union with {len(lt)} members")
        ((fid, lbody),) = lt.items()
        lname = LOGICAL.get(fid, f"#{fid}")
    return (None if ct is None else _name(CONVERTED, ct)), lname, lbody if isinstance(lbody, dict) else {}


def _leaf_kind(e: dict, where: str) -> tuple[int, str]:
    """(physical type, kind) of a leaf the project writes; anything else is refused, naming its type."""
    t = _field(e, 1, int, where)
    ct, lt, lbody = _annotations(e, where)
    named = f"{_name(TYPES, t)}" + (f" ({lt or ct})" if lt or ct else "")
    if t == BOOLEAN and ct is None and lt is None:
        return t, "bool"
    if t in (INT32, INT64):
        width = 32 if t == INT32 else 64
        plain_ct = ct in (None, f"INT_{width}")
        plain_lt = lt is None or (lt == "INTEGER" and lbody.get(1) == width and lbody.get(2) is True)
        if plain_ct and plain_lt:
            return t, f"int{width}"
    if t == DOUBLE and ct is None and lt is None:
        return t, "double"
    if t == BYTE_ARRAY and ct in (None, "UTF8") and lt in (None, "STRING") and (ct or lt):
        return t, "string"
    raise ParquetError(f"{where}: type {named}, which this reader does not read (the project writes none)")


def schema_columns(elements: list) -> list[Column]:
    """The top-level columns of a flattened schema (``FileMetaData.schema``: the root, then each node
    depth first with its ``num_children``)."""
    if not elements or not all(isinstance(e, dict) for e in elements):
        raise ParquetError("schema: no root element")
    root = elements[0]
    n = _field(root, 5, int, "schema root")
    if n < 0 or n > len(elements) - 1:
        raise ParquetError(f"schema root: {n} children in a schema of {len(elements)} elements")
    cols: list[Column] = []
    i = 1
    for _ in range(n):
        if i >= len(elements):
            raise ParquetError("schema: fewer elements than the root's children")
        e = elements[i]
        name = _text(_field(e, 4, bytes, f"schema element {i}"), f"schema element {i}: name")
        where = f"column {name!r}"
        rep = _repetition(e, where)
        kids = _field(e, 5, int, where, required=False)
        if rep == REPEATED:
            raise ParquetError(f"{where}: a repeated column (the project writes lists as LIST groups)")
        if kids is None:
            t, kind = _leaf_kind(e, where)
            cols.append(Column(name, kind, t, (name,), rep == OPTIONAL))
            i += 1
            continue
        cols.append(_list_column(elements, i, name, rep, where))
        i += 3
    if i != len(elements):
        raise ParquetError(f"schema: {len(elements) - i} elements after the root's {n} columns")
    return cols


def _list_column(elements: list, i: int, name: str, rep: int, where: str) -> Column:
    """Arrow's 3-level list of int32 at ``elements[i]`` (three elements), else refused."""
    ct, lt, _ = _annotations(elements[i], where)
    if (ct, lt) not in (("LIST", None), (None, "LIST"), ("LIST", "LIST")):
        raise ParquetError(f"{where}: a group annotated {lt or ct} (the project writes groups only as lists)")
    if _field(elements[i], 5, int, where) != 1 or i + 2 >= len(elements):
        raise ParquetError(f"{where}: a list group without exactly one repeated child")
    mid, leaf = elements[i + 1], elements[i + 2]
    mid_name = _text(_field(mid, 4, bytes, where), where)
    if (
        _repetition(mid, where) != REPEATED
        or _field(mid, 5, int, where, required=False) != 1
        or mid_name != "list"
        or _annotations(mid, where)[:2] != (None, None)
    ):
        raise ParquetError(f"{where}: not a 3-level list (repeated group 'list' with one element)")
    leaf_name = _text(_field(leaf, 4, bytes, where), where)
    if _field(leaf, 5, int, where, required=False) is not None:
        raise ParquetError(f"{where}: a list of groups (the project writes lists of int32)")
    lrep = _repetition(leaf, where)
    t, kind = _leaf_kind(leaf, where + " element")
    if kind != "int32" or lrep == REPEATED:
        raise ParquetError(f"{where}: a list of {kind} (the project writes lists of int32)")
    return Column(name, "list<int32>", t, (name, mid_name, leaf_name), rep == OPTIONAL, lrep == OPTIONAL)


def _text(b: bytes, where: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise ParquetError(f"{where}: not UTF-8") from None


# --------------------------------------------------------------------------- pages


def _decompress(codec: int, body: bytes, size: int, where: str) -> bytes:
    if codec == UNCOMPRESSED:
        if len(body) != size:
            raise ParquetError(f"{where}: uncompressed page of {len(body)} bytes, stated {size}")
        return body
    if codec != GZIP:
        raise UnsupportedCodec(_name(CODECS, codec), where)
    d = zlib.decompressobj(wbits=47)  # 32 + 15: a gzip or zlib header, the largest window
    try:
        out = d.decompress(body, size + 1)
    except zlib.error as e:
        raise ParquetError(f"{where}: GZIP data does not decompress ({e})") from None
    if len(out) != size or not d.eof or d.unused_data or d.unconsumed_tail:
        raise ParquetError(f"{where}: GZIP page does not decompress to exactly its stated {size} bytes")
    return out


def hybrid(data: bytes, pos: int, end: int, width: int, n: int, where: str) -> list[int]:
    """``n`` values of ``width`` bits in the RLE/bit-packed hybrid encoding in ``data[pos:end]``."""
    out: list[int] = []
    vbytes = (width + 7) // 8
    mask = (1 << width) - 1
    while len(out) < n:
        h = s = 0
        for _ in range(5):
            if pos >= end:
                raise ParquetError(f"{where}: RLE/bit-packed run header past the end of its data")
            b = data[pos]
            pos += 1
            h |= (b & 0x7F) << s
            s += 7
            if not b & 0x80:
                break
        else:
            raise ParquetError(f"{where}: RLE/bit-packed run header longer than 5 bytes")
        if h & 1:  # bit-packed: (h >> 1) groups of 8 values, LSB first
            groups = h >> 1
            nbytes = groups * width
            if groups == 0 or nbytes > end - pos:
                raise ParquetError(f"{where}: bit-packed run of {groups} groups past the end of its data")
            take = min(groups * 8, n - len(out))
            if width == 0:
                out.extend([0] * take)
            for k in range(0, take if width else 0, 512):  # 64 groups at a time: linear in the run's length
                m = min(512, take - k)
                big = int.from_bytes(data[pos + k * width // 8 : pos + (k + m) * width // 8 + 1], "little")
                out.extend((big >> (j * width)) & mask for j in range(m))
            pos += nbytes
        else:  # RLE: (h >> 1) repeats of one value in ceil(width / 8) bytes
            count = h >> 1
            if count == 0 or vbytes > end - pos:
                raise ParquetError(f"{where}: RLE run of {count} values past the end of its data")
            v = int.from_bytes(data[pos : pos + vbytes], "little")
            if v > mask:
                raise ParquetError(f"{where}: RLE value {v} wider than {width} bits")
            pos += vbytes
            out.extend([v] * min(count, n - len(out)))
    return out


def _levels(data: bytes, pos: int, encoding: int, max_level: int, n: int, where: str) -> tuple[list[int], int]:
    """A data page's repetition or definition levels: RLE hybrid after its 4-byte length; (levels, next pos)."""
    if encoding != RLE:
        raise ParquetError(f"{where}: levels encoded {_name(ENCODINGS, encoding)} (this reader reads RLE)")
    if len(data) - pos < 4:
        raise ParquetError(f"{where}: no length of its levels")
    length = int.from_bytes(data[pos : pos + 4], "little")
    pos += 4
    if length > len(data) - pos:
        raise ParquetError(f"{where}: levels of {length} bytes past the end of the page")
    levels = hybrid(data, pos, pos + length, max_level.bit_length(), n, where)
    if max(levels, default=0) > max_level:
        raise ParquetError(f"{where}: a level above the column's maximum {max_level}")
    return levels, pos + length


def plain(data: bytes, pos: int, physical: int, n: int, where: str) -> tuple[list, int]:
    """``n`` PLAIN values of a physical type from ``data[pos:]``; (values, next pos)."""
    left = len(data) - pos
    if physical == BOOLEAN:
        nbytes = (n + 7) // 8
        if nbytes > left:
            raise ParquetError(f"{where}: {n} booleans need {nbytes} bytes, the page has {left}")
        bits = int.from_bytes(data[pos : pos + nbytes], "little")
        return [bool((bits >> k) & 1) for k in range(n)], pos + nbytes
    if physical in (INT32, INT64, DOUBLE):
        code, size = {INT32: ("i", 4), INT64: ("q", 8), DOUBLE: ("d", 8)}[physical]
        if n * size > left:
            raise ParquetError(
                f"{where}: {n} {_name(TYPES, physical)} values need {n * size} bytes, the page has {left}"
            )
        return list(struct.unpack_from(f"<{n}{code}", data, pos)), pos + n * size
    if physical == BYTE_ARRAY:
        out = []
        for _ in range(n):
            if len(data) - pos < 4:
                raise ParquetError(f"{where}: a string's length past the end of the page")
            k = int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
            if k > len(data) - pos:
                raise ParquetError(f"{where}: a string of {k} bytes past the end of the page")
            try:
                out.append(data[pos : pos + k].decode("utf-8"))
            except UnicodeDecodeError:
                raise ParquetError(f"{where}: a string that is not UTF-8") from None
            pos += k
        return out, pos
    raise ParquetError(f"{where}: physical type {_name(TYPES, physical)}")


@dataclass
class _Chunk:
    """One column chunk's metadata as this reader uses it."""

    codec: int
    num_values: int
    start: int
    end: int
    where: str
    statistics: Any = None


def _chunk(cc: dict, col: Column, rg: int, file_end: int) -> _Chunk:
    where = f"row group {rg} column {col.name!r}"
    if _field(cc, 1, bytes, where, required=False) is not None:
        raise ParquetError(f"{where}: its data lies in another file (ColumnChunk.file_path)")
    if 8 in cc or 9 in cc:
        raise ParquetError(f"{where}: an encrypted column")
    if any(f in cc for f in (4, 5, 6, 7)):
        raise ParquetError(f"{where}: a page index (which the project does not write; a filtering reader uses it)")
    md = _field(cc, 3, dict, where)
    if 14 in md or 15 in md:
        raise ParquetError(f"{where}: a bloom filter (which the project does not write; a filtering reader uses it)")
    if _field(md, 1, int, where) != col.physical:
        raise ParquetError(f"{where}: the column chunk's type {_name(TYPES, md[1])} is not the schema's")
    path = tuple(_text(p, where) if isinstance(p, bytes) else None for p in _field(md, 3, list, where))
    if path != col.path:
        raise ParquetError(f"{where}: the column chunk's path {'.'.join(map(str, path))} is not the schema's")
    codec = _field(md, 4, int, where)
    n = _field(md, 5, int, where)
    size = _field(md, 7, int, where)
    data_off = _field(md, 9, int, where)
    dict_off = _field(md, 11, int, where, required=False)
    start = data_off if dict_off is None else dict_off
    if dict_off is not None and not 0 < dict_off < data_off:
        raise ParquetError(f"{where}: dictionary page offset {dict_off} not before the data pages at {data_off}")
    if n == 0 and size == 0:  # an empty column chunk (of an empty table): no pages, whatever its offsets
        start = len(MAGIC)
    if n < 0 or size < 0 or start < len(MAGIC) or start + size > file_end:
        raise ParquetError(f"{where}: column chunk at {start} of {size} bytes, {n} values: outside the file's data")
    if codec not in (UNCOMPRESSED, GZIP):
        raise UnsupportedCodec(_name(CODECS, codec), where)
    return _Chunk(codec, n, start, start + size, where, md.get(12))


def _page_values(raw: bytes, dph: dict, col: Column, dictionary: list | None, where: str):
    """(repetition levels or None, definition levels or None, the non-null values) of one DATA_PAGE."""
    n = _field(dph, 1, int, where)
    enc = _field(dph, 2, int, where)
    if n < 0:
        raise ParquetError(f"{where}: {n} values")
    pos = 0
    reps = defs = None
    if col.max_rep:
        reps, pos = _levels(raw, pos, _field(dph, 4, int, where), col.max_rep, n, where + " repetition levels")
    if col.max_def:
        defs, pos = _levels(raw, pos, _field(dph, 3, int, where), col.max_def, n, where + " definition levels")
    present = n if defs is None else defs.count(col.max_def)
    if enc == PLAIN:
        values, pos = plain(raw, pos, col.physical, present, where)
        if pos != len(raw):
            raise ParquetError(f"{where}: {len(raw) - pos} bytes after its values")
    elif enc in (RLE_DICTIONARY, PLAIN_DICTIONARY):
        if dictionary is None:
            raise ParquetError(f"{where}: dictionary-encoded values without a dictionary page")
        if pos >= len(raw) and present:
            raise ParquetError(f"{where}: no bit width of its dictionary indices")
        width = raw[pos] if pos < len(raw) else 0
        if width > 32:
            raise ParquetError(f"{where}: dictionary indices of {width} bits")
        idx = hybrid(raw, pos + 1, len(raw), width, present, where) if present else []
        if any(k >= len(dictionary) for k in idx):
            raise ParquetError(f"{where}: a dictionary index past the dictionary's {len(dictionary)} values")
        values = [dictionary[k] for k in idx]
    else:
        raise ParquetError(f"{where}: values encoded {_name(ENCODINGS, enc)}, which this reader does not read")
    return reps, defs, values


def _assemble(col: Column, reps: list | None, defs: list | None, values: list, where: str) -> list:
    """The rows of a column chunk's levels and values: a value or None per row, or of a list column a list
    (of ints and None) or None per row."""
    if col.kind != "list<int32>":
        if defs is None:
            return values
        it = iter(values)
        return [next(it) if d == col.max_def else None for d in defs]
    rows: list = []
    empty = int(col.optional)  # the definition level of an empty list (below it: a null list)
    it = iter(values)
    for r, d in zip(reps, defs):
        if r == 0:
            rows.append(None if d < empty else [])
            if d <= empty:
                continue
        elif d <= empty or not rows or not rows[-1]:
            raise ParquetError(f"{where}: a list element that continues a null or empty list, or no list")
        rows[-1].append(next(it) if d == col.max_def else None)
    return rows


def _bound(raw: Any, physical: int, where: str) -> Any:
    """A statistics bound (the PLAIN bytes of one value) as a value to compare with; a string's as its bytes."""
    size = {BOOLEAN: 1, INT32: 4, INT64: 8, DOUBLE: 8}.get(physical)
    if not isinstance(raw, bytes) or (size is not None and len(raw) != size):
        raise ParquetError(f"{where}: a statistics bound that is not one {_name(TYPES, physical)} value")
    if physical == BYTE_ARRAY:
        return raw
    if physical == BOOLEAN:
        if raw not in (b"\x00", b"\x01"):
            raise ParquetError(f"{where}: a boolean statistics bound {raw!r}")
        return raw == b"\x01"
    return struct.unpack("<" + {INT32: "i", INT64: "q", DOUBLE: "d"}[physical], raw)[0]


def check_statistics(stats: Any, physical: int, values: list, nulls: int, where: str) -> None:
    """A column chunk's statistics hold its values: each min bound at most, each max bound at least every
    non-null value (NaN aside), and the null count is its nulls. A reader that filters rows (pandas'
    ``read_parquet(filters=...)``) skips row groups by them, so a false bound would hide rows from it."""
    if stats is None:
        return
    if not isinstance(stats, dict):
        raise ParquetError(f"{where}: statistics that are not a struct")
    nc = stats.get(3)
    if nc is not None and nc != nulls:
        raise ParquetError(f"{where}: statistics count {nc} nulls, the column chunk holds {nulls}")
    keyed = values
    if physical == BYTE_ARRAY:
        keyed = [v.encode("utf-8") for v in values]
    elif physical == DOUBLE:
        keyed = [v for v in values if v == v]
    if not keyed:
        return
    lo, hi = min(keyed), max(keyed)
    for fid, is_max in ((1, True), (2, False), (5, True), (6, False)):
        if fid not in stats:
            continue
        b = _bound(stats[fid], physical, where)
        if b != b or ((b < hi) if is_max else (b > lo)):
            side, v = ("max", hi) if is_max else ("min", lo)
            raise ParquetError(f"{where}: statistics {side} {b!r} does not hold the values (their {side} is {v!r})")


def read_chunk(data: bytes, ch: _Chunk, col: Column) -> list:
    """Every row of one column chunk (its pages in order; a list may go on from one page into the next),
    checked against the chunk's metadata and statistics."""
    pos, seen = ch.start, 0
    reps: list | None = [] if col.max_rep else None
    defs: list | None = [] if col.max_def else None
    values: list = []
    dictionary: list | None = None
    first = True
    while pos < ch.end:
        rd = _Compact(data, pos, ch.end, ch.where + " page header")
        ph = rd.struct()
        pos = rd.pos
        where = f"{ch.where} page at byte {rd.pos}"
        ptype = _field(ph, 1, int, where)
        usize = _field(ph, 2, int, where)
        csize = _field(ph, 3, int, where)
        if csize < 0 or csize > ch.end - pos:
            raise ParquetError(f"{where}: a page of {csize} bytes past the end of its column chunk")
        if not 0 <= usize <= MAX_PAGE_BYTES:
            raise ParquetError(f"{where}: a page of {usize} bytes (this reader's limit is {MAX_PAGE_BYTES})")
        body = data[pos : pos + csize]
        pos += csize
        if ptype == DICTIONARY_PAGE:
            dph = _field(ph, 7, dict, where)
            if not first:
                raise ParquetError(f"{where}: a dictionary page after the column chunk's first page")
            n = _field(dph, 1, int, where)
            if _field(dph, 2, int, where) not in (PLAIN, PLAIN_DICTIONARY):
                raise ParquetError(f"{where}: a dictionary encoded {_name(ENCODINGS, dph[2])}")
            if not 0 <= n <= 8 * usize:
                raise ParquetError(f"{where}: a dictionary of {n} values in {usize} bytes")
            raw = _decompress(ch.codec, body, usize, where)
            dictionary, end = plain(raw, 0, col.physical, n, where)
            if end != len(raw):
                raise ParquetError(f"{where}: {len(raw) - end} bytes after the dictionary's values")
        elif ptype == DATA_PAGE:
            dph = _field(ph, 5, dict, where)
            n = _field(dph, 1, int, where)
            if not 0 <= n <= ch.num_values - seen:
                raise ParquetError(f"{where}: {n} values, more than the column chunk's {ch.num_values} in all")
            raw = _decompress(ch.codec, body, usize, where)
            r, d, v = _page_values(raw, dph, col, dictionary, where)
            if reps is not None:
                if not reps and r and r[0] != 0:
                    raise ParquetError(f"{where}: the column chunk starts in the middle of a list")
                reps.extend(r)
            if defs is not None:
                defs.extend(d)
            values.extend(v)
            seen += n
        else:
            raise ParquetError(f"{where}: a {_name(PAGE_TYPES, ptype)} page (this reader reads DATA_PAGE version 1)")
        first = False
    if pos != ch.end or seen != ch.num_values:
        raise ParquetError(f"{ch.where}: its pages hold {seen} values, the metadata says {ch.num_values}")
    nulls = 0 if defs is None else len(defs) - len(values)
    check_statistics(ch.statistics, col.physical, values, nulls, ch.where)
    return _assemble(col, reps, defs, values, ch.where)


# --------------------------------------------------------------------------- the file


class ParquetFile:
    """A Parquet file read into memory: its columns (:attr:`columns`, names in :attr:`names`), key-value
    metadata (:attr:`metadata`), row count and row groups (:meth:`row_group`, :meth:`rows`)."""

    def __init__(self, data: bytes, where: str = "Parquet file"):
        self.data = data
        n = len(data)
        if n < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
            if n >= 4 and data[-4:] == b"PARE":
                raise ParquetError(f"{where}: an encrypted Parquet file (magic PARE)")
            raise ParquetError(f"{where}: not a Parquet file (no PAR1 magic at both ends)")
        flen = int.from_bytes(data[-8:-4], "little")
        if flen > n - 12 or flen > MAX_FOOTER_BYTES:
            raise ParquetError(f"{where}: a footer of {flen} bytes in a file of {n}")
        self.data_end = n - 8 - flen
        rd = _Compact(data, self.data_end, n - 8, f"{where}: footer")
        fmd = rd.struct()
        if rd.pos != n - 8:
            raise ParquetError(f"{where}: {n - 8 - rd.pos} bytes after the footer's FileMetaData")
        if 8 in fmd or 9 in fmd:
            raise ParquetError(f"{where}: encryption metadata in the footer")
        self.columns = schema_columns(_field(fmd, 2, list, "FileMetaData"))
        self.names = [c.name for c in self.columns]
        self.num_rows = _field(fmd, 3, int, "FileMetaData")
        self._groups = _field(fmd, 4, list, "FileMetaData")
        self.metadata: dict[str, str | None] = {}
        for kv in _field(fmd, 5, list, "FileMetaData", required=False, default=[]):
            if not isinstance(kv, dict):
                raise ParquetError("FileMetaData: a key-value entry that is not a struct")
            key = _text(_field(kv, 1, bytes, "key-value metadata"), "key-value metadata")
            val = _field(kv, 2, bytes, f"key-value metadata {key!r}", required=False)
            if key in self.metadata:
                raise ParquetError(f"key-value metadata: key {key!r} given twice")
            self.metadata[key] = None if val is None else val.decode("utf-8", "replace")
        self.where = where
        self._chunks: list[tuple[int, list[_Chunk]]] = []
        total = cells = 0
        for g, rg in enumerate(self._groups):
            if not isinstance(rg, dict):
                raise ParquetError(f"row group {g}: not a struct")
            nrows = _field(rg, 3, int, f"row group {g}")
            ccs = _field(rg, 1, list, f"row group {g}")
            if nrows < 0 or len(ccs) != len(self.columns) or not all(isinstance(cc, dict) for cc in ccs):
                raise ParquetError(f"row group {g}: {len(ccs)} column chunks for {len(self.columns)} columns")
            chunks = [_chunk(cc, col, g, self.data_end) for cc, col in zip(ccs, self.columns)]
            for ch, col in zip(chunks, self.columns):
                if col.max_rep == 0 and ch.num_values != nrows:
                    raise ParquetError(f"{ch.where}: {ch.num_values} values in a row group of {nrows} rows")
                cells += ch.num_values
            total += nrows
            self._chunks.append((nrows, chunks))
        if total != self.num_rows:
            raise ParquetError(f"{where}: {self.num_rows} rows, its row groups hold {total}")
        if cells > MAX_VALUES:
            raise ParquetError(f"{where}: {cells} values (this reader's limit is {MAX_VALUES})")

    @property
    def num_row_groups(self) -> int:
        return len(self._chunks)

    def row_group(self, g: int) -> list[tuple]:
        """The rows of row group ``g``, each a tuple of the columns' values."""
        nrows, chunks = self._chunks[g]
        cols = [read_chunk(self.data, ch, col) for ch, col in zip(chunks, self.columns)]
        for ch, vals in zip(chunks, cols):
            if len(vals) != nrows:
                raise ParquetError(f"{ch.where}: {len(vals)} rows in a row group of {nrows}")
        return list(zip(*cols)) if cols else [() for _ in range(nrows)]

    def rows(self) -> Iterator[tuple]:
        for g in range(self.num_row_groups):
            yield from self.row_group(g)


def open_parquet(path: str | os.PathLike, where: str | None = None) -> ParquetFile:
    """The Parquet file at ``path``, its footer read (its pages are read by :meth:`ParquetFile.row_group`)."""
    with open(path, "rb") as f:
        data = f.read()
    return ParquetFile(data, where or os.fspath(path))


def read_parquet(source: str | os.PathLike | bytes) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of a Parquet file (a path or its bytes); rows are tuples of Python values."""
    pf = ParquetFile(source) if isinstance(source, (bytes, bytearray)) else open_parquet(source)
    return pf.names, list(pf.rows())
