"""The README's commands are executed: every ``./run ...`` line of its code blocks and every command
of its command table is parsed by the command's own argument parser (nothing is run), and each
command's ``--help`` exits 0. A README example that the command line refuses (an option it does not
have, a sub-command left out) fails here."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from refspec import cli
from support.paths import REPO_ROOT as REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
# commands that hand their arguments to another program (Snakemake, pytest, bash)
WRAPPERS = ("main", "test", "shell")


def code_block_lines() -> list[str]:
    """The ``./run ...`` lines of the README's fenced code blocks."""
    out, inside = [], False
    for line in README.splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if inside and line.strip().startswith("./run "):
            out.append(line.strip()[len("./run ") :])
    return out


def table_commands() -> list[str]:
    """The synopses of the README's command table, as a user would type them: ``[--x Y]`` with its
    option given, ``a\\|b`` as its first choice, ``...`` dropped."""
    out = []
    for m in re.finditer(r"^\| `([a-z][^`]*)` \|", README, re.M):
        s = m.group(1).replace("\\|", "|")
        s = re.sub(r"\[([^\]]*)\]", r"\1", s)
        s = re.sub(r"(\S+)\|\S+", r"\1", s).replace("...", "")
        for part in s.split(", "):
            words = [PLACEHOLDERS.get(w, w) for w in part.split()]
            if words:
                out.append(" ".join(words))
    return out


# a synopsis's placeholders for a number or a fixed choice, as a user fills them in
PLACEHOLDERS = {"N": "8", "K": "2", "B": "16", "STAGE": "replay"}


def parse(line: str) -> None:
    """Parse ``line`` (``COMMAND ARGS``) with the command's own parser, as cli.main does, running nothing."""
    argv = shlex.split(line)
    name = argv[0]
    assert name in cli.SUBCOMMANDS, f"{name!r} is not a refspec command"
    command = cli._load(name)
    parser = argparse.ArgumentParser(prog=f"refspec {name}", exit_on_error=False)
    command.add_arguments(parser)
    if name in getattr(command, "PASSTHROUGH", ()):
        parser.parse_known_args(argv[1:])
    else:
        parser.parse_args(argv[1:])


LINES = [line for line in code_block_lines() if line.split()[0] not in WRAPPERS]
SYNOPSES = [s for s in table_commands() if s.split()[0] not in WRAPPERS and s.split()[0] in cli.SUBCOMMANDS]


def test_the_readme_has_commands_to_check():
    assert code_block_lines()[:2] == ["main", "test"]  # the README starts with the two commands
    assert len(LINES) >= 2 and len(SYNOPSES) >= 12


@pytest.mark.parametrize("line", LINES + SYNOPSES)
def test_a_readme_command_parses(line, capsys):
    """The command line accepts the README's example as written (exit 2 would be a usage error)."""
    try:
        parse(line)
    except SystemExit as e:
        err = capsys.readouterr().err
        raise AssertionError(f"./run {line}: exit {e.code}: {err.strip()[-300:]}") from None
    except argparse.ArgumentError as e:
        raise AssertionError(f"./run {line}: {e}") from None


@pytest.mark.parametrize("name", sorted({line.split()[0] for line in LINES + SYNOPSES}))
def test_help_of_each_readme_command(name, capsys):
    try:
        code = cli.main([name, "--help"])
    except SystemExit as e:
        code = e.code
    assert code == 0 and capsys.readouterr().out.startswith(f"usage: refspec {name}")


def test_a_wrong_example_is_caught():
    """The check refuses what the README once said: ``qualify`` needs its sub-command."""
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        parse("qualify --server-binary /path/to/llama-server --model target.gguf")
