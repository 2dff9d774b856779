"""The files of a sealed archive: the report check.py checks, and data records. A file a reader
would open as a document (``campaigns/*/summary.txt``, a README, notes, another PDF or page) that
nothing checks is a mismatch: the seal proves who wrote it, not that it says what the tables say.

The format (anc/report.md): the report (``report.html``, ``report.tex``, ``report.pdf``,
``numbers.json`` in the archive or its ``report/`` folder) and data records (``.json``,
``.jsonl``, ``.csv``, ``.parquet``: tables, plans, ledgers, journals, the seal). A results folder
checked before sealing (``--unsealed``) also holds the operator's files (logs, summaries) and is
not held to this.
"""

from __future__ import annotations

import os

from refspec_check.contract import posix_rel
from refspec_check.problems import Checker

REPORT_FILES = ("report.html", "report.tex", "report.pdf", "numbers.json")
DATA_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
# the empty marker Snakemake writes into a folder it made as a rule's output (the sealed archive):
# it holds nothing a reader could read, and a marker with content is refused like any other file
EMPTY_MARKERS = (".snakemake_timestamp",)


def check_archive_files(c: Checker, report_dir: str) -> None:
    """Every file of a sealed archive (``c.tree``) is a report file of ``report_dir`` or a data record."""
    if "SEAL.dsse.json" not in c.tree:
        return
    report = {posix_rel(os.path.join(report_dir, n), c.archive) for n in REPORT_FILES}
    for rel in sorted(c.tree):
        if rel in report or rel.endswith(DATA_SUFFIXES):
            continue
        if os.path.basename(rel) in EMPTY_MARKERS and os.path.getsize(os.path.join(c.archive, rel)) == 0:
            continue
        c.bad(
            rel,
            "a file a reader can open that check.py does not check (a sealed archive holds its report and "
            "data records only; the campaign summaries stay in the results folder)",
        )
