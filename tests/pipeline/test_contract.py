"""The import contract that ``refspec lint`` runs (refspec.devtools.contract): upward imports,
import cycles, unmarked imports inside functions and functions over 80 lines fail it, on small
packages made here; functions over 80 lines fail it in the checker's package too."""

from __future__ import annotations

from pathlib import Path

from refspec.core.paths import REPO_ROOT
from refspec.devtools import contract, lint


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return pkg


CLEAN = {
    "cli.py": "import importlib\nfrom .commands import build\n",
    "core/__init__.py": "",
    "core/errors.py": "class E(Exception):\n    pass\n",
    "core/config.py": "from .errors import E\nfrom . import errors\n",
    "native/__init__.py": "",
    "native/build.py": (
        "from typing import TYPE_CHECKING\n"
        "from ..core import config\n"
        "from ..core.errors import E\n"
        "if TYPE_CHECKING:\n"
        "    from ..commands.build import run\n"  # type-only: no cycle, but still upward
    ),
    "reporting/__init__.py": "",
    "reporting/render.py": (
        "from ..native.build import E\n\n\ndef render():\n    import pkg.native.build  # lazy: heavy, for the example\n"
    ),
    "commands/__init__.py": "",
    "commands/build.py": "from ..native import build\nfrom ..reporting.render import render\n\n\ndef run(args):\n    return 0\n",
}


def _clean(tmp_path: Path, **changes: str) -> Path:
    files = dict(CLEAN)
    files.pop("native/build.py")
    files["native/build.py"] = "from ..core import config\nfrom ..core.errors import E\n"
    files.update(changes)
    return _package(tmp_path, files)


def test_clean_package_passes(tmp_path):
    assert contract.check(_clean(tmp_path)) == []


def test_upward_import_fails(tmp_path):
    pkg = _clean(
        tmp_path,
        **{"core/config.py": "from .errors import E\nfrom ..reporting import svg\n", "reporting/svg.py": "X = 1\n"},
    )
    problems = contract.check(pkg)
    assert problems == [
        "pkg/core/config.py:2: upward import: pkg.core.config (core) imports pkg.reporting.svg "
        "(reporting, a layer below core)"
    ]


def test_every_upward_import_is_reported_with_its_line(tmp_path):
    # the type-only import counts for the layers (not for cycles); an import of cli from a folder is upward
    pkg = _package(tmp_path, {**CLEAN, "engine/__init__.py": "", "engine/x.py": "\n\nfrom pkg import cli\n"})
    problems = contract.check(pkg)
    assert problems[0] == "pkg/engine/x.py:3: upward import: pkg.engine.x (engine) imports the top-level pkg.cli"
    assert problems[1].startswith(
        "pkg/native/build.py:5: upward import: pkg.native.build (native) imports pkg.commands.build"
    )
    assert len(problems) == 2


def test_folder_outside_the_order_fails(tmp_path):
    pkg = _clean(tmp_path, **{"misc/__init__.py": "", "misc/util.py": "x = 1\n"})
    problems = contract.check(pkg)
    assert len(problems) == 2 and all("'misc' is not in the layer order" in p for p in problems)


def test_cycle_fails(tmp_path):
    pkg = _clean(
        tmp_path,
        **{
            "engine/__init__.py": "",
            "engine/driver.py": "from .server import serve\n\n\ndef drive():\n    pass\n",
            "engine/server.py": "import os\nfrom . import driver\n\n\ndef serve():\n    pass\n",
        },
    )
    problems = contract.check(pkg)
    assert problems == [
        "pkg/engine/driver.py:1: import cycle: pkg.engine.driver -> pkg.engine.server -> pkg.engine.driver"
    ]


