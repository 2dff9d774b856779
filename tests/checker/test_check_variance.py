"""The variance components of log request time (``variance``): computed by the package
(refspec.campaigns.variance), shown in the report's noise section, recomputed by report/check.py.

A signer who re-seals an archive with a component, a design or a row of their liking (or without one)
is refused; the components of synthetic paired rows are the ones they were drawn with.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from refspec.campaigns import variance as VC
from refspec.core import tables as T
from refspec.reporting import render
from support.synthetic_archive import make_results, reseal_edited, run_check, seal_archive


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    results = make_results(tmp_path_factory.mktemp("variance") / "results", draws=300, aa=True)
    render.render(results, pdf=False)
    return results


def test_every_timed_campaign_has_its_row_shown_and_the_checker_agrees(rendered):
    rows = T.read_records("variance", rendered)
    reqs = T.read_records("requests", rendered)
    timed = {(r["campaign"], r["family"], r["cap"]) for r in reqs if r["status"] == "ok" and r["t_ns"] is not None}
    assert {(r["campaign"], r["family"], r["cap"]) for r in rows} == timed
    assert any(r["reason"] is None for r in rows) and any(r["reason"] is not None for r in rows)
    html = (rendered / "report.html").read_text(encoding="utf-8")
    assert "Variance components of log request time" in html
    for r in rows:
        if r["reason"] is None:
            assert r["design"] == "fresh" and r["interaction"] is None, r
            assert math.isclose(r["sd_within"] ** 2, r["within"], rel_tol=1e-12)
            assert f'data-num="variance|{r["campaign"]}|{r["family"]}|{r["cap"]}|sd_within"' in html
        else:
            assert r["within"] is None and r["share_between"] is None, r
    rc, out = run_check(seal_archive(rendered, rendered.parent / "archive"))
    assert rc == 0, out[-2000:]


def _edit_variance(edit_rows):
    """Rewrite variance.parquet and variance.csv with ``edit_rows(records)`` (the report untouched)."""

    def edit(w: Path) -> None:
        recs = T.read_records("variance", w)
        recs = edit_rows(recs)
        tdir = w / "tables" if (w / "tables").is_dir() else w
        T.write_table(recs, "variance", tdir)

    return edit


def _first_with_components(recs: list[dict]) -> int:
    return next(i for i, r in enumerate(recs) if r["reason"] is None)


def _within(recs):
    i = _first_with_components(recs)
    recs[i]["within"] *= 1.5
    return recs


def _design(recs):
    i = _first_with_components(recs)
    recs[i]["design"] = "paired" if recs[i]["design"] == "fresh" else "fresh"
    return recs


def _drop(recs):
    del recs[_first_with_components(recs)]
    return recs


@pytest.mark.parametrize("edit, what", [(_within, "within"), (_design, "design"), (_drop, "missing")])
def test_a_resealed_variance_row_is_refused(rendered, tmp_path, edit, what):
    archive = reseal_edited(rendered, tmp_path / "archive", _edit_variance(edit))
    rc, out = run_check(archive)
    assert rc == 1, out[-1500:]
    assert "variance" in out and what in out, out[-1500:]


def _paired_rows(seed: int, procs: int, sd_b: float, sd_i: float, sd_w: float) -> list[tuple[str, str, str, float]]:
    """Timed rows of arms A and B on four tasks, every process serving both arms (the paired design)."""
    rng = random.Random(seed)
    tasks = {f"T{j}": rng.uniform(-1.0, 1.0) for j in range(4)}
    out = []
    for p in range(procs):
        b = rng.gauss(0.0, sd_b)
        for arm, effect in (("A", 0.05), ("B", 0.0)):
            g = rng.gauss(0.0, sd_i)
            for t, mu in tasks.items():
                for _ in range(3):
                    out.append((f"w{p}", arm, t, math.exp(20.0 + mu + effect + b + g + rng.gauss(0.0, sd_w))))
    return out


def test_variance_table_recovers_the_components_of_paired_rows():
    rows = _paired_rows(11, 400, 0.2, 0.05, 0.03)
    reqs = [
        dict(campaign="width", family="f", cap=16, worker=w, arm=a, task_id=t, status="ok", t_ns=int(x))
        for w, a, t, x in rows
    ]
    reqs.append(dict(reqs[0], status="excluded_warmup"))
    reqs.append(dict(reqs[0], status="failed", t_ns=None))
    reqs.append(dict(reqs[0], campaign="confirmation"))
    (row,) = VC.variance_table(reqs, "width")
    assert (row["campaign"], row["family"], row["cap"], row["design"]) == ("width", "f", 16, "paired")
    assert row["processes"] == 400 and row["requests"] == len(rows) and row["reason"] is None
    assert row["sd_between"] == pytest.approx(0.2, rel=0.1)
    assert row["sd_interaction"] == pytest.approx(0.05, rel=0.15)
    assert row["sd_within"] == pytest.approx(0.03, rel=0.05)
    assert row["share_between"] == pytest.approx(0.04 / (0.04 + 0.0025 + 0.0009), rel=0.1)
    import refspec_check.variance as mirror

    got = mirror.variance_row([(r["worker"], r["arm"], r["task_id"], float(r["t_ns"])) for r in reqs[: len(rows)]])
    for col, v in got.items():
        assert v == pytest.approx(row[col], rel=1e-12) if isinstance(v, float) else v == row[col], col


def test_too_few_processes_or_requests_give_a_reason():
    one = [r for r in _paired_rows(3, 2, 0.2, 0.05, 0.03) if r[0] == "w0"]
    row = VC.variance_row(one)
    assert row["design"] == "paired" and row["processes"] == 1 and row["reason"] == "too_few_processes"
    assert row["within"] is None and row["sd_between"] is None
    single = [("w0", "A", "T0", 1e6), ("w1", "A", "T0", 1.1e6), ("w0", "B", "T0", 1e6), ("w1", "B", "T0", 1.2e6)]
    assert VC.variance_row(single)["reason"] == "too_few_requests"
    import refspec_check.variance as mirror

    assert mirror.variance_row(one)["reason"] == "too_few_processes"
    assert mirror.variance_row(single)["reason"] == "too_few_requests"
