"""The checker's fixtures: ``stage``, a synthetic results folder with a dishonest signer's draws
(``evil``), rendered without report.pdf, that a test copies, edits and seals again."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def stage(tmp_path_factory) -> Path:
    """The rendered synthetic results folder (one per test module; never edited in place)."""
    from refspec.reporting import render as report
    from support.synthetic_archive import make_results

    results = make_results(tmp_path_factory.mktemp("stage") / "results", evil=True, draws=300)
    report.render(results, pdf=False)
    return results
