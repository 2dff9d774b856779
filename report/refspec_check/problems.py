"""The findings of a check: mismatches and unreadable inputs (Checker), the exit codes, and how a stated
value is compared with a recomputed one."""

from __future__ import annotations

import os

EXIT_OK, EXIT_MISMATCH, EXIT_UNREADABLE = 0, 1, 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: the checker itself failed (an unexpected exception)

REL_TOL = 1e-12


class Unreadable(Exception):
    pass


class Checker:
    def __init__(self, archive: str, quiet: bool = False):
        self.archive = os.path.abspath(archive)
        self.quiet = quiet
        self.problems: list[str] = []
        self.unreadable: list[str] = []
        self.unchecked: dict[str, str] = {}  # archive file (relative) -> why check.py did not check it
        self.recomputed = 0  # numbers computed by this checker
        self.compared = 0  # comparisons of a stated number with a recomputed one
        self.matched = 0
        self.identities = 0
        self.files: set[str] = set()
        self.tables: dict = {}  # name -> CsvTable, as read
        self.tree: set[str] = set()  # regular files of the archive, relative, '/'-separated
        self.reproduces: str | None = None  # the archive a reproduction's seal names

    def bad(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    def unread(self, where: str, msg: str) -> None:
        self.unreadable.append(f"{where}: {msg}")

    def same(self, where: str, stated, expected, what: str = "") -> bool:
        """Compare a stated value with a recomputed one (numbers within REL_TOL * max(1, |recomputed|): 1e-12
        absolute below 1, relative above)."""
        self.compared += 1
        ok = values_equal(stated, expected)
        if ok:
            self.matched += 1
        else:
            self.bad(where, f"{what + ' ' if what else ''}{fmt(stated)} != recomputed {fmt(expected)}")
        return ok


def fmt(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if v is None:
        return "null"
    return repr(v) if isinstance(v, str) else str(v)


def values_equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return abs(float(a) - float(b)) <= REL_TOL * max(1.0, abs(float(b)))
    return a == b
