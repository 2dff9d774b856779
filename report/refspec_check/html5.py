"""report.html read as a browser reads it: a pre-scan of the raw text that admits only a language on
which Python's html.parser (StrictHTML) and the HTML5 tokenizer agree.

* Every ``<`` starts ``<!DOCTYPE html>``, a start tag ``<name attr="value" ...>`` (double-quoted
  values without ``<``) or an end tag ``</name>``, exactly. ``</ style>``, ``</style x>``, ``</``
  followed by anything but a letter (a bogus comment in a browser), ``<!``, ``<?`` are refused.
* ``&`` only in the five references the renderer's escaping writes (``&amp;`` ``&lt;`` ``&gt;``
  ``&#34;`` ``&#39;``): no numeric reference to a character the repertoire refuses, no legacy
  reference without its ``;`` that the two parsers decode differently.
* ``<style>``'s content ends where a browser ends it, at the first ``</style`` (any case) followed
  by a tab, line feed, form feed, carriage return, space, ``/`` or ``>``; it must end there with
  ``</style>`` (the stylesheet itself is pinned by its sha256, strict_html.STYLESHEET_SHA256).
* ``<title>`` (RCDATA in a browser: its content is text, markup inside is not parsed) holds plain
  text: no ``<`` before its ``</title>``.
* No raw text or RCDATA element other than ``<style>`` and ``<title>`` (``script``, ``textarea``,
  ``xmp``, ``iframe``, ``noembed``, ``noframes``, ``noscript``, ``plaintext``): a browser would
  read what follows them otherwise than html.parser does.
* Every character, raw, is in the report's repertoire (repertoire.py)."""

from __future__ import annotations

import bisect
import hashlib
import re

from refspec_check import repertoire
from refspec_check.strict_html import STYLESHEET_SHA256

DOCTYPE = "<!DOCTYPE html>"

_NAME = r"[A-Za-z][A-Za-z0-9]*"
_START_RE = re.compile(rf'<({_NAME})((?:[ \n]+[A-Za-z][A-Za-z0-9:-]*(?:="[^"<]*")?)*)[ \n]*(/?)>')
_END_RE = re.compile(rf"</({_NAME})>")
_ENTITY_RE = re.compile(r"&(?:amp|lt|gt|#34|#39);")

# a browser's end of raw text / RCDATA: "</name" followed by one of these (or the end of input)
_BROWSER_END_FOLLOW = "\t\n\f\r />"

RAW_TEXT = ("style",)
RCDATA = ("title",)
REFUSED = ("script", "textarea", "xmp", "iframe", "noembed", "noframes", "noscript", "plaintext")


def _line_of(text: str):
    """pos -> the line of ``text`` holding it."""
    starts = [m.end() for m in re.finditer("\n", text)]
    return lambda pos: bisect.bisect_right(starts, pos) + 1


def browser_end(text: str, name: str, start: int) -> int:
    """Where a browser ends the raw text or RCDATA of ``<name>`` that starts at ``start``: the
    first ``</name`` (case-insensitive) followed by white space, ``/``, ``>`` or the end of input;
    -1 if it never ends."""
    low = text.lower()
    pat = "</" + name
    i = start
    while True:
        i = low.find(pat, i)
        if i < 0:
            return -1
        nxt = text[i + len(pat) : i + len(pat) + 1]
        if nxt == "" or nxt in _BROWSER_END_FOLLOW:
            return i
        i += len(pat)


def prescan(text: str) -> list[tuple[int, str]]:
    """(line, problem) for everything in ``text`` outside the language both parsers read alike."""
    out = list(repertoire.problems(text))
    _line = lambda _t, pos: line_of(pos)  # noqa: E731
    line_of = _line_of(text)
    for m in re.finditer("&", text):
        if not _ENTITY_RE.match(text, m.start()):
            out.append(
                (
                    _line(text, m.start()),
                    f"character reference {text[m.start() : m.start() + 12]!r} (only &amp; &lt; &gt; &#34; &#39;)",
                )
            )
    i = 0
    while True:
        i = text.find("<", i)
        if i < 0:
            break
        line = _line(text, i)
        if text.startswith("<!", i) or text.startswith("<?", i):
            if text.startswith(DOCTYPE, i) and i == 0:
                i += len(DOCTYPE)
                continue
            out.append((line, f"markup {text[i : i + 20]!r} (only {DOCTYPE}, first)"))
            i += 2
            continue
        if text.startswith("</", i):
            m = _END_RE.match(text, i)
            if m is None:
                out.append((line, f"end tag {text[i : i + 20]!r} is not '</name>' (a browser reads it otherwise)"))
                i += 2
                continue
            i = m.end()
            continue
        m = _START_RE.match(text, i)
        if m is None:
            out.append((line, f"'<' that does not start a tag of the report format: {text[i : i + 20]!r}"))
            i += 1
            continue
        name = m.group(1).lower()
        i = m.end()
        if name in REFUSED:
            out.append((line, f"<{name}> (raw text or RCDATA) is not in the report format"))
        if name in RAW_TEXT or name in RCDATA:
            end = browser_end(text, name, i)
            if end < 0:
                out.append((line, f"<{name}> is never ended (a browser reads the rest of the file as its text)"))
                break
            if not text.startswith(f"</{name}>", end):
                out.append(
                    (
                        _line(text, end),
                        f"<{name}> ends at {text[end : end + 20]!r} in a browser, not at '</{name}>'",
                    )
                )
            body = text[i:end]
            k = body.find("</")
            if k >= 0:  # the first only: a browser reads all that follows as the element's text
                out.append(
                    (
                        _line(text, i + k),
                        f"{body[k : k + 10]!r} inside <{name}>: html.parser may end the element there, a browser "
                        f"does not (it reads on to line {_line(text, end)})",
                    )
                )
            if name in RAW_TEXT and hashlib.sha256(body.encode("utf-8")).hexdigest() != STYLESHEET_SHA256:
                out.append((line, "the stylesheet a browser reads is not the report format's (sha256 differs)"))
            if name in RCDATA and "<" in body:
                out.append(
                    (
                        _line(text, i + body.index("<")),
                        f"markup inside <{name}> (a browser shows it as the {name}'s text, html.parser as elements)",
                    )
                )
            i = end
    if not text.startswith(DOCTYPE):
        out.append((1, f"the report does not start with {DOCTYPE}"))
    return out
