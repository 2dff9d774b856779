"""A comparison archive (``refspec compare A B --out``) changed by its signer and sealed again with a valid
key: report/check.py recomputes every row, label, verdict and the band from the two carried inputs, so a
deleted "differs" row, a changed timing verdict, an inflated band or a verdict word changed in the report
is refused (anc/compare.md)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from refspec.campaigns import derived as D
from refspec.campaigns import noise as NZ
from refspec.cli import main
from refspec.compare import compare_archives, load_verified
from refspec.compare.archive import write_archive
from refspec.compare.model import ArchiveNoiseFloors
from refspec.compare.timings import verdict
from refspec.core import tables as T
from refspec.core.endpoint import Endpoint
from refspec.provenance import keys
from refspec.provenance.seal import seal
from support.synthetic_archive import make_results, run_check, seal_archive, signer_pubkey


def _diverged_endpoint(eps: list[dict]) -> tuple[dict, int]:
    """A confirmation endpoint that leaves R's before its last two tokens, and where it first does."""
    ref = {(e["family"], e["task_id"], e["cap"]): e for e in eps if e["campaign"] == "confirmation" and e["arm"] == "R"}
    for e in eps:
        r = ref.get((e["family"], e["task_id"], e["cap"]))
        if e["campaign"] != "confirmation" or e["arm"] == "R" or r is None:
            continue
        i = next((j for j, (x, y) in enumerate(zip(e["tokens"], r["tokens"])) if x != y), None)
        if i is not None and i + 2 < len(e["tokens"]):
            return e, i
    raise AssertionError("the synthetic confirmation has no diverging endpoint")


def _slower_pq_and_one_endpoint(res: Path) -> None:
    """B: the replication's PQ arms 1.5x slower (its E2 estimates recomputed) and one endpoint changed."""
    reqs = T.read_records("requests", res)
    for r in reqs:
        if r["campaign"] == "replication" and r["layout"] == "pq" and r["t_ns"] is not None:
            r["t_ns"] = int(r["t_ns"] * 1.5)
    qual = T.read_records("qualification", res)
    contrasts, estimates = D.replication_tables(reqs, qual)
    noise = [n for n in T.read_records("noise", res) if n["campaign"] == "replication"]
    estimates = NZ.weigh_estimates(estimates, noise)
    for name, rows in (("requests", reqs), ("contrasts", contrasts), ("estimates", estimates)):
        T.write_table(rows, name, res / "tables")
    eps = T.read_records("endpoints", res)
    e, i = _diverged_endpoint(eps)
    # a token after its first divergence from the reference: B's qualification and ratios stay what its
    # records give (the comparison's checker recomputes them from the carried requests and endpoints)
    e["tokens"] = e["tokens"][: i + 1] + [e["tokens"][i + 1] + 1] + e["tokens"][i + 2 :]
    e["last_token"] = e["tokens"][-1]
    e["endpoint_sha256"] = Endpoint(tuple(e["tokens"]), e["eog"], e["stop_reason"]).sha256
    T.write_table(eps, "endpoints", res / "tables")


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """Synthetic archives A and B (B: slower PQ arms, one endpoint changed) and their comparison
    archive (``out``), sealed by the comparison's signer (``key``), under ``base``."""
    base = tmp_path_factory.mktemp("compare-tamper")
    ra = make_results(base / "results-a", draws=300, aa=True)
    rb = base / "results-b"
    shutil.copytree(ra, rb)
    _slower_pq_and_one_endpoint(rb)
    a, b = seal_archive(ra, base / "a"), seal_archive(rb, base / "b")
    key = keys.generate(base / "keys", name="compare_signer")
    out = base / "comparison"
    code = main(
        ["compare", str(a), str(b), "--pubkey", str(signer_pubkey()), "--out", str(out), "--key", str(key.private_path)]
    )
    assert code == 1  # the endpoint differs
    return {"base": base, "a": a, "b": b, "key": key, "out": out}


def _lie(comparison, name: str, change) -> Path:
    """The signer's comparison: the real comparison of A and B, changed by ``change``, written and sealed by
    the comparison's own writer with his valid key (tables, numbers.json and both reports agree)."""
    a = load_verified(comparison["a"], signer_pubkey(), "A")
    b = load_verified(comparison["b"], signer_pubkey(), "B")
    c = compare_archives(a, b)
    change(c)
    out = comparison["base"] / name
    write_archive(c, out, key=comparison["key"].private_path)
    return out


def _reseal_edited(comparison, name: str, edit) -> Path:
    """The clean comparison archive with its files edited by ``edit(folder)`` and sealed again (same
    statement: campaign compare, the same compared archives) with the signer's valid key."""
    st = json.loads((comparison["out"] / "SEAL.dsse.json").read_text())
    import base64

    pred = json.loads(base64.b64decode(st["payload"]))["predicate"]
    work = comparison["base"] / f"{name}-results"
    shutil.copytree(comparison["out"], work)
    (work / "SEAL.dsse.json").unlink()
    edit(work)
    out = comparison["base"] / name
    seal(
        work,
        out,
        key=comparison["key"].private_path,
        campaign="compare",
        predicate_extra={"compares": pred["compares"]},
    )
    return out


