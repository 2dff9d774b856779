"""Version skew said plainly: numbers.json records the renderer's version (a digest of the renderer's
source), and a checker whose renderer is another version says which one the archive needs (exit 2,
unreadable here) instead of calling an honest archive tampered."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from refspec_check.render import render as report

from support.synthetic_archive import reseal_edited, run_check


def test_numbers_json_records_the_renderer_version(stage):
    doc = json.loads((stage / "numbers.json").read_text(encoding="utf-8"))
    assert doc["renderer"] == report.renderer_version() and len(doc["renderer"]) == 64
    assert list(doc)[:2] == ["format", "renderer"]


def test_another_renderer_version_is_named_not_called_tampering(stage, tmp_path):
    other = "f" * 64

    def edit(work: Path) -> None:
        p = work / "numbers.json"
        p.write_text(p.read_text(encoding="utf-8").replace(report.renderer_version(), other), encoding="utf-8")

    code, out = run_check(reseal_edited(stage, tmp_path / "archive", edit))
    assert code == 2, out[-3000:]
    assert f"rendered by renderer {other[:16]}, this checker renders {report.renderer_version()[:16]}" in out
    assert "differs from the canonical rendering" not in out


def test_the_version_changes_with_the_renderer_source(tmp_path, monkeypatch):
    """The digest covers the renderer's sources, the checker's modules it imports and the table specs it reads
    the tables by: one byte of any of them moves it; a module of the checker the renderer does not import
    does not."""
    src = Path(report.__file__).resolve().parents[1]  # the checker's package
    copy = tmp_path / "refspec_check"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(report, "__file__", str(copy / "render" / "render.py"))
    same = report.renderer_version()
    for rel in ("render/page.py", "names.py", "schemas/tables/requests.json", "archive.py"):
        before = (copy / rel).read_bytes()
        (copy / rel).write_bytes(before + b"\n")
        assert (same != report.renderer_version()) == (rel != "archive.py"), rel
        (copy / rel).write_bytes(before)
    assert same == report.renderer_version()
