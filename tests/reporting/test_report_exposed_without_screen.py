"""A campaign exposes tasks without a divergence screen: where an unrepaired arm of the confirmation
diverges from R on its own panel, the report states each repaired arm's matches on those tasks
("reproduces R on k of n") whether or not the screen ran, and report/check.py, which recomputes those
counts from the qualification and request tables, accepts it. A run with the screen switched off (the
device check's) was refused by the checker when the report left the counts out."""

from __future__ import annotations

import json

import pytest

from refspec.reporting import render as report
from support.synthetic_archive import make_results, run_check, seal_archive


@pytest.fixture(scope="module")
def unscreened(tmp_path_factory):
    results = make_results(tmp_path_factory.mktemp("unscreened") / "results", draws=300, screen=False)
    assert not (results / "tables" / "divergence_screen.parquet").exists()
    report.render(results, pdf=False)
    return results


def test_exposed_repairs_are_shown_without_a_screen(unscreened):
    html = (unscreened / "report.html").read_text(encoding="utf-8")
    assert "divergence_screen.csv not present: the divergence screen did not run" in html
    assert 'data-table="screen-repairs"' in html
    nums = {n["id"]: n["value"] for n in json.loads((unscreened / "numbers.json").read_text())["numbers"]}
    exposed = {k: v for k, v in nums.items() if k.startswith("exprep|") and k.endswith("|exposed")}
    assert exposed and all(v > 0 for v in exposed.values()), exposed
    # the unrepaired arms are never counted as repairs
    assert not any(f"|{arm}|" in k for k in exposed for arm in ("M0", "C0", "R_prod"))


def test_the_unscreened_report_checks(unscreened, tmp_path):
    code, out = run_check(seal_archive(unscreened, tmp_path / "archive"))
    assert code == 0, out
    assert "0 mismatches" in out
