"""The characters a reader may see in the report: printable ASCII, the line break, and exactly the
non-ASCII characters the renderer writes (report/refspec_check/render/: the dashes, the middle dot
of the summary, the section sign, the ellipsis of a cut reason, and the three math signs the TeX
escaping knows). Everything else in report.html (raw or after entity decoding, text and attribute
values) or report.tex is refused with its line, its code point and its Unicode name: bidi
controls that reverse a number on screen, zero-width characters, line and paragraph separators
that split a number into "names", letter confusables and number forms that read as digits,
control characters."""

from __future__ import annotations

import unicodedata

# the renderer's non-ASCII characters (tests/checker/test_report_chars.py keeps this equal to the
# characters of report/refspec_check/render/)
RENDERER_CHARS = frozenset(
    {
        "\u00a7",  # SECTION SIGN (paper sections, "§6.1")
        "\u00b7",  # MIDDLE DOT (the headline's separator)
        "\u00d7",  # MULTIPLICATION SIGN
        "\u2013",  # EN DASH
        "\u2014",  # EM DASH (a value that is not there)
        "\u2026",  # HORIZONTAL ELLIPSIS (a long reason cut)
        "\u2264",  # LESS-THAN OR EQUAL TO
        "\u2265",  # GREATER-THAN OR EQUAL TO
    }
)

# white space inside visible text: the space and the line break only (no tab, CR, form feed)
WHITESPACE = frozenset(" \n")

# the classes named in a refusal (the rest is "outside the report's characters")
_KINDS = (
    (frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"), "a bidi control"),
    (frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"), "a zero-width character"),
    (frozenset("\u2028\u2029\u0085"), "a line or paragraph separator"),
)


def allowed(ch: str) -> bool:
    return 32 <= ord(ch) <= 126 or ch in WHITESPACE or ch in RENDERER_CHARS


def describe(ch: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE (a bidi control)``: the code point, its Unicode name and its class."""
    name = unicodedata.name(ch, "") or f"unnamed, category {unicodedata.category(ch)}"
    for chars, kind in _KINDS:
        if ch in chars:
            break
    else:
        cat = unicodedata.category(ch)
        if cat.startswith("N") or unicodedata.numeric(ch, None) is not None:
            kind = "a number form"
        elif cat.startswith("C"):
            kind = "a control or format character"
        elif cat.startswith("Z"):
            kind = "a space or separator"
        elif cat.startswith("L"):
            kind = "a letter outside ASCII (a confusable)"
        else:
            kind = "outside the report's characters"
    return f"U+{ord(ch):04X} {name} ({kind})"


def problems(text: str, first_line: int = 1) -> list[tuple[int, str]]:
    """(line, message) for every character of ``text`` outside the repertoire (``first_line``: the
    line ``text`` starts on)."""
    out = []
    if all(allowed(ch) for ch in text):  # the common case, fast
        return out
    line = first_line
    for ch in text:
        if not allowed(ch):
            out.append((line, f"character {describe(ch)} is not in the report's characters"))
        if ch == "\n":
            line += 1
    return out