def _check(archive: Path) -> tuple[int, str]:
    """check.py with the comparison's key and, for both carried inputs, their signer's."""
    inputs = [f"--input-pubkey={lab}={signer_pubkey()}" for lab in ("a", "b")]
    return run_check(archive, *inputs, pubkey=env_key(archive))


def env_key(archive: Path) -> Path:
    return archive.parent / "keys" / "compare_signer.pub"


def _refused(archive: Path, *needles: str) -> str:
    code, out = _check(archive)
    assert code == 1, out[-3000:]
    for n in needles:
        assert n in out, (n, out[-3000:])
    return out


def test_the_clean_comparison_archive_checks(comparison):
    code, out = _check(comparison["out"])
    assert code == 0, out[-4000:]
    assert "OK:" in out


def test_the_inputs_signer_must_be_given_and_must_have_signed(comparison):
    """A carried seal is verified under its signer's key: without that key the check fails and says
    which option gives it; a carried seal whose signature is not the signer's (random bytes in its
    place, the comparison sealed again with the valid key) is refused."""
    code, out = run_check(comparison["out"], pubkey=env_key(comparison["out"]))
    assert code == 1 and "give that signer's public key with --input-pubkey a=KEY.pub" in out, out[-3000:]

    def forge(folder: Path) -> None:
        import base64
        import os

        sp = folder / "inputs" / "b" / "SEAL.dsse.json"
        env = json.loads(sp.read_text())
        env["signatures"][0]["sig"] = base64.b64encode(os.urandom(64)).decode("ascii")
        sp.write_text(json.dumps(env, sort_keys=True, separators=(",", ":")) + "\n")

    # the comparison's statement names the forged seal's digest, so only its signature can tell
    import base64
    import hashlib

    pred = json.loads(base64.b64decode(json.loads((comparison["out"] / "SEAL.dsse.json").read_text())["payload"]))
    work = comparison["base"] / "forged-input-signature-results"
    shutil.copytree(comparison["out"], work)
    (work / "SEAL.dsse.json").unlink()
    forge(work)
    compares = pred["predicate"]["compares"]
    compares["b"]["seal_sha256"] = hashlib.sha256((work / "inputs" / "b" / "SEAL.dsse.json").read_bytes()).hexdigest()
    forged = comparison["base"] / "forged-input-signature"
    seal(work, forged, key=comparison["key"].private_path, campaign="compare", predicate_extra={"compares": compares})
    out = _refused(forged, "inputs/b/SEAL.dsse.json", "Ed25519 signature refused")
    assert "seal sha256" not in out and "inputs/a/SEAL.dsse.json" not in out, out[-3000:]


def test_a_deleted_differs_row_is_refused(comparison):
    def drop(c):
        assert [f.verdict for f in c.findings if f.finding == "endpoints"] == ["differs"]
        c.findings = [f for f in c.findings if f.finding != "endpoints"]

    _refused(
        _lie(comparison, "no-endpoints", drop),
        "row 'endpoints' missing: the carried inputs give it, with verdict 'differs'",
    )


def test_a_changed_timing_verdict_is_refused(comparison):
    item = "estimate|smollm2-135m|spec|PQ/QB"

    def hide(c):
        (t,) = [t for t in c.timings if t.id == item]
        assert t.verdict == "differs"
        t.verdict, t.reason = "not comparable", "the panels differ"

    _refused(
        _lie(comparison, "hidden-timing", hide),
        "path=spec comparison=PQ/QB] column verdict: verdict 'not comparable' != recomputed 'differs'",
    )


def test_an_inflated_band_is_refused(comparison):
    def widen(c):
        assert any(t.verdict == "differs" for t in c.timings)
        c.band = 2.0
        c.noise = ArchiveNoiseFloors(2.0 / c.threshold, c.noise.b)
        for t in c.timings:
            t.band = 2.0
            if t.lo is not None and t.verdict != "not comparable":
                t.verdict = verdict(t.lo, t.hi, 2.0)
                t.reason = "the interval contains 1" if t.lo <= 1.0 <= t.hi else "the interval lies within the band"

    out = _refused(
        _lie(comparison, "wide-band", widen),
        "band tau * max(F_A, F_B) 2.0 != recomputed",
        "plan.json noise_floor.a: A's A/A noise floor",
        "verdict 'reproduced' != recomputed 'differs'",
    )
    assert re.search(r"cmp\|estimate\|smollm2-135m\|spec\|PQ/QB\|band", out), out[-3000:]


