"""Write the report of a results folder or archive: report.html, report.tex, numbers.json and report.pdf.

``refspec report RESULTS_DIR [--out DIR] [--pubkey KEY.pub] [--no-pdf]`` (:mod:`refspec.commands.report`)
and the report stage call :func:`render`. The bytes are the renderer's
(:func:`refspec_check.render.render.report_files`: the checker's standard-library renderer, which
``report/check.py`` runs again on the sealed archive); this module reads the tables from their Parquet
files, takes the signing key's fingerprint, writes the files atomically and compiles report.pdf
(:func:`compile_pdf`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from refspec_check.render.document import NotAnArchive, load_archive
from refspec_check.render.render import report_files
from refspec_check.render.sections.provenance import read_seal

from ..core import tables as T
from ..core.errors import RenderError, UsageError
from ..core.fsutil import atomic_write_bytes


def render(
    results_dir: str | Path,
    out_dir: str | Path | None = None,
    pdf: bool = True,
    pubkey: str | Path | None = None,
    data_seal: str | Path | None = None,
) -> dict[str, Path]:
    """Render report.html, report.tex, numbers.json (and report.pdf) into ``out_dir`` (default results_dir)."""
    fp = None
    if pubkey is not None:
        from ..provenance.keys import fingerprint, load_public_key  # lazy: cryptography, only where a key is given

        fp = fingerprint(load_public_key(pubkey))
    out = Path(out_dir) if out_dir is not None else Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        a = load_archive(results_dir, out, reader=T.read_records)
    except NotAnArchive as e:
        raise UsageError(str(e)) from None
    files = report_files(a, fp, read_seal(Path(data_seal)) if data_seal is not None else None)
    paths = {"html": out / "report.html", "tex": out / "report.tex", "numbers": out / "numbers.json"}
    for key, name in (("html", "report.html"), ("tex", "report.tex"), ("numbers", "numbers.json")):
        atomic_write_bytes(paths[key], files[name], mode=0o644)
    if pdf:
        p = compile_pdf(paths["tex"])
        if p is not None:
            paths["pdf"] = p
    return paths


def compile_pdf(tex_path: Path, timeout: int = 300) -> Path | None:
    """Compile ``report.tex`` with pdflatex when present; return the PDF path or None when TeX is absent.

    The compile is reproducible: report.tex alone in an empty folder, ``SOURCE_DATE_EPOCH=0`` with
    ``FORCE_SOURCE_DATE=1`` (the info dictionary's dates and the trailer /ID are fixed), two passes,
    so the same pdfTeX makes the same bytes. ``report/check.py`` (``refspec_check/pdf.py``) compiles
    report.tex the same way and compares the bytes with report.pdf; change both together.

    Raises :class:`refspec.core.errors.RenderError` (exit code 5) with the log tail when pdflatex fails.
    """
    exe = shutil.which("pdflatex")
    if exe is None:
        return None
    with tempfile.TemporaryDirectory(prefix="refspec-tex-") as td:
        shutil.copyfile(tex_path, Path(td) / "report.tex")
        env = dict(os.environ, SOURCE_DATE_EPOCH="0", FORCE_SOURCE_DATE="1")
        cmd = [exe, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex"]
        for _ in range(2):
            r = subprocess.run(
                cmd,
                cwd=td,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
            if r.returncode != 0:
                log = r.stdout.decode("utf-8", "replace")
                raise RenderError(f"pdflatex failed on {tex_path}:\n{log[-3000:]}")
        dst = tex_path.with_suffix(".pdf")
        atomic_write_bytes(dst, (Path(td) / "report.pdf").read_bytes(), mode=0o644)
        return dst
