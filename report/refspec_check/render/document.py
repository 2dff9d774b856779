"""The report's data model: the archive it reads and the items it shows.

:class:`Archive` (the result tables and files of a results folder, :func:`load_archive`),
:class:`Numbers` (the registry of every number shown, written as ``numbers.json``) with
its :class:`Num` entries, and the items sections hold: :class:`Cell`, :class:`Table`,
:class:`Figure` and :class:`Section`. A section built on one result table is declared with
:func:`table_section` (the section, or its '<table>.csv not present' note when the table is absent);
:class:`ShownTable` registers the numbers a report table shows.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refspec_check.table_specs import TABLES, find_table, read_csv_records

DASH = "\u2014"
#: reads one result table's rows: ``reader(name, folder)`` (the report's own reading is its CSV copy)
Reader = Callable[[str, Path], list[dict[str, Any]]]


class NotAnArchive(ValueError):
    """A results folder that is not there, or holds no result table (the pipeline's ``refspec report`` says
    it as a usage error)."""


@dataclass
class Num:
    """One number shown in the report."""

    id: str
    value: float | int
    fmt: str
    source: str
    table: str
    row: dict[str, Any]
    column: str

    @property
    def text(self) -> str:
        return format(self.value, self.fmt)


@dataclass(frozen=True)
class Link:
    """A link to a place of the same report (``#`` + an element's id); report.tex shows its text."""

    text: str
    target: str


@dataclass
class Cell:
    parts: list[Any]  # str, Num or Link
    cls: str = ""
    title: str = ""


@dataclass
class Table:
    id: str
    title: str
    sources: list[str]
    header: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    numeric: list[bool] = field(default_factory=list)
    # on a phone's width each row stacks, each cell under its column's name (report.html)
    stack: bool = False


@dataclass
class Figure:
    """A figure; ``canvas`` is a :class:`refspec_check.render.svg.Canvas`, drawn as inline SVG and as TikZ."""

    id: str
    title: str
    sources: list[str]
    canvas: Any
    caption: str = ""


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    items: list[Any] = field(default_factory=list)  # Table | Figure
    notes: list[str] = field(default_factory=list)  # "not run" and similar visible notes
    # open without a click in report.html; a folded section is one click away, in <details> under
    # its title (report.tex shows every section in full). The main report opens only on its
    # findings and speeds (render.OPEN_SECTIONS); a comparison's or a qualification's sections are open
    open: bool = True


def absent_note(table: str, why: str = "") -> str:
    """The note a section shows when the archive lacks result ``table``: '<table>.csv not present: <why>'."""
    return f"{table}.csv not present: {why}" if why else f"{table}.csv not present"


def table_section(
    id: str, title: str, intro: str = "", *, table: str, absent: str
) -> Callable[[Callable[[Section, Archive, Numbers], None]], Callable[[Archive, Numbers], Section]]:
    """A section built on result ``table``: the decorated ``body(sec, a, N)`` fills the section
    (``id``, ``title``, ``intro``); when the archive has no ``table`` the body is not called and the
    section holds only :func:`absent_note` with ``absent`` (why the table is missing)."""

    def wrap(body: Callable[[Section, Archive, Numbers], None]) -> Callable[[Archive, Numbers], Section]:
        @functools.wraps(body)
        def section(a: Archive, N: Numbers) -> Section:
            sec = Section(id, title, intro)
            if not a.has(table):
                sec.notes.append(absent_note(table, absent))
            else:
                body(sec, a, N)
            return sec

        return section

    return wrap


class Numbers:
    """Collects every number shown; one id, one value."""

    def __init__(self) -> None:
        self.items: dict[str, Num] = {}

    def add(self, id_parts: Sequence[Any], value, fmt: str, source: str, table: str, row: dict, column: str) -> Num:
        nid = "|".join(str(p) for p in id_parts)
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"number {nid} is not finite")
        n = Num(nid, value, fmt, source, table, row, column)
        old = self.items.get(nid)
        if old is not None:
            if old.value != value:
                raise ValueError(f"number {nid} shown with two values {old.value!r} and {value!r}")
            return old
        self.items[nid] = n
        return n

    def as_json(self) -> list[dict[str, Any]]:
        return [
            dict(
                id=n.id,
                table=n.table,
                row=n.row,
                column=n.column,
                value=n.value,
                fmt=n.fmt,
                text=n.text,
                source=n.source,
            )
            for n in self.items.values()
        ]


