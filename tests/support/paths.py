"""The repository and the test data folders, for test modules at any depth under ``tests/``."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO_ROOT = TESTS.parent
DATA = TESTS / "data"  # captured inputs (llama-server --help texts)
GOLDEN = TESTS / "golden"  # archives sealed by earlier versions
GPU = TESTS / "gpu"  # the device check (check.sh) and its config
