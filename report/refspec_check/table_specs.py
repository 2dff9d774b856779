"""The result tables' column contracts and the reading of their CSV copies, standard library only: one owner
for the pipeline (``refspec.core.tables`` validates and writes the tables by these specs) and the renderer
(:mod:`refspec_check.render` reads each CSV copy typed by its spec).

Every table a campaign writes has a spec in ``schemas/tables/<name>.json`` beside this module (documented
column by column in ``anc/tables.md``), a comparison archive's tables in ``schemas/compare/<name>.json``.
A spec names the table (``title``), its ``key`` columns and its columns in order, each with its ``type``
(``string``, ``int32``, ``int64``, ``float64``, ``bool``, ``list<int32>``), whether it is ``nullable``,
and optionally ``enum`` (allowed values) and ``minimum``.

A CSV copy (one contract, written by ``refspec.core.tables``): the header line holds the column names in
spec order; null is the empty cell; ``bool`` is ``true``/``false``; integers in decimal; ``float64`` as
Python's ``repr``; ``list<int32>`` the integers separated by single spaces. :func:`parse_cell` reads
one cell back. The checker's own recomputations read the CSV copies by its own contract
(:mod:`refspec_check.contract`), not by these specs.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TYPES = ("string", "int32", "int64", "float64", "bool", "list<int32>")
#: the folder of the spec files: ``tables/`` (a run's result tables) and ``compare/`` (a comparison's)
SCHEMAS = Path(__file__).resolve().parent / "schemas"


class TableSpecError(ValueError):
    """A spec file that does not hold, an unknown table, or a CSV copy that does not fit its spec."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    description: str
    enum: tuple[str, ...] | None = None
    minimum: float | None = None


@dataclass(frozen=True)
class TableSpec:
    name: str
    description: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]
    path: Path | None = field(default=None, compare=False)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


def load_spec(path: str | Path) -> TableSpec:
    """Read one spec file (``schemas/tables/<name>.json``)."""
    p = Path(path)
    doc = json.loads(p.read_text(encoding="utf-8"))
    cols = []
    for c in doc["columns"]:
        if c["type"] not in TYPES:
            raise TableSpecError(f"{p}: column {c['name']!r} has unknown type {c['type']!r}")
        if c["type"] == "list<int32>" and c.get("nullable"):
            raise TableSpecError(f"{p}: list column {c['name']!r} cannot be nullable")
        cols.append(
            Column(
                name=c["name"],
                type=c["type"],
                nullable=bool(c.get("nullable", False)),
                description=c.get("description", ""),
                enum=tuple(c["enum"]) if "enum" in c else None,
                minimum=c.get("minimum"),
            )
        )
    names = [c.name for c in cols]
    if len(set(names)) != len(names):
        raise TableSpecError(f"{p}: duplicate column names")
    key = tuple(doc.get("key", ()))
    missing = [k for k in key if k not in names]
    if missing:
        raise TableSpecError(f"{p}: key column(s) {missing} are not columns")
    return TableSpec(name=doc["title"], description=doc.get("description", ""), key=key, columns=tuple(cols), path=p)


def _load_all() -> dict[str, TableSpec]:
    out: dict[str, TableSpec] = {}
    for p in sorted((SCHEMAS / "tables").glob("*.json")):
        sp = load_spec(p)
        if sp.name != p.stem:
            raise TableSpecError(f"{p}: title {sp.name!r} differs from the file name")
        out[sp.name] = sp
    return out


#: name -> TableSpec for every result table (``schemas/tables``), in the files' name order
TABLES: dict[str, TableSpec] = _load_all()


def spec_of(table: str | TableSpec) -> TableSpec:
    """The spec of result table ``table`` (a spec is returned as it is: a comparison's, or one loaded with
    :func:`load_spec` from another folder)."""
    if isinstance(table, TableSpec):
        return table
    if table not in TABLES:
        raise TableSpecError(f"unknown table {table!r} (known: {', '.join(sorted(TABLES))})")
    return TABLES[table]


def compare_spec(name: str) -> TableSpec:
    """The spec of a comparison archive's table (``schemas/compare/<name>.json``)."""
    return load_spec(SCHEMAS / "compare" / f"{name}.json")


def find_table(name: str, directory: str | Path, ext: str = "parquet") -> Path | None:
    """``DIR/<name>.<ext>`` or ``DIR/tables/<name>.<ext>``, whichever exists."""
    d = Path(directory)
    for p in (d / f"{name}.{ext}", d / "tables" / f"{name}.{ext}"):
        if p.is_file():
            return p
    return None


def parse_cell(col_type: str, nullable: bool, text: str) -> Any:
    """One CSV cell's value (the inverse of the pipeline's ``refspec.core.tables.csv_cell``)."""
    if col_type == "list<int32>":
        return [int(x) for x in text.split(" ")] if text else []
    if text == "":
        return None if nullable else ("" if col_type == "string" else None)
    if col_type == "string":
        return text
    if col_type in ("int32", "int64"):
        return int(text)
    if col_type == "float64":
        return float(text)
    if col_type == "bool":
        if text not in ("true", "false"):
            raise ValueError(f"bad bool {text!r}")
        return text == "true"
    raise ValueError(col_type)


def read_csv_records(table: str | TableSpec, directory: str | Path) -> list[dict[str, Any]]:
    """Rows of a table's CSV copy in ``directory`` (or its ``tables/``), typed by its spec (a result table's
    name, or a spec): the report's reading when the checker renders it again."""
    sp = spec_of(table)
    p = find_table(sp.name, directory, ext="csv")
    if p is None:
        raise TableSpecError(f"table {sp.name}: no {sp.name}.csv in {directory}")
    with open(p, newline="", encoding="utf-8") as f:
        rd = csv.reader(f)
        header = next(rd, None)
        if header != sp.names:
            raise TableSpecError(f"table {sp.name}: {p} header {header} differs from the schema {sp.names}")
        return [{c.name: parse_cell(c.type, c.nullable, t) for c, t in zip(sp.columns, row)} for row in rd]
