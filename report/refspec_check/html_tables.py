"""The tables of report.html as rows of cells, for the checks that recompute a table shown only in the report
(the arms at a glance, ``arms.py``; the findings, ``findings.py``)."""

from __future__ import annotations

from html.parser import HTMLParser

NUM = "\x00"  # a checked number inside a text run


def norm(s: str) -> str:
    """White space collapsed."""
    return " ".join(s.split())


class TableText(HTMLParser):
    """The tables of report.html as rows of cells, each cell its parts (text, or a checked number id), and the
    other visible text runs (outside tables and figures) with their lines."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[dict] = []
        self.runs: list[tuple[str, int]] = []
        self._t: dict | None = None
        self._row: list | None = None
        self._cell: list | None = None
        self._num = False
        self._skip = 0  # inside <svg>, <style>, <title> (checked elsewhere)
        self._run: list[str] = []
        self._run_line = 0
        self._srcs: list[str] = []
        self._in_src = False

    def _flush(self):
        if self._run and norm("".join(self._run).replace(NUM, " ")):
            self.runs.append(("".join(self._run), self._run_line))
        self._run = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("svg", "style", "title", "script"):
            self._skip += 1
            return
        if tag == "span" and "data-num" in a:
            if self._cell is not None:
                self._cell.append(("num", a["data-num"]))
            else:
                if not self._run:
                    self._run_line = self.getpos()[0]
                self._run.append(NUM)
            self._num = True
            return
        if self._cell is None:
            self._flush()
        if tag == "p" and a.get("class") == "src":
            self._srcs, self._in_src = [], True
        if tag == "a" and self._in_src and a.get("data-src"):
            self._srcs.append(a["data-src"])
        if tag == "table":
            srcs = list(self._srcs)
            if a.get("data-src") and a["data-src"] not in srcs:
                srcs.append(a["data-src"])
            self._t = {"id": a.get("data-table") or "", "line": self.getpos()[0], "rows": [], "sources": srcs}
            self.tables.append(self._t)
        elif tag == "tr" and self._t is not None:
            self._row = []
            self._t["rows"].append((self.getpos()[0], self._row))
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            self._row.append((tag, self._cell))

    def handle_endtag(self, tag):
        if tag in ("svg", "style", "title", "script"):
            self._skip = max(0, self._skip - 1)
            return
        if tag == "span" and self._num:
            self._num = False
            return
        if tag in ("td", "th"):
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._t = None
        elif tag == "p":
            self._in_src = False
        if self._cell is None:
            self._flush()

    def handle_data(self, data):
        if self._skip or self._num:
            return
        if self._cell is not None:
            self._cell.append(("text", data))
            return
        if not self._run:
            self._run_line = self.getpos()[0]
        self._run.append(data)

    def close(self):
        super().close()
        self._flush()
