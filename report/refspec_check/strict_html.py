"""The report's strict HTML subset (anc/report.md): what report.html may hold, element by element."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from refspec_check import repertoire

# Elements and their attributes: exactly what the renderer writes. Anything else (another element,
# attribute or value, an inline ``style``, ``hidden``, an event handler, a comment, a second
# stylesheet) is refused with its line.
_NUM_ATTRS = frozenset({"data-num", "data-src"})

HTML_ELEMENTS = {
    "html": {"lang"},
    "head": set(),
    "meta": {"charset", "name", "content"},
    "title": set(),
    "style": set(),
    "body": set(),
    "main": set(),
    "nav": set(),
    "section": {"id"},
    "h1": set(),
    "h2": set(),
    "h3": {"id"},
    "p": {"class"},
    "code": set(),
    "a": {"href", "data-src"},
    "div": {"class"},
    "table": {"data-table", "data-src", "class"},
    "thead": set(),
    "tbody": set(),
    "tr": set(),
    "th": {"scope", "class"},
    "td": {"class", "title", "data-label"},
    "span": set(_NUM_ATTRS),
    "figure": {"id"},
    "figcaption": set(),
    "footer": set(),
    # a folded section: <details><summary><h2>title</h2></summary> ... </details>
    "details": set(),
    "summary": set(),
}

SVG_ELEMENTS = {
    "svg": {"xmlns", "viewbox", "role", "aria-label", "class"},
    "title": set(),
    "line": {"x1", "y1", "x2", "y2", "stroke", "stroke-width", "stroke-dasharray"},
    "rect": {"x", "y", "width", "height", "fill"},
    "circle": {"cx", "cy", "r", "fill"},
    "text": {"x", "y", "text-anchor", "font-size", "fill"},
}

VOID_ELEMENTS = {"meta"}

SVG_LEAVES = {"line", "rect", "circle"}

# the colours of the figures (svg.py's palette)
SVG_COLOURS = {
    "#7a4e9c",
    "#2c6db0",
    "#d2691e",
    "#6a8a3a",
    "#7f7f7f",
    "#b22222",
    "#d9d9d9",
    "#333333",
    "#4a7fb5",
    "#222",
}

_DECIMAL = r"-?\d+(?:\.\d+)?"

ATTR_VALUES = {
    "lang": re.compile(r"en"),
    "charset": re.compile(r"utf-8"),
    "scope": re.compile(r"col"),
    "class": re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?: [A-Za-z_][A-Za-z0-9_-]*)*"),
    "id": re.compile(r"[A-Za-z][A-Za-z0-9_-]*"),
    "data-table": re.compile(r"[A-Za-z][A-Za-z0-9_-]*"),
    "xmlns": re.compile(r"http://www\.w3\.org/2000/svg"),
    "viewbox": re.compile(r"0 0 \d+ \d+"),
    "role": re.compile(r"img"),
    "text-anchor": re.compile(r"start|middle|end"),
    "font-size": re.compile(r"\d+"),
    "stroke-dasharray": re.compile(r"4 3"),
    **{k: re.compile(_DECIMAL) for k in ("x", "y", "x1", "y1", "x2", "y2", "width", "height", "cx", "cy", "r")},
    "stroke-width": re.compile(_DECIMAL),
}

# the two meta elements the renderer writes (no refresh, no other http-equiv)
META_ALLOWED = ({"charset": "utf-8"}, {"name": "viewport", "content": "width=device-width, initial-scale=1"})

# sha256 of the one stylesheet (the <style> element refspec_check.render.page writes); a report
# with any other CSS is refused (tests/checker/test_report_strict.py keeps the two in step)
STYLESHEET_SHA256 = "172b357244e9bc55d8facf04f438233eee71fb3bf1023d3bc4a421658e2d7f9c"


class StrictHTML(HTMLParser):
    """Parse report.html against the subset, recording problems (line, what), the links, ids, the
    stylesheet and the visible text outside checked numbers."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems: list[tuple[int, str]] = []
        self.links: list[tuple[str, str, int]] = []
        self.ids: dict[str, int] = {}
        self.hrefs: list[tuple[str, int]] = []
        self.styles: list[str] = []
        # visible text outside checked numbers, one entry per run of text between tags (a checked
        # number inside the run reads as "#"): (text, line, context)
        self.text: list[tuple[str, int, str]] = []
        self._run: list[str] = []
        self._run_at: tuple[int, str] = (0, "")
        self.stack: list[tuple[str, int]] = []
        self._num: tuple | None = None
        self._buf: list[str] = []
        self._seen_doctype = False

    def bad(self, msg: str) -> None:
        self.problems.append((self.getpos()[0], msg))

    def _in(self, tag: str) -> bool:
        return any(t == tag for t, _l in self.stack)

    def handle_decl(self, decl):
        if decl.lower() != "doctype html" or self._seen_doctype or self.stack:
            self.bad(f"declaration <!{decl}> (only <!DOCTYPE html>, first)")
        self._seen_doctype = True

    def unknown_decl(self, data):
        self.bad(f"declaration <![{data[:30]}...]> is not in the report format")

    def handle_pi(self, data):
        self.bad("processing instruction is not in the report format")

    def handle_comment(self, data):
        self.bad("comment is not in the report format")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs, closed=True)

    def _flush(self) -> None:
        if self._run:
            self.text.append(("".join(self._run), *self._run_at))
            self._run = []

    def handle_starttag(self, tag, attrs, closed=False):
        line = self.getpos()[0]
        if not any(k == "data-num" for k, _v in attrs):
            self._flush()
        if not self._seen_doctype:
            self.bad("no <!DOCTYPE html> before the first element")
            self._seen_doctype = True
        if self._num is not None:
            self.bad(f"<{tag}> inside a checked number (data-num {self._num[0]!r}): a number has no nested element")
        in_svg = self._in("svg")
        allowed = SVG_ELEMENTS if (in_svg or tag == "svg") else HTML_ELEMENTS
        if tag == "title" and not in_svg and not (self.stack and self.stack[-1][0] == "head"):
            allowed = {}
        if tag not in allowed:
            self.bad(f"element <{tag}> is not in the report format")
        names = [k for k, _v in attrs]
        if len(set(names)) != len(names):
            self.bad(f"<{tag}> repeats an attribute")
        a = dict(attrs)
        for k, v in attrs:
            if k not in allowed.get(tag, ()):
                self.bad(f"attribute {k}= on <{tag}> is not in the report format")
                continue
            if v is None:
                self.bad(f"attribute {k} on <{tag}> has no value")
                continue
            for _l, msg in repertoire.problems(v):
                self.bad(f"{k}= on <{tag}>: {msg}")
            pat = ATTR_VALUES.get(k)
            if pat is not None and not pat.fullmatch(v):
                self.bad(f"{k}={v[:60]!r} on <{tag}> is not a value of the report format")
            if k in ("fill", "stroke") and v not in SVG_COLOURS:
                self.bad(f"{k}={v[:60]!r} on <{tag}> is not a colour of the figures")
        if tag == "meta" and a not in META_ALLOWED:
            self.bad(f"<meta {' '.join(f'{k}={v!r}' for k, v in attrs)}> is not in the report format")
        if tag == "style" and not (self.stack and self.stack[-1][0] == "head"):
            self.bad("<style> outside <head>")
        parent = self.stack[-1][0] if self.stack else ""
        if tag == "svg" and parent != "figure":
            self.bad(f"<svg> inside <{parent}>: a drawing is only a figure's (<figure><svg>)")
        if tag == "figure" and parent not in ("section", "details"):
            self.bad(f"<figure> inside <{parent}>: a figure stands in a section, not in a table cell or paragraph")
        if "id" in a and a["id"] is not None:
            if a["id"] in self.ids:
                self.bad(f"duplicate id {a['id']!r} (first on line {self.ids[a['id']]})")
            else:
                self.ids[a["id"]] = line
        for k in ("href", "src", "data-src"):
            if a.get(k) is not None:
                self.links.append((k, a[k], line))
        if tag == "a" and a.get("href") is not None:
            self.hrefs.append((a["href"], line))
        if "data-num" in a:
            if tag != "span" or set(a) != _NUM_ATTRS:
                self.bad(f"a checked number is a <span> with data-num and data-src only, not <{tag} {sorted(a)}>")
            if not self._in("td") and not self._in("p"):
                self.bad(f"checked number {a['data-num']!r} outside a table cell or paragraph")
            self._num = (a["data-num"], line)
            self._buf = []
        elif tag == "span":
            self.bad("<span> without data-num")
        if closed or tag in VOID_ELEMENTS:
            if tag not in VOID_ELEMENTS and tag not in SVG_LEAVES:
                self.bad(f"<{tag}/> self-closed")
            if tag == "span" and self._num is not None:
                self.handle_endtag("span")
            return
        if tag in SVG_LEAVES:
            self.bad(f"<{tag}> must be self-closed")
        self.stack.append((tag, line))

    def handle_endtag(self, tag):
        if not (tag == "span" and self._num is not None):
            self._flush()
        if tag in VOID_ELEMENTS or (tag in SVG_LEAVES and not (self.stack and self.stack[-1][0] == tag)):
            self.bad(f"end tag </{tag}> of an element that has none")
            return
        if not self.stack or self.stack[-1][0] != tag:
            open_ = self.stack[-1][0] if self.stack else "nothing"
            self.bad(f"</{tag}> closes <{open_}> (elements nest strictly in the report format)")
            if any(t == tag for t, _l in self.stack):
                while self.stack and self.stack[-1][0] != tag:
                    self.stack.pop()
            else:
                return
        self.stack.pop()
        if tag == "span" and self._num is not None:
            nid, line = self._num
            text = "".join(self._buf)
            if text != text.strip() or not text:
                self.problems.append((line, f"checked number {nid!r} has surrounding space or no text"))
            if not self._run:
                self._run_at = (line, self.stack[-1][0] if self.stack else "")
            self._run.append("#")
            self._num = None

    def handle_data(self, data):
        line = self.getpos()[0]
        for k, msg in repertoire.problems(data, line):
            self.problems.append((k, msg))
        if self._num is not None:
            self._buf.append(data)
            return
        if self.stack and self.stack[-1][0] == "style":
            self.styles.append(data)
            return
        if data.strip():
            if not self.stack or self.stack[-1][0] in ("html", "head", "tr", "thead", "tbody", "table", "svg"):
                self.bad(f"text {data.strip()[:40]!r} where the report format has none")
        if not self._run:
            ctx = "svg" if self._in("svg") else self.stack[-1][0] if self.stack else ""
            self._run_at = (self.getpos()[0], ctx)
        self._run.append(data)

    def close(self):
        super().close()
        self._flush()
        for tag, line in self.stack:
            self.problems.append((line, f"<{tag}> is never closed"))
        if self._num is not None:
            self.problems.append((self._num[2], f"checked number {self._num[0]!r} is never closed"))
