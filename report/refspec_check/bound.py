"""Every visible word of report.html bound to what the archive says (anc/report.md, "What a reader sees").

A report is a sequence of visible text nodes. Each one must be one of three things:

* a **checked number** (``<span data-num>``, :mod:`refspec_check.numbers`), shown in the precision the
  report format pins for its column (:data:`NUMBER_FORMATS`: the text is exactly
  ``format(value, fmt)``, so "1 [1, 2]" for 1.402596 [1.295839, 1.534103] is refused);
* a **label**: a value of the archive row the text belongs to (an arm, a task, a comparison, a verdict
  as :data:`DISPLAY` writes it, a column name), bound to that row;
* **fixed text of the report format**, pinned in ``format.json`` (:data:`FORMAT_TEXT`: every string of
  the renderer's source; tests keep the two in step).

Binding. Text of a table cell belongs to the row of the checked number that follows it in the cell (text
after the last number belongs to that last number's row); a cell without numbers belongs to every row the
numbers of its table row come from, and a table row without numbers to the one record of the table's
sources that explains all its cells. A header cell belongs to the rows of the numbers below it. A
number's row is the CSV row of its source whose key columns are the number's ``row`` in numbers.json,
and the number's id names that row (its parts are the row's key values). So a verdict changed
("machine noise too high" to "exceeds"), two arm labels swapped, a ratio label inverted ("R/M3" to
"M3/R") or two checked spans moved between rows leave text that no row holds, and are refused with their
line. Label vocabulary (display texts, every value of the archive's tables) is never fixed text: a
verdict word is only accepted where its row says it.

Text outside tables (titles, introductions, captions, notes) is fixed text, checked numbers and names
the archive holds. The segmentation is a dynamic programme over the characters of a text run: position
``i`` is reachable when a fragment or label ends there; the run is bound when its end is reachable
(white space is free between segments).
"""

from __future__ import annotations

import csv
import functools
import json
import os
from collections import defaultdict
from html.parser import HTMLParser

from refspec_check.contract import (
    LEDGER_KEYS,
    LEDGER_KINDS,
    LEDGER_SHOWN,
    PROVENANCE_KEYS,
    ledger_kind,
    posix_rel,
    table_columns,
)
from refspec_check.divergence import DIVERGENCE_TEXT
from refspec_check.problems import Checker
from refspec_check.report import Report

_HERE = os.path.dirname(os.path.abspath(__file__))

with open(os.path.join(_HERE, "format.json"), encoding="utf-8") as _f:
    _FORMAT = json.load(_f)

FORMAT_TEXT: frozenset[str] = frozenset(_FORMAT["fragments"])
NUMBER_FORMATS: dict[str, str] = dict(_FORMAT["formats"])

# how a verdict column's code is written (refspec.reporting.sections: timing.DECISION_TEXT, noise.VERDICT_TEXT;
# a first divergence's class: refspec.core.divergence.DIVERGENCE_TEXT)
DISPLAY = {
    **DIVERGENCE_TEXT,
    "too_few_sessions": "too few sessions",
    "noise_too_high": "machine noise too high",
    "ok": "A/A ok",
    "biased": "A/A biased",
    "unqualified": "A/A not qualified",
}

NUM = "\x00"  # a checked number inside a text run

# key columns a campaign's ledger record may leave out (its folder names the campaign, the campaign one family)
IMPLIED = ("campaign", "family")


def norm(s: str) -> str:
    return " ".join(s.split())


# a refused arm's reason as the qualification table quotes it (refspec.reporting.sections.qualification)
REFUSAL_PREFIX = "worker start failed: "
QUOTE_CHARS = 400


@functools.cache
def value_texts(v: str) -> frozenset[str]:
    """The ways the report writes one cell: as stored, its display text, a boolean in lower case, a refusal
    reason without its prefix and cut to :data:`QUOTE_CHARS` characters."""
    raw = [v]
    if v.startswith(REFUSAL_PREFIX):
        raw.append(v[len(REFUSAL_PREFIX) :])
    raw += [r[:QUOTE_CHARS] + " \u2026" for r in list(raw) if len(r) > QUOTE_CHARS]
    out = {norm(r) for r in raw if norm(r)}
    v = norm(v)
    if " " in v and all(x.lstrip("-").isdigit() for x in v.split()):  # an integer list cell (argmax tokens)
        out.add("/".join(v.split()))
    if v in DISPLAY:
        out.add(DISPLAY[v])
    if v in ("True", "False"):
        out.add(v.lower())
    return frozenset(out)


