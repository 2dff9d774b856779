"""``refspec compare A B`` on the sealed data archive of a small real study (the session's
``small_study``: the implementation and replication campaigns, the A/A twin of C_qb and the state
stages) and on copies of it changed by hand and sealed again with a test key (anc/compare.md)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from refspec.campaigns import derived
from refspec.campaigns.noise import weigh_estimates
from refspec.cli import main
from refspec.core import tables as T
from refspec.core.endpoint import Endpoint
from refspec.provenance import keys
from refspec.provenance.seal import seal
from refspec.provenance.verify import verify_archive
from support.synthetic_archive import run_check

#: the noise floor of the comparisons of a copy with scaled times: the practical threshold alone, so
#: that a scaled time is "differs" whatever the small study's own A/A control measured
THRESHOLD_ONLY = ("--noise-floor", "1")
#: the factor the PQ arms' times are scaled by: far outside the small study's own session-to-session
#: spread (three sessions of one task), so the E2 estimates' B/A interval excludes 1
SCALE = 3.0


def _reseal(study_copy, name: str, change) -> Path:
    """A copy of A whose results are changed by ``change(results_folder)`` and sealed again with the test key."""
    res = study_copy["base"] / f"{name}-results"
    shutil.copytree(study_copy["a"], res)
    campaign = verify_archive(study_copy["a"], study_copy["signer"]).statement["predicate"]["campaign"]
    (res / "SEAL.dsse.json").unlink()
    change(res)
    out = study_copy["base"] / name
    seal(
        res, out, key=study_copy["key"].private_path, campaign=campaign, created="2026-01-01T00:00:00Z", archive_id=name
    )
    return out


def _compare(study_copy, b: Path, *extra: str, pub_b: Path | None = None, capsys=None) -> tuple[int, dict]:
    code = main(
        [
            "compare",
            str(study_copy["a"]),
            str(b),
            "--pubkey-a",
            str(study_copy["signer"]),
            "--pubkey-b",
            str(pub_b or study_copy["key"].public_path),
            "--json",
            *extra,
        ]
    )
    out = capsys.readouterr().out if capsys is not None else ""
    return code, (json.loads(out) if out.strip().startswith("{") else {})


def _verdicts(doc: dict) -> tuple[dict, dict]:
    return (
        {f["finding"]: f["verdict"] for f in doc["preservation"]},
        {t["id"]: t for t in doc["timings"]},
    )


def _scale_pq(res: Path) -> None:
    """Every time of the PQ arms (target and speculative) x SCALE; ratios, contrasts and estimates recomputed
    (the A/A noise table, of QB arms only, is unchanged)."""
    reqs = T.read_records("requests", res)
    for r in reqs:
        if r["layout"] == "pq" and r["t_ns"] is not None:
            r["t_ns"] = int(r["t_ns"] * SCALE)
    qual = T.read_records("qualification", res)
    old = T.read_records("ratios", res)
    ratios = []
    for camp in dict.fromkeys(r["campaign"] for r in old):
        pairs = [(r["numerator"], r["denominator"]) for r in old if r["campaign"] == camp]
        ratios += derived.ratios_table(reqs, qual, camp, pairs)
    plan = json.loads((res / "plan.json").read_text())
    b = plan["bootstrap"]
    contrasts, estimates = derived.replication_tables(reqs, qual, threshold=b["threshold"])
    estimates = weigh_estimates(estimates, T.read_records("noise", res))  # as the campaign states them
    for name, rows in (("requests", reqs), ("ratios", ratios), ("contrasts", contrasts), ("estimates", estimates)):
        T.write_table(rows, name, res / "tables")


def test_an_archive_compared_with_itself(study_copy, capsys):
    code, doc = _compare(study_copy, study_copy["a"], pub_b=study_copy["signer"], capsys=capsys)
    assert code == 0
    pres, tim = _verdicts(doc)
    assert set(pres) == {
        "qualification",
        "first_divergence",
        "endpoints",
        "replay",
        "phase_masks",
        "partition",
        "crosses",
    }
    assert set(pres.values()) == {"same"}
    assert tim and {t["verdict"] for t in tim.values()} == {"reproduced"}
    assert {t["kind"] for t in tim.values()} == {"ratio", "estimate"}
    for t in tim.values():
        assert t["ratio"] == pytest.approx(1.0, rel=1e-12) and t["lo"] <= 1.0 <= t["hi"]
    # the A/A control C_qb/C_qb_aa is the noise floor of both (the same archive)
    floor = doc["noise_floor"]
    assert floor["recorded"] and floor["a"] == floor["b"] and floor["a"] >= 1.0
    assert not any("no A/A control" in n for n in doc["notes"])


def test_scaled_times_differ_in_timings_and_preservation_stays_same(study_copy, capsys):
    b = _reseal(study_copy, "scaled", _scale_pq)
    code, doc = _compare(study_copy, b, *THRESHOLD_ONLY, capsys=capsys)
    assert code == 0
    pres, tim = _verdicts(doc)
    assert set(pres.values()) == {"same"}
    for path in ("target", "spec"):
        t = tim[f"estimate|smollm2-135m|{path}|PQ/QB"]
        assert t["verdict"] == "differs", t
        assert t["ratio"] == pytest.approx(SCALE, rel=0.01) and t["lo"] > 1.02
    r = tim["ratio|implementation|smollm2-135m|32|M_pq/M_qb"]
    assert r["verdict"] == "differs" and r["ratio"] == pytest.approx(SCALE, rel=0.01)
    assert tim["ratio|implementation|smollm2-135m|32|M_pq/C_pq"]["verdict"] == "reproduced"  # both arms scaled
    assert tim["ratio|implementation|smollm2-135m|32|R/M_qb"]["verdict"] == "reproduced"  # neither arm scaled


def test_a_changed_endpoint_differs_with_its_row(study_copy, capsys):
    changed = {}

    def change(res: Path) -> None:
        rows = T.read_records("endpoints", res)
        r = next(r for r in rows if r["campaign"] == "implementation" and r["arm"] == "C_pq" and len(r["tokens"]) > 5)
        r["tokens"] = r["tokens"][:5] + [r["tokens"][5] + 1] + r["tokens"][6:]
        r["last_token"] = r["tokens"][-1]
        r["endpoint_sha256"] = Endpoint(tuple(r["tokens"]), r["eog"], r["stop_reason"]).sha256
        changed["key"] = "|".join(
            str(r[k]) for k in ("campaign", "family", "task_id", "arm", "cap", "session", "repeat")
        )
        T.write_table(rows, "endpoints", res / "tables")

    b = _reseal(study_copy, "endpoint", change)
    code, doc = _compare(study_copy, b, capsys=capsys)
    assert code == 1
    pres, _tim = _verdicts(doc)
    assert pres["endpoints"] == "differs"
    assert {k: v for k, v in pres.items() if k != "endpoints"} == dict.fromkeys(set(pres) - {"endpoints"}, "same")
    (f,) = [f for f in doc["preservation"] if f["finding"] == "endpoints"]
    assert f["rows_differing"] == 1
    (d,) = f["differences"]
    assert d["key"] == changed["key"] and d["column"] == "endpoint_sha256"
    assert "first differing token at index 5" in d["detail"]


def test_a_plan_change_makes_its_timings_not_comparable(study_copy, capsys):
    def change(res: Path) -> None:
        plan = json.loads((res / "plan.json").read_text())
        plan["campaigns"]["replication"]["gap_s"] = 30.0
        (res / "plan.json").write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")

    b = _reseal(study_copy, "plan", change)
    code, doc = _compare(study_copy, b, capsys=capsys)
    assert code == 0
    _pres, tim = _verdicts(doc)
    est = [t for t in tim.values() if t["kind"] == "estimate"]
    assert est and all(t["verdict"] == "not comparable" for t in est)
    assert all("plan of replication differs" in t["reason"] and "gap_s" in t["reason"] for t in est)
    assert all(t["verdict"] == "reproduced" for t in tim.values() if t["kind"] == "ratio")


def test_pinned_input_change_makes_every_timing_not_comparable(study_copy, capsys):
    def change(res: Path) -> None:
        m = json.loads((res / "manifest.json").read_text())
        for d in m["buildDefinition"]["resolvedDependencies"]:
            if d["name"].startswith("model:"):
                d["digest"]["sha256"] = "0" * 64
                break
        (res / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")

    b = _reseal(study_copy, "pinned", change)
    code, doc = _compare(study_copy, b, capsys=capsys)
    assert code == 0 and doc["inputs"]["pinned_differences"]
    assert {t["verdict"] for t in doc["timings"]} == {"not comparable"}
    assert all("pinned inputs differ" in t["reason"] for t in doc["timings"])


def test_an_archive_that_does_not_verify_exits_3(study_copy, capsys):
    bad = study_copy["base"] / "tampered"
    shutil.copytree(study_copy["a"], bad)
    p = bad / "tables" / "ratios.csv"
    p.write_bytes(p.read_bytes().replace(b"implementation", b"implementatioN", 1))
    code, _doc = _compare(study_copy, bad, pub_b=study_copy["signer"], capsys=capsys)
    assert code == 3
    wrong = "SHA256:" + "0" * 64
    code, _doc = _compare(
        study_copy, study_copy["a"], "--expect-keyid-b", wrong, pub_b=study_copy["signer"], capsys=capsys
    )
    assert code == 3
    assert main(["compare", str(study_copy["a"]), str(study_copy["a"])]) == 2  # no key: usage


def test_the_comparison_archive_is_sealed_and_checked(study_copy, capsys):
    b = _reseal(study_copy, "scaled-out", _scale_pq)
    out = study_copy["base"] / "comparison"
    code = main(
        [
            "compare",
            str(study_copy["a"]),
            str(b),
            "--pubkey-a",
            str(study_copy["signer"]),
            "--pubkey-b",
            str(study_copy["key"].public_path),
            *THRESHOLD_ONLY,
            "--out",
            str(out),
            "--key",
            str(study_copy["key"].private_path),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0 and "differs" in text and "comparison archive:" in text
    res = verify_archive(out, study_copy["key"].public_path)
    assert res.ok, res.problems
    compares = res.statement["predicate"]["compares"]
    a_seal = verify_archive(study_copy["a"], study_copy["signer"]).seal_sha256
    assert (
        compares["a"]["seal_sha256"] == a_seal
        and compares["b"]["seal_sha256"] == verify_archive(b, study_copy["key"].public_path).seal_sha256
    )
    assert compares["a"]["keyid"] == keys.fingerprint(keys.load_public_key(study_copy["signer"]))
    signed_a = f"--input-pubkey=a={study_copy['signer']}"
    code, stdout = run_check(out, signed_a, pubkey=study_copy["key"].public_path)
    assert code == 0, stdout[-4000:]
    assert "OK:" in stdout
    # B is signed with the comparison's key (--pubkey verifies it); A's signer must be given
    code, stdout = run_check(out, pubkey=study_copy["key"].public_path)
    assert code == 1 and "inputs/a/SEAL.dsse.json" in stdout
    assert "--input-pubkey a=KEY.pub" in stdout and "inputs/b/SEAL.dsse.json" not in stdout
    # a shown number changed by hand is found
    edited = study_copy["base"] / "comparison-edited"
    shutil.copytree(out, edited)
    html = (edited / "report.html").read_text()
    m = re.search(r'data-num="cmp\|estimate\|smollm2-135m\|target\|PQ/QB\|ratio"[^>]*>([0-9.]+)<', html)
    assert m
    (edited / "report.html").write_text(html.replace(m.group(0), m.group(0).replace(m.group(1), "1.000000"), 1))
    code, stdout = run_check(edited, signed_a, pubkey=study_copy["key"].public_path)
    assert code == 1 and "MISMATCH report.html: differs from the canonical rendering" in stdout, stdout[-3000:]
    assert ">1.000000</span>" in stdout, stdout[-3000:]


def test_noise_floor_is_the_widest_reach_of_the_archives_a_a_controls():
    """The noise floor comes from the noise table (the A/A controls), max(hi, 1/lo) over its rows;
    an archive without the table (or with an unqualified control, no interval) has none."""
    from refspec.compare import noise_floor_of
    from refspec.compare.model import ArchiveData

    def archive(noise_rows):
        tables = {"noise": noise_rows} if noise_rows is not None else {}
        return ArchiveData("A", Path("."), ".", "0" * 64, "SHA256:" + "0" * 64, "x", "", {}, {}, tables)

    rows = [
        {"campaign": "confirmation", "arm": "M3", "twin": "M3_aa", "lo": 0.99, "hi": 1.03},
        {"campaign": "replication", "arm": "C_qb", "twin": "C_qb_aa", "lo": 0.95, "hi": 1.01},
        {"campaign": "implementation", "arm": "M_qb", "twin": "M_qb_aa", "lo": "", "hi": ""},
    ]
    assert noise_floor_of(archive(rows)) == pytest.approx(1 / 0.95)
    assert noise_floor_of(archive(rows[:1])) == pytest.approx(1.03)
    assert noise_floor_of(archive(rows[2:])) is None
    assert noise_floor_of(archive(None)) is None


def test_an_a_a_twin_is_not_a_side_of_an_estimate():
    """The replication's spec QB side is C_qb, also when its A/A twin C_qb_aa (same mode and
    layout) ran beside it; before, the two made the side ambiguous and the E2 spec estimate
    'not comparable' with no reason."""
    from refspec.compare.timings import _arms_of

    rows = [
        dict(campaign="replication", family="f", mode="spec", layout=lay, arm=arm)
        for arm, lay in (("C_pq", "pq"), ("C_qb", "qb"), ("C_qb_aa", "qb"))
    ]
    assert _arms_of(rows, "replication", "f", "spec", "qb") == "C_qb"
    assert _arms_of(rows, "replication", "f", "spec", "pq") == "C_pq"
