"""report.pdf rebuilt from report.tex: the PDF a reader opens is checked byte for byte, or plainly
marked as not checked.

The renderer compiles report.tex reproducibly (``refspec.reporting.render.compile_pdf``: the file
alone in an empty folder, ``SOURCE_DATE_EPOCH=0`` and ``FORCE_SOURCE_DATE=1``, two passes of
``pdflatex -interaction=nonstopmode -halt-on-error -no-shell-escape report.tex``), so the same
pdfTeX makes the same bytes. When ``pdflatex`` is on the PATH this module compiles the archive's
report.tex the same way in a temporary folder and compares the bytes with report.pdf: any other
PDF (another number, another page, a PDF re-sealed with a valid key) is a mismatch. It is not
checked, and said so (``Checker.unchecked``: the check fails unless the auditor passes
``--pdf-unchecked``, and then its last line says so), when pdflatex is absent,
when the pdfTeX named in report.pdf is not the one here (another pdfTeX writes other bytes), or
when TeX here lacks a file report.tex needs. report.tex itself is compiled only when it is inside
the report's LaTeX subset (``StrictTeX`` found nothing), so no refused construct ever runs.

Why bytes and not the PDF's text: the text a PDF shows is drawn by its content streams (glyph
positions, fonts, kerning, overlays, annotations, form fields); extracting the words with zlib and
comparing them with report.tex would leave everything else a reader sees (a glyph drawn over a
number, a white box, an added page outside the text operators, a font whose glyphs draw other
digits) unchecked. Equal bytes leave nothing unchecked.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile

from refspec_check.contract import posix_rel
from refspec_check.problems import Checker

# how the renderer compiles report.tex (refspec.reporting.render.compile_pdf); change both together
PDF_ENV = {"SOURCE_DATE_EPOCH": "0", "FORCE_SOURCE_DATE": "1"}
PDF_ARGS = ("-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex")
PDF_PASSES = 2
PDF_TIMEOUT = 300

# the pdfTeX that wrote a PDF: its info dictionary's banner, "This is pdfTeX, Version V (DIST) kpathsea ..."
_BANNER_RE = re.compile(rb"/PTEX\.Fullbanner\s*\(This is pdfTeX, Version ([!-~]+ \([ -'*-\[\]-~]*\))")
_MISSING_RE = re.compile(r"^! LaTeX Error: File `([^']*)' not found\.", re.M)


def pdf_pdftex(data: bytes) -> str | None:
    """The pdfTeX version a PDF names (``3.141592653-2.6-1.40.24 (TeX Live 2022/Debian)``), or None."""
    m = _BANNER_RE.search(data)
    return m.group(1).decode("latin-1") if m else None


def local_pdftex(exe: str) -> str | None:
    """The version of the pdfTeX behind ``exe`` (``pdflatex --version``'s first line, as a PDF names it)."""
    try:
        r = subprocess.run(
            [exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    first = r.stdout.decode("latin-1").splitlines()[:1]
    if r.returncode != 0 or not first or not first[0].startswith("pdfTeX "):
        return None
    return first[0][len("pdfTeX ") :].strip()


def compile_report(exe: str, tex: bytes, timeout: int = PDF_TIMEOUT) -> tuple[bytes | None, str]:
    """``tex`` compiled as the renderer compiles report.tex: (the PDF's bytes, "") or (None, the log's tail)."""
    with tempfile.TemporaryDirectory(prefix="refspec-check-tex-") as td:
        with open(os.path.join(td, "report.tex"), "wb") as f:
            f.write(tex)
        # TeX reads and writes only inside the folder ("paranoid"), never runs a program
        env = dict(os.environ, openin_any="p", openout_any="p", shell_escape="f", **PDF_ENV)
        for _ in range(PDF_PASSES):
            try:
                r = subprocess.run(
                    [exe, *PDF_ARGS],
                    cwd=td,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                return None, f"pdflatex ran past {timeout} s"
            if r.returncode != 0:
                return None, r.stdout.decode("utf-8", "replace")[-3000:]
        with open(os.path.join(td, "report.pdf"), "rb") as f:
            return f.read(), ""


def check_pdf(c: Checker, report_dir: str, tex_ok: bool) -> None:
    """report.pdf beside report.tex: rebuilt and compared byte for byte, or recorded as not checked
    (``c.unchecked``) with the reason. ``tex_ok``: report.tex is present and inside its format (a
    report.pdf without its report.tex is refused by ``numbers.check_markup``)."""
    pdf = os.path.join(report_dir, "report.pdf")
    if not os.path.isfile(pdf):
        return
    rel = posix_rel(pdf, c.archive)
    tex_path = os.path.join(report_dir, "report.tex")
    if not os.path.isfile(tex_path):
        return
    if not tex_ok:
        c.unchecked[rel] = "report.tex is outside the report's format (refused above), so it is not compiled"
        return
    exe = shutil.which("pdflatex")
    if exe is None:
        c.unchecked[rel] = (
            "pdflatex is not on the PATH here, so report.pdf was not rebuilt from report.tex; only report.tex "
            "and report.html are checked (install TeX: Debian texlive-latex-base, texlive-latex-recommended, "
            "texlive-pictures)"
        )
        return
    with open(pdf, "rb") as f:
        data = f.read()
    made_by = pdf_pdftex(data)
    if made_by is None:
        c.bad(rel, "not a PDF that pdfTeX wrote (no PTEX.Fullbanner): it is not report.tex compiled")
        return
    here = local_pdftex(exe)
    if here != made_by:
        c.unchecked[rel] = f"not checked: pdfTeX {here or 'of unknown version'} here, {made_by} made it"
        return
    with open(tex_path, "rb") as f:
        tex = f.read()
    got, log = compile_report(exe, tex)
    if got is None:
        missing = _MISSING_RE.search(log)
        if missing:
            c.unchecked[rel] = f"not checked: TeX here lacks {missing.group(1)}, which report.tex needs"
        else:
            tail = " | ".join(ln for ln in log.splitlines()[-6:] if ln.strip())
            c.bad(posix_rel(tex_path, c.archive), f"does not compile with pdflatex (pdfTeX {here}): {tail}")
        return
    c.compared += 1
    if got == data:
        c.matched += 1
        c.files.add(pdf)
    else:
        c.bad(
            rel,
            f"is not report.tex compiled: pdflatex (pdfTeX {here}) makes sha256 {hashlib.sha256(got).hexdigest()[:16]}... "
            f"({len(got)} bytes), report.pdf is {hashlib.sha256(data).hexdigest()[:16]}... ({len(data)} bytes)",
        )