class Records:
    """The archive's rows, read as the report shows them, from the records its format declares only
    (``refspec_check.contract``, "the archive's data records"; ``files`` refuses the rest): each table
    of the format (by its path relative to the report) with its declared columns, each ledger's records
    of a declared kind with declared keys, read at the keys a report shows (``LEDGER_SHOWN``), and the
    provenance values of numbers.json. No other document, key or column is read: extra data can never
    make a text acceptable."""

    def __init__(self, c: Checker, rep: Report):
        self.csv: dict[str, list[dict[str, str]]] = {}
        tdir = os.path.join(c.archive, "tables")
        if os.path.isdir(tdir):
            for fn in sorted(os.listdir(tdir)):
                cols = table_columns(fn[: -len(".csv")]) if fn.endswith(".csv") else ()
                if cols:
                    rel = os.path.relpath(os.path.join(tdir, fn), rep.dir).replace(os.sep, "/")
                    try:
                        with open(os.path.join(tdir, fn), newline="", encoding="utf-8") as f:
                            self.csv[rel] = [{k: v for k, v in r.items() if k in cols} for r in csv.DictReader(f)]
                    except (OSError, UnicodeDecodeError, csv.Error) as e:  # a finding, not a crash
                        c.unread(posix_rel(os.path.join(tdir, fn), c.archive), f"cannot read ({e})")
        self.docs: list[dict[str, str]] = []
        prov = rep.numbers_doc.get("provenance")
        if isinstance(prov, dict):
            self._walk({k: v for k, v in prov.items() if k in PROVENANCE_KEYS})
        for rel in sorted(c.tree):
            parts = rel.split("/")
            if parts[-1] != "ledger.jsonl" or not (len(parts) == 1 or parts[0] == "campaigns"):
                continue
            lines = self.csv.setdefault(posix_rel(os.path.join(c.archive, rel), rep.dir), [])
            with open(os.path.join(c.archive, rel), encoding="utf-8", errors="replace") as f:
                for raw in f:
                    try:
                        rec = json.loads(raw)
                    except (ValueError, RecursionError):
                        continue
                    if ledger_kind(rec) in LEDGER_KINDS and all(k in LEDGER_KEYS for k in rec):
                        lines.append(
                            {
                                k: "" if rec[k] is None else str(rec[k])
                                for k in LEDGER_SHOWN
                                if k in rec and not isinstance(rec[k], (dict, list))
                            }
                        )
        # the files of the archive (the report names its sources by path; check_html checks every link)
        self.paths: set[str] = {
            os.path.relpath(os.path.join(c.archive, f), rep.dir).replace(os.sep, "/") for f in c.tree
        }
        self.names: set[str] = set()
        for rows in self.csv.values():
            for r in rows:
                for v in r.values():
                    if v:
                        self.names |= value_texts(v)
        for d in self.docs:
            for v in d.values():
                self.names |= value_texts(v)
        self._key_index: dict[tuple, list[dict[str, str]]] = {}
        self._pair_index: dict | None = None

    def _walk(self, obj, depth: int = 0) -> None:
        if depth > 12:
            return
        if isinstance(obj, dict):
            rec = {}
            for k, v in obj.items():
                if isinstance(v, (dict, list)):
                    self._walk(v, depth + 1)
                elif v is not None and not isinstance(v, bool):
                    rec[str(k)] = str(v)
            if rec:
                self.docs.append(rec)
        elif isinstance(obj, list):
            scalars = [str(x) for x in obj if isinstance(x, (str, int, float)) and not isinstance(x, bool)]
            if scalars:
                self.docs.append({"": ", ".join(scalars), **{str(i): s for i, s in enumerate(scalars)}})
            for x in obj:
                if isinstance(x, (dict, list)):
                    self._walk(x, depth + 1)

    def rows_of(self, source: str, key: dict) -> list[dict[str, str]]:
        """The CSV rows of ``source`` whose columns equal ``key`` (as the CSV writes them)."""
        want = tuple(sorted((str(k), _csv_text(v)) for k, v in key.items()))
        ik = (source, want)
        if ik not in self._key_index:
            self._key_index[ik] = [
                r for r in self.csv.get(source, []) if all(r.get(k) == v or norm(r.get(k) or "") == v for k, v in want)
            ]
        return self._key_index[ik]

    def related(self, key: dict) -> list[dict[str, str]]:
        """The rows of every CSV (and ledger) that hold all of ``key``'s columns with its values (a refused
        arm's reason in requests.csv or its campaign's ledger beside its qualification counts)."""
        want = tuple(sorted((str(k), _csv_text(v)) for k, v in key.items()))
        ik = ("*", want)
        if ik not in self._key_index:
            # a ledger line may leave out the campaign and family only beside a key of its own (an arm)
            own = [kv for kv in want if kv[0] not in IMPLIED]
            found = []
            if want:
                pool = min((self._pairs().get(kv, []) for kv in own or want), key=len)
                found = [
                    r
                    for src, r in pool
                    if all(
                        norm(r[k] or "") == v if k in r else (bool(own) and src.endswith(".jsonl") and k in IMPLIED)
                        for k, v in want
                    )
                ]
            self._key_index[ik] = found
        return self._key_index[ik]

    def _pairs(self) -> dict[tuple[str, str], list[tuple[str, dict]]]:
        """(column, value) -> the rows holding it, over every table read."""
        if self._pair_index is None:
            idx: dict[tuple[str, str], list] = defaultdict(list)
            for src, rows in self.csv.items():
                for r in rows:
                    for k, v in r.items():
                        if v:
                            idx[(k, norm(v))].append((src, r))
            self._pair_index = idx
        return self._pair_index


