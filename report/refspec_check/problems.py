"""The findings of a check: mismatches and unreadable inputs (Checker), the exit codes, and how a stated
value is compared with a recomputed one."""

from __future__ import annotations

import os

# what a sealed input of the wrong shape raises in a check (a list where an object belongs, a string
# where a number does, a nesting deeper than the stack): a mismatch of that check, never exit 70
MALFORMED = (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError)

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
        self.problems.append(printable(f"{where}: {msg}"))

    def unread(self, where: str, msg: str) -> None:
        self.unreadable.append(printable(f"{where}: {msg}"))

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


# bidirectional controls, which reorder what a terminal shows
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def printable(s: str) -> str:
    """A message as one line a reader can trust: control and bidirectional characters (a file name
    with a newline that would print a line of its own, "OK: ..." above the real verdict) escaped as
    ``\\xNN`` / ``\\uNNNN``."""
    if all(32 <= ord(ch) < 127 or (ord(ch) > 159 and ord(ch) not in _BIDI) for ch in s):
        return s
    return "".join(
        ch
        if 32 <= ord(ch) < 127 or (ord(ch) > 159 and ord(ch) not in _BIDI)
        else f"\\x{ord(ch):02x}"
        if ord(ch) < 256
        else f"\\u{ord(ch):04x}"
        for ch in s
    )


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
