"""Render every kind of synthetic results folder and print the sha256 of each rendered file.

    PYTHONPATH=workflow:report:tests python -m support.render_digests [OUT.json]

A refactor that must not change what a reader sees runs this before and after and compares the
two listings: report.html, report.tex and numbers.json of each kind (the evil-text default, the
A/A twins, a Vulkan run on lavapipe, an unexposed family, a run without the divergence screen,
one session) must be byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

from refspec.reporting import render

from .synthetic_archive import make_results

#: the synthetic kinds and their make_results arguments
KINDS = {
    "evil": dict(evil=True, draws=300),
    "aa": dict(draws=300, aa=True),
    "vulkan": dict(draws=300, vulkan=True),
    "unexposed": dict(draws=300, unexposed="llama31-8b"),
    "unscreened": dict(draws=300, screen=False),
    "one-session": dict(n_sessions=1, draws=300),
}
RENDERED = ("report.html", "report.tex", "numbers.json")


def _freeze_clock() -> None:
    """Every timestamp the synthetic folders write (ledger records) at one fixed time, so that two
    renderings of the same code are byte-identical."""
    fixed = {"utc_now": lambda: "2026-01-01T00:00:00.000000Z", "utc_now_seconds": lambda: "2026-01-01T00:00:00Z"}
    for name, module in list(sys.modules.items()):
        if name.startswith("refspec."):
            for attr, fn in fixed.items():
                if hasattr(module, attr):
                    setattr(module, attr, fn)


def digests() -> dict[str, dict[str, str]]:
    _freeze_clock()
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="refspec-digests-") as tmp:
        for kind, kwargs in KINDS.items():
            results = make_results(Path(tmp) / kind / "results", **kwargs)
            render.render(results, pdf=False)
            out[kind] = {name: hashlib.sha256((results / name).read_bytes()).hexdigest() for name in RENDERED}
    return out


def main(argv: list[str]) -> int:
    text = json.dumps(digests(), indent=2, sort_keys=True) + "\n"
    if argv:
        Path(argv[0]).write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