def _csv_text(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if v is None:
        return ""
    return norm(str(v))


# the pairs a report writes as one label "a/b" (a ratio's numerator over its denominator, an A/A twin over
# its arm, a pair of tokens, query over key-value heads)
PAIRS = (("numerator", "denominator"), ("twin", "arm"), ("token_a", "token_b"), ("n_head", "n_head_kv"))


_RECORD_LABELS: dict[int, tuple[dict, frozenset[str]]] = {}


def labels_of(records: list[dict[str, str]]) -> set[str]:
    """The labels the rows ``records`` give the text beside them: their values as written, their
    column names and their pair labels."""
    out: set[str] = set()
    for r in records:
        hit = _RECORD_LABELS.get(id(r))
        if hit is None or hit[0] is not r:
            hit = (r, frozenset(_record_labels(r)))
            _RECORD_LABELS[id(r)] = hit
        out |= hit[1]
    return out


def _record_labels(r: dict[str, str]) -> set[str]:
    out: set[str] = set()
    for a, b in PAIRS:
        if r.get(a) and r.get(b):
            out.add(f"{norm(r[a])}/{norm(r[b])}")
    if r.get("comparison") and r["comparison"].count("/") == 1:  # an E2 comparison's two layouts ("PQ is ...")
        out.update(x for x in map(norm, r["comparison"].split("/")) if x)
    for k, v in r.items():
        if k:
            out.add(k)
        if v:
            out |= value_texts(v)
    return out


class Segmenter:
    """Whether a text run is a sequence of fixed fragments and labels (white space free between them)."""

    def __init__(self, fragments: set[str]):
        self.by_first: dict[str, list[str]] = defaultdict(list)
        for s in fragments:
            if s:
                self.by_first[s[0]].append(s)

    def bound(self, text: str, labels: set[str]) -> bool:
        """Whether ``text`` segments into fragments and ``labels``; two labels joined by a slash ("C3/M3")
        are not a segmentation: a ratio's or a pair's label is one label of its row (:data:`PAIRS`)."""
        text = norm(text)
        n = len(text)
        if n == 0:
            return True
        extra: dict[str, list[str]] = defaultdict(list)
        for s in labels:
            if s:
                extra[s[0]].append(s)
        # states reached at each position: F after fixed text, L after a label, S after "label /"
        reach: list[set[str]] = [set() for _ in range(n + 1)]
        reach[0].add("F")
        for i in range(n):
            st = reach[i]
            if not st:
                continue
            ch = text[i]
            if ch == " ":
                reach[i + 1] |= st
                continue
            for s in self.by_first.get(ch, ()):
                if text.startswith(s, i):
                    reach[i + len(s)] |= {"S" if x in ("L", "S") and s == "/" else "F" for x in st}
            if st - {"S"}:
                for s in extra.get(ch, ()):
                    if text.startswith(s, i):
                        reach[i + len(s)].add("L")
        return bool(reach[n])


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


def _chunks(parts: list) -> list[tuple[str, str | None]]:
    """A cell's text chunks, each with the number it belongs to: the next one, else the last one."""
    out, buf, last = [], [], None
    for kind, v in parts:
        if kind == "num":
            out.append(("".join(buf), v))
            buf, last = [], v
        else:
            buf.append(v)
    out.append(("".join(buf), last))
    return [(t, n) for t, n in out if norm(t)]


class Binder:
    """The rows a report's numbers come from, and the check of each visible text run against them."""

    def __init__(self, c: Checker, rep: Report):
        self.c, self.rep = c, rep
        self.R = Records(c, rep)
        self.stated = {
            n["id"]: n
            for n in rep.numbers_doc.get("numbers", [])
            if isinstance(n, dict) and isinstance(n.get("id"), str)
        }
        vocabulary = self.R.names | set(DISPLAY.values()) | set(DISPLAY)
        self.seg = Segmenter({f for f in FORMAT_TEXT if f not in vocabulary})
        self.seg_names = Segmenter(set(FORMAT_TEXT))
        self._labels: dict[str, set[str]] = {}

    def records(self, nid: str) -> list[dict[str, str]]:
        n = self.stated.get(nid)
        if n is None or not isinstance(n.get("row"), dict) or not isinstance(n.get("source"), str):
            return []
        return self.R.rows_of(n["source"], n["row"])

    def labels(self, nid: str) -> set[str]:
        """What text beside number ``nid`` may say: the values and columns of its row, and of the rows of other
        tables with the same key."""
        if nid not in self._labels:
            n = self.stated.get(nid) or {}
            rel = self.R.related(n["row"]) if isinstance(n.get("row"), dict) else []
            self._labels[nid] = labels_of(self.records(nid)) | labels_of(rel)
        return self._labels[nid]

    def refuse(self, line: int, table: str, text: str, why: str) -> None:
        self.c.bad(
            f"{self.rep.html_rel}:{line}",
            f"text {norm(text)[:90]!r} in table {table!r} is {why}",
        )

    def check_number_row(self, nid: str, line: int, table: str) -> bool:
        """A number's stated row names one CSV row of its source, and its id names that row."""
        n = self.stated.get(nid)
        if n is None:
            return False
        recs = self.records(nid)
        if not recs:
            self.c.bad(
                f"{self.rep.html_rel}:{line} data-num={nid!r}",
                f"its row {n.get('row')!r} is no row of {n.get('source')!r}",
            )
            return False
        framed = f"|{nid}|"
        named = {k: v for k, v in n["row"].items() if f"|{_csv_text(v)}|" in framed}
        unnamed = {k: v for k, v in n["row"].items() if k not in named and isinstance(v, str)}
        narrowed = unnamed and len(self.R.rows_of(n["source"], n["row"])) != len(
            self.R.rows_of(n["source"], {k: v for k, v in n["row"].items() if k not in unnamed})
        )
        if (n["row"] and not named) or narrowed:
            self.c.bad(
                f"{self.rep.html_rel}:{line} data-num={nid!r}",
                f"its id does not name its row {n.get('row')!r} (table {table!r})",
            )
            return False
        return True

    def check_table(self, t: dict) -> None:
        tid = t["id"]
        body = [(line, cells) for line, cells in t["rows"] if any(tag == "td" for tag, _p in cells)]
        heads = [(line, cells) for line, cells in t["rows"] if all(tag == "th" for tag, _p in cells)]
        column_recs: dict[int, list] = defaultdict(list)
        source_recs = [r for s in t["sources"] for r in self.R.csv.get(s, [])]
        if tid != "summary":
            self.check_grid(tid, body)
        for line, cells in body:
            ids = [v for _tag, parts in cells for kind, v in parts if kind == "num"]
            for nid in ids:
                self.check_number_row(nid, line, tid)
            if not ids:
                self.bind_free_row(line, tid, cells, source_recs)
                continue
            row_labels = set().union(*(self.labels(nid) for nid in ids))
            for j, (_tag, parts) in enumerate(cells):
                cell_ids = [v for kind, v in parts if kind == "num"]
                for nid in cell_ids:
                    column_recs[j] += self.records(nid)
                if not cell_ids:
                    text = "".join(v for _k, v in parts)
                    if not self.seg.bound(text, row_labels) and not self.seg.bound(
                        text, row_labels | self.study_labels(ids)
                    ):
                        self.refuse(line, tid, text, "neither the report format's text nor a value of its row")
                    continue
                for text, nid in _chunks(parts):
                    if not self.seg.bound(text, self.labels(nid)):
                        self.refuse(
                            line, tid, text, f"neither the report format's text nor a value of the row of {nid!r}"
                        )
        for line, cells in heads:
            for j, (_tag, parts) in enumerate(cells):
                text = "".join(v for _k, v in parts)
                recs = column_recs.get(j) or source_recs
                if not self.seg_names.bound(text, labels_of(recs)):
                    self.refuse(line, tid, text, "a header neither of the report format nor a value of its column")

    def study_labels(self, ids: list[str]) -> set[str]:
        """What a cell without numbers may also say: the A/A control rows (noise.csv) of the campaign and
        family of its table row's numbers (the control beside a ratio, shown without numbers when it has
        no value)."""
        out: set[str] = set()
        noise = [s for s in self.R.csv if s.endswith("noise.csv")]
        for nid in ids[:1]:
            row = (self.stated.get(nid) or {}).get("row")
            if isinstance(row, dict) and noise:
                sub = {k: row[k] for k in ("campaign", "family") if k in row}
                if sub:
                    out |= labels_of(self.R.rows_of(noise[0], sub))
        return out

    def keys_of(self, nid: str) -> dict[str, str]:
        """The key items of a number's row that its id names (other items of the row are attributes)."""
        n = self.stated.get(nid) or {}
        row = n.get("row") if isinstance(n.get("row"), dict) else {}
        framed = f"|{nid}|"
        return {f"{n.get('source')}:{k}": _csv_text(v) for k, v in row.items() if f"|{_csv_text(v)}|" in framed}

    def check_grid(self, tid: str, body: list) -> None:
        """Outside the headline, each key a table's numbers name is constant along its table row (the row's
        task, say) or down its column (a pivot's arm): a number moved to another row breaks both."""
        grid = {}
        for i, (_line, cells) in enumerate(body):
            for j, (_tag, parts) in enumerate(cells):
                for kind, v in parts:
                    if kind == "num":
                        grid.setdefault((i, j), []).append(self.keys_of(v))
        for (i, j), keys in grid.items():
            for key in keys:
                for k, v in key.items():
                    along_row = {kk[k] for (ii, _jj), ks in grid.items() if ii == i for kk in ks if k in kk}
                    down_col = {kk[k] for (_ii, jj), ks in grid.items() if jj == j for kk in ks if k in kk}
                    if len(along_row) > 1 and len(down_col) > 1:
                        self.c.bad(
                            f"{self.rep.html_rel}:{body[i][0]}",
                            f"table {tid!r}: a number of {k.split(':', 1)[1]} {v!r} sits in a row and a column that "
                            f"hold other {k.split(':', 1)[1]} values ({sorted(along_row)[:3]} ...)",
                        )
                        return

    def bind_free_row(self, line: int, tid: str, cells: list, source_recs: list) -> None:
        """A row without numbers: one record explains every cell: a record of the table's sources, a
        provenance value, or else any declared row of the archive that holds one of the cells' texts
        (the glossary's row "R_prod" is bound by a row whose arm is R_prod: a term the archive names is
        one of its labels, never fixed text)."""
        texts = ["".join(v for _k, v in parts) for _tag, parts in cells]
        for rec in source_recs + self.R.docs:
            labs = labels_of([rec])
            if all(self.seg.bound(t, labs) for t in texts):
                return
        joined = " ".join(texts)
        for rows in self.R.csv.values():
            for rec in rows:
                if any(v and v in joined for v in rec.values()) and all(
                    self.seg.bound(t, labels_of([rec])) for t in texts
                ):
                    return
        bad = [t for t in texts if not self.seg.bound(t, labels_of(source_recs))]
        self.refuse(line, tid, " | ".join(bad or texts), "a row no single record of the archive holds")

    def check_runs(self, runs: list[tuple[str, int]]) -> None:
        for text, line in runs:
            for piece in text.split(NUM):
                if not self.seg_names.bound(piece, self.R.names | self.R.paths):
                    self.c.bad(
                        f"{self.rep.html_rel}:{line}",
                        f"text {norm(piece)[:90]!r} is neither the report format's text nor a name of the archive",
                    )


def html_rows(tp: TableText) -> list[tuple[str, tuple[str, ...]]]:
    """The HTML's table rows, each as one line of text (``#`` for a checked number, cells space-separated)
    with the ids of its numbers in order."""
    rows = []
    for t in tp.tables:
        for _line, cells in t["rows"]:
            text, ids = [], []
            for _tag, parts in cells:
                for kind, v in parts:
                    if kind == "num":
                        text.append("#")
                        ids.append(v)
                    else:
                        text.append(v)
                text.append(" ")
            rows.append((norm("".join(text)), tuple(ids)))
    return rows


def tex_visible(s: str) -> str:
    """Text as report.tex shows it (refspec.reporting.tex.tex_escape: dashes as '---' and '--', other
    characters than printable ASCII and the escaped symbols as '?')."""
    out = []
    for ch in s:
        if ch in "\u2014\u2013":
            out.append("---" if ch == "\u2014" else "--")
        elif ch in "\u00a7\u00b7\u00d7\u2264\u2265" or 32 <= ord(ch) <= 126:
            out.append(ch)
        else:
            out.append(" " if ord(ch) < 32 else "?")
    return "".join(out)


def check_tex_rows(c: Checker, rep: Report, tp: TableText) -> None:
    """report.tex says what report.html says: each table row of report.tex (a line with cells ``&``
    ending in ``\\\\``) is one row of report.html, with the same text and the same numbers in the same
    places, and every row of report.html is in report.tex. The HTML rows are bound (``check_bound_text``),
    so a TeX row equal to one is bound too."""
    if rep.tex is None:
        return
    want: dict[tuple, int] = defaultdict(int)
    for text, ids in html_rows(tp):
        want[(norm(tex_visible(text)), ids)] += 1
    ids_at: dict[int, list[str]] = defaultdict(list)
    for nid, _text, line in rep.tex.nums:
        ids_at[line].append(nid)
    with open(os.path.join(rep.dir, "report.tex"), encoding="utf-8") as f:
        src = f.read().split("\n")
    for text, line in rep.tex.text:
        raw = src[line - 1] if 0 < line <= len(src) else ""
        if "&" not in raw or not raw.rstrip().endswith("\\\\"):
            continue
        got = (norm(text), tuple(ids_at.get(line, [])))
        c.identities += 1
        if want.get(got, 0) <= 0:
            c.bad(f"{rep.tex_rel}:{line}", f"table row {norm(text)[:90]!r} is no row of report.html")
            continue
        want[got] -= 1
    for (r, _ids), n in want.items():
        if n > 0:
            c.bad(rep.tex_rel, f"row {r[:90]!r} of report.html is not in report.tex")


def check_bound_text(c: Checker, rep: Report) -> None:
    """Every visible text run of report.html bound (see the module's docstring), and report.tex's table
    rows equal to report.html's (``check_tex_rows``)."""
    tp = TableText()
    tp.feed(rep.html_text)
    tp.close()
    b = Binder(c, rep)
    for t in tp.tables:
        b.check_table(t)
        c.identities += 1
    b.check_runs(tp.runs)
    check_tex_rows(c, rep, tp)


def check_precision(c: Checker, where: str, nid: str, text: str, value) -> None:
    """A checked number's text is its value in the precision the report format pins for its column."""
    col = nid.rsplit("|", 1)[-1]
    fmt_ = NUMBER_FORMATS.get(col)
    if fmt_ is None:
        c.bad(where, f"column {col!r} has no precision in the report format")
        return
    try:
        want = format(int(value) if fmt_ == "d" and float(value).is_integer() else value, fmt_)
    except (ValueError, TypeError):
        c.bad(where, f"value {value!r} cannot be written as {fmt_!r}")
        return
    if text != want:
        c.bad(where, f"shows {text!r}; the report format writes it {want!r} (precision {fmt_!r})")
