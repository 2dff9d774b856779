"""What the section checks work on: the numbers the report must show (Expected) and one Context bundling
the findings, those numbers, the archive's tables and where the report names each table."""

from __future__ import annotations

from refspec_check.problems import Checker, fmt, values_equal


class Expected:
    """The numbers the report must show, as recomputed here."""

    def __init__(self, c: Checker):
        self.c = c
        self.items: dict[str, tuple] = {}  # id -> (value, source)

    def add(self, parts, value, source: str):
        nid = "|".join(str(p) for p in parts)
        if isinstance(value, bool):
            value = int(value)
        self.c.recomputed += 1
        old = self.items.get(nid)
        if old is not None and not values_equal(old[0], value):
            self.c.bad("check", f"number {nid} recomputed with two values {fmt(old[0])} and {fmt(value)}")
        self.items[nid] = (value, source)


class Context:
    """One archive's check in progress: ``c`` records the findings, ``E`` the numbers the report must show,
    ``tables`` the archive's tables by name (as read, ``c.tables``) and ``src(name)`` the path of a table as the
    report's ``data-src`` names it (relative to the report's folder)."""

    def __init__(self, c: Checker, tables: dict, src, E: Expected | None = None, partial: bool = False):
        self.c = c
        self.tables = tables
        # a carried subset of an archive's tables (a comparison's inputs): a table absent was not carried,
        # and the rows it would hold are not missing
        self.partial = partial
        self.src = src
        self.E = E if E is not None else Expected(c)
