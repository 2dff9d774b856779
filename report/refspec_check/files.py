"""The files of a sealed archive and the records in them: a closed world. A file a reader would open
as a document (``campaigns/*/summary.txt``, a README, notes, another PDF or page) that nothing
checks is a mismatch: the seal proves who wrote it, not that it says what the tables say. So is a
data record outside the archive's format (``refspec_check.contract``, "the archive's data
records"): a file, a table, a column, a key of numbers.json or a ledger record of a kind or with a
key the format does not declare. Extra data can never make a text of the report acceptable
(``bound.Records`` reads labels from the declared records only); this check says where it is.

The format (anc/report.md): the report (``report.html``, ``report.tex``, ``report.pdf``,
``numbers.json`` in the archive or its ``report/`` folder) and data records: the tables
(``tables/NAME.csv`` and ``.parquet``, with their columns), the run's plan, manifest and ledger,
a campaign's records (``campaigns/[FAMILY/]NAME/``), a comparison's carried inputs (``inputs/a``,
``inputs/b``) and the seal. A results folder checked before sealing (``--unsealed``) also holds
the operator's files (logs, summaries) and is not held to this.
"""

from __future__ import annotations

import csv
import os

from refspec_check import jsonio
from refspec_check.contract import (
    CAMPAIGN_RECORDS,
    COMPARE_COLUMNS,
    COMPARED_INPUTS,
    COMPARED_RECORDS,
    COMPARED_TABLES,
    LEDGER_KEYS,
    LEDGER_KINDS,
    NUMBER_KEYS,
    NUMBERS_KEYS,
    PROVENANCE_KEYS,
    RUN_RECORDS,
    TABLE_NAMES,
    ledger_kind,
    posix_rel,
    table_columns,
)
from refspec_check.problems import Checker

REPORT_FILES = ("report.html", "report.tex", "report.pdf", "numbers.json")
DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
# the empty marker Snakemake writes into a folder it made as a rule's output (the sealed archive):
# it holds nothing a reader could read, and a marker with content is refused like any other file
EMPTY_MARKERS = (".snakemake_timestamp",)
TABLE_SUFFIXES = (".csv", ".parquet")


def check_archive_files(c: Checker, report_dir: str, comparison: bool = False) -> None:
    """Every file of a sealed archive (``c.tree``) is a report file of ``report_dir`` or a data record
    of the format (``declared_record``), and the records hold only what the format declares
    (``check_data_records``). ``comparison``: a comparison archive (refspec compare)."""
    if "SEAL.dsse.json" not in c.tree:
        return
    report = {posix_rel(os.path.join(report_dir, n), c.archive) for n in REPORT_FILES}
    for rel in sorted(c.tree):
        if rel in report:
            continue
        if rel.endswith(DATA_SUFFIXES):
            if not declared_record(rel, comparison):
                c.bad(
                    rel,
                    "a data record outside the archive's format (no table, plan, manifest, ledger or campaign "
                    "record of it)",
                )
            continue
        if os.path.basename(rel) in EMPTY_MARKERS and os.path.getsize(os.path.join(c.archive, rel)) == 0:
            continue
        c.bad(
            rel,
            "a file a reader can open that check.py does not check (a sealed archive holds its report and "
            "data records only; the campaign summaries stay in the results folder)",
        )
    check_data_records(c, report_dir, comparison)


def declared_record(rel: str, comparison: bool) -> bool:
    """Whether ``rel`` (relative to the archive, '/'-separated) is a data record of the format."""
    parts = rel.split("/")
    if rel == "SEAL.dsse.json" or rel in RUN_RECORDS:
        return True
    if parts[0] == "tables" and len(parts) == 2:
        name, ext = os.path.splitext(parts[1])
        return ext in TABLE_SUFFIXES and name in (COMPARE_COLUMNS if comparison else TABLE_NAMES)
    if parts[0] == "campaigns" and len(parts) in (3, 4):
        return parts[-1] in CAMPAIGN_RECORDS
    if comparison and parts[0] == "inputs" and len(parts) >= 3 and parts[1] in COMPARED_INPUTS:
        inner = parts[2:]
        if len(inner) == 1:
            return inner[0] in COMPARED_RECORDS
        return len(inner) == 2 and inner[0] == "tables" and inner[1] in {f"{t}.csv" for t in COMPARED_TABLES}
    return False


