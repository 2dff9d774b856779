"""The embedded family and the arms file of the tests that run real workers."""

from __future__ import annotations

import yaml

from refspec.core.paths import config_dir

FAMILY = "smollm2-135m"


def one_thread_arms(path):
    """config/arms.yaml with one thread per context (a shared 2-core machine runs tests in parallel)."""
    data = yaml.safe_load((config_dir() / "arms.yaml").read_text())
    data["defaults"]["threads"] = 1
    path.write_text(yaml.safe_dump(data))
    return str(path)
