"""Exit codes of the failure paths that used to escape as tracebacks or with the wrong code
(documented in refspec.core.errors: 0 ok, 1 check failed, 2 usage, 3 integrity, 4 build, 5 runtime)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from refspec.cli import main
from refspec.core import errors
from refspec.core.stats import StatsError, mean_log
from refspec.reporting.render import compile_pdf
from test_seal_tamper import copy_archive
from test_seal_util import seal_env  # noqa: F401  (fixture)


def test_report_stage_on_data_that_does_not_verify_exits_1(seal_env, tmp_path, capsys):
    d = copy_archive(seal_env["clean"], tmp_path / "sealed")
    (d / "extra.txt").write_text("not sealed\n")
    rc = main(
        [
            "report-stage",
            "--sealed",
            str(d),
            "--pubkey",
            str(seal_env["a"].public_path),
            "--out",
            str(tmp_path / "stage"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == errors.EXIT_FAILED == 1
    assert "does not verify" in err and "extra.txt: not listed in the seal" in err
    assert not (tmp_path / "stage").exists()


def test_stats_error_is_an_input_integrity_error_with_exit_code_3():
    with pytest.raises(StatsError) as e:
        mean_log([])
    assert isinstance(e.value, errors.RefspecError) and isinstance(e.value, ValueError)
    assert e.value.exit_code == errors.EXIT_INTEGRITY == 3


def test_pdflatex_failure_is_a_runtime_error_with_exit_code_5(tmp_path, monkeypatch):
    tex = tmp_path / "report.tex"
    tex.write_text("\\documentclass{article}\\begin{document}\\undefinedmacro\\end{document}\n")
    if shutil.which("pdflatex") is None:
        # No TeX here: a program named pdflatex that fails the way TeX does (exit 1, log on stdout).
        bindir = tmp_path / "bin"
        bindir.mkdir()
        exe = bindir / "pdflatex"
        exe.write_text("#!/bin/sh\necho '! Undefined control sequence.'\nexit 1\n")
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    with pytest.raises(errors.RenderError) as e:
        compile_pdf(tex)
    assert e.value.exit_code == errors.EXIT_RUNTIME == 5
    assert "Undefined control sequence" in str(e.value)
    assert not Path(tmp_path / "report.pdf").exists()