def check_data_records(c: Checker, report_dir: str, comparison: bool) -> None:
    """What the records hold: each table's columns are its columns in the format; numbers.json holds
    only its keys, each number only a number's keys and the provenance only the values the report
    shows; each ledger record is of a declared kind with declared keys. Every problem is named with
    its file and the column, key or record."""
    for rel in sorted(c.tree):
        parts = rel.split("/")
        if parts[0] == "tables" and len(parts) == 2 and rel.endswith(".csv"):
            check_header(c, rel, parts[1][: -len(".csv")])
        elif parts[-1] == "ledger.jsonl" and parts[0] != "inputs":
            check_ledger_records(c, rel)
    check_numbers_keys(c, posix_rel(os.path.join(report_dir, "numbers.json"), c.archive))


def check_header(c: Checker, rel: str, name: str) -> None:
    """A table's header names each of its columns in the format once, and nothing else."""
    declared = table_columns(name)
    if not declared:
        return  # not a table of the format: declared_record says so
    try:
        with open(os.path.join(c.archive, rel), newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), None) or []
    except (OSError, UnicodeDecodeError, csv.Error):
        return  # unreadable: read_tables says so
    for col in dict.fromkeys(header):
        if col not in declared:
            c.bad(rel, f"column {col!r} is not a column of table {name!r} in the archive's format")
        elif header.count(col) > 1:
            c.bad(rel, f"column {col!r} is named {header.count(col)} times")


def check_ledger_records(c: Checker, rel: str) -> None:
    """Each record of a ledger is a JSON object of a declared kind (``LEDGER_KINDS``) whose keys are
    ledger keys (``LEDGER_KEYS``); a line that is not JSON is the ledger checks' finding."""
    try:
        with open(os.path.join(c.archive, rel), "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for i, raw in enumerate(lines, start=1):
        try:
            rec = jsonio.loads(raw)
        except (ValueError, RecursionError):
            continue
        where = f"{rel}:{i}"
        kind = ledger_kind(rec)
        if kind is None:
            c.bad(where, "a ledger record without a kind (a JSON object with a kind, event or type)")
            continue
        if kind not in LEDGER_KINDS:
            c.bad(where, f"ledger record of kind {kind!r}, which is no kind of the archive's format")
        for k in rec:
            if k not in LEDGER_KEYS:
                c.bad(where, f"ledger record ({kind}) has key {k!r}, which is no key of a ledger record")


def check_numbers_keys(c: Checker, rel: str) -> None:
    """numbers.json holds its keys (``NUMBERS_KEYS``), each number a number's (``NUMBER_KEYS``), and its
    provenance only values of ``PROVENANCE_KEYS``."""
    try:
        with open(os.path.join(c.archive, rel), encoding="utf-8") as f:
            doc = jsonio.load(f)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return  # read_report says so
    if not isinstance(doc, dict):
        return
    for k in doc:
        if k not in NUMBERS_KEYS:
            c.bad(rel, f"key {k!r} is not a key of numbers.json in the report format")
    prov = doc.get("provenance")
    for k in prov if isinstance(prov, dict) else ():
        if k not in PROVENANCE_KEYS:
            c.bad(f"{rel}: provenance.{k}", "not a provenance value of the report format")
    nums = doc.get("numbers")
    for j, n in enumerate(nums if isinstance(nums, list) else ()):
        for k in n if isinstance(n, dict) else ():
            if k not in NUMBER_KEYS:
                c.bad(f"{rel}: numbers[{j}]", f"key {k!r} is not a key of a number in the report format")
