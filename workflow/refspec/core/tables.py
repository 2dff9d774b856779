"""The result tables: schemas, validation, Parquet + CSV writing and reading.

Every table a campaign writes has a column contract in
``report/refspec_check/schemas/tables/<name>.json`` (documented column by column in
``anc/tables.md``). The specs, their loading and the typed reading of a CSV copy have one owner,
the checker's standard-library :mod:`refspec_check.table_specs` (the report's renderer reads the
tables with it); this module re-exports them. :func:`write_table` validates rows against a spec and writes

* ``<name>.parquet`` (GZIP-compressed, PLAIN-encoded version 1 data pages without
  dictionaries: :data:`PARQUET_WRITE`; columns in schema order, Arrow types from the
  schema) -- the table the pipeline reads back, and
* ``<name>.csv`` -- the copy that the standard-library checker
  (``report/check.py``) reads; it also reads the Parquet file with its own reader
  (``refspec_check.parquet``, which is why the encoding is this plain) and requires
  the two copies to hold the same text.

CSV encoding (one contract, also implemented by the checker):

* header line = column names in schema order; ``\\n`` line ends; UTF-8;
  ``csv`` module quoting (minimal);
* null = empty cell. A nullable string column therefore cannot carry the empty
  string: :func:`write_table` stores ``""`` in a nullable string column as null
  so that the two copies never disagree;
* ``bool`` = ``true`` / ``false``;
* integers in decimal; ``float64`` as Python's ``repr`` (the shortest text
  that reads back to the identical double);
* ``list<int32>`` = the integers separated by single spaces (empty list =
  empty cell; list columns are never nullable).

Column types: ``string``, ``int32``, ``int64``, ``float64`` (finite),
``bool``, ``list<int32>``. A column may carry ``enum`` (allowed values) and
``minimum``. Each table has a ``key`` (columns that identify a row); duplicate
keys are refused.
"""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import io
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from refspec_check import table_specs as _specs
from refspec_check.table_specs import (  # noqa: F401 (the specs' names, re-exported for the pipeline)
    TABLES,
    TYPES,
    Column,
    TableSpec,
    find_table,
    load_spec,
    parse_cell,
)

from .errors import RefspecError
from .fsutil import atomic_write_bytes
from .hashing import canonical_json

_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
#: the GZIP level of every Parquet table the project writes
PARQUET_GZIP_LEVEL = 9
#: how every Parquet table the project writes is encoded (here and in the seal's copy): GZIP, which the
#: standard library's zlib reads, PLAIN values (no dictionary) and version 1 data pages, whose levels are
#: the RLE/bit-packed hybrid -- the subset the standard-library checker's reader reads
PARQUET_WRITE = {
    "compression": "gzip",
    "compression_level": PARQUET_GZIP_LEVEL,
    "use_dictionary": False,
    "data_page_version": "1.0",
}
_MAX_ERRORS = 12


class TableError(RefspecError):
    """Rows that do not fit a table's column contract, or an unreadable table."""


def spec(name: str | TableSpec) -> TableSpec:
    """The spec of table ``name`` (a spec is returned as it is: every function that takes a
    table's name also takes a spec loaded with :func:`load_spec` from another folder)."""
    try:
        return _specs.spec_of(name)
    except _specs.TableSpecError as e:
        raise TableError(str(e)) from None


# --------------------------------------------------------------------------- values


def is_null(v: Any) -> bool:
    """None, NaN, pandas NA/NaT."""
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    np, pd = _loaded("numpy"), _loaded("pandas")
    if np is not None and isinstance(v, np.floating) and np.isnan(v):  # numpy floating NaN
        return True
    return pd is not None and (v is pd.NA or v is pd.NaT)


