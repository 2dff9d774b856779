"""The glossary check that ``refspec lint`` runs (refspec.devtools.glossary): a public name of the
package that uses a word ``anc/glossary.md`` lists as not to use fails it, on small packages and
glossaries made here; the real package passes the real glossary."""

from __future__ import annotations

from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT
from refspec.devtools import glossary, lint

GLOSSARY = """# Glossary

Some prose with a | pipe that is not a table.

| term | meaning | where it lives | words not to use |
| --- | --- | --- | --- |
| archive | A sealed folder. | `provenance/archive.py` | `tarball`, `snapshot` |
| ledger | The hash-chained record. | `provenance/ledger.py` | history |
| floor | The A/A noise floor. | `noise` table | `noise level`, `jitter` |
| qualified ratio | A ratio of two qualified arms. | `ratios` table | `speedup` |
| worker | The HTTP process serving arms. | `engine/` | — |
"""


def _package(root: Path, files: dict[str, str], text: str = GLOSSARY) -> tuple[Path, Path]:
    pkg = root / "pkg"
    for rel, body in {"__init__.py": "", **files}.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
    g = root / "anc" / "glossary.md"
    g.parent.mkdir(parents=True, exist_ok=True)
    g.write_text(text)
    return pkg, g


def _check(tmp_path: Path, files: dict[str, str], text: str = GLOSSARY) -> list[str]:
    pkg, g = _package(tmp_path, files, text)
    return glossary.check(pkg, glossary=g, show_from=tmp_path)


CLEAN = {
    "core/__init__.py": "",
    "core/archive.py": (
        "from typing import TYPE_CHECKING\n"
        "from os import path as snapshot  # an imported name is not the package's own\n"
        "ARCHIVE_NAME = 'a'\n"
        "_snapshot_cache = {}  # private\n"
        "historyless = 1  # one word, not 'history'\n"
        "\n\n"
        "def seal(folder):\n"
        "    tarball = folder  # a local name\n"
        "    return tarball\n"
        "\n\n"
        "class Archive:\n"
        "    def snapshot(self):  # a method, not a top-level name\n"
        "        return 1\n"
        "\n\n"
        "def _jitter():\n"
        "    return 0\n"
    ),
    "engine/__init__.py": "",
    "engine/worker.py": "WORKER = 1  # a term itself; its cell lists no words\nnoise = 2\nlevel = 3\n",
}


def test_clean_package_passes(tmp_path):
    assert _check(tmp_path, CLEAN) == []


def test_every_kind_of_public_name_is_checked(tmp_path):
    problems = _check(
        tmp_path,
        {
            **CLEAN,
            "core/snapshot_io.py": "",  # a module file name
            "history/__init__.py": "",  # a package folder name
            "core/names.py": (
                "import os\n"
                "class TarballReader:\n    pass\n"  # CamelCase class
                "def load_history():\n    pass\n"  # snake_case function
                "async def fetch_snapshot():\n    pass\n"  # async function
                "MAX_SPEEDUPS = 3\n"  # a plural, in capitals
                "JITTER: float = 0.1\n"  # an annotated constant
                "A, NOISE_LEVEL = 1, 2\n"  # a phrase, in a tuple target
                "if os.name:\n    NoiseLevels = 3\n"  # a CamelCase phrase, plural, in a top-level block
                "try:\n    import json\nexcept ImportError:\n    histories = None\n"  # y -> ies
            ),
        },
    )
    reserved_for = "which the glossary reserves for"
    assert sorted(problems) == sorted(
        [
            f"pkg/core/snapshot_io.py:1: snapshot_io uses snapshot, {reserved_for} archive (anc/glossary.md)",
            f"pkg/history/__init__.py:1: history uses history, {reserved_for} ledger (anc/glossary.md)",
            f"pkg/core/names.py:2: TarballReader uses tarball, {reserved_for} archive (anc/glossary.md)",
            f"pkg/core/names.py:4: load_history uses history, {reserved_for} ledger (anc/glossary.md)",
            f"pkg/core/names.py:6: fetch_snapshot uses snapshot, {reserved_for} archive (anc/glossary.md)",
            f"pkg/core/names.py:8: MAX_SPEEDUPS uses speedup, {reserved_for} qualified ratio (anc/glossary.md)",
            f"pkg/core/names.py:9: JITTER uses jitter, {reserved_for} floor (anc/glossary.md)",
            f"pkg/core/names.py:10: NOISE_LEVEL uses noise level, {reserved_for} floor (anc/glossary.md)",
            f"pkg/core/names.py:12: NoiseLevels uses noise level, {reserved_for} floor (anc/glossary.md)",
            f"pkg/core/names.py:16: histories uses history, {reserved_for} ledger (anc/glossary.md)",
        ]
    )


def test_words_are_whole_words(tmp_path):
    files = {
        **CLEAN,
        "core/words.py": "snapshotting = 1\nHISTORYX = 2\nnoise_and_level = 3\nE1Snapshot = 4\nsnapshot2_rows = 5\n",
    }
    problems = _check(tmp_path, files)
    assert [p.split(": ")[1].split()[0] for p in problems] == ["E1Snapshot"]


def test_names_split_into_words():
    assert glossary.words_of("E1Result") == ["e1", "result"]
    assert glossary.words_of("HTTPServer_top2_margin") == ["http", "server", "top2", "margin"]
    assert glossary.words_of("`noise level`") == ["noise", "level"]


