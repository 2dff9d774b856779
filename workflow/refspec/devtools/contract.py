"""The import contract of the package, checked by ``refspec lint``.

The package's folders are layers, in this order (a folder may import itself and the folders
above it, never one below)::

    core, native, engine, provenance, engines, experiments, campaigns, reporting, compare, pipeline, devtools, commands

The top-level modules (``cli.py``, ``__init__.py``) may import anything; a folder that imports
``cli`` imports upward. Five rules, read from the source with :mod:`ast` (nothing is imported):

* **layers**: no import of a folder below the importing one, nor of a folder outside the order;
* **cycles**: no cycle of module-level imports between modules (relative imports resolved;
  imports in a function body and in an ``if TYPE_CHECKING:`` block do not count);
* **in-function imports**: no import of the package's own modules inside a function body,
  unless the import's line carries a comment starting ``# lazy:`` that says why (a heavy
  optional dependency);
* **function length**: no function or method longer than :data:`MAX_FUNCTION_LINES` (80) lines,
  from its ``def`` line to its last line (``end_lineno - lineno + 1``, decorators not counted).
  ``refspec lint`` applies this rule, and only this one, to the checker's package
  (``report/refspec_check``) too, with :func:`check_function_lengths`: the layers and the command
  layer are the package's own;
* **command layer**: only the command layer (``commands/`` and the top-level modules, ``cli.py``
  and ``__init__.py``) talks to the user and decides how the process ends. Everywhere else a
  module may not

  - call ``print(`` (report through a return value or an exception; progress and warnings go
    through :mod:`logging` or a tqdm bar);
  - import :mod:`argparse` (a domain function takes typed arguments, not a namespace);
  - end the process: ``sys.exit``, ``os._exit``, a call of ``exit(`` or ``quit(``, any use of
    ``SystemExit``;
  - compute an exit code: use an ``EXIT_*`` name (``refspec.core.errors``) anywhere, in a
    ``return``, an assignment, a comparison or an argument. The one use that is not computing
    one: an error class's ``exit_code = EXIT_*`` in its class body (the code that error means
    to the command that catches it), and ``core/errors.py`` itself, which defines the codes.

  Code under ``if __name__ == "__main__":`` is that module's own command line and is not checked.
  An exception is marked on its line (any line of the call or name, or a comment line just
  above its first) with a comment starting ``# contract:`` and saying why (an empty reason does
  not count).

:func:`check` returns every problem, one line each, ``path:line: message``; :func:`check_function_lengths`
the function-length problems of any folder of Python files, in the same form.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

LAYERS = (
    "core",
    "native",
    "engine",
    "provenance",
    "engines",
    "experiments",
    "campaigns",
    "reporting",
    "compare",
    "pipeline",
    "devtools",
    "commands",
)
TOP_LAYER = "(top)"  # the layer of the top-level modules
LAZY_MARK = "# lazy:"
COMMAND_LAYER = "commands"  # with the top-level modules: where printing and exit codes belong
CONTRACT_MARK = "# contract:"
ERRORS_MODULE = "core.errors"  # defines the EXIT_* codes (relative to the package)
MAX_FUNCTION_LINES = 80  # the longest function or method, def line to last line
_ENDS_PROCESS = {("sys", "exit"), ("os", "_exit")}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)  # a class body ends at a function


@dataclass
class Import:
    target: str  # the imported module, absolute (refspec.core.config)
    line: int
    module_level: bool  # executed when the importing module is imported (not in a function)
    type_only: bool  # inside ``if TYPE_CHECKING:``
    lazy: bool  # the line carries a ``# lazy:`` comment


@dataclass
class Module:
    name: str  # refspec.engine.driver (a package: refspec.engine)
    path: Path
    shown: str  # the path as problems name it
    is_package: bool
    imports: list[Import] = field(default_factory=list)
    tree: ast.Module | None = None  # the parsed source (None: it could not be parsed)


def layer_of(module: str, mods: dict[str, Module]) -> str | None:
    """The layer of a module of the package: its folder's, :data:`TOP_LAYER` for a top-level
    module, ``None`` for a folder outside the order."""
    parts = module.split(".")
    folder_pkg = ".".join(parts[:2])
    if len(parts) == 1 or (len(parts) == 2 and not (folder_pkg in mods and mods[folder_pkg].is_package)):
        return TOP_LAYER
    return parts[1] if parts[1] in LAYERS else None


def _modules(root: Path, package: str, show_from: Path) -> dict[str, Module]:
    mods = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join([package, *parts])
        try:
            shown = str(path.relative_to(show_from))
        except ValueError:
            shown = str(path)
        mods[name] = Module(name, path, shown, is_package)
    return mods


def _comments(source: str) -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(mod: Module, node: ast.Import | ast.ImportFrom, package: str, known: dict[str, Module]) -> list[str]:
    """The package's own modules an import statement names (a name imported from a package is
    its submodule when there is one, else the package itself)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == package or a.name.startswith(package + ".")]
    if node.level:
        base = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        if not base:
            return []
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    if origin != package and not origin.startswith(package + "."):
        return []
    out = []
    for a in node.names:
        sub = f"{origin}.{a.name}"
        out.append(sub if sub in known else origin)
    return out


