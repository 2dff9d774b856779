"""The Parquet tables against their CSV copies: every ``NAME.parquet`` of the archive (``tables/NAME.parquet``
of a run's or a comparison's archive) must hold, cell for cell, the text of its CSV copy ``NAME.csv``, the copy
every other check reads. The seal writes (or checks) that copy from the table with pyarrow; here the table is
read again with the standard library (:mod:`refspec_check.parquet`), each row rendered to CSV cells as the
pipeline renders them (``refspec.core.tables.csv_text``, :func:`cell`) and written as its CSV writer writes
them (``csv.writer``, ``\\n`` line ends, a header of the Parquet schema's column names), and the whole text
must equal the CSV file's. So what a reader of the Parquet table (pyarrow, pandas) sees is what was checked:
a signer who seals a forged Parquet table beside an honest CSV copy, or the converse, is refused, with the
table, the first differing row and column and both values named.

A Parquet table this checker cannot read is a mismatch naming it and why; one compressed with ZSTD, as the
releases before GZIP tables sealed them, is said plainly as unreadable here (exit 2), like an archive
rendered by another renderer version. Key-value metadata that a pandas reader applies to what it shows
(``pandas``: column names, index, types), which the project never writes, is a mismatch too.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import struct

from refspec_check.parquet import ParquetError, ParquetFile, UnsupportedCodec, open_parquet
from refspec_check.problems import Checker

#: key-value metadata a reader applies to what it shows, which the project's tables never carry
READER_METADATA = ("pandas",)
_SHOWN = 80


def cell(v) -> str:
    """The CSV text of one value as the pipeline writes it (``refspec.core.tables.csv_text``, for the values a
    Parquet table of the project holds): null = empty; ``true``/``false``; integers in decimal; floats by
    ``repr`` (``nan``, ``inf``, ``-inf``); a list of integers separated by single spaces (empty list: empty);
    a list with a null element as canonical JSON; strings as they are."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, (int, str)):
        return str(v)
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return " ".join(str(x) for x in v)
    return json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def csv_lines(rows) -> str:
    """Rows of cells as the pipeline's CSV writer joins them (``csv.writer``, minimal quoting, ``\\n``)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _cells(pf: ParquetFile, g: int) -> list[list[str]]:
    return [[cell(v) for v in row] for row in pf.row_group(g)]


def check_parquet_copies(c: Checker) -> None:
    """Every Parquet table of the archive (``c.tree``) against its CSV copy (:func:`check_parquet_copy`)."""
    for rel in sorted(c.tree):
        if rel.endswith(".parquet"):
            check_parquet_copy(c, rel)


def check_parquet_copy(c: Checker, rel: str) -> None:
    """``rel`` (a Parquet table, relative to the archive) holds the text of its CSV copy beside it."""
    crel = rel[: -len(".parquet")] + ".csv"
    if crel not in c.tree:
        c.bad(rel, f"no CSV copy {crel} beside it: this checker reads tables through their CSV copies")
        return
    c.compared += 1
    try:
        pf = open_parquet(os.path.join(c.archive, rel), rel)
        c.files.add(os.path.join(c.archive, rel))
        for key in READER_METADATA:
            if key in pf.metadata:
                c.bad(
                    rel,
                    f"key-value metadata {key!r}, which a {key} reader applies to what it shows (column names, "
                    "index, types) and the project never writes",
                )
                return
        with open(os.path.join(c.archive, crel), "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            c.bad(rel, f"its CSV copy {crel} is not UTF-8 text ({e}), so the two copies differ")
            return
        if _same_text(pf, text):
            c.matched += 1
        else:
            c.bad(rel, first_difference(pf, text, crel))
    except UnsupportedCodec as e:
        if e.codec == "ZSTD":
            c.unread(
                rel,
                f"the Parquet copy is compressed with ZSTD, as releases before GZIP tables sealed them: a codec "
                f"this checker cannot read, so it is not checked against {crel} (seal the results again with "
                "this release to have it checked)",
            )
        else:
            c.bad(
                rel,
                f"the Parquet copy is compressed with {e.codec}, a codec this checker cannot read (the seal "
                f"writes GZIP), so it is not checked against {crel}",
            )
    except ParquetError as e:
        c.bad(rel, f"a Parquet table this checker cannot read, so it is not checked against {crel}: {e}")
    except OSError as e:
        c.bad(rel, f"cannot be read ({e})")
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, struct.error, RecursionError) as e:
        c.bad(rel, f"a malformed Parquet table ({type(e).__name__}: {str(e)[:200]}), not checked against {crel}")


def _same_text(pf: ParquetFile, text: str) -> bool:
    """Whether ``text`` is the CSV text of ``pf``'s rows, rendered one row group at a time."""
    head = csv_lines([pf.names])
    if not text.startswith(head):
        return False
    pos = len(head)
    for g in range(pf.num_row_groups):
        body = csv_lines(_cells(pf, g)) if pf.columns else ""
        if text[pos : pos + len(body)] != body:
            return False
        pos += len(body)
    return pos == len(text)


def _show(s: str) -> str:
    if s == "":
        return "an empty cell"
    if len(s) > _SHOWN:
        return repr(s[:_SHOWN]) + "..."
    return s if s.isprintable() and not any(ch in s for ch in " ,\"'") else repr(s)


def first_difference(pf: ParquetFile, text: str, crel: str) -> str:
    """Where the CSV copy first differs from the CSV text of the Parquet rows: the header, the first row and
    column whose cells differ (rows counted from 1 after the header), the row count, or the line whose text
    alone differs (quoting, line ends)."""
    want = [pf.names] + [r for g in range(pf.num_row_groups) for r in (_cells(pf, g) if pf.columns else [])]
    try:
        have = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        return f"its CSV copy {crel} is not CSV text ({e}), so the two copies differ"
    if not have or have[0] != want[0]:
        return f"columns {want[0]} but the CSV copy {crel} has the header {have[0] if have else []}"
    for i, (w, h) in enumerate(zip(want[1:], have[1:]), start=1):
        if w == h:
            continue
        for j, (a, b) in enumerate(zip(w, h)):
            if a != b:
                name = pf.names[j] if j < len(pf.names) else f"#{j + 1}"
                return f"row {i} column {name}: Parquet {_show(a)} but the CSV copy {crel} says {_show(b)}"
        return f"row {i}: Parquet has {len(w)} cells but the CSV copy {crel} has {len(h)}"
    if len(want) != len(have):
        return f"Parquet has {len(want) - 1} rows but the CSV copy {crel} has {len(have) - 1}"
    want_lines = (csv_lines(want) if pf.columns else csv_lines(want[:1])).split("\n")
    for k, (a, b) in enumerate(zip(want_lines, text.split("\n")), start=1):
        if a != b:
            return f"the CSV copy {crel} writes line {k} as {b[:_SHOWN]!r}, the Parquet rows give {a[:_SHOWN]!r}"
    return f"the CSV copy {crel} differs from the CSV text of the Parquet rows (its line ends)"
