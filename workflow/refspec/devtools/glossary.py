"""The glossary check of ``refspec lint``: the package's public names keep to ``anc/glossary.md``.

The glossary is a markdown table, one row per term, with the columns ``term``, ``meaning``,
``where it lives`` and ``words not to use``; the last lists, comma-separated (each in backticks
or not, ``—`` for none), the words that must not stand for the term. Read from the source with
:mod:`ast` (nothing is imported), the public names of the package are

* every module file name and sub-package folder name;
* every top-level class, function and assigned name of a module (also inside a top-level ``if``,
  ``try`` or ``with`` block),

leaving out the names that start with ``_``. A name is split into words at underscores and
CamelCase boundaries (``E1Result``: ``e1``, ``result``; ``top2_margin``: ``top2``, ``margin``),
case ignored. It uses a listed word when one of its words is that word or its plural (``s``,
``es``, ``y`` to ``ies``); a listed phrase of several words (``noise level``) is used when the
name has those words in a row, the last one possibly plural.

A term whose cell is in bold (``**worker**``) has one meaning and one place: a public name that
uses its word (or its plural) must live where the row's ``where it lives`` column says, in a module
it names (``refspec.engines.worker``, with the modules of that folder), a module beside the last one
named (``worker_http`` after ``refspec.engines.worker.engine``), a name of one (``receiver.run_job``,
``refspec.experiments.state.jobs`` (``spawn_job``)), or a command's module (``refspec worker``:
``refspec/commands/worker.py``). Anywhere else the word stands for something else (a hashing
thread called a worker), which is an overloaded use of a real term.

The glossary itself must be one table with those columns; a word listed for two terms, or
listed as a word not to use while it names a term, is a problem too.

:func:`check` returns every problem, one line each, ``path:line: message``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..core.paths import REPO_ROOT

GLOSSARY = REPO_ROOT / "anc" / "glossary.md"
TERM_COLUMN = "term"
WHERE_COLUMN = "where it lives"
AVOID_COLUMN = "words not to use"
NONE_MARKS = ("—", "-", "")
_WORD = re.compile(r"[A-Z]+[0-9]*(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_RULE_CELL = re.compile(r"^:?-+:?$")
_BLOCKS = (ast.If, ast.Try, ast.With)


@dataclass(frozen=True)
class Avoided:
    text: str  # the word or phrase as the glossary writes it
    words: tuple[str, ...]  # its lower-case words
    term: str  # the term it must not stand for
    line: int  # the glossary line that lists it


@dataclass(frozen=True)
class Owned:
    word: str  # the term's one word
    places: tuple[str, ...]  # dotted modules and names where a public name may use it
    line: int  # the glossary line of the term


def words_of(name: str) -> list[str]:
    """The lower-case words of a snake_case or CamelCase name (or of a phrase)."""
    return [w.lower() for part in re.split(r"[\W_]+", name) for w in _WORD.findall(part)]


def _plural_of(word: str, singular: str) -> bool:
    if word in (singular, singular + "s", singular + "es"):
        return True
    return singular.endswith("y") and word == singular[:-1] + "ies"


def uses(name_words: list[str], phrase: tuple[str, ...]) -> bool:
    """Whether the words of a name hold ``phrase`` in a row (its last word possibly plural)."""
    n = len(phrase)
    for i in range(len(name_words) - n + 1):
        head, last = name_words[i : i + n - 1], name_words[i + n - 1]
        if tuple(head) == phrase[:-1] and _plural_of(last, phrase[-1]):
            return True
    return False


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(line.strip().strip("|"))]


def _plain(cell: str) -> str:
    return cell.replace("`", "").replace("**", "").strip()


def read_glossary(path: Path, shown: str) -> tuple[list[Avoided], list[str], list[str]]:
    """The words not to use, the terms, and the problems of the glossary file itself."""
    avoided, terms, _owned, problems = read_terms(path, shown)
    return avoided, terms, problems


def read_terms(path: Path, shown: str) -> tuple[list[Avoided], list[str], list[Owned], list[str]]:
    """:func:`read_glossary`'s words, terms and problems, with the bold terms (:class:`Owned`) third."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        return [], [], [], [f"{shown}: cannot be read: {e}"]
    avoided: list[Avoided] = []
    terms: list[str] = []
    owned: list[Owned] = []
    heads_of_table: list[str] = []
    cols: tuple[int, int] | None = None
    for n, line in enumerate(lines, 1):
        if not line.lstrip().startswith("|"):
            if cols is not None and terms:
                break  # the table has ended
            continue
        cells = _cells(line)
        heads = [_plain(c).lower() for c in cells]
        if cols is None:
            if TERM_COLUMN in heads and any(h.startswith(AVOID_COLUMN) for h in heads):
                cols = (heads.index(TERM_COLUMN), next(i for i, h in enumerate(heads) if h.startswith(AVOID_COLUMN)))
                heads_of_table = heads
            continue
        if all(_RULE_CELL.match(c) for c in cells):
            continue
        if len(cells) <= max(cols):
            return [], [], [], [f"{shown}:{n}: a row with {len(cells)} cells, not {max(cols) + 1} or more"]
        term = _plain(cells[cols[0]])
        terms.append(term)
        if cells[cols[0]].startswith("**") and WHERE_COLUMN in heads_of_table and len(words_of(term)) == 1:
            owned.append(Owned(words_of(term)[0], places_of(cells[heads_of_table.index(WHERE_COLUMN)]), n))
        for item in cells[cols[1]].split(","):
            text = _plain(item).strip("'\"")
            if text not in NONE_MARKS and words_of(text):
                avoided.append(Avoided(text, tuple(words_of(text)), term, n))
    if cols is None:
        return [], [], [], [f"{shown}: no table with a {TERM_COLUMN!r} and a {AVOID_COLUMN!r} column"]
    return avoided, terms, owned, _glossary_problems(avoided, terms, shown)