def _collect(mod: Module, package: str, known: dict[str, Module]) -> list[str]:
    """Fill ``mod.imports``; return the problems of a file that cannot be read."""
    source = mod.path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=str(mod.path))
    except SyntaxError as e:
        return [f"{mod.shown}:{e.lineno or 0}: cannot parse: {e.msg}"]
    mod.tree = tree
    comments = _comments(source)

    def lazy_mark(node: ast.stmt) -> bool:
        end = node.end_lineno or node.lineno
        return any(LAZY_MARK in comments.get(n, "") for n in range(node.lineno, end + 1))

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _resolve(mod, child, package, known):
                    mod.imports.append(Import(target, child.lineno, not in_function, type_only, lazy_mark(child)))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, type_only)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), in_function, True)
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), in_function, type_only)
            else:
                visit(child, in_function, type_only)

    visit(tree, False, False)
    return []


def _layer_problems(mod: Module, package: str, mods: dict[str, Module]) -> list[str]:
    here = layer_of(mod.name, mods)
    if here is None:
        return [f"{mod.shown}:1: folder {mod.name.split('.')[1]!r} is not in the layer order ({', '.join(LAYERS)})"]
    if here == TOP_LAYER:
        return []
    problems = []
    for imp in mod.imports:
        there = layer_of(imp.target, mods)
        if there is None or there == here:
            continue  # a folder outside the order is reported once, at its own modules
        if there == TOP_LAYER:
            if imp.target != package:  # the package itself (refspec/__init__.py) is the root, not a layer
                problems.append(
                    f"{mod.shown}:{imp.line}: upward import: {mod.name} ({here}) imports the top-level {imp.target}"
                )
        elif LAYERS.index(there) > LAYERS.index(here):
            problems.append(
                f"{mod.shown}:{imp.line}: upward import: {mod.name} ({here}) imports {imp.target} "
                f"({there}, a layer below {here})"
            )
    return problems


def _function_problems(mod: Module) -> list[str]:
    by_line: dict[int, list[str]] = {}
    for imp in mod.imports:
        if not imp.module_level and not imp.lazy and imp.target not in by_line.get(imp.line, []):
            by_line.setdefault(imp.line, []).append(imp.target)
    return [
        f"{mod.shown}:{line}: import inside a function: {', '.join(targets)} "
        f"(move it to the module's top, or mark the line '{LAZY_MARK} <why>')"
        for line, targets in sorted(by_line.items())
    ]


def _length_problems(mod: Module) -> list[str]:
    """Every function or method of the module longer than :data:`MAX_FUNCTION_LINES` lines."""
    if mod.tree is None:
        return []  # reported by _collect
    return _long_functions(mod.tree, mod.shown)


def _long_functions(tree: ast.Module, shown: str) -> list[str]:
    """A problem for each function or method of a parsed module longer than :data:`MAX_FUNCTION_LINES`
    lines, in the order of their lines (``shown``: the module's path as problems name it)."""
    found = sorted(
        (node.lineno, node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    )
    return [f"{shown}:{line}: function {name} is {n} lines (at most {MAX_FUNCTION_LINES})" for line, name, n in found]


def check_function_lengths(root: Path, show_from: Path | None = None) -> list[str]:
    """The function-length rule alone over every Python file under the folder ``root`` (the checker's
    package, which has no layers of its own), one problem a line, ``path:line: message``, with paths
    relative to ``show_from`` (default: the folder above ``root``)."""
    root = Path(root)
    base = Path(show_from) if show_from else root.parent
    problems = []
    for path in sorted(root.rglob("*.py")):
        try:
            shown = str(path.relative_to(base))
        except ValueError:
            shown = str(path)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError as e:
            problems.append(f"{shown}:{e.lineno or 0}: cannot parse: {e.msg}")
            continue
        problems += _long_functions(tree, shown)
    return problems


def _is_main_guard(test: ast.expr) -> bool:
    """``if __name__ == "__main__":``"""
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _command_findings(tree: ast.Module) -> list[tuple[ast.AST, str]]:
    """(node, what) for each thing only the command layer may do (module docstring's list)."""
    found: list[tuple[ast.AST, str]] = []
    allowed: set[int] = set()  # id() of EXIT_* names that are an error class's exit_code

    def visit(node: ast.AST, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_main_guard(child.test):
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), in_class)
                continue
            if (
                in_class
                and isinstance(child, ast.Assign)
                and [t.id for t in child.targets if isinstance(t, ast.Name)] == ["exit_code"]
            ):
                allowed.update(id(n) for n in ast.walk(child.value))
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
                if child.func.id == "print":
                    found.append((child, "print() call"))
                elif child.func.id in ("exit", "quit"):
                    found.append((child, f"{child.func.id}() call (ends the process)"))
            elif isinstance(child, ast.Import) and any(a.name.split(".")[0] == "argparse" for a in child.names):
                found.append((child, "import of argparse"))
            elif isinstance(child, ast.ImportFrom) and (child.module or "").split(".")[0] == "argparse":
                found.append((child, "import of argparse"))
            elif isinstance(child, ast.ImportFrom) and any(a.name.startswith("EXIT_") for a in child.names):
                pass  # the import itself computes nothing; each use of the name is reported
            elif (
                isinstance(child, ast.Attribute)
                and isinstance(child.value, ast.Name)
                and (child.value.id, child.attr) in _ENDS_PROCESS
            ):
                found.append((child, f"{child.value.id}.{child.attr} (ends the process)"))
            elif isinstance(child, ast.Name) and child.id == "SystemExit":
                found.append((child, "SystemExit (ends the process)"))
            elif (isinstance(child, ast.Name) and child.id.startswith("EXIT_") and isinstance(child.ctx, ast.Load)) or (
                isinstance(child, ast.Attribute) and child.attr.startswith("EXIT_")
            ):
                if id(child) not in allowed:
                    found.append(
                        (child, f"exit code {getattr(child, 'id', None) or child.attr} (computes an exit code)")
                    )
            visit(child, isinstance(child, ast.ClassDef) or (in_class and not isinstance(child, _SCOPES)))

    visit(tree, False)
    return found


