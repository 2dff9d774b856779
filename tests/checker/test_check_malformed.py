"""report/check.py on malformed files that a signer sealed: wrong encoding, truncation or the wrong
JSON type is a finding about the archive (exit 1, a line naming the file), never a crash of the
checker (exit 70). Each archive is sealed with the signer's valid key after the damage, so the seal
verifies and only reading the damaged file can tell."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from refspec.provenance.dsse import SEAL_NAME, envelope_bytes
from support.synthetic_archive import FAMILIES, run_check, seal_archive, signer
from support.tampering import folder_files, signed_statement, statement


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _latin1(p: Path) -> None:
    p.write_bytes(p.read_bytes() + "caf\u00e9 \u00ff\n".encode("latin-1"))


def _json_type(p: Path) -> None:
    p.write_text(json.dumps(["not", "an", "object"]), encoding="utf-8")


def _nul(p: Path) -> None:
    data = p.read_bytes()
    cut = data.index(b"\n") + 1
    p.write_bytes(data[:cut] + b"\x00" + data[cut:])


def _deep(p: Path) -> None:
    """A value nested 5,000 levels deep beside the document's own keys (Python's parser would recurse
    past its stack: RecursionError)."""
    text = p.read_text(encoding="utf-8")
    at = text.index("{") + 1
    p.write_text(text[:at] + '"deep": ' + "[" * 5000 + "]" * 5000 + ", " + text[at:], encoding="utf-8")


def _retyped(p: Path, key: str, to) -> None:
    """Every value under ``key`` (at any depth) replaced by ``to(value)``."""

    def walk(v):
        if isinstance(v, dict):
            return {k: (to(x) if k == key else walk(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    p.write_text(json.dumps(walk(json.loads(p.read_text(encoding="utf-8")))), encoding="utf-8")


def _campaigns_list(p: Path) -> None:
    _retyped(p, "campaigns", lambda v: list(v.values()) if isinstance(v, dict) else v)


def _threshold_str(p: Path) -> None:
    _retyped(p, "threshold", str)


def _panel_list(p: Path) -> None:
    _retyped(p, "panel", lambda v: [v])


SCREEN = f"campaigns/{FAMILIES[0]}/screen/screen.json"

#: (file in the results folder, damage): every kind of file the checker reads
DAMAGE = [
    ("tables/ratios.csv", _latin1),
    ("tables/qualification.csv", _truncate),
    ("tables/requests.csv", _nul),
    ("tables/estimates.csv", _latin1),
    ("numbers.json", _truncate),
    ("numbers.json", _json_type),
    ("numbers.json", _latin1),
    ("report.html", _latin1),
    ("report.tex", _latin1),
    ("plan.json", _truncate),
    ("plan.json", _json_type),
    ("manifest.json", _json_type),
    ("manifest.json", _latin1),
    ("ledger.jsonl", _latin1),
    ("ledger.jsonl", _truncate),
    # the wrong shape inside a well-formed document
    ("plan.json", _deep),
    ("manifest.json", _deep),
    (SCREEN, _deep),
    ("plan.json", _campaigns_list),
    ("plan.json", _threshold_str),
]


@pytest.fixture(scope="module")
def sealed(stage, tmp_path_factory) -> Path:
    """The synthetic archive, sealed once with the signer's key."""
    return seal_archive(stage, tmp_path_factory.mktemp("malformed") / "archive")


def _resealed(sealed: Path, tmp_path: Path, damage) -> Path:
    """A copy of the sealed archive after ``damage(folder)``, signed again over the damage with the valid
    key, as a signer's own tool could."""
    archive = tmp_path / "archive"
    shutil.copytree(sealed, archive)
    for p in archive.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    damage(archive)
    stmt = signed_statement(statement(archive), folder_files(archive))
    (archive / SEAL_NAME).write_bytes(envelope_bytes(stmt, signer()))
    return archive


@pytest.mark.parametrize(("rel", "damage"), DAMAGE, ids=[f"{r}-{d.__name__.strip('_')}" for r, d in DAMAGE])
def test_a_sealed_malformed_file_is_a_finding_not_a_crash(sealed, tmp_path, rel, damage):
    code, out = run_check(_resealed(sealed, tmp_path, lambda archive: damage(archive / rel)))
    assert code in (1, 2), f"exit {code}:\n{out[-3000:]}"
    assert "internal error" not in out
    named = [
        line for line in out.splitlines() if line.startswith(("MISMATCH", "UNREADABLE")) and Path(rel).name in line
    ]
    assert named, f"no line names {rel}:\n{out[-3000:]}"


def test_a_file_name_cannot_print_a_line_of_its_own(sealed, tmp_path):
    """A sealed file whose name holds a newline and "OK: ..." is named escaped on one line: the only
    line starting with OK or FAIL is the verdict's, and it is FAIL."""

    def stray(archive: Path) -> None:
        (archive / "x\nOK: all consistent").write_text("stray\n", encoding="utf-8")

    code, out = run_check(_resealed(sealed, tmp_path, stray))
    assert code == 1, out[-2000:]
    verdicts = [line for line in out.splitlines() if line.startswith(("OK", "FAIL"))]
    assert len(verdicts) == 1 and verdicts[0].startswith("FAIL"), verdicts
    assert "x\\x0aOK: all consistent" in out, out[-2000:]


def test_a_screen_panel_of_the_wrong_type_is_a_finding(sealed, tmp_path):
    """screen.json's panel a list where an object belongs: mismatches (the screen's numbers no longer
    recomputable), never exit 70."""
    code, out = run_check(_resealed(sealed, tmp_path, lambda archive: _panel_list(archive / SCREEN)))
    assert code in (1, 2) and "internal error" not in out, out[-3000:]
    assert "MISMATCH numbers.json: screen|" in out, out[-3000:]