def test_a_verdict_word_changed_in_the_report_is_refused(comparison):
    def edit(folder: Path) -> None:
        h = (folder / "report.html").read_text()
        row = re.search(r"<tr>(?:(?!</tr>).)*cmp\|endpoints\|rows_a(?:(?!</tr>).)*</tr>", h, re.S).group(0)
        (folder / "report.html").write_text(
            h.replace(row, row.replace('<td class="bad">differs</td>', '<td class="ok">same</td>'))
        )
        t = (folder / "report.tex").read_text()
        line = next(x for x in t.splitlines() if "cmp|endpoints|rows_a" in x)
        (folder / "report.tex").write_text(t.replace(line, line.replace(" & differs & ", " & same & ")))

    _refused(
        _reseal_edited(comparison, "word", edit),
        "MISMATCH report.html: differs from the canonical rendering of the sealed tables, line ",
        "MISMATCH report.tex: differs from the canonical rendering of the sealed tables, line ",
    )


def test_swapped_arm_labels_are_refused(comparison):
    item = "ratio|implementation|smollm2-135m|64|R/M_qb"

    def relabel(c):
        (t,) = [t for t in c.timings if t.id == item]
        t.numerator, t.denominator = t.denominator, t.numerator

    _refused(
        _lie(comparison, "relabelled", relabel),
        "numerator=M_qb denominator=R path=target comparison=R/M_qb] column numerator: label 'M_qb' != recomputed 'R'",
    )


def test_a_noise_floor_given_by_hand_checks(comparison):
    """refspec compare --noise-floor: the band is the threshold widened by that floor, recorded in plan.json."""
    out = comparison["base"] / "given-floor"
    code = main(
        [
            "compare",
            str(comparison["a"]),
            str(comparison["b"]),
            "--pubkey",
            str(signer_pubkey()),
            "--noise-floor",
            "1.25",
            "--out",
            str(out),
            "--key",
            str(comparison["key"].private_path),
        ]
    )
    assert code == 1
    assert json.loads((out / "plan.json").read_text())["noise_floor"]["given"] == 1.25
    code, text = _check(out)
    assert code == 0, text[-4000:]


def test_a_claimed_pinned_difference_hiding_every_timing_is_refused(comparison):
    """The signer says the pinned inputs differ, so that no timing (the differing ones included) is comparable."""

    def claim(c):
        line = "changed buildDefinition.resolvedDependencies[model:smollm2-135m].digest.sha256"
        c.inputs.pinned_differences = [line]
        for t in c.timings:
            t.verdict, t.reason = "not comparable", f"pinned inputs differ (1: {line})"

    _refused(
        _lie(comparison, "claimed-pinned", claim),
        "column verdict: verdict 'not comparable' != recomputed 'differs'",
        "MISMATCH tables/differences.csv: the carried manifests' pinned inputs are the same, but the differences "
        "list pinned inputs",
    )


def test_an_edit_of_the_comparison_report_is_refused_by_its_rendering(comparison):
    """The comparison's report.tex with two section titles exchanged, sealed again: its words all belong to
    the format, so only the report rendered again from the comparison's tables (refspec_check/rendering.py)
    tells; the clean comparison archive is its own rendering."""

    def exchange(folder: Path) -> None:
        p = folder / "report.tex"
        t = p.read_text(encoding="utf-8")
        a, b = "\\section{Findings}", "\\section{Differences}"
        assert a in t and b in t
        p.write_text(t.replace(a, "\x00").replace(b, a).replace("\x00", b), encoding="utf-8")

    out = _refused(
        _reseal_edited(comparison, "titles-exchanged", exchange),
        "MISMATCH report.tex: differs from the canonical rendering of the sealed tables, line ",
    )
    assert "report.html: differs" not in out and "numbers.json: differs" not in out, out[-3000:]
    assert "differs from the canonical rendering" not in _check(comparison["out"])[1]


@pytest.mark.parametrize("table", ["qualification", "ratios"])
def test_an_inputs_derived_row_its_carried_records_do_not_give_is_refused(comparison, table):
    """The signer of an input and of the comparison states, in input B, a derived row its own requests
    and endpoints do not give (an arm qualified on a task where its endpoint diverges; a ratio halved),
    seals B and compares it honestly: the comparison's checker recomputes B's derived rows from the
    records B carries and names the row."""
    base = comparison["base"]
    rb = base / f"results-b-forged-{table}"
    shutil.copytree(base / "results-b", rb)
    rows = T.read_records(table, rb)
    if table == "qualification":
        r = next(q for q in rows if q["campaign"] == "confirmation" and not q["qualified"])
        r.update(qualified=True, n_matching=r["n_required"])
        needle = "inputs/b/tables/qualification.csv"
    else:
        r = next(x for x in rows if x["campaign"] == "confirmation" and x["ratio"] is not None)
        r["ratio"] = r["ratio"] / 2
        needle = "inputs/b/tables/ratios.csv"
    T.write_table(rows, table, rb / "tables")
    b = seal_archive(rb, base / f"b-forged-{table}")
    out = base / f"comparison-forged-{table}"
    main(["compare", str(comparison["a"]), str(b), "--pubkey", str(signer_pubkey()), "--out", str(out),
          "--key", str(comparison["key"].private_path)])  # fmt: skip
    _refused(out, needle)