@dataclass(frozen=True)
class ShownTable:
    """Where the numbers of one report table come from: result ``table`` of ``archive`` (its CSV is each
    number's source), shown in the report table with id ``tid``; :meth:`add` registers one in ``numbers``."""

    numbers: Numbers
    archive: Archive
    table: str
    tid: str

    def add(self, parts: Sequence[Any], value: Any, fmt: str, *, row: dict[str, Any], column: str) -> Num:
        """The number ``value`` of ``row``'s ``column``, under the id made of ``parts``, formatted with ``fmt``."""
        return self.numbers.add(parts, value, fmt, self.archive.src(self.table), self.tid, row, column)

    def speed(self, base: Sequence[Any], row: dict[str, Any], column: str, r: dict[str, Any]) -> Speed:
        """The timing ratio ``r[column]`` (numerator time / denominator time) of ``row`` as a speed
        (:func:`fold`): its fold ``base + (fold,)`` and, where ``r`` has an interval, the fold's
        bounds ``base + (fold_lo,)`` and ``base + (fold_hi,)``, each to two decimals."""
        slower, f, lo, hi = fold(r[column], r.get("lo"), r.get("hi"))
        cols = (column, "lo", "hi") if slower else (column, "hi", "lo")
        n = self.add(tuple(base) + ("fold",), f, ".2f", row=row, column=cols[0])
        if lo is None or hi is None:
            return Speed(slower, n, None, None)
        n_lo = self.add(tuple(base) + ("fold_lo",), lo, ".2f", row=row, column=cols[1])
        n_hi = self.add(tuple(base) + ("fold_hi",), hi, ".2f", row=row, column=cols[2])
        return Speed(slower, n, n_lo, n_hi)


def fold(ratio: float, lo: float | None = None, hi: float | None = None) -> tuple[bool, float, Any, Any]:
    """A timing ratio (numerator time / denominator time) as a speed: ``(slower, fold, fold_lo, fold_hi)``.

    At or above one the numerator is ``ratio`` times slower (fold = ratio, bounds [lo, hi]); below one it
    is ``1 / ratio`` times faster, and its interval turns over: [1 / hi, 1 / lo]. Bounds are None where the
    ratio has no interval. report/check.py (refspec_check/findings.py) applies the same rule."""
    if ratio >= 1.0:
        return True, ratio, lo, hi
    return False, 1.0 / ratio, None if hi is None else 1.0 / hi, None if lo is None else 1.0 / lo


@dataclass(frozen=True)
class Speed:
    """A ratio as a speed (:meth:`ShownTable.speed`): whether the numerator is slower, the fold and its bounds."""

    slower: bool
    fold: Num
    lo: Num | None
    hi: Num | None

    def parts(self) -> list[Any]:
        """'1.36× slower [1.30, 1.42]' (or faster), without the interval where there is none."""
        out: list[Any] = [self.fold, "\u00d7 slower" if self.slower else "\u00d7 faster"]
        if self.lo is not None:
            out += [" [", self.lo, ", ", self.hi, "]"]
        return out


# =========================================================================== archive


@dataclass
class Archive:
    root: Path
    out: Path
    data: dict[str, list[dict[str, Any]]]
    csv: dict[str, str]  # table -> CSV path relative to out
    notes: list[str]
    files: dict[str, Path]  # manifest/plan/ledger/seal -> path when present

    def has(self, name: str) -> bool:
        return name in self.data

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self.data.get(name, [])

    def src(self, name: str) -> str:
        return self.csv[name]


def rel_path(path: Path, out: Path) -> str:
    return Path(os.path.relpath(path, out)).as_posix()


def load_archive(
    results_dir: str | Path, out_dir: str | Path | None = None, *, reader: Reader | None = None, seal: bool = True
) -> Archive:
    """The tables and records of a results folder or archive, for the report written into ``out_dir``.

    Each table is read as its CSV copy typed by its spec (:func:`refspec_check.table_specs.read_csv_records`),
    as ``report/check.py`` does when it renders the report again, unless ``reader`` reads it otherwise (the
    pipeline reads the Parquet table: the same records); ``seal=False`` leaves out a ``SEAL.dsse.json``
    present in the folder (an archive's own seal, which did not exist when its report was rendered)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise NotAnArchive(f"results folder {root} not found")
    read = reader or read_csv_records
    out = Path(out_dir) if out_dir is not None else root
    data, csv, notes, files = {}, {}, [], {}
    for name in TABLES:
        pq = find_table(name, root)
        cp = find_table(name, root, ext="csv")
        if pq is None and cp is None:
            continue
        if pq is None:
            notes.append(f"{cp.name} has no Parquet table next to it; not used")
            continue
        if cp is None:
            notes.append(f"{pq.name} has no CSV copy; not used (the checker reads the CSV)")
            continue
        data[name] = read(name, root)
        csv[name] = rel_path(cp, out)
    for key, fname in (
        ("manifest", "manifest.json"),
        ("plan", "plan.json"),
        ("ledger", "ledger.jsonl"),
        ("seal", "SEAL.dsse.json"),
    ):
        p = root / fname
        if p.is_file() and (seal or key != "seal"):
            files[key] = p
    if not data:
        raise NotAnArchive(f"{root}: no result table found (looked for <table>.parquet + .csv in it and in tables/)")
    return Archive(root=root, out=out, data=data, csv=csv, notes=notes, files=files)


def read_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def bootstrap_settings(plan: Any) -> dict[str, Any]:
    """seed/draws/threshold from plan.json: ``bootstrap: {seed, draws, threshold}`` or top-level keys."""
    out: dict[str, Any] = {}
    if not isinstance(plan, dict):
        return out
    b = plan.get("bootstrap")
    for k in ("seed", "draws", "threshold"):
        if isinstance(b, dict) and k in b:
            out[k] = b[k]
        elif f"bootstrap_{k}" in plan:
            out[k] = plan[f"bootstrap_{k}"]
    return out