def _command_problems(mod: Module, package: str, mods: dict[str, Module]) -> list[str]:
    here = layer_of(mod.name, mods)
    if here in (TOP_LAYER, COMMAND_LAYER, None) or mod.name == f"{package}.{ERRORS_MODULE}":
        return []
    source = mod.path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=str(mod.path))
    except SyntaxError:
        return []  # reported by _collect
    comments = _comments(source)
    lines = source.splitlines()

    def marked(node: ast.AST) -> bool:
        end = getattr(node, "end_lineno", None) or node.lineno
        above = node.lineno - 1 if node.lineno > 1 and lines[node.lineno - 2].lstrip().startswith("#") else node.lineno
        return any(
            CONTRACT_MARK in comments.get(n, "") and comments[n].split(CONTRACT_MARK, 1)[1].strip()
            for n in range(above, end + 1)
        )

    return [
        f"{mod.shown}:{node.lineno}: {what} outside the command layer ({COMMAND_LAYER}/, cli.py): "
        f"move it to a command, or mark the line '{CONTRACT_MARK} <why>'"
        for node, what in _command_findings(tree)
        if not marked(node)
    ]


def _cycles(mods: dict[str, Module]) -> list[str]:
    """One problem per strongly connected group of module-level imports (Tarjan's algorithm),
    naming one cycle through it."""
    edges: dict[str, dict[str, int]] = {name: {} for name in mods}
    for m in mods.values():
        for imp in m.imports:
            if imp.module_level and not imp.type_only and imp.target in mods:
                edges[m.name].setdefault(imp.target, imp.line)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def strongconnect(v: str) -> None:
        # iterative Tarjan: (node, iterator over its successors)
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == node:
                        break
                if len(group) > 1 or node in edges[node]:
                    groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            strongconnect(v)
    problems = []
    for group in sorted(groups):
        path = _cycle_path(group[0], set(group), edges)
        first = mods[path[0]]
        problems.append(
            f"{first.shown}:{edges[path[0]][path[1]]}: import cycle: {' -> '.join(path)}"
            + (f" (one of {len(group)} modules that import each other)" if len(group) > len(path) - 1 else "")
        )
    return problems


def _cycle_path(start: str, group: set[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """The shortest cycle from ``start`` back to itself inside ``group`` (breadth first)."""
    prev: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt_frontier = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w in group and w not in seen:
                    seen.add(w)
                    prev[w] = v
                    nxt_frontier.append(w)
        frontier = nxt_frontier
    return [start, start]  # not reached: every member of a group lies on a cycle


def check(root: Path, package: str | None = None, show_from: Path | None = None) -> list[str]:
    """Every problem of the import contract in the package folder ``root`` (its name: the folder's,
    unless ``package``), one line each, ``path:line: message`` with paths relative to
    ``show_from`` (default: the folder above ``root``)."""
    root = Path(root)
    package = package or root.name
    mods = _modules(root, package, Path(show_from) if show_from else root.parent)
    problems = []
    for m in mods.values():
        problems += _collect(m, package, mods)
    for m in mods.values():
        problems += _layer_problems(m, package, mods)
        problems += _function_problems(m)
        problems += _length_problems(m)
        problems += _command_problems(m, package, mods)
    problems += _cycles(mods)
    return problems