def _loaded(name: str) -> Any:
    """The module ``name`` when it is imported, else None: a value of numpy or pandas exists only once
    they are (the report and the standard-library checker read tables without them)."""
    return sys.modules.get(name)


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    np = _loaded("numpy")
    if np is not None:
        if isinstance(v, np.bool_):
            return None
        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, np.floating):
            v = float(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return None


def _coerce(col: Column, v: Any) -> tuple[Any, str | None]:
    """Return (python value, error message or None)."""
    if col.type == "list<int32>":
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            return None, f"expected a list of int32, got {type(v).__name__}"
        out = []
        for x in v:
            i = _as_int(x)
            if i is None or not (_INT_RANGE["int32"][0] <= i <= _INT_RANGE["int32"][1]):
                return None, f"list element {x!r} is not an int32"
            out.append(i)
        return out, None
    if is_null(v):
        if col.nullable:
            return None, None
        return None, "null in a non-nullable column"
    if col.type == "string":
        if not isinstance(v, str):
            return None, f"expected string, got {type(v).__name__} {v!r}"
        v = str(v)
        if v == "" and col.nullable:
            return None, None
    elif col.type in ("int32", "int64"):
        i = _as_int(v)
        if i is None:
            return None, f"expected {col.type}, got {type(v).__name__} {v!r}"
        lo, hi = _INT_RANGE[col.type]
        if not lo <= i <= hi:
            return None, f"{i} is out of the {col.type} range"
        v = i
    elif col.type == "float64":
        if isinstance(v, bool) or _as_int(v) is None and not _is_float(v):
            return None, f"expected float64, got {type(v).__name__} {v!r}"
        v = float(v)
        if not math.isfinite(v):
            return None, f"{v!r} is not a finite float64"
    elif col.type == "bool":
        np = _loaded("numpy")
        if np is not None and isinstance(v, np.bool_):
            v = bool(v)
        if not isinstance(v, bool):
            return None, f"expected bool, got {type(v).__name__} {v!r}"
    if col.enum is not None and v not in col.enum:
        return None, f"{v!r} is not one of {list(col.enum)}"
    if col.minimum is not None and col.type in ("int32", "int64", "float64") and v < col.minimum:
        return None, f"{v!r} is below the minimum {col.minimum}"
    return v, None


def _is_float(v: Any) -> bool:
    if isinstance(v, float):
        return True
    np = _loaded("numpy")
    return np is not None and isinstance(v, np.floating)


def records(data: Any) -> list[dict[str, Any]]:
    """Rows of a DataFrame, a list of mappings or a mapping of columns, as plain dicts.

    Pandas missing values become None; numpy scalars become Python scalars.
    """
    if data is None:
        return []
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # DataFrame
        rows = data.to_dict(orient="records")
    elif isinstance(data, Mapping):
        cols = list(data)
        n = {len(data[c]) for c in cols}
        if len(n) > 1:
            raise TableError("columns of unequal length")
        rows = [{c: data[c][i] for c in cols} for i in range(n.pop() if n else 0)]
    else:
        rows = [dict(r) for r in data]
    out = []
    for r in rows:
        d = {}
        for k, v in r.items():
            if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
                v = v.tolist()
            elif not isinstance(v, (list, tuple)) and is_null(v):
                v = None
            d[k] = v
        out.append(d)
    return out


def validate(data: Any, name: str | TableSpec) -> list[dict[str, Any]]:
    """Check rows against table ``name`` (or a spec); return them normalized, in schema column order.

    Raises TableError listing (up to 12) problems: missing or unknown columns,
    wrong types, nulls in non-nullable columns, values outside an enum or
    below a minimum, duplicate keys.
    """
    sp = spec(name)
    name = sp.name
    rows = records(data)
    names = sp.names
    errors: list[str] = []
    if hasattr(data, "columns"):
        cols_seen = [{str(c) for c in data.columns}]
    else:
        cols_seen = [set(r) for r in rows]
    for i, cols in enumerate(cols_seen):
        missing = [c for c in names if c not in cols]
        extra = sorted(c for c in cols if c not in names)
        if missing or extra:
            where = "columns" if hasattr(data, "columns") else f"row {i}"
            msg = f"table {name}: {where}:"
            if missing:
                msg += f" missing column(s) {missing}"
            if extra:
                msg += f" unknown column(s) {extra}"
            raise TableError(msg + f" (schema {sp.path})")
    out = []
    seen_keys: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        norm = {}
        for col in sp.columns:
            v, err = _coerce(col, r.get(col.name))
            if err is not None:
                if len(errors) < _MAX_ERRORS:
                    errors.append(f"row {i}, column {col.name!r} ({col.type}): {err}")
                else:
                    errors.append("...")
                    break
            norm[col.name] = v
        if sp.key and not errors:
            k = tuple(norm[c] for c in sp.key)
            if k in seen_keys:
                errors.append(f"rows {seen_keys[k]} and {i} share the key {dict(zip(sp.key, k))}")
            else:
                seen_keys[k] = i
        if errors and errors[-1] == "...":
            break
        out.append(norm)
    if errors:
        raise TableError(f"table {name}: {len(errors)} problem(s) against {sp.path}:\n  " + "\n  ".join(errors))
    return out


# --------------------------------------------------------------------------- CSV


def csv_text(v: Any) -> str:
    """CSV text of one value, the one encoding of every CSV cell (tables and sealed archives).

    null = empty cell; bool = ``true``/``false``; integers in decimal; floats as
    Python's ``repr`` (shortest round-trip text; ``nan``, ``inf``, ``-inf``);
    a list of integers = the integers separated by single spaces; other lists
    and structs = canonical JSON; bytes = hex; dates and times = ISO 8601.
    """
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
    if isinstance(v, (int, str, decimal.Decimal)):
        return str(v)
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return " ".join(str(x) for x in v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, _dt.timedelta):
        return repr(v.total_seconds())
    return json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _plain_numbers(col: Any) -> bool:
    """An Arrow column of float64 or integers without nulls: its cells are the values'
    own ``repr`` (which is :func:`csv_text` for these types) and never need CSV quoting."""
    import pyarrow as pa

    t = col.type
    return col.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_float64(t))


