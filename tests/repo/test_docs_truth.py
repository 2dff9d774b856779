"""What the documents and help texts say matches the code: they cite only files the project ships,
name the modules by their names, and count and describe what the code does."""

from __future__ import annotations

import argparse
import re
import subprocess

from refspec.campaigns import derived as D
from refspec.cli import SUBCOMMANDS
from refspec.commands import decode
from refspec.core.paths import REPO_ROOT

EXEMPT: tuple[str, ...] = ()  # every tracked file is covered, the checker's included


def _tracked_text() -> dict[str, str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    files = {}
    for rel in out.decode().split("\0"):
        if not rel or rel.startswith(EXEMPT):
            continue
        path = REPO_ROOT / rel
        if not path.is_file():
            continue
        try:
            files[rel] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return files


def test_no_tracked_file_cites_a_design_document_the_project_does_not_ship():
    assert not (REPO_ROOT / "DESIGN.md").exists()
    hits = [
        f"{rel}:{n}"
        for rel, text in _tracked_text().items()
        for n, line in enumerate(text.splitlines(), 1)
        if re.search(r"\bDESIGN(\.md| ?§)", line) and rel != "tests/repo/test_docs_truth.py"
    ]
    assert not hits, hits


def test_the_report_package_is_named_refspec_reporting():
    hits = [
        f"{rel}:{n}"
        for rel, text in _tracked_text().items()
        for n, line in enumerate(text.splitlines(), 1)
        if re.search(r"\brefspec\.report\.", line) and rel != "tests/repo/test_docs_truth.py"
    ]
    assert not hits, hits


def test_no_tracked_file_names_the_renderer_or_the_table_specs_by_their_old_places():
    """The renderer is the checker's (report/refspec_check/render), the table specs are under
    report/refspec_check/schemas: no file names them in workflow/ (the pipeline keeps only
    refspec.reporting.render, which writes the files)."""
    old = (
        r"refspec\.reporting\.(sections|page|tex|svg|document|device|comparison)\b"
        r"|workflow/refspec/reporting/(?!render\.py)|workflow/schemas/(tables|compare)\b"
    )
    hits = [
        f"{rel}:{n}"
        for rel, text in _tracked_text().items()
        for n, line in enumerate(text.splitlines(), 1)
        if re.search(old, line) and rel != "tests/repo/test_docs_truth.py"
    ]
    assert not hits, hits


def test_derived_counts_its_diagnostic_pairs():
    words = {3: "three", 9: "nine", 12: "twelve"}
    doc = D.__doc__
    assert f"{words[len(D.DIAGNOSTIC_PAIRS)]} registered pairs ``DIAGNOSTIC_PAIRS``" in doc
    assert f"{words[len(D.SERVER_DIAGNOSTIC_PAIRS)]} ``SERVER_DIAGNOSTIC_PAIRS``" in doc
    for num, den in D.DIAGNOSTIC_PAIRS[:3]:
        assert f"{num}/{den}" in doc


def test_decode_help_says_what_decode_does():
    p = argparse.ArgumentParser()
    decode.add_arguments(p)
    arms = p.get_default("arms")
    for text in (SUBCOMMANDS["decode"][1], decode.__doc__):
        assert "one arm" not in text and "target-only" not in text
    assert f"default {arms}" in SUBCOMMANDS["decode"][1]
    assert f"``{arms}``" in decode.__doc__ and "``--draft``" in decode.__doc__