def places_of(cell: str) -> tuple[str, ...]:
    """The dotted modules and names a ``where it lives`` cell names: ``refspec.a.b``; a bare name after
    one, as a module beside it and as a name of it (``worker_http``, ``spawn_job``, ``receiver.run_job``);
    ``refspec CMD``, the command's module ``refspec.commands.CMD``."""
    out: list[str] = []
    last = None
    for tok in re.findall(r"`([^`]+)`", cell):
        tok = tok.strip()
        if re.fullmatch(r"refspec(\.\w+)+", tok):
            last = tok
            out.append(tok)
        elif re.fullmatch(r"refspec \w+", tok):
            out.append("refspec.commands." + tok.split()[1])
        elif last is not None and re.fullmatch(r"\w+(\.\w+)*", tok):
            out += [last.rsplit(".", 1)[0] + "." + tok, last + "." + tok]
    return tuple(out)


def _module_of(shown: str) -> str:
    """The dotted module of a shown path (``refspec/engine/spawn.py`` -> ``refspec.engine.spawn``)."""
    parts = Path(shown).with_suffix("").parts
    parts = parts[parts.index("refspec") :] if "refspec" in parts else parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _lives_in(module: str, name: str, places: tuple[str, ...]) -> bool:
    full = f"{module}.{name}"
    return any(module == p or module.startswith(p + ".") or full == p or p.startswith(full + ".") for p in places)


def term_names(term: str) -> list[tuple[str, ...]]:
    """The word sequences a term cell names (``repair, repaired arm``; ``reference (R)``)."""
    return [tuple(words_of(part)) for part in re.sub(r"\([^)]*\)", "", term).split(",") if words_of(part)]


def _glossary_problems(avoided: list[Avoided], terms: list[str], shown: str) -> list[str]:
    problems = []
    names = {name: term for term in terms for name in term_names(term)}
    seen: dict[tuple[str, ...], Avoided] = {}
    for a in avoided:
        if a.words in names:
            problems.append(
                f"{shown}:{a.line}: {a.text} is listed as a word not to use, but it names the term {names[a.words]}"
            )
        if a.words in seen and seen[a.words].term != a.term:
            problems.append(f"{shown}:{a.line}: {a.text} is listed for {seen[a.words].term} and for {a.term}")
        seen.setdefault(a.words, a)
    return problems


def _assigned(target: ast.expr) -> Iterator[ast.Name]:
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for t in target.elts:
            yield from _assigned(t)


def _top_level(body: list[ast.stmt]) -> Iterator[tuple[str, int]]:
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                yield from ((t.id, t.lineno) for t in _assigned(target))
        elif isinstance(node, _BLOCKS):
            for block in ("body", "orelse", "finalbody"):
                yield from _top_level(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _top_level(handler.body)


def public_names(root: Path, show_from: Path) -> Iterator[tuple[str, int, str]]:
    """``(shown path, line, name)`` of every public name of the package folder ``root``."""
    for path in sorted(Path(root).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        try:
            shown = str(path.relative_to(show_from))
        except ValueError:
            shown = str(path)
        if path.stem == "__init__":
            if path.parent != Path(root):
                yield shown, 1, path.parent.name
        else:
            yield shown, 1, path.stem
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # the import contract reports a file it cannot parse
        for name, line in _top_level(tree.body):
            yield shown, line, name


def check(root: Path, glossary: Path = GLOSSARY, show_from: Path | None = None) -> list[str]:
    """Every public name of the package folder ``root`` that uses a word the glossary lists as not
    to use, and every problem of the glossary itself, one line each, ``path:line: message`` with
    paths relative to ``show_from`` (default: the folder above ``root``)."""
    base = Path(show_from) if show_from else Path(root).parent
    try:
        shown_glossary = str(Path(glossary).relative_to(base))
    except ValueError:
        shown_glossary = str(glossary)
    avoided, _terms, owned, problems = read_terms(glossary, shown_glossary)
    for shown, line, name in public_names(root, base):
        if name.startswith("_"):
            continue
        name_words = words_of(name)
        module = _module_of(shown)
        for o in owned:
            if any(_plural_of(w, o.word) for w in name_words) and not _lives_in(module, name, o.places):
                problems.append(
                    f"{shown}:{line}: {name} uses {o.word}, which the glossary gives one meaning living in "
                    f"{', '.join(o.places[:3])}{' ...' if len(o.places) > 3 else ''} ({shown_glossary}:{o.line})"
                )
        for a in avoided:
            if uses(name_words, a.words):
                problems.append(
                    f"{shown}:{line}: {name} uses {a.text}, which the glossary reserves for {a.term} ({shown_glossary})"
                )
    return problems