def _real_avoided() -> list[glossary.Avoided]:
    avoided, _terms, problems = glossary.read_glossary(glossary.GLOSSARY, "anc/glossary.md")
    assert problems == []
    return avoided


def test_every_word_the_real_glossary_lists_is_caught(tmp_path):
    """One module per listed word or phrase, named with it as a function, a CamelCase class and a
    plural constant: the check names every one of them, with its term."""
    avoided = _real_avoided()
    assert len(avoided) >= 40
    files = dict(CLEAN)
    for i, a in enumerate(avoided):
        snake = "_".join(a.words)
        camel = "".join(w.capitalize() for w in a.words)
        files[f"core/m{i}.py"] = (
            f"def load_{snake}():\n    pass\nclass {camel}Reader:\n    pass\nALL_{snake.upper()}S = 1\n"
        )
    problems = _check(tmp_path, files, glossary.GLOSSARY.read_text(encoding="utf-8"))
    for i, a in enumerate(avoided):
        mine = [p for p in problems if p.startswith(f"pkg/core/m{i}.py:")]
        assert len(mine) == 3, (a, mine)
        assert all(f"uses {a.text}, which the glossary reserves for {a.term} (anc/glossary.md)" in p for p in mine)


def test_the_glossary_defines_the_project_terms():
    _avoided, terms, _problems = glossary.read_glossary(glossary.GLOSSARY, "anc/glossary.md")
    names = {" ".join(n) for t in terms for n in glossary.term_names(t)}
    wanted = [
        "arm", "reference", "repair", "repaired arm", "unrepaired control", "a a twin", "campaign", "session",
        "block", "worker", "process", "design", "job", "request", "attempt", "endpoint", "qualification",
        "qualified ratio", "diagnostic ratio", "estimate", "floor", "detectable ratio", "verdict", "claim",
        "claim stage", "layout", "phase mask", "micro batch", "exposed task", "screen", "crosses", "e1", "e2",
        "seal", "archive", "manifest", "ledger", "journal", "plan",
    ]  # fmt: skip
    assert [w for w in wanted if w not in names] == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# Glossary\n\nNo table here.\n", "anc/glossary.md: no table with a 'term' and a 'words not to use' column"),
        (
            GLOSSARY + "| ledger copy | A second row. | x | `tarball` |\n",
            "anc/glossary.md:12: tarball is listed for archive and for ledger copy",
        ),
        (
            GLOSSARY.replace("| history |", "| `worker`, history |"),
            "anc/glossary.md:8: worker is listed as a word not to use, but it names the term worker",
        ),
    ],
)
def test_a_glossary_that_cannot_be_read_as_one_fails(tmp_path, text, message):
    assert message in _check(tmp_path, CLEAN, text)


def test_the_real_package_passes_the_real_glossary():
    assert glossary.check(lint.PACKAGE_DIR, show_from=REPO_ROOT) == []


def test_refspec_lint_runs_the_glossary_check():
    assert lint.GLOSSARY_CHECK == "glossary"
    assert "glossary" in (lint.__doc__ or "") and "refspec.devtools.glossary" in lint.__doc__


OWNED = """| term | meaning | where it lives | words not to use |
| --- | --- | --- | --- |
| **worker** | refspec's own HTTP process. | `refspec.engines.worker` (`process`, `http`); `refspec worker` | `daemon` |
| **job** | A unit of the crosses. | `refspec.experiments.state.jobs` (`spawn_job`), `receiver.run_job` | — |
| arm | A recipe. | `refspec.core.arms` | — |
"""


def test_a_bold_terms_word_outside_the_places_its_row_names_is_an_overloaded_use(tmp_path):
    """A term in bold has one meaning and one place: ``default_workers`` in the archive code (hashing
    threads) and ``ReplayJob`` in the replay code use the word for something else and are named; the
    worker's own modules, its command, the crosses' jobs module and a listed name pass, and a term
    not in bold (``arm``) may be used anywhere."""
    files = {
        "__init__.py": "",
        "engines/__init__.py": "",
        "engines/worker/__init__.py": "",
        "engines/worker/process.py": "class WorkerProcess:\n    pass\n\n\ndef start_worker():\n    pass\n",
        "engines/worker/http.py": "WORKER_HEADER = 1\n",
        "commands/__init__.py": "",
        "commands/worker.py": "def worker_main():\n    pass\n",
        "provenance/__init__.py": "",
        "provenance/archive.py": "def default_workers():\n    return 4\n\n\ndef arm_names():\n    pass\n",
        "experiments/__init__.py": "",
        "experiments/replay_runner.py": "class ReplayJob:\n    pass\n",
        "experiments/state/__init__.py": "",
        "experiments/state/jobs.py": "def spawn_job():\n    pass\n",
        "experiments/state/receiver.py": "def run_job():\n    pass\n\n\ndef job_count():\n    pass\n",
    }
    root = tmp_path / "refspec"
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
    g = tmp_path / "glossary.md"
    g.write_text(OWNED)
    problems = glossary.check(root, glossary=g, show_from=tmp_path)
    named = sorted(p.split(": ")[1].split(" uses ")[0] for p in problems)
    assert named == ["ReplayJob", "default_workers", "job_count"], problems
    assert all("one meaning living in" in p for p in problems)
