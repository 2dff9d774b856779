"""The report's strict LaTeX subset (anc/report.md): what report.tex may hold, line by line."""

from __future__ import annotations

import hashlib
import re

from refspec_check import repertoire

# sha256 of report.tex up to and including its "\begin{document}" line: the renderer's preamble
# (its packages, the figures' colours and the one macro \rsnum). Any other preamble (\rsnum
# redefined, a \catcode, \input, another package) is refused; tests/checker/test_report_strict.py keeps
# this equal to the template's.
TEX_PREAMBLE_SHA256 = "2a9a8944e891c09edb3581f723aa254cf4cb659ca6e6a72dc451025659b48f6a"

TEX_BEGIN, TEX_END = "\\begin{document}", "\\end{document}"

# control words of the body (sectioning, sizes, tables, the note box); every other control word
# (\input, \include, \write, \immediate, \openin, \def, \let, \newcommand, \catcode, \csname,
# \url, \includegraphics, \special, \color, \phantom, ...) is refused with its line
TEX_WORDS = frozenset(
    {
        "maketitle",
        "section",
        "subsection",
        "footnotesize",
        "scriptsize",
        "small",
        "texttt",
        "toprule",
        "midrule",
        "bottomrule",
        "endhead",
        "raggedright",
        "fbox",
    }
)

# the text macros of the escaping (refspec_check.render.tex.tex_escape), each written with "{}"
TEX_TEXT_MACROS = {
    "textbackslash": "\\",
    "textasciicircum": "^",
    "textasciitilde": "~",
    "textless": "<",
    "textgreater": ">",
    "textbar": "|",
    "textquotedbl": '"',
    "textperiodcentered": "\u00b7",
    "S": "\u00a7",
}

TEX_SYMBOLS = {"{": "{", "}": "}", "$": "$", "&": "&", "#": "#", "%": "%", "_": "_"}

TEX_MATH = {"$\\times$": "\u00d7", "$\\le$": "\u2264", "$\\ge$": "\u2265"}

TEX_ENVS = ("longtable", "center", "tikzpicture")

_TEX_WORD_RE = re.compile(r"\\([A-Za-z]+)")

_TEX_ENV_RE = re.compile(r"\\(begin|end)\{([A-Za-z*]*)\}")

# \rsnum{ID}{TEXT}: ID in the characters refspec_check.render.tex.tex_id writes (others as !HEX;)
_TEX_NUM_RE = re.compile(r"\\rsnum\{([A-Za-z0-9 ._:/+=,|@!;-]*)\}\{([^{}\\]*)\}")

_TEX_ID_ESC_RE = re.compile(r"!([0-9a-f]{1,6});")

# the renderer's box widths: table cells (4.2cm, 11cm) and the note box
_TEX_PARBOX_RE = re.compile(r"\\parbox(?:\[t\]\{(?:2\.4|4\.2|11)cm\}|\{0\.95\\linewidth\})")

_TEX_COLSPEC_RE = re.compile(r"\\begin\{longtable\}\{[lr]+\}")

# the figures (refspec_check.render.svg.Canvas.to_tikz): one drawing command per line, numeric coordinates
# inside the picture's bounding box, colours of the palette, nothing else
_TN = r"(-?\d+\.\d{3})"

_TCOL = r"rs(?:diag|target|spec|mixed|ref|thr|grid|axis|fail|bar)"

TIKZ_BEGIN = "\\begin{tikzpicture}[font=\\sffamily]"

TIKZ_RES = (
    re.compile(rf"\\useasboundingbox \(0,0\) rectangle \({_TN},{_TN}\);"),
    re.compile(rf"\\draw\[draw={_TCOL},line width=\d+\.\d\dpt(?:,dashed)?\] \({_TN},{_TN}\) -- \({_TN},{_TN}\);"),
    re.compile(rf"\\fill\[{_TCOL}\] \({_TN},{_TN}\) rectangle \({_TN},{_TN}\);"),
    re.compile(rf"\\fill\[{_TCOL}\] \({_TN},{_TN}\) circle \((\d+\.\d{{3}})\);"),
    re.compile(
        r"\\node\[anchor=(?:base west|base|base east),inner sep=0pt,scale=(?:0\.\d{3}|1\.000)\] "
        rf"at \({_TN},{_TN}\) \{{\\(?:scriptsize|footnotesize) (.*)\}};"
    ),
)


