"""The report rendered again: report.html, report.tex and numbers.json must be, byte for byte, what the
report's canonical rendering makes of the archive's sealed tables and records.

The rendering is the report's one renderer, carried by this checker (:mod:`refspec_check.render`, standard
library only, which the pipeline writes every report with). It reads each table's CSV copy, typed by the
table's spec (:mod:`refspec_check.table_specs`), plan.json, manifest.json and ledger.jsonl, and two values
that do not come from the tables: the signing key's fingerprint and the data seal's digest, both taken from
numbers.json and both checked against the archive's own seal (``provenance.check_data_seal``). Every number
the rendering shows is recomputed by the checker's own code (``numbers.check_numbers`` and the section
checks), so what a reader sees is the checker's numbers in the one layout the tables give: a changed word,
row, order, style, figure or line of report.tex is a difference of bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from refspec_check import jsonio
from refspec_check.problems import Checker
from refspec_check.render.comparison import comparison_files
from refspec_check.render.document import load_archive
from refspec_check.render.render import renderer_version, report_files
from refspec_check.render.sections.provenance import ShownSeal

RENDERED = ("report.html", "report.tex", "numbers.json")


def first_difference(have: bytes, want: bytes) -> str:
    """Where two renderings first differ: the line, and each side's text around the first differing character."""
    a = have.decode("utf-8", "replace").split("\n")
    b = want.decode("utf-8", "replace").split("\n")
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            j = next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            lo = max(0, j - 40)
            return f"line {i + 1}: the archive has {x[lo : j + 60]!r}, the tables give {y[lo : j + 60]!r}"
    if len(a) != len(b):
        n = min(len(a), len(b))
        return f"the archive has {len(a)} lines, the tables give {len(b)} (from line {n + 1} on)"
    return "the bytes differ"  # only a line ending or encoding detail


def _where(c: Checker, report_dir: str) -> str:
    where = os.path.relpath(report_dir, c.archive).replace(os.sep, "/")
    return "" if where == "." else where + "/"


def _compare(c: Checker, report_dir: str, render: Callable[[], dict[str, bytes]]) -> None:
    """Each rendered file of ``report_dir`` against ``render()`` (name -> bytes); the problem names the file."""
    where = _where(c, report_dir)
    try:
        files = render()
    except Exception as e:  # records the rendering cannot read: the section checks name the file
        c.bad(f"{where}report.html", f"the sealed tables cannot be rendered ({type(e).__name__}: {e})")
        return
    for name in RENDERED:
        c.compared += 1
        path = os.path.join(report_dir, name)
        try:
            with open(path, "rb") as f:
                have = f.read()
        except OSError as e:
            c.bad(where + name, f"cannot be read to compare with the canonical rendering ({e})")
            continue
        if have == files[name]:
            c.matched += 1
        else:
            c.bad(
                where + name,
                "differs from the canonical rendering of the sealed tables, " + first_difference(have, files[name]),
            )


def rendered_by(report_dir: str) -> str | None:
    """The renderer version numbers.json records (None: not recorded, or not readable here)."""
    try:
        with open(os.path.join(report_dir, "numbers.json"), encoding="utf-8") as f:
            v = jsonio.load(f).get("renderer")
    except (OSError, ValueError, AttributeError):
        return None
    return v if isinstance(v, str) else None


def version_skew(c: Checker, report_dir: str) -> bool:
    """Whether the archive was rendered by another version of the renderer than this checker carries:
    said plainly as unreadable here (exit 2, "use the checker of X"), not as tampering."""
    have = rendered_by(report_dir)
    if have is None:
        return False
    want = renderer_version()
    if have == want:
        return False
    c.unread(
        _where(c, report_dir) + "numbers.json",
        f"rendered by renderer {have[:16]}, this checker renders {want[:16]}: check it with the checker of "
        f"{have[:16]} (the repository's report/ of the release that rendered it)",
    )
    return True


def check_rendering(c: Checker, report_dir: str, prov: dict) -> None:
    """report.html, report.tex and numbers.json of a run's archive equal the rendering of its tables
    (rendered by this checker's renderer version; another version is said as such: :func:`version_skew`)."""
    if version_skew(c, report_dir):
        return
    fp = prov.get("pubkey_fingerprint") if isinstance(prov.get("pubkey_fingerprint"), str) else None
    ds = prov.get("data_seal_sha256")

    def render() -> dict[str, bytes]:
        a = load_archive(c.archive, report_dir, seal="seal_sha256" in prov)
        return report_files(a, fp, ShownSeal(ds) if isinstance(ds, str) else None)

    _compare(c, report_dir, render)


def check_comparison_rendering(c: Checker, report_dir: str, compares: dict, fmt: str) -> None:
    """The same of a comparison archive: its tables, plan.json and manifest.json, and the compared archives
    as its seal names them (``compares``)."""
    _compare(c, report_dir, lambda: comparison_files(Path(c.archive), compares, fmt))
