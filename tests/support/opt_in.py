"""The opt-in test groups: the markers whose description in pyproject.toml says ``opt-in``, and
the skip that tests/conftest.py puts on their tests unless ``-m`` names them."""

from __future__ import annotations

import pytest

#: the reason prefix of an opt-in group's skip
OPT_IN = "opt-in:"


def opt_in_markers(config) -> list[str]:
    """The markers whose description in pyproject.toml says ``opt-in``: their tests run only when
    ``-m`` names them, under a plain ``pytest`` and under ``./run test`` alike."""
    names = []
    for line in config.getini("markers"):
        name, _, description = line.partition(":")
        if "opt-in" in description:
            names.append(name.split("(")[0].strip())
    return names


def skip_opt_in(config, items) -> None:
    """Skip the tests of every opt-in group that ``-m`` does not name."""
    for marker in opt_in_markers(config):
        if marker in (config.option.markexpr or ""):
            continue
        skip = pytest.mark.skip(reason=f"{OPT_IN} ./run test -m {marker}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