def test_cycle_through_three_modules_and_type_checking_excluded(tmp_path):
    files = {
        "engine/__init__.py": "",
        "engine/a.py": "from . import b\n",
        "engine/b.py": "from .c import x\n",
        "engine/c.py": "import typing\nif typing.TYPE_CHECKING:\n    from .a import y\nx = 1\n",
    }
    assert contract.check(_clean(tmp_path, **files)) == []
    files["engine/c.py"] = "from .a import y\nx = 1\n"
    problems = contract.check(_clean(tmp_path / "b", **files))
    assert problems == ["pkg/engine/a.py:1: import cycle: pkg.engine.a -> pkg.engine.b -> pkg.engine.c -> pkg.engine.a"]


def test_unmarked_function_level_import_fails(tmp_path):
    pkg = _clean(
        tmp_path,
        **{
            "native/models.py": (
                "import json\n\n\ndef load():\n"
                "    import yaml  # not the package's: allowed\n"
                "    from ..core import config, errors\n"
                "    from . import build  # lazy: the bindings are heavy\n"
                "    return json, yaml, config, errors, build\n"
            )
        },
    )
    problems = contract.check(pkg)
    assert problems == [
        "pkg/native/models.py:6: import inside a function: pkg.core.config, pkg.core.errors "
        "(move it to the module's top, or mark the line '# lazy: <why>')"
    ]


def test_function_level_import_does_not_make_a_cycle(tmp_path):
    pkg = _clean(
        tmp_path,
        **{
            "engine/__init__.py": "",
            "engine/driver.py": "from .server import serve\n",
            "engine/server.py": "def serve():\n    from . import driver  # lazy: the example's reason\n",
        },
    )
    assert contract.check(pkg) == []


def test_all_problems_are_collected(tmp_path):
    pkg = _clean(
        tmp_path,
        **{
            "core/config.py": "from ..reporting import svg\n",
            "reporting/svg.py": "X = 1\n",
            "engine/__init__.py": "",
            "engine/a.py": "from . import b\n\n\ndef f():\n    from ..core import errors\n",
            "engine/b.py": "from . import a\n",
        },
    )
    kinds = sorted(p.split(": ")[1] for p in contract.check(pkg))
    assert kinds == ["import cycle", "import inside a function", "upward import"]


def _function(name: str, n_lines: int, indent: str = "") -> str:
    """A function of exactly ``n_lines`` lines (its def line and ``n_lines - 1`` body lines)."""
    return f"{indent}def {name}():\n" + f"{indent}    x = 0\n" * (n_lines - 2) + f"{indent}    return x\n"


def test_a_function_over_80_lines_fails(tmp_path):
    assert contract.MAX_FUNCTION_LINES == 80
    body = (
        _function("short", 80)
        + "\n\n@staticmethod\n"  # a decorator line does not count
        + _function("long", 81)
        + "\n\nclass C:\n"
        + _function("method", 120, indent="    ")
    )
    pkg = _clean(tmp_path, **{"native/models.py": body})
    assert contract.check(pkg) == [
        "pkg/native/models.py:84: function long is 81 lines (at most 80)",
        "pkg/native/models.py:168: function method is 120 lines (at most 80)",
    ]


def test_a_function_of_81_lines_in_the_checker_package_fails(tmp_path):
    # the checker's package has its own folders and prints (its command line): only the length rule applies
    checker = _package(
        tmp_path,
        {
            "render/__init__.py": "",
            "render/sections.py": _function("short", 80) + "\n\n" + _function("long", 81),
            "cli.py": "import sys\n\n\ndef main():\n    print('ok')\n    sys.exit(0)\n",
        },
    )
    assert contract.check_function_lengths(checker, show_from=tmp_path) == [
        "pkg/render/sections.py:83: function long is 81 lines (at most 80)"
    ]


def test_refspec_lint_checks_the_function_length_of_the_checker_package():
    assert lint.CHECKER_DIR == REPO_ROOT / "report" / "refspec_check"
    assert lint.contract_problems() == contract.check(
        lint.PACKAGE_DIR, show_from=REPO_ROOT
    ) + contract.check_function_lengths(lint.CHECKER_DIR, show_from=REPO_ROOT)


