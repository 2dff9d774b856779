"""The engines refspec can time and qualify: one registry, one folder per engine.

An engine is what serves an arm's requests behind the process interface
(:class:`refspec.engine.process.ArmProcess`). Each has a folder of its own,
``refspec/engines/<folder>/``, whose ``__init__.py`` declares it as ``ENGINE``, an :class:`Engine`:
its arms' ``kind``, its name in words, where its launcher is, the settings an arm of it carries
(their key in the arm record and the class that reads and checks them), and its ``refspec
qualify`` preset. :data:`PLUGINS` lists the folders, in the order the house shows them.

The rest of the house reads the engines only through :func:`engine` and :data:`KINDS`:
:class:`refspec.core.arms.Arm` checks an arm's kind and settings, the launcher
(:func:`refspec.engine.launcher.start_process`) starts its process, ``refspec qualify`` offers a
sub-command per preset. Adding an engine is a folder under ``refspec/engines/`` and its line in
:data:`PLUGINS`; no other module names it (``tests/engines/test_registry.py`` checks that).

The launcher and the preset are named as ``"module:attribute"`` and imported when first used
(:meth:`Engine.load`): an engine's process code lives in a layer above ``core``, and an engine
whose dependencies are absent costs nothing until one of its arms runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

PACKAGE = __name__.rsplit(".", 2)[0]  # refspec
PLUGINS = ("worker", "llama_server", "openvino", "llama_cpp_python")


@dataclass(frozen=True)
class Engine:
    """One engine's declaration (its folder's ``ENGINE``).

    ``kind``: the arms' ``kind``; ``name``: the engine in words; ``start``: its launcher
    ``(ctx, arm, block) -> (process, warmup record)`` as ``"module:function"`` (relative to the
    engine's folder when it starts with a dot); ``start_paired``: the same for several arms in one
    process (only an engine that serves several arms at once has it); ``settings_key``: the key of
    the arm's engine settings in its record (``None``: the engine takes none); ``settings``: the
    class that reads them (``from_record``, ``record``); ``check``: the problems of an arm's recipe
    on this engine (its settings included), each a phrase; ``reference_problems``: why an arm of it
    cannot be a reference, beyond the house's rule (``None``: the house's rule only); ``micro_batch``:
    whether its arms' ``ub`` is a micro-batch (the house's rule: a reference runs ub 1); ``qualify``:
    its ``refspec qualify`` preset (``"module:attribute"``).
    """

    kind: str
    name: str
    folder: str
    start: str
    start_paired: str | None = None
    settings_key: str | None = None
    settings: type | None = None
    check: Callable[[Any], list[str]] | None = None
    reference_problems: Callable[[Any], list[str] | None] | None = None
    micro_batch: bool = (
        True  # False: the engine has no micro-batch setting (the house's ub-1 reference rule does not apply)
    )
    qualify: str | None = None

    def load(self, ref: str) -> Any:
        """The attribute ``"module:attribute"`` names (a module starting with a dot is in the engine's folder)."""
        module, _, attr = ref.partition(":")
        if module.startswith("."):
            module = f"{PACKAGE}.engines.{self.folder}{module}"
        return getattr(importlib.import_module(module), attr)


def _declared() -> dict[str, Engine]:
    out: dict[str, Engine] = {}
    for folder in PLUGINS:
        e = importlib.import_module(f"{PACKAGE}.engines.{folder}").ENGINE
        if e.folder != folder or e.kind in out:
            raise ConfigError(f"engine folder {folder}: its ENGINE names folder {e.folder!r}, kind {e.kind!r}")
        out[e.kind] = e
    return out


_ENGINES: dict[str, Engine] = {}


def engines() -> dict[str, Engine]:
    """Every engine by its arms' kind, in :data:`PLUGINS` order."""
    if not _ENGINES:
        _ENGINES.update(_declared())
    return _ENGINES


def engine(kind: str, arm: str | None = None) -> Engine:
    """The engine of arms of ``kind``; :class:`ConfigError` naming the known kinds when there is none."""
    es = engines()
    if kind not in es:
        who = f"arm {arm}: " if arm else ""
        raise ConfigError(f"{who}kind {kind!r} is not one of {', '.join(es)}")
    return es[kind]


def kinds() -> tuple[str, ...]:
    """The arms' kinds, in :data:`PLUGINS` order."""
    return tuple(engines())


# --------------------------------------------------------------------------- refspec qualify presets


@dataclass(frozen=True)
class QualifyOption:
    """One command-line option of an engine's ``refspec qualify`` sub-command (its argparse keywords)."""

    flags: tuple[str, ...]
    help: str
    default: Any = None
    type: type | None = None
    choices: tuple[str, ...] | None = None


@dataclass
class QualifySetup:
    """What an engine's preset makes of the command's options, before the campaign runs.

    ``arms``: the arms file's ``arms:`` (the reference and the candidates); ``version``: the
    engine's version (``None``: unknown); ``reference_args``: how its reference runs, in words;
    ``target``: what is qualified, in words (the summary's first line); ``record``: the engine's
    entry in ``verdicts.json``; ``tool``: a binary the run starts (hashed into the manifest)."""

    arms: dict
    version: str | None
    reference_args: str
    target: str
    record: dict
    tool: Any = None


@dataclass(frozen=True)
class QualifyPreset:
    """An engine's ``refspec qualify <command>``: the engine against its own reference.

    ``setup(options)`` (the command's options as a dict: ``model``, ``draft``, ``k`` and the
    preset's own) returns a :class:`QualifySetup` or raises a usage error; ``pins(files, draft,
    setup, lib_dir)`` returns what the sealed archive's source manifest adds for this engine:
    (artifacts, environments, the manifest's ``qualify`` entry); ``usage(options)``, when given,
    refuses (a usage error) options that cannot run before anything is created or started."""

    command: str
    help: str
    reference: str
    default_k: int
    setup: Callable[[dict], QualifySetup]
    pins: Callable[[Any, str | None, QualifySetup, Any], tuple[list, dict, dict]]
    options: tuple[QualifyOption, ...] = ()
    usage: Callable[[dict], None] | None = None  # refuses options that cannot run, before anything runs


def qualify_presets() -> dict[str, tuple[Engine, QualifyPreset]]:
    """Every engine's ``refspec qualify`` preset by its sub-command."""
    out = {}
    for e in engines().values():
        if e.qualify is not None:
            p = e.load(e.qualify)
            out[p.command] = (e, p)
    return out
