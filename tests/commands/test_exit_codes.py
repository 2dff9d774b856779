"""Exit codes of the failure paths that used to escape as tracebacks or with the wrong code
(documented in refspec.core.errors: 0 ok, 1 check failed, 2 usage, 3 integrity, 4 build, 5 runtime)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from refspec.cli import SUBCOMMANDS, main
from refspec.core import errors
from refspec.core.stats import StatsError, mean_log
from refspec.reporting.render import compile_pdf
from support.sealing import copy_archive


def test_render_on_data_that_does_not_verify_exits_1(seal_env, tmp_path, capsys):
    d = copy_archive(seal_env["clean"], tmp_path / "sealed-data")
    (d / "extra.txt").write_text("not sealed\n")
    rc = main(
        [
            "render",
            "--sealed-data",
            str(d),
            "--pubkey",
            str(seal_env["a"].public_path),
            "--out",
            str(tmp_path / "rendered"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == errors.EXIT_FAILED == 1
    assert "does not verify" in err and "extra.txt: not listed in the seal" in err
    assert not (tmp_path / "rendered").exists()


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


# ----------------------------------------------------------------- REFSPEC_DEBUG / --debug

FAILING_COMMAND = """
from refspec.core.errors import UsageError


def add_arguments(p):
    p.add_argument("--what", default="outer")


def run(args):
    try:
        {}["missing"]
    except KeyError as e:
        raise UsageError(f"{args.what} failed") from e
"""


@pytest.fixture
def failing_command(tmp_path, monkeypatch):
    """A command ``boom`` whose RefspecError (exit 2) has a cause."""
    (tmp_path / "refspec_boom_command.py").write_text(FAILING_COMMAND)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(SUBCOMMANDS, "boom", ("refspec_boom_command", "fail with a cause"))
    monkeypatch.delenv("REFSPEC_DEBUG", raising=False)
    return "boom"


def test_error_prints_one_line_by_default(failing_command, capsys, monkeypatch):
    assert main([failing_command]) == errors.EXIT_USAGE
    assert capsys.readouterr().err == "refspec boom: error: outer failed\n"
    monkeypatch.setenv("REFSPEC_DEBUG", "0")
    assert main([failing_command]) == errors.EXIT_USAGE
    assert capsys.readouterr().err == "refspec boom: error: outer failed\n"


def _chain_printed(err: str) -> None:
    assert err.startswith("Traceback (most recent call last):"), err
    assert "KeyError: 'missing'" in err
    assert "The above exception was the direct cause of the following exception:" in err
    assert "refspec.core.errors.UsageError: outer failed" in err
    assert err.index("KeyError") < err.index("UsageError: outer failed")
    assert err.endswith("\nrefspec boom: error: outer failed\n")  # the usual line comes last


def test_refspec_debug_prints_the_exception_chain(failing_command, capsys, monkeypatch):
    monkeypatch.setenv("REFSPEC_DEBUG", "1")
    assert main([failing_command]) == errors.EXIT_USAGE  # the exit code is unchanged
    captured = capsys.readouterr()
    _chain_printed(captured.err)
    assert captured.out == ""


def test_debug_flag_prints_the_exception_chain(failing_command, capsys):
    assert main(["--debug", failing_command, "--what", "outer"]) == errors.EXIT_USAGE
    _chain_printed(capsys.readouterr().err)


def test_debug_flag_is_in_the_help(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--debug" in out and "REFSPEC_DEBUG=1" in out


# ----------------------------------------------------------------- a crash (not a RefspecError)

CRASHING_COMMAND = """
def add_arguments(p):
    pass


def run(args):
    raise RuntimeError("the bug")
"""
CRASH_LINE = "refspec: internal error: RuntimeError: the bug (run with --debug for the traceback)\n"


@pytest.fixture
def crashing_command(tmp_path, monkeypatch):
    """A command ``crash`` whose run raises an exception that is not a RefspecError."""
    (tmp_path / "refspec_crash_command.py").write_text(CRASHING_COMMAND)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(SUBCOMMANDS, "crash", ("refspec_crash_command", "raise a bug"))
    monkeypatch.delenv("REFSPEC_DEBUG", raising=False)
    return "crash"


def test_a_crash_exits_70_with_one_line(crashing_command, capsys):
    # not 1: that says a check ran and failed
    assert main([crashing_command]) == errors.EXIT_CRASH == 70
    captured = capsys.readouterr()
    assert captured.err == CRASH_LINE
    assert captured.out == ""


def test_a_crash_under_debug_prints_its_traceback(crashing_command, capsys, monkeypatch):
    assert main(["--debug", crashing_command]) == errors.EXIT_CRASH
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):"), err
    assert "RuntimeError: the bug" in err and err.endswith("\n" + CRASH_LINE)
    monkeypatch.setenv("REFSPEC_DEBUG", "1")
    assert main([crashing_command]) == errors.EXIT_CRASH
    assert capsys.readouterr().err.startswith("Traceback (most recent call last):")


def test_qualify_sub_commands_each_have_their_own_options(capsys):
    """``refspec qualify arms`` and an engine's, e.g. ``refspec qualify server`` (one exit rule,
    ``commands.qualify.exit_status``, tested in tests/campaigns/test_qualify_vacuity.py): no sub-command, a server option given to ``arms`` or an arms option to ``server`` is a usage
    error (exit 2) that names what is wrong, before anything runs."""
    assert main(["qualify", "--panel", "humaneval:0-1"]) == errors.EXIT_USAGE == 2
    assert "arms|server|openvino|llama-cpp-python" in capsys.readouterr().err
    assert main(["qualify", "arms", "--arms", "R,M3"]) == 2
    assert "--panel" in capsys.readouterr().err
    assert main(["qualify", "arms", "--panel", "humaneval:0", "--server-binary", "x"]) == 2
    assert "--server-binary" in capsys.readouterr().err
    assert main(["qualify", "server", "--model", "m.gguf", "--arms", "R,M3"]) == 2
    assert "--arms" in capsys.readouterr().err
    assert main(["qualify", "server", "--model", "m.gguf"]) == 2
    assert "--server-binary PATH, or --url URL" in capsys.readouterr().err