def test_print_in_a_domain_module_fails(tmp_path):
    pkg = _clean(tmp_path, **{"native/build.py": "from ..core import config\n\n\ndef build():\n    print('done')\n"})
    assert contract.check(pkg) == [
        "pkg/native/build.py:5: print() call outside the command layer (commands/, cli.py): "
        "move it to a command, or mark the line '# contract: <why>'"
    ]


def test_a_marked_exception_passes(tmp_path):
    pkg = _clean(
        tmp_path,
        **{
            "native/build.py": (
                "import sys\n\n\ndef build():\n"
                "    print('step', file=sys.stderr)  # contract: progress on stderr\n"
                "    # contract: the notice before a rebuild\n"
                "    print(\n        'rebuilding',\n        file=sys.stderr,\n    )\n"
                "    print('unmarked')\n"
            )
        },
    )
    # the two marked calls pass; only the unmarked one is reported
    assert [p.split(": ")[0] for p in contract.check(pkg)] == ["pkg/native/build.py:11"]


def test_a_mark_without_a_reason_does_not_count(tmp_path):
    pkg = _clean(tmp_path, **{"native/build.py": "def build():\n    print('x')  # contract:\n"})
    assert [p.split(": ")[1] for p in contract.check(pkg)] == [
        "print() call outside the command layer (commands/, cli.py)"
    ]


def test_unmarked_argparse_import_in_a_domain_module_fails(tmp_path):
    pkg = _clean(tmp_path, **{"core/config.py": "import argparse\nfrom .errors import E\n"})
    assert contract.check(pkg) == [
        "pkg/core/config.py:1: import of argparse outside the command layer (commands/, cli.py): "
        "move it to a command, or mark the line '# contract: <why>'"
    ]


def test_ending_the_process_or_computing_an_exit_code_outside_commands_fails(tmp_path):
    errors = "EXIT_OK = 0\nEXIT_FAILED = 1\n\n\nclass E(Exception):\n    exit_code = EXIT_FAILED\n"
    pkg = _clean(
        tmp_path,
        **{
            "core/errors.py": errors,
            "native/build.py": (
                "import sys\n\nfrom ..core import errors\nfrom ..core.errors import EXIT_FAILED, EXIT_OK\n\n\n"
                "class Refused(Exception):\n    exit_code = EXIT_FAILED  # an error's code: allowed\n\n\n"
                "def build(ok):\n"
                "    if not ok:\n        sys.exit(2)\n"
                "    if ok is None:\n        raise SystemExit(3)\n"
                "    return EXIT_OK if ok else errors.EXIT_FAILED\n\n\n"
                "if __name__ == '__main__':\n    print(build(True))\n    sys.exit(0)\n"
            ),
            "commands/build.py": (
                "import argparse\nimport sys\n\nfrom ..core.errors import EXIT_OK\n\n\n"
                "def run(args: argparse.Namespace) -> int:\n    print('built')\n    sys.exit(EXIT_OK)\n"
            ),
        },
    )
    found = [p.split(" outside the command layer")[0] for p in contract.check(pkg)]
    assert found == [
        "pkg/native/build.py:13: sys.exit (ends the process)",
        "pkg/native/build.py:15: SystemExit (ends the process)",
        "pkg/native/build.py:16: exit code EXIT_OK (computes an exit code)",
        "pkg/native/build.py:16: exit code EXIT_FAILED (computes an exit code)",
    ]


def test_the_package_meets_its_import_contract():
    problems = contract.check(REPO_ROOT / "workflow" / "refspec", show_from=REPO_ROOT)
    assert problems == [], "\n".join(problems)


def test_the_checker_package_has_no_function_over_80_lines():
    problems = contract.check_function_lengths(REPO_ROOT / "report" / "refspec_check", show_from=REPO_ROOT)
    assert problems == [], "\n".join(problems)
