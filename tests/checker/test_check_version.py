"""Version skew said plainly: numbers.json records the renderer's version (a digest of the renderer's
source), and a checker whose renderer is another version says which one the archive needs (exit 2,
unreadable here) instead of calling an honest archive tampered."""

from __future__ import annotations

import json
from pathlib import Path

from refspec.reporting import render as report
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
    """The digest covers the renderer's sources: one byte of one module moves it."""
    src = Path(report.__file__).resolve().parent
    copy = tmp_path / "reporting"
    for p in src.rglob("*.py"):
        (copy / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        (copy / p.relative_to(src)).write_bytes(p.read_bytes())
    monkeypatch.setattr(report, "__file__", str(copy / "render.py"))
    same = report.renderer_version()
    (copy / "page.py").write_bytes((copy / "page.py").read_bytes() + b"\n")
    assert same != report.renderer_version()
