"""Every qualified ratio's interval, verdict and detectable ratio: computed by the package
(refspec.campaigns.intervals), shown in the report, recomputed by report/check.py.

A signer who re-seals an archive with a verdict, a design or a bound of their liking is refused, and
the checker reads the design from the requests: the same rows timed by one process per arm give the
fresh (Welch) interval, by processes that serve both arms the paired one.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from refspec.campaigns import intervals as IV
from refspec.core import stats as S
from refspec.core import tables as T
from refspec.reporting import render
from support.synthetic_archive import make_results, reseal_edited, run_check, seal_archive


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    results = make_results(tmp_path_factory.mktemp("intervals") / "results", draws=300, aa=True)
    render.render(results, pdf=False)
    return results


def qualified(results: Path) -> list[dict]:
    return [r for r in T.read_records("ratios", results) if r["qualified"]]


def test_every_qualified_ratio_has_its_interval_and_the_report_shows_it(rendered):
    rows = qualified(rendered)
    assert rows
    html = (rendered / "report.html").read_text(encoding="utf-8")
    for r in rows:
        assert r["design"] == "fresh" and r["units"] >= 2, r
        assert r["lo"] <= r["ratio"] <= r["hi"], r  # a fresh interval is centred on the pooled ratio
        assert r["verdict"] in ("exceeds", "faster", "equivalent", "noise_too_high", "inconclusive")
        assert r["detectable"] > S.DEFAULT_THRESHOLD
        assert f"{r['lo']:.6f}" in html and f"{r['hi']:.6f}" in html
    rc, out = run_check(seal_archive(rendered, rendered.parent / "archive"))
    assert rc == 0, out[-2000:]


def _edit_ratios(column: str, value):
    """Change ``column`` of the first qualified ratio in ratios.parquet and ratios.csv (report untouched)."""

    def edit(w: Path) -> None:
        recs = T.read_records("ratios", w)
        i = next(i for i, r in enumerate(recs) if r["qualified"])
        recs[i][column] = value(recs[i][column])
        tdir = w / "tables" if (w / "tables").is_dir() else w
        T.write_table(recs, "ratios", tdir)

    return edit


@pytest.mark.parametrize(
    "column, value",
    [
        ("verdict", lambda v: "equivalent" if v != "equivalent" else "exceeds"),
        ("design", lambda v: "paired"),
        ("lo", lambda v: v * 0.99),
        ("detectable", lambda v: 1.01),
    ],
)
def test_a_resealed_interval_column_is_refused(rendered, tmp_path, column, value):
    archive = reseal_edited(rendered, tmp_path / "archive", _edit_ratios(column, value))
    rc, out = run_check(archive)
    assert rc == 1, out[-1500:]
    assert "ratios" in out and column in out


def _rows(design: str, effect: float, seed: int = 3) -> list[tuple[str, str, str, float]]:
    """Timed rows of arms A and B on two tasks: six processes, each serving both arms (paired) or one arm
    (fresh), with a strong process effect."""
    import random

    rng = random.Random(seed)
    out = []
    for p in range(6):
        shift = rng.gauss(0.0, 0.2)
        for arm, f in (("A", effect), ("B", 1.0)):
            proc = f"w{p}" if design == "paired" else f"w{p}-{arm}"
            if design == "fresh":
                shift = rng.gauss(0.0, 0.2)
            for t in ("T0", "T1"):
                for _ in range(3):
                    out.append((proc, arm, t, f * math.exp(shift + rng.gauss(0.0, 0.01))))
    return out


@pytest.mark.parametrize("design", ["paired", "fresh"])
def test_the_checker_reads_the_design_from_the_rows_and_agrees(design):
    rows = _rows(design, 1.05)
    assert IV.design_of(rows) == design
    want = IV.ratio_columns(rows, "A", "B", ["T0", "T1"], design)
    import refspec_check.intervals as mirror

    assert mirror.design_of(rows) == design
    got = mirror.ratio_columns(rows, "A", "B", ["T0", "T1"], design, 1.0)
    assert got["design"] == want["design"] and got["units"] == want["units"] and got["verdict"] == want["verdict"]
    for col in ("lo", "hi", "detectable"):
        assert math.isclose(got[col], want[col], rel_tol=1e-12), col


def test_pairing_decides_what_the_fresh_design_cannot():
    """The same effect and noise: the paired interval excludes 1 and says "exceeds"; the fresh one is
    wide (the process effect enters both arms)."""
    paired = IV.ratio_columns(_rows("paired", 1.05), "A", "B", ["T0", "T1"], "paired")
    fresh = IV.ratio_columns(_rows("fresh", 1.05), "A", "B", ["T0", "T1"], "fresh")
    assert paired["verdict"] == "exceeds" and paired["lo"] > 1.02
    assert math.log(fresh["hi"] / fresh["lo"]) > 10 * math.log(paired["hi"] / paired["lo"])
    assert fresh["verdict"] != "exceeds"