def tex_id_decode(s: str) -> str:
    """The number id written by refspec_check.render.tex.tex_id (``!HEX;`` for other characters)."""
    return _TEX_ID_ESC_RE.sub(lambda m: chr(int(m.group(1), 16)), s)


class StrictTeX:
    """Parse report.tex against the report's LaTeX subset, recording problems (line, what)."""

    def __init__(self, text: str):
        self.problems: list[tuple[int, str]] = []
        self.envs: list[tuple[str, int]] = []
        self.depth = 0
        self.parse(text)

    def bad(self, line: int, msg: str) -> None:
        self.problems.append((line, msg))

    def parse(self, text: str) -> None:
        lines = text.split("\n")
        try:
            start = lines.index(TEX_BEGIN)
        except ValueError:
            self.bad(1, f"no {TEX_BEGIN} line")
            return
        pre = "\n".join(lines[: start + 1]) + "\n"
        if hashlib.sha256(pre.encode("utf-8")).hexdigest() != TEX_PREAMBLE_SHA256:
            self.bad(1, "the preamble is not the report format's (sha256 differs from TEX_PREAMBLE_SHA256)")
        body = lines[start + 1 :]
        while body and body[-1] == "":
            body.pop()
        if not body or body[-1] != TEX_END:
            self.bad(start + 1 + len(body), f"the document does not end with {TEX_END} on the last line")
        else:
            body.pop()
        box = None  # the figure being read: its bounding box (width, height), or () before it is known
        for i, line in enumerate(body):
            no = start + 2 + i
            if box is not None:
                if line == "\\end{tikzpicture}":
                    box = None
                    continue
                box = self.tikz_line(line, no, box)
                continue
            if line == TIKZ_BEGIN:
                box = ()
                # a figure is the renderer's: its own lines, directly in a center environment of
                # the body (not in a table cell, a box or a paragraph, where its labels would read
                # as the cell's text)
                if i == 0 or body[i - 1] != "\\begin{center}" or [e for e, _n in self.envs] != ["center"]:
                    self.bad(
                        no, "a figure outside the report's figure environment (\\begin{center} on the line before)"
                    )
                elif self.depth:
                    self.bad(no, "a figure inside a group or box")
                else:
                    end = next((j for j in range(i + 1, len(body)) if body[j] == "\\end{tikzpicture}"), None)
                    if end is not None and body[end + 1 : end + 2] != ["\\end{center}"]:
                        self.bad(no, "a figure not closed by \\end{center} on the line after its picture")
                continue
            self.scan(line, no)
        if box is not None:
            self.bad(start + 1 + len(body), "a figure is never closed")
        for env, no in self.envs:
            self.bad(no, f"\\begin{{{env}}} is never closed")
        if self.depth:
            self.bad(start + 1 + len(body), f"{self.depth} unclosed brace(s)")

    def tikz_line(self, line: str, no: int, box: tuple) -> tuple:
        for k, pat in enumerate(TIKZ_RES):
            m = pat.fullmatch(line)
            if m is None:
                continue
            vals = [float(v) for v in m.groups()[: (4 if k in (1, 2) else 3 if k == 3 else 2)]]
            if k == 0:
                if box != ():
                    self.bad(no, "a second bounding box in one figure")
                return (vals[0], vals[1])
            if box == ():
                self.bad(no, "a figure draws before its bounding box")
                return box
            w, h = box
            xs, ys = vals[0::2], vals[1::2]
            if k == 3:
                xs, ys = [vals[0]], [vals[1]]
            if any(not (-0.001 <= x <= w + 0.001) for x in xs) or any(not (-0.001 <= y <= h + 0.001) for y in ys):
                self.bad(no, "a figure draws outside its bounding box")
            if k == 4:
                self.scan(m.group(3), no, label=True)
            return box
        self.bad(no, f"figure line {line[:60]!r} is not in the report format")
        return box

    def scan(self, line: str, no: int, label: bool = False) -> None:
        """Record what of one line is outside the subset; ``label``: a figure's label (text and the
        escaping's macros only)."""
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if ch == "\\":
                i = self.control(line, i, no, label)
            elif ch == "$":
                i = self.math(line, i, no)
            else:
                if ch in "{}":
                    self.brace(ch, no, label)
                else:
                    self.character(ch, no, label)
                i += 1

    def control(self, line: str, i: int, no: int, label: bool) -> int:
        """Check the control symbol or sequence at ``line[i]`` (a backslash); returns the index after it."""
        m = _TEX_WORD_RE.match(line, i)
        if m is None:
            sym = line[i + 1 : i + 2]
            if sym == "\\" and not label:
                rest = line[i + 2 :].lstrip(" ")
                if rest[:1] in ("[", "*"):
                    self.bad(no, "\\\\ with an argument is not in the report format")
            elif sym not in TEX_SYMBOLS:
                self.bad(no, f"control symbol \\{sym} is not in the report format")
            return i + 2
        word = m.group(1)
        if word in TEX_TEXT_MACROS:
            if line[m.end() : m.end() + 2] != "{}":
                self.bad(no, f"\\{word} without its {{}}")
                return m.end()
            return m.end() + 2
        if label:
            self.bad(no, f"control sequence \\{word} in a figure label")
            return m.end()
        if word == "rsnum":
            mm = _TEX_NUM_RE.match(line, i)
            if mm is None:
                self.bad(no, "\\rsnum not of the form \\rsnum{ID}{NUMBER}")
                return m.end()
            return mm.end()
        if word == "parbox":
            mm = _TEX_PARBOX_RE.match(line, i)
            if mm is None:
                self.bad(no, "\\parbox of a width the report format does not use")
                return m.end()
            return mm.end()
        if word in ("begin", "end"):
            return self.env(line, i, no)
        if word in TEX_WORDS:
            i = m.end()
            if word in ("section", "subsection") and line[i : i + 1] == "*":
                i += 1
            return i
        self.bad(no, f"control sequence \\{word} is not in the report format")
        return m.end()

    def math(self, line: str, i: int, no: int) -> int:
        """Check the math at ``line[i]`` (a dollar): only the report's few symbols; returns the index after it."""
        for k in TEX_MATH:
            if line.startswith(k, i):
                return i + len(k)
        self.bad(no, "math mode other than $\\times$, $\\le$, $\\ge$")
        return i + 1

    def brace(self, ch: str, no: int, label: bool) -> None:
        """Count a brace into the group depth (none in a figure label; none closed that was not opened)."""
        if label:
            self.bad(no, "a brace in a figure label")
        elif ch == "{":
            self.depth += 1
        elif self.depth == 0:
            self.bad(no, "a closing brace without its opening one")
        else:
            self.depth -= 1

    def character(self, ch: str, no: int, label: bool) -> None:
        """Check one character of text: none of TeX's special characters, printable ASCII only."""
        if ch in "%#^_~" or (ch == "&" and label):
            what = {"%": "a comment", "#": "a macro parameter", "~": "an active character"}.get(ch, "math")
            self.bad(no, f"character {ch!r} ({what}) is not in the report format")
        elif ord(ch) < 32 or ord(ch) > 126:
            self.bad(no, f"character {repertoire.describe(ch)} (the report's LaTeX is printable ASCII)")

    def env(self, line: str, i: int, no: int) -> int:
        m = _TEX_ENV_RE.match(line, i)
        if m is None or m.group(2) not in TEX_ENVS:
            self.bad(no, f"environment {line[i : i + 30]!r}... is not in the report format")
            return i + 6
        kind, env = m.groups()
        if kind == "begin":
            if env == "tikzpicture":
                self.bad(no, f"a figure starts on its own line: {TIKZ_BEGIN}")
            if env == "longtable":
                mm = _TEX_COLSPEC_RE.match(line, i)
                if mm is None:
                    self.bad(no, "longtable columns other than l and r")
                    return m.end()
                self.envs.append((env, no))
                return mm.end()
            self.envs.append((env, no))
            return m.end()
        if not self.envs or self.envs[-1][0] != env:
            self.bad(no, f"\\end{{{env}}} closes {self.envs[-1][0] if self.envs else 'nothing'}")
        else:
            self.envs.pop()
        return m.end()
