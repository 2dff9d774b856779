"""What the documents state of the code is checked against the code: every file or folder that
README.md, CONTRIBUTING.md and anc/*.md name in backticks exists, every ``refspec.…`` module or name
they cite resolves, each file the README's architecture table lists sits in its row's folder, and
the lists they give (the campaigns, the engines, ``refspec qualify``'s sub-commands) are the code's."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from support.paths import REPO_ROOT as REPO

DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "anc").glob("*.md"))]
PKG = REPO / "workflow" / "refspec"
# where a relative path in a document is looked up, in order
ROOTS = [REPO, PKG, REPO / "workflow", REPO / "report", REPO / "report" / "refspec_check", REPO / "tests"]
SUFFIXES = (".py", ".md", ".yaml", ".smk", ".txt", ".json", ".toml", ".sh", ".patch")
# the frozen plan's executor label for the worker (every plan records it so; it names no module)
LABELS = {"refspec.engine.worker"}
TOP = {p.name for p in REPO.iterdir() if not p.name.startswith(".git")}
FOLDERS = {p.name for p in PKG.iterdir() if p.is_dir()} | {"render", "schemas"}


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\s]+)`", text)


def _placeholder(seg: str) -> bool:
    """A segment that stands for a name (NAME, FAMILY, <id>, *.json, $VAR, ~)."""
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[a-z.]+)?", seg)) or any(c in seg for c in "<>*{}$~")


def _paths(doc: Path) -> list[str]:
    """The repository paths a document names: a first segment that is a top-level entry of the
    repository or a folder of the package (then a module or a folder: a results folder shares some
    of their names, its files do not end in .py), no placeholder segment."""
    out = []
    for tok in _backticked(doc.read_text(encoding="utf-8")):
        tok = tok.rstrip(".,:;)")
        segs = [x for x in tok.split("/") if x]
        if "/" not in tok or "://" in tok or tok.startswith(("-", "./", "/")) or len(segs) < 2:
            continue
        if any(_placeholder(x) for x in segs) or not (tok.endswith(SUFFIXES) or tok.endswith("/")):
            continue
        if segs[0] in TOP or (segs[0] in FOLDERS and tok.endswith(".py")):
            out.append(tok)
    return out


def _exists(tok: str) -> bool:
    return any((root / tok).exists() for root in ROOTS)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_document_names_exists(doc):
    missing = sorted({t for t in _paths(doc) if not _exists(t)})
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            if not hasattr(obj, p):
                return False
            obj = getattr(obj, p)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_refspec_name_a_document_cites_resolves(doc):
    text = doc.read_text(encoding="utf-8")
    names = {m.rstrip(".") for m in re.findall(r"\brefspec(?:_check)?(?:\.[A-Za-z_][A-Za-z0-9_]*)+", text)}
    # refspec.table, refspec.dev ...: metadata keys and domains, not modules of the package
    modules = [n for n in names if _resolves(".".join(n.split(".")[:2])) and n not in LABELS]
    bad = sorted(n for n in modules if not _resolves(n))
    assert not bad, f"{doc.name} cites names that do not resolve: {bad}"


def test_each_file_of_the_architecture_table_is_in_its_rows_folder():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = []
    for m in re.finditer(r"^\| `([a-z_]+)/` \| (.*) \|$", readme, re.M):
        folder, text = PKG / m.group(1), m.group(2)
        checker = REPO / "report" / "refspec_check"
        for tok in _backticked(text):
            if tok.endswith(".py") and "/" not in tok.rstrip("/"):
                if not (any(folder.rglob(tok)) or any(checker.rglob(tok))):
                    missing.append(f"{m.group(1)}/ {tok}")
    assert not missing, missing


def test_the_lists_the_documents_give_are_the_codes():
    from refspec_check.names import CAMPAIGNS

    from refspec.core.engine_registry import engines, qualify_presets

    glossary = (REPO / "anc" / "glossary.md").read_text(encoding="utf-8")
    row = next(line for line in glossary.splitlines() if line.startswith("| campaign |"))
    listed = re.findall(r"`([a-z_]+)`", row.split("|")[2].split(":", 1)[1])
    assert listed == list(CAMPAIGNS), "the glossary's campaign row lists other campaigns than the code"
    engine_row = next(line for line in glossary.splitlines() if line.startswith("| engine |"))
    kinds = re.findall(r"\(`([a-z_]+)`\)", engine_row)
    assert kinds == list(engines()), "the glossary's engine row lists other engines than the registry"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `qualify ([a-z-]+) ", readme, re.M))
    assert rows == set(qualify_presets()), "the README's command table lists other qualify sub-commands"


def test_a_wrong_path_or_name_is_caught(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "see `engine/openvino_server.py`, `results/NAME/x.py` and `refspec.engine.worker_process.start_worker`\n"
    )
    assert [t for t in _paths(doc) if not _exists(t)] == ["engine/openvino_server.py"]
    assert not _resolves("refspec.engine.worker_process.start_worker")
    assert _resolves("refspec.engines.worker.process.start_worker")
