"""The checker carries its renderer: the repository's report/ folder alone, the archive and the signer's
public key check an archive (no workflow/, no refspec), and the renderer in the checker's package
(report/refspec_check/render) imports nothing of the pipeline's package."""

from __future__ import annotations

import ast
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from refspec_check.render import render as renderer
from refspec_check.render.sections.summary import VERIFY_COMMAND

from refspec.core.paths import REPO_ROOT
from support.synthetic_archive import make_results, run_check, seal_archive, signer, signer_pubkey

PACKAGE = REPO_ROOT / "report" / "refspec_check"
RENDERER = PACKAGE / "render"


def _report_alone(base: Path) -> Path:
    """A copy of the repository's report/ folder, alone in ``base`` (no workflow/ beside it)."""
    carried = base / "report"
    shutil.copytree(REPO_ROOT / "report", carried, ignore=shutil.ignore_patterns("__pycache__"))
    assert sorted(p.name for p in base.iterdir()) == ["report"]
    return carried


def test_report_alone_checks_an_archive(stage, tmp_path):
    """python3 -I -S <copy>/report/check.py, run outside the repository, checks a sealed archive: OK."""
    arch = seal_archive(stage, tmp_path / "archive")
    carried = _report_alone(tmp_path / "auditor")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out = run_check(arch, check=carried / "check.py", cwd=elsewhere)
    assert code == 0, out[-3000:]
    assert out.splitlines()[-1] == f"OK: {arch}", out[-3000:]
    assert "differs from the canonical rendering" not in out


def test_the_printed_command_works_with_report_alone(tmp_path):
    """The report's own command ("verify this report": python3 report/check.py ARCHIVE --pubkey KEY.pub
    --expect-keyid ...), run as printed in a folder holding only report/, the archive and the key."""
    from refspec.provenance.seal import seal
    from refspec.reporting.render import render

    results = make_results(tmp_path / "results", draws=300)
    data = tmp_path / "sealed-data"
    seal(results, data, key=signer(), archive_id="data", created="2026-10-20T00:00:00Z")
    rendered = tmp_path / "rendered"
    shutil.copytree(data, rendered, ignore=shutil.ignore_patterns("SEAL.dsse.json"))
    for q in rendered.rglob("*"):
        q.chmod(0o755 if q.is_dir() else 0o644)
    render(rendered, pdf=False, data_seal=data / "SEAL.dsse.json")
    folder = tmp_path / "auditor"
    _report_alone(folder)
    seal(rendered, folder / "ARCHIVE", key=signer(), archive_id="final", created="2026-10-20T00:00:01Z", previous=data)
    shutil.copy(signer_pubkey(), folder / "KEY.pub")
    doc = json.loads((folder / "ARCHIVE" / "numbers.json").read_text(encoding="utf-8"))
    row = next(h for h in doc["headline"] if h["finding"] == "verify this report")
    command = shlex.split("".join(row["parts"]))
    assert command[:2] == ["python3", "report/check.py"] and VERIFY_COMMAND.startswith(" ".join(command[:5]))
    r = subprocess.run(
        [sys.executable, *command[1:]],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-3000:]
    assert r.stdout.splitlines()[-1] == "OK: ARCHIVE", r.stdout[-3000:]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import of a module of the checker's package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join([*base, node.module] if node.module else base)
            out += [(node.lineno, mod)] + [(node.lineno, f"{mod}.{a.name}") for a in node.names if node.level]
    return out


def _renderer_imports() -> dict[Path, list[tuple[int, str]]]:
    files = [*sorted(RENDERER.rglob("*.py")), *(PACKAGE / name for name in renderer.DEPENDS)]
    return {p: _imports(p) for p in files}


def test_the_renderer_imports_nothing_of_refspec():
    """No module of the renderer (nor a checker module it imports) imports the pipeline's refspec: only the
    standard library and the checker's own package."""
    bad = [
        f"{p.relative_to(REPO_ROOT)}:{line}: {name}"
        for p, found in _renderer_imports().items()
        for line, name in found
        if name == "refspec" or name.startswith("refspec.")
    ]
    assert not bad, bad
    other = {
        name.split(".")[0]
        for found in _renderer_imports().values()
        for _line, name in found
        if name.split(".")[0] not in sys.stdlib_module_names
    }
    assert other <= {"refspec_check", "__future__"}, other


def test_the_renderer_version_covers_what_it_imports():
    """renderer.DEPENDS is exactly the checker's modules the renderer imports (the closure): the version
    digest covers every source the rendering runs."""
    modules = {
        name.split(".")[1]
        for found in _renderer_imports().values()
        for _line, name in found
        if name.startswith("refspec_check.") and name.split(".")[1] != "render"
    }
    assert {f"{m}.py" for m in modules if (PACKAGE / f"{m}.py").is_file()} == set(renderer.DEPENDS)
    files = {p.relative_to(PACKAGE).as_posix() for p in renderer.renderer_files()}
    assert {p.relative_to(PACKAGE).as_posix() for p in RENDERER.rglob("*.py")} <= files
    assert "schemas/tables/requests.json" in files and "archive.py" not in files
