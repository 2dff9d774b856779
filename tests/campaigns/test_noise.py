"""The A/A control (noise floor) and the busy-machine flag: the decision rule on synthetic sessions,
the noise table from a small requests table, the checker's recomputation, the load sample."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil

import pytest
import refspec_check as CHECK

from refspec.campaigns import derived as D
from refspec.campaigns import noise as NZ
from refspec.campaigns.context import aa_twins
from refspec.core import stats as S
from refspec.core.arms import Arm
from refspec.core.errors import ConfigError
from refspec.engine import load
from refspec.reporting import render as report
from support.synthetic_archive import make_results, reseal_edited, run_check, seal_archive

THR = S.DEFAULT_THRESHOLD


# synthetic session contrasts (natural log): an A/B effect of about 5 %, and three A/A controls
AB = [0.050, 0.047, 0.052, 0.049, 0.051, 0.048]
AA_QUIET = [0.0010, -0.0008, 0.0004, -0.0012, 0.0006, 0.0000]  # contains 1, narrow
AA_DRIFT = [0.030, 0.031, 0.029, 0.032, 0.028, 0.030]  # excludes 1
AA_WIDE = [-0.050, 0.045, -0.040, 0.052, 0.010, -0.012]  # contains 1, wide


def _decision(aa: list[float], ab: list[float] = AB, rule: str = S.DEFAULT_AA_RULE) -> tuple[str, str]:
    nf, e = S.session_interval(aa), S.session_interval(ab)
    return S.aa_verdict(nf.lo, nf.hi), S.decide_weighed(e.lo, e.hi, THR, S.decision_floor(nf.lo, nf.hi, rule))


def test_quiet_aa_keeps_the_decision():
    nf = S.session_interval(AA_QUIET)
    assert nf.lo <= 1 <= nf.hi
    assert _decision(AA_QUIET) == ("ok", "exceeds")
    assert _decision(AA_QUIET, [-x for x in AB]) == ("ok", "below")


def test_aa_excluding_one_is_biased_and_its_floor_still_weighs():
    nf = S.session_interval(AA_DRIFT)
    assert nf.lo > 1
    # F = hi of the control, about 1.032: a 5 % effect (lo about 1.049) clears 1.02, not 1.02 x 1.032;
    # a 10 % effect clears both
    for rule in S.AA_RULES:  # a failed control carries its bias under either rule
        assert _decision(AA_DRIFT, rule=rule) == ("biased", "noise_too_high")
        assert _decision(AA_DRIFT, [x + 0.05 for x in AB], rule) == ("biased", "exceeds")


def test_a_wide_aa_is_no_longer_a_veto():
    """The old rule called every decision beside an A/A interval wider than 2 % machine noise; a
    clear effect whose interval clears the threshold by the floor is now decided."""
    nf = S.session_interval(AA_WIDE)
    assert nf.lo < 1 < nf.hi and nf.hi / nf.lo > THR
    F = S.noise_floor_of(nf.lo, nf.hi)
    big = [0.33, 0.35, 0.34, 0.32, 0.36, 0.34]  # a 40 % effect
    e = S.session_interval(big)
    assert e.lo > THR * F and S.decide_weighed(e.lo, e.hi, THR, F) == "exceeds"
    assert _decision(AA_WIDE, rule=S.AA_FLOOR) == ("ok", "noise_too_high")  # 5 % sits inside this wide band
    # the calibration rule: the control holds 1, so the 5 % effect's own interval decides it
    assert _decision(AA_WIDE) == ("ok", "exceeds")


def test_noise_never_turns_an_inconclusive_into_a_claim():
    assert S.decide_weighed(1.0, 1.05, THR, 1.3) == "inconclusive"
    assert S.decide_weighed(1.0, 1.05, THR, 1.0) == "inconclusive"


@pytest.mark.parametrize("lo,hi", [(0.999, 1.001), (1.001, 1.01), (0.98, 1.01), (0.99, 1.0102), (1.0, 1.02)])
def test_checker_applies_the_same_rule(lo, hi):
    assert CHECK.aa_verdict(lo, hi) == S.aa_verdict(lo, hi)
    for rule in S.AA_RULES:
        F = S.decision_floor(lo, hi, rule)
        for elo, ehi in ((1.03, 1.06), (0.9, 0.95), (1.0, 1.05), (1.021, 1.03)):
            assert CHECK.decide_weighed(elo, ehi, THR, F) == S.decide_weighed(elo, ehi, THR, F)
        assert CHECK.minimum_detectable(lo, hi, THR, rule) == S.minimum_detectable(lo, hi, THR, rule)


# --------------------------------------------------------------------------- the noise table


def _requests(aa_shift: dict[str, float], n_sessions: int = 6) -> tuple[list[dict], list[dict]]:
    """A small replication requests table (C_pq, C_qb, C_qb_aa; two tasks) and its qualification."""
    reqs, qual = [], []
    base = {"HumanEval/0": 2.0e9, "HumanEval/1": 3.0e9}
    fac = {"C_pq": 1.05, "C_qb": 1.0, "C_qb_aa": 1.0}
    for si in range(n_sessions):
        s = f"s{si + 1:02d}"
        for bi, arm in enumerate(fac):
            for t, b in base.items():
                wobble = math.exp(0.002 * ((si * 7 + bi * 3 + len(t)) % 5 - 2))
                t_ns = int(b * fac[arm] * wobble * math.exp(aa_shift.get(s, 0.0) if arm == "C_qb_aa" else 0.0))
                reqs.append(
                    dict(
                        campaign="replication",
                        family="fam",
                        session=s,
                        cap=24,
                        arm=arm,
                        mode="spec",
                        layout="pq" if arm == "C_pq" else "qb",
                        task_id=t,
                        status="ok",
                        t_ns=t_ns,
                        cpu_ns=int(t_ns * 1.9),
                        block=bi,
                        worker=f"{s}-w{bi}",
                    )
                )
    for arm in fac:
        for t in base:
            qual.append(dict(campaign="replication", family="fam", task_id=t, arm=arm, cap=24, qualified=True))
    return reqs, qual


def test_noise_table_from_a_small_requests_table():
    shift = {f"s{i + 1:02d}": 0.03 for i in range(6)}  # the twin is 3 % slower in every session
    reqs, qual = _requests(shift)
    rows = NZ.noise_table(reqs, qual, "replication")
    assert len(rows) == 1
    n = rows[0]
    assert (n["arm"], n["twin"], n["kind"], n["units"], n["sessions"], n["tasks"]) == (
        "C_qb",
        "C_qb_aa",
        "estimate",
        6,
        6,
        2,
    )
    # by hand: c_s = mean over tasks of log(t_twin / t_arm) per session, the t interval over them
    times = {(r["session"], r["arm"], r["task_id"]): r["t_ns"] for r in reqs}
    cs = [
        sum(
            math.log(times[(s, "C_qb_aa", t)]) - math.log(times[(s, "C_qb", t)]) for t in ("HumanEval/0", "HumanEval/1")
        )
        / 2
        for s in sorted(shift)
    ]
    iv = S.session_interval(cs)
    assert n["value"] == pytest.approx(math.exp(sum(cs) / len(cs)), rel=1e-12)
    assert (n["lo"], n["hi"], n["df"]) == (iv.lo, iv.hi, 5.0)
    assert n["verdict"] == "biased" and n["lo"] > 1 and "does not contain 1" in n["reason"]
    assert n["floor"] == n["hi"] and n["mde"] == pytest.approx(THR * n["hi"] * math.sqrt(n["hi"] / n["lo"]))
    assert n["cpu_value"] == pytest.approx(n["value"], rel=1e-2)
    # the twin is never a replication arm; the estimate's decision weighs the control's floor
    contrasts, est = D.replication_tables(reqs, qual, paths=["spec"])
    assert [e["comparison"] for e in est] == ["PQ/QB"] and est[0]["decision"] == "exceeds"
    weighed = NZ.weigh_estimates(est, rows)
    assert weighed[0]["floor"] == n["floor"]
    assert weighed[0]["decision"] == ("exceeds" if est[0]["lo"] > THR * n["floor"] else "noise_too_high")
    # a quiet twin: F close to 1, the decision stands
    quiet = NZ.noise_table(*_requests({}), "replication")
    assert quiet[0]["verdict"] == "ok"
    assert NZ.weigh_estimates(est, quiet)[0]["decision"] == "exceeds"


def test_a_twins_warmup_is_no_control():
    """The twin's registered warmup (excluded, at the warmup cap) makes no noise row: the run's
    A/A rows are the timed caps only (a warmup row at cap 4 once gave an empty, unqualified row)."""
    reqs, qual = _requests({})
    for arm in ("C_qb", "C_qb_aa"):
        reqs.append(dict(reqs[0], arm=arm, cap=4, status="excluded_warmup", t_ns=1.0e8, task_id="warmup"))
    rows = NZ.noise_table(reqs, qual, "replication")
    assert [(r["cap"], r["twin"]) for r in rows] == [(24, "C_qb_aa")]
    assert rows[0]["verdict"] != "unqualified"


def test_noise_table_of_a_ratio_campaign_and_unqualified_twin():
    reqs, qual = _requests({})
    for r in reqs:
        r["campaign"] = "confirmation"
    for q in qual:
        q["campaign"] = "confirmation"
    rows = NZ.noise_table(reqs, qual, "confirmation")
    ratio = D.ratios_table(reqs, qual, "confirmation", pairs=[("C_qb_aa", "C_qb")])[0]["ratio"]
    # kind ratio: the unit is the worker, six per arm (one per session here)
    assert rows[0]["kind"] == "ratio" and rows[0]["units"] == 6
    assert rows[0]["value"] == pytest.approx(ratio, rel=1e-12)
    assert all("C_qb_aa" not in (r["numerator"], r["denominator"]) for r in D.ratios_table(reqs, qual, "confirmation"))
    qual[-1]["qualified"] = False
    bad = NZ.noise_table(reqs, qual, "confirmation")[0]
    assert bad["verdict"] == "unqualified" and bad["value"] is None and "C_qb_aa" in bad["reason"]


def test_one_worker_per_arm_is_no_interval():
    reqs, qual = _requests({}, n_sessions=1)
    for r in reqs:
        r["campaign"] = "confirmation"
    for q in qual:
        q["campaign"] = "confirmation"
    (row,) = NZ.noise_table(reqs, qual, "confirmation")
    assert row["verdict"] == "unqualified" and "at least 2 workers" in row["reason"]


def test_twin_arm_in_the_definition():
    arms = [
        Arm(name="R", mode="target", layout="mq", ub=1, mask=0),
        Arm(name="M3", mode="target", layout="qb", ub=4, mask=3),
    ]
    (twin,) = aa_twins("confirmation", {"aa_arm": "M3"}, arms)
    assert twin.name == "M3_aa" and twin.with_(name="M3") == arms[1]
    assert aa_twins("confirmation", {"aa_arm": None}, arms) == []
    with pytest.raises(ConfigError):
        aa_twins("confirmation", {"aa_arm": "R"}, arms)
    with pytest.raises(ConfigError):
        aa_twins("width", {"aa_arm": "M3"}, arms)
    with pytest.raises(ConfigError):
        aa_twins("confirmation", {}, arms + [Arm(name="X_aa", mode="target", layout="qb", ub=4, mask=3)])


# --------------------------------------------------------------------------- the busy-machine flag


def _sample(cores: float) -> dict:
    top = [{"name": "stress", "pid": 4242, "cores": cores}] if cores else []
    return {"load1": 1.0, "cpu_percent": 50.0, "competing_cores": cores, "top": top, "governor": None, "freq_mhz": None}


def test_busy_machine_flag_from_a_load_sample():
    quiet, busy = _sample(0.1), _sample(0.9)
    assert not load.busy(quiet, quiet)
    assert load.busy(busy, quiet) and load.busy(quiet, busy)
    assert not load.busy(_sample(0.5), _sample(0.5))  # at the threshold: not above it
    assert load.busy_reason(busy, quiet).startswith("busy machine:") and "stress (pid 4242)" in load.busy_reason(
        busy, quiet
    )
    ledger = [
        {"kind": "block_load", "session": "s01", "block": 0, "arm": "R", "before": quiet, "after": quiet,
         "busy_threshold": load.BUSY_CORES, "busy": load.busy(quiet, quiet)},
        {"kind": "block_load", "session": "s01", "block": 1, "arm": "M3", "before": busy, "after": quiet,
         "busy_threshold": load.BUSY_CORES, "busy": load.busy(busy, quiet)},
    ]  # fmt: skip
    rows = NZ.loads_table(ledger, "confirmation", "fam")
    assert [r["busy"] for r in rows] == [False, True]
    assert rows[1]["top_competing"] == "stress:4242:0.90 | stress:4242:0.10"
    assert "1/2 block(s) ran on a busy machine" in NZ.busy_text(rows)


def test_a_real_load_sample_is_json():
    s = load.sample(window_s=0.01)
    json.dumps(s, allow_nan=False)
    assert s["competing_cores"] >= 0 and set(s) == {
        "load1",
        "cpu_percent",
        "competing_cores",
        "top",
        "governor",
        "freq_mhz",
        "steal_jiffies",
        "total_jiffies",
    }
    # /proc/stat on Linux: steal and total CPU ticks since boot
    assert s["total_jiffies"] > 0 and 0 <= s["steal_jiffies"] <= s["total_jiffies"]
    later = dict(s, steal_jiffies=s["steal_jiffies"] + 5, total_jiffies=s["total_jiffies"] + 200)
    assert load.steal_percent(s, later) == 2.5


def test_process_cpu_time_reads_proc_stat():
    import os

    t0 = load.process_cpu_ns(os.getpid())
    x = 0
    for i in range(3_000_000):
        x += i * i
    t1 = load.process_cpu_ns(os.getpid())
    assert t0 is not None and t1 >= t0 + 10_000_000  # at least one clock tick of work
    assert load.process_cpu_ns(None) is None and load.process_cpu_ns(2**22 + 12345) is None


# --------------------------------------------------------------------------- the checker


@pytest.fixture(scope="module")
def aa_archive(tmp_path_factory):
    base = tmp_path_factory.mktemp("aa")
    results = make_results(base / "results", draws=500, aa=True, aa_spread=0.01, aa_shift=0.04)
    report.render(results, pdf=False)
    return seal_archive(results, base / "archive")


def _copy(archive, tmp_path):
    dst = tmp_path / "archive"
    shutil.copytree(archive, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_checker_recomputes_the_noise_table(aa_archive):
    code, out = run_check(aa_archive)
    assert code == 0, out
    html = (aa_archive / "report.html").read_text()
    assert "A/A noise floor" in html and "Machine load: blocks run on a busy machine" in html
    assert 'data-num="noise|replication|' in html and 'data-num="loadsum|replication|' in html
    noise = (aa_archive / "tables" / "noise.csv").read_text()
    assert "C_qb_aa" in noise and "M_qb_aa" in noise and ",biased," in noise  # the shifted twins are biased
    with open(aa_archive / "tables" / "noise.csv") as f:
        floors: dict[str, float] = {}
        for r in csv.DictReader(f):
            if r["campaign"] == "replication" and r["floor"]:
                floors[r["family"]] = max(floors.get(r["family"], 1.0), float(r["floor"]))
    with open(aa_archive / "tables" / "estimates.csv") as f:
        est = [e for e in csv.DictReader(f) if e["lo"]]
    assert est and min(floors.values()) > math.exp(0.03)  # the 4 % shift sets the floors
    for e in est:  # every decision weighs its family's floor
        lo, hi, thr = float(e["lo"]), float(e["hi"]), float(e["threshold"])
        assert float(e["floor"]) == floors[e["family"]]
        assert e["decision"] == S.decide_weighed(lo, hi, thr, floors[e["family"]])


def test_edited_aa_number_is_caught(aa_archive, tmp_path):
    dst = _copy(aa_archive, tmp_path)
    p = dst / "report.html"
    html = p.read_text()
    m = re.search(r'data-num="(noise\|replication\|[^"]*\|hi)"[^>]*>([0-9.]+)<', html)
    assert m
    edited = f"{float(m.group(2)) - 0.01:.6f}"
    p.write_text(html[: m.start(2)] + edited + html[m.end(2) :])
    code, out = run_check(dst)
    assert code == 1
    assert any(
        l.startswith("MISMATCH report.html: differs from the canonical rendering") and f">{edited}</span>" in l
        for l in out.splitlines()
    ), out


def test_edited_aa_verdict_and_busy_flag_are_caught(aa_archive, tmp_path):
    dst = _copy(aa_archive, tmp_path)
    for name, col, old, new in (("noise", "verdict", "biased", "ok"), ("loads", "busy", "true", "false")):
        p = dst / "tables" / f"{name}.csv"
        lines = p.read_text().splitlines()
        i = lines[0].split(",").index(col)
        j = next(k for k, l in enumerate(lines[1:], 1) if l.split(",")[i] == old)
        cells = lines[j].split(",")
        cells[i] = new
        lines[j] = ",".join(cells)
        p.write_text("\n".join(lines) + "\n")
    code, out = run_check(dst, "--unsealed")
    assert code == 1
    assert any("tables/noise.csv" in l and "column verdict" in l for l in out.splitlines()), out
    assert any("tables/loads.csv" in l and "column busy" in l for l in out.splitlines()), out


# --------------------------------------------------------------------------- an archive from before aa_rule


@pytest.fixture(scope="module")
def legacy_results(tmp_path_factory):
    """A rendered archive decided under the floor rule whose plan.json records no aa_rule, as every
    archive sealed before the field."""
    results = make_results(tmp_path_factory.mktemp("aa-legacy") / "results", draws=500, aa=True, aa_rule=None)
    report.render(results, pdf=False)
    return results


def _rows(folder, name):
    with open(folder / "tables" / f"{name}.csv") as f:
        return list(csv.DictReader(f))


def test_an_archive_from_before_the_rule_checks_under_the_floor_rule(legacy_results, tmp_path):
    plan = json.loads((legacy_results / "plan.json").read_text())
    assert "aa_rule" not in plan and not any("aa_rule" in p for p in plan["campaigns"].values())
    noise = [n for n in _rows(legacy_results, "noise") if n["lo"]]
    assert any(n["verdict"] == "ok" for n in noise)  # a control that holds: F > 1 only under the floor rule
    for n in noise:
        assert float(n["floor"]) == S.noise_floor_of(float(n["lo"]), float(n["hi"]))
    code, out = run_check(seal_archive(legacy_results, tmp_path / "archive"))
    assert code == 0, out[-2000:]


def test_a_plan_that_claims_the_calibration_rule_for_floor_rule_tables_is_refused(legacy_results, tmp_path):
    def claim(w):
        doc = json.loads((w / "plan.json").read_text())
        doc["aa_rule"] = S.AA_CALIBRATION
        for p in doc["campaigns"].values():
            p["aa_rule"] = S.AA_CALIBRATION
        (w / "plan.json").write_text(json.dumps(doc, indent=1) + "\n")

    code, out = run_check(reseal_edited(legacy_results, tmp_path / "archive", claim))
    assert code == 1
    assert any("tables/noise.csv" in l and "column floor" in l for l in out.splitlines()), out[-2000:]
