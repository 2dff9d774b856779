"""No test names a folder of one machine: the tests read only the clone, their temporary folders
and ``$REFSPEC_CACHE``, so an absolute path under one of ``MACHINE_FOLDERS`` (the temporary folder,
home folders, mounts) in a file under ``tests/`` is refused (a test that read one machine's results folder skipped on every other
machine). A line that names such a path for another reason (a path an archive must not write, an
input text) says why with a comment starting ``abspath:``."""

from __future__ import annotations

import re

from support.paths import TESTS

#: the tests' own output folder (tests/artifacts, every file of it ignored by git)
ARTIFACTS = TESTS / "artifacts"
#: the top folders of one machine's files (temporary, home and mounted folders)
MACHINE_FOLDERS = ("tmp", "work", "home", "root", "Users", "mnt", "media", "srv", "scratch", "var/tmp")
ABSOLUTE = re.compile(r"(?<![\w.~$}/\\-])/(?:" + "|".join(re.escape(f) for f in MACHINE_FOLDERS) + r")(?=/|\b)")
MARK = re.compile(r"#\s*abspath:\s*\S")


def absolute_paths(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every line naming a machine folder without an ``abspath:`` reason."""
    return [
        (n, line.strip())
        for n, line in enumerate(text.splitlines(), 1)
        if ABSOLUTE.search(line) and not MARK.search(line)
    ]


def _test_files() -> dict[str, str]:
    files = {}
    for path in sorted(TESTS.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if path.is_relative_to(ARTIFACTS):
            continue  # what the tests write (screenshots, browser logs), ignored by git
        try:
            files[str(path.relative_to(TESTS.parent))] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary fixtures (the golden archives)
    return files


def test_the_scanner_finds_a_machine_path_and_accepts_a_reasoned_one():
    # a results folder under the first machine folder, built from the scanner's own list
    old = f'DEFAULT = Path("/{MACHINE_FOLDERS[0]}/fresh-main2/results/default")'
    assert absolute_paths(old) == [(1, old)]
    machine = ('open("/work/x")', "p = '/home/u/results'", 'HOME="/root"', "cd /tmp && ls")  # abspath: examples
    for text in machine:
        assert absolute_paths(text), text
    for text in ('"/v1/completions"', '"/usr/bin/chromium"', "REPO_ROOT / 'tmp'", "x/tmp/y", "$HOME/tmp"):
        assert not absolute_paths(text), text
    assert not absolute_paths(old + "  # abspath: an example")


def test_no_file_under_tests_names_a_folder_of_one_machine():
    hits = [f"{rel}:{n}: {line}" for rel, text in _test_files().items() for n, line in absolute_paths(text)]
    assert not hits, "\n".join(hits)
