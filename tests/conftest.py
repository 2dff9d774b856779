"""Shared fixtures: the patched native build and the embedded default family's model files.

Both are prepared once per test session (a first run builds the libraries and
derives the model files; later runs find them in the cache).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def native_build():
    """The patched llama.cpp build (:func:`refspec.native.build.current`)."""
    from refspec.native import build as native

    return native.current()


@pytest.fixture(scope="session")
def lib_path(native_build):
    """The folder with the patched libraries (what LLAMA_CPP_LIB_PATH points at)."""
    return native_build.lib_dir


@pytest.fixture(scope="session")
def family_files(native_build):
    """The ``smollm2-135m`` target and drafts, checked against their pins."""
    from refspec.native import models

    return models.ensure_family("smollm2-135m")


@pytest.fixture(scope="session")
def vulkan_build():
    """The patched build with the Vulkan backend (``./run test`` prepares it); the tests that need
    it skip only where this machine cannot have it (no Vulkan runtime and no root with apt)."""
    from refspec.native import build as native
    from refspec.native import vulkan

    why = vulkan.unavailable()
    if why:
        pytest.skip(f"Vulkan backend unavailable: {why}")
    return native.build(native.BuildOptions(backend="vulkan"), quiet=True)


@pytest.fixture(scope="session")
def replay_tool():
    """``refspec-replay`` of the default (CPU) native build, or ``$REFSPEC_REPLAY_TOOL``."""
    import os
    from pathlib import Path

    from refspec.native import build as native

    env = os.environ.get("REFSPEC_REPLAY_TOOL")
    return Path(env) if env else native.current().replay_tool


def opt_in_markers(config) -> list[str]:
    """The markers whose description in pyproject.toml says ``opt-in``: their tests run only when
    ``-m`` names them, under a plain ``pytest`` and under ``./run test`` alike."""
    names = []
    for line in config.getini("markers"):
        name, _, description = line.partition(":")
        if "opt-in" in description:
            names.append(name.split("(")[0].strip())
    return names


def pytest_collection_modifyitems(config, items):
    """The opt-in tests (``server_build``, ``bundle_round_trip``, ``cuda_build``, ``upstream_suite``
    and ``other_server`` build for a long time or download, ``reproduce_full`` runs the whole
    default study again) are skipped unless ``-m`` names them."""
    for marker in opt_in_markers(config):
        if marker in (config.option.markexpr or ""):
            continue
        skip = pytest.mark.skip(reason=f"opt-in: ./run test -m {marker}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