def _column_cells(col: Any) -> list[str]:
    """:func:`csv_text` of every value of an Arrow column (plain numbers by their ``repr``: the same text, faster)."""
    if _plain_numbers(col):
        import pyarrow as pa

        fmt = float.__repr__ if pa.types.is_float64(col.type) else int.__repr__
        return list(map(fmt, col.to_numpy().tolist()))
    return list(map(csv_text, col.to_pylist()))


def csv_body(table: Any) -> str:
    """The CSV text of every row of an Arrow table: cells by :func:`csv_text`, joined as
    ``csv.writer`` with ``\\n`` line ends writes them (no header)."""
    if table.num_rows == 0 or table.num_columns == 0:
        return ""
    cols = [_column_cells(c) for c in table.columns]
    if all(_plain_numbers(c) for c in table.columns):  # nothing to quote: the writer would only join
        return "\n".join(map(",".join, zip(*cols))) + "\n"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(zip(*cols))
    return buf.getvalue()


def parquet_csv_text(pf: Any) -> Iterable[str]:
    """The CSV copy of an opened Parquet file (``pyarrow.parquet.ParquetFile``), in pieces:
    the header of column names, then the rows of each row group (:func:`csv_body`).
    Sealing writes this text; ``refspec verify`` compares it."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(pf.schema_arrow.names)
    yield buf.getvalue()
    for i in range(pf.num_row_groups):
        yield csv_body(pf.read_row_group(i, use_threads=False))


_CELL_TYPES = {"float64": float, "int32": int, "int64": int, "bool": bool, "string": str}


def csv_cell(col_type: str, v: Any) -> str:
    """The CSV text (:func:`csv_text`) of one value of a column of type ``col_type``."""
    if v is None:
        return ""
    if col_type == "list<int32>":
        return csv_text([int(x) for x in v])
    return csv_text(_CELL_TYPES.get(col_type, lambda x: x)(v))


def to_csv_bytes(rows: Sequence[Mapping[str, Any]], name: str | TableSpec) -> bytes:
    sp = spec(name)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(sp.names)
    for r in rows:
        w.writerow([csv_cell(c.type, r[c.name]) for c in sp.columns])
    return buf.getvalue().encode("utf-8")


# --------------------------------------------------------------------------- Parquet


def _arrow_schema(sp: TableSpec):
    import pyarrow as pa

    m = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "list<int32>": pa.list_(pa.int32()),
    }
    fields = [pa.field(c.name, m[c.type], nullable=c.nullable) for c in sp.columns]
    meta = {b"refspec.table": sp.name.encode(), b"refspec.columns": canonical_json(sp.names)}
    return pa.schema(fields, metadata=meta)


def to_parquet_bytes(rows: Sequence[Mapping[str, Any]], name: str | TableSpec) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sp = spec(name)
    schema = _arrow_schema(sp)
    arrays = [pa.array([r[c.name] for r in rows], type=schema.field(c.name).type) for c in sp.columns]
    table = pa.Table.from_arrays(arrays, schema=schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **PARQUET_WRITE)
    return sink.getvalue().to_pybytes()


def write_table(data: Any, name: str | TableSpec, out_dir: str | Path) -> dict[str, Path]:
    """Validate ``data`` against table ``name`` (or a spec) and write ``<name>.parquet`` and ``<name>.csv``.

    ``data`` is a DataFrame, a list of mappings or a mapping of columns; its
    columns must be exactly the schema's (any order). Rows keep their order.
    Both files are written atomically. Returns ``{"parquet": path, "csv": path}``.
    """
    sp = spec(name)
    rows = validate(data, sp)
    name = sp.name
    out = Path(out_dir)
    paths = {"parquet": out / f"{name}.parquet", "csv": out / f"{name}.csv"}
    atomic_write_bytes(paths["parquet"], to_parquet_bytes(rows, sp), mode=0o644)
    atomic_write_bytes(paths["csv"], to_csv_bytes(rows, sp), mode=0o644)
    return paths


def read_table(name: str, directory: str | Path):
    """Read ``<name>.parquet`` from ``directory`` (or its ``tables/``) as a pandas DataFrame.

    Integer and boolean columns use pandas' nullable dtypes; the columns are
    checked against the schema. Raises TableError when the file is missing or
    its columns differ.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    sp = spec(name)
    p = find_table(name, directory)
    if p is None:
        raise TableError(f"table {name}: no {name}.parquet in {directory}")
    try:
        table = pq.read_table(p)
    except (OSError, pa.ArrowException) as e:
        raise TableError(f"table {name}: cannot read {p}: {e}") from e
    if table.column_names != sp.names:
        raise TableError(f"table {name}: {p} has columns {table.column_names}, schema has {sp.names}")
    mapping = {
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
        pa.float64(): pd.Float64Dtype(),
    }
    return table.to_pandas(types_mapper=mapping.get)


def read_records(name: str, directory: str | Path) -> list[dict[str, Any]]:
    """Rows of ``<name>.parquet`` as plain dicts (None for nulls, lists for list columns)."""
    import pyarrow.parquet as pq

    sp = spec(name)
    p = find_table(name, directory)
    if p is None:
        raise TableError(f"table {name}: no {name}.parquet in {directory}")
    table = pq.read_table(p)
    if table.column_names != sp.names:
        raise TableError(f"table {name}: {p} has columns {table.column_names}, schema has {sp.names}")
    return table.to_pylist()


def read_csv_records(name: str | TableSpec, directory: str | Path) -> list[dict[str, Any]]:
    """Rows of the CSV copy, typed by the schema (:func:`refspec_check.table_specs.read_csv_records`, the
    report's reading; here for cross-checks); a missing or mismatched copy is a :class:`TableError`."""
    try:
        return _specs.read_csv_records(name, directory)
    except _specs.TableSpecError as e:
        raise TableError(str(e)) from None
