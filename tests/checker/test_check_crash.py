"""report/check.py: a defect of the checker itself (an unexpected exception) exits 70 with one line on
stderr, never 1 (a mismatch); ``--debug`` adds the traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
import refspec_check.archive
import refspec_check.cli

from support.synthetic_archive import CHECK_PATH, signer_pubkey

MESSAGE = "check.py: internal error: RuntimeError: boom (run with --debug for the traceback)"


@pytest.fixture()
def folder(tmp_path):
    (tmp_path / "numbers.json").write_text('{"numbers": []}')
    (tmp_path / "report.html").write_text("")
    return tmp_path


def _boom(*_args, **_kw):
    raise RuntimeError("boom")


def test_an_internal_error_exits_70_with_one_line(folder, monkeypatch, capsys):
    monkeypatch.setattr(refspec_check.archive, "read_report", _boom)
    assert refspec_check.cli.main([str(folder), "--unsealed"]) == 70
    out, err = capsys.readouterr()
    assert out == "" and err == MESSAGE + "\n"


def test_debug_prints_the_traceback(folder, monkeypatch, capsys):
    monkeypatch.setattr(refspec_check.archive, "read_report", _boom)
    assert refspec_check.cli.main([str(folder), "--unsealed", "--debug"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and err.endswith(MESSAGE + "\n")


def test_the_command_exits_70_on_an_internal_error(tmp_path):
    """report/check.py run isolated (-I -S) as its own __main__, with one package function made to raise."""
    code = (
        "import runpy, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import refspec_check.archive as A\n"
        "def boom(*a, **k): raise RuntimeError('boom')\n"
        "A.read_report = boom\n"
        "script, sys.argv = sys.argv[1] + '/check.py', ['check.py', *sys.argv[2:]]\n"
        "runpy.run_path(script, run_name='__main__')\n"
    )
    (tmp_path / "a").mkdir()
    args = [str(CHECK_PATH.parent), str(tmp_path / "a"), "--pubkey", str(signer_pubkey())]
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 70, r
    assert r.stdout == "" and r.stderr == MESSAGE + "\n"
