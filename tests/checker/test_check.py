"""report/check.py: passes on a fresh archive, fails naming the place on each kind of tampering."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT
from refspec.reporting import render as report
from support.synthetic_archive import make_results, run_check, seal_archive, signer

CHECK = REPO_ROOT / "report" / "check.py"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("check")
    results = make_results(base / "results", draws=10_000)
    report.render(results, pdf=False)
    return seal_archive(results, base / "archive")


@pytest.fixture()
def copy(archive, tmp_path) -> Path:
    dst = tmp_path / "archive"
    shutil.copytree(archive, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def mismatches(out: str) -> list[str]:
    return [l for l in out.splitlines() if l.startswith("MISMATCH ")]


def test_checker_uses_only_the_standard_library():
    """The checker imports the standard library and its own package, nothing of refspec: its modules here,
    and its renderer (refspec_check/render, which imports within its package: tests/checker/test_check_alone.py)."""
    mods = set()
    for path in [CHECK, *sorted((CHECK.parent / "refspec_check").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, "relative import"
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] != "refspec", (path, name)
                mods.add(name.split(".")[0])
    mods.discard("refspec_check")  # the checker's own package, beside check.py
    assert mods and mods <= set(sys.stdlib_module_names) | {"__future__"}, mods - set(sys.stdlib_module_names)


def test_fresh_archive_passes(archive):
    t0 = time.perf_counter()
    code, out = run_check(archive)
    elapsed = time.perf_counter() - t0
    assert code == 0, out
    assert out.splitlines()[-1] == f"OK: {archive}"
    m = re.search(r"check: (\d+) numbers recomputed; (\d+) of (\d+) comparisons matched", out)
    assert m and int(m.group(1)) > 1000 and m.group(2) == m.group(3)
    print(f"checker run time on the synthetic archive: {elapsed:.2f} s\n{out.splitlines()[-2]}")


def test_missing_seal_fails_unless_unsealed_is_asked_for(archive, tmp_path):
    dst = tmp_path / "unsealed"
    shutil.copytree(archive, dst)
    (dst / "SEAL.dsse.json").unlink()
    code, out = run_check(dst)
    assert code == 1, out
    assert "MISMATCH SEAL.dsse.json: missing" in out and out.splitlines()[-1] == f"FAIL: {dst}"
    code, out = run_check(dst, "--unsealed")
    assert code == 0, out


def test_deeply_nested_seal_is_unreadable_not_a_traceback(copy):
    (copy / "SEAL.dsse.json").write_text("[" * 100_000 + "]" * 100_000)
    code, out = run_check(copy)
    assert code == 2, out
    assert "UNREADABLE SEAL.dsse.json" in out and "Traceback" not in out


def test_edited_number_in_html(copy):
    p = copy / "report.html"
    html = p.read_text()
    nid = "ratio|implementation|llama31-8b|64|M_pq|M_qb|ratio"
    m = re.search(r'data-num="' + re.escape(nid) + r'"[^>]*>([0-9.]+)<', html)
    assert m
    edited = f"{float(m.group(1)) + 0.001:.6f}"
    p.write_text(html[: m.start(1)] + edited + html[m.end(1) :])
    code, out = run_check(copy)
    assert code == 1
    assert any(
        l.startswith("MISMATCH report.html: differs from the canonical rendering") and f">{edited}</span>" in l
        for l in mismatches(out)
    ), out
    assert any("subject 'report.html'" in l for l in mismatches(out))


def test_edited_number_in_numbers_json(copy):
    p = copy / "numbers.json"
    doc = json.loads(p.read_text())
    entry = next(n for n in doc["numbers"] if n["id"].startswith("est|") and n["column"] == "lo")
    entry["value"] = entry["value"] * 1.0000001
    p.write_text(json.dumps(doc, indent=1))
    code, out = run_check(copy)
    assert code == 1
    assert any(l.startswith(f"MISMATCH numbers.json: {entry['id']}:") and "recomputed" in l for l in mismatches(out)), (
        out
    )


def test_edited_csv_value(copy):
    p = copy / "tables" / "requests.csv"
    lines = p.read_text().splitlines()
    header = lines[0].split(",")
    ti, ci, si, ai = (header.index(k) for k in ("t_ns", "campaign", "status", "arm"))
    for j, line in enumerate(lines[1:], start=1):
        cells = line.split(",")
        if cells[ci] == "implementation" and cells[si] == "ok" and cells[ai] == "M_qb":
            cells[ti] = str(int(cells[ti]) * 2)
            lines[j] = ",".join(cells)
            break
    p.write_text("\n".join(lines) + "\n")
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    # the stored ratios no longer follow from the times, and the report's numbers neither
    assert any(l.startswith("MISMATCH tables/ratios.csv:") and "M_qb" in l and "column ratio" in l for l in mm), out
    assert any(l.startswith("MISMATCH numbers.json: ratio|implementation|") for l in mm)
    assert any("subject 'tables/requests.csv'" in l for l in mm)


def test_changed_threshold_in_plan(copy):
    p = copy / "plan.json"
    plan = json.loads(p.read_text())
    plan["bootstrap"]["threshold"] = 1.5
    p.write_text(json.dumps(plan, indent=1) + "\n")
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    assert any(
        l.startswith("MISMATCH tables/estimates.csv:") and "column threshold" in l and "plan.json" in l for l in mm
    ), out
    assert any(l.startswith("MISMATCH numbers.json: est|") and "|threshold" in l for l in mm)
    assert any("provenance.plan_sha256" in l for l in mm)


def test_removed_source_file(copy):
    (copy / "tables" / "replay.csv").unlink()
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    assert any("report.html:" in l and "tables/replay.csv" in l and "missing" in l for l in mm), out
    assert any(l.startswith("MISMATCH numbers.json: replay|") and "not recomputable" in l for l in mm)
    assert any("subject 'tables/replay.csv'" in l and "missing" in l for l in mm)


def test_unqualified_ratio_shown_as_number_is_caught(copy):
    """A failed qualification must stay a dash: a ratio number for it is a mismatch."""
    p = copy / "tables" / "ratios.csv"
    text = p.read_text()
    lines = text.splitlines()
    header = lines[0].split(",")
    qi, ri = header.index("qualified"), header.index("ratio")
    j = next(j for j, l in enumerate(lines[1:], 1) if l.split(",")[qi] == "false")
    cells = next(__import__("csv").reader([lines[j]]))
    cells[ri] = "1.5"
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(cells)
    lines[j] = buf.getvalue()
    p.write_text("\n".join(lines) + "\n")
    code, out = run_check(copy)
    assert code == 1
    assert any(
        l.startswith("MISMATCH tables/ratios.csv:") and "column ratio" in l and "must have no value" in l
        for l in mismatches(out)
    ), out


def test_unreadable_inputs(tmp_path, copy):
    code, out = run_check(tmp_path / "nope")
    assert code == 2 and "UNREADABLE" in out
    (copy / "numbers.json").write_text("{not json")
    code, out = run_check(copy)
    assert code == 2 and "UNREADABLE numbers.json" in out


def _edit_csv(path: Path, match, col: str, value: str) -> dict:
    """Set ``col`` to ``value`` in the first row for which ``match(row)`` holds; return that row."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(path.read_text())))
    header = rows[0]
    for cells in rows[1:]:
        row = dict(zip(header, cells))
        if match(row):
            cells[header.index(col)] = value
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            path.write_text(buf.getvalue())
            return row
    raise AssertionError(f"no row to edit in {path}")


def test_altered_diagnostic_ratio_is_caught(copy):
    row = _edit_csv(
        copy / "tables" / "diagnostics.csv",
        lambda r: r["numerator"] == "M3" and r["denominator"] == "M0",
        "ratio",
        "1.2345",
    )
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    assert any(
        l.startswith("MISMATCH tables/diagnostics.csv:") and "numerator=M3 denominator=M0" in l and "column ratio" in l
        for l in mm
    ), out
    assert row["label"] == "diagnostic: denominator not qualified"


def test_diagnostic_label_must_name_the_unqualified_side(copy):
    _edit_csv(
        copy / "tables" / "diagnostics.csv",
        lambda r: r["numerator"] == "R_prod",
        "label",
        "diagnostic: denominator not qualified",
    )
    code, out = run_check(copy)
    assert code == 1
    assert any(
        l.startswith("MISMATCH tables/diagnostics.csv:") and "column label" in l and "numerator not qualified" in l
        for l in mismatches(out)
    ), out


def test_altered_headline_is_caught(copy):
    p = copy / "numbers.json"
    doc = json.loads(p.read_text())
    head = doc["headline"]
    e2 = next(h for h in head if h["finding"] == "E2 estimate")
    e2["decision"] = "too_few_sessions" if e2["decision"] != "too_few_sessions" else "exceeds"
    ratio = next(h for h in head if h["finding"] == "qualified ratios")
    j = next(j for j, part in enumerate(ratio["parts"]) if isinstance(part, dict))
    ratio["parts"][j] = {"num": "ratio|confirmation|nowhere|64|A|B|ratio"}
    p.write_text(json.dumps(doc, indent=1))
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    assert any(l.startswith("MISMATCH numbers.json: headline[") and "decision" in l for l in mm), out
    assert any("ratio|confirmation|nowhere" in l and "not one of the report's numbers" in l for l in mm), out
    assert any("numbers.json: headline: the headline leaves out" in l for l in mm), out
    assert any(l.startswith("MISMATCH numbers.json: differs from the canonical rendering") for l in mm), out


def test_headline_number_in_html_is_caught(copy):
    p = copy / "report.html"
    html = p.read_text()
    start = html.index('<table data-table="summary"')
    m = re.compile(r'data-num="(est\|[^"]+\|(?:fold|plain))"[^>]*>([0-9.]+)<').search(html, start)
    assert m and m.start() < html.index("</table>", start)
    edited = f"{float(m.group(2)) + 0.01:.2f}"
    p.write_text(html[: m.start(2)] + edited + html[m.end(2) :])
    code, out = run_check(copy)
    assert code == 1
    assert any(
        l.startswith("MISMATCH report.html: differs from the canonical rendering") and f">{edited}</span>" in l
        for l in mismatches(out)
    ), out


def test_prediction_is_recomputed(copy):
    _edit_csv(copy / "tables" / "prediction.csv", lambda r: r["task_id"] == "HumanEval/4", "reference_matches", "3")
    _edit_csv(copy / "tables" / "prediction.csv", lambda r: r["task_id"] == "HumanEval/3", "predictor", "R")
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    assert any(
        l.startswith("MISMATCH tables/prediction.csv:") and "HumanEval/4" in l and "reference_matches" in l for l in mm
    ), out
    assert any("column predictor" in l and "reference" in l for l in mm), out


def test_frozen_prediction_must_be_the_predictors_output(copy):
    p = copy / "plan.json"
    plan = json.loads(p.read_text())
    ep = plan["campaigns"]["prediction"]["predictions"]["endpoints"]["HumanEval/3"]
    ep["tokens"] = ep["tokens"][:-1] + [ep["tokens"][-1] + 1]
    p.write_text(json.dumps(plan, indent=1) + "\n")
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    assert any("predictions.endpoints['HumanEval/3']" in l for l in mm), out
    assert any(l.startswith("MISMATCH tables/prediction.csv:") and "HumanEval/3" in l for l in mm), out


def test_too_few_sessions_is_not_a_decision(tmp_path):
    results = make_results(tmp_path / "results", n_sessions=1, draws=500)
    report.render(results, pdf=False)
    archive = seal_archive(results, tmp_path / "archive")
    code, out = run_check(archive)
    assert code == 0, out
    dst = tmp_path / "edited"
    shutil.copytree(archive, dst)
    for q in dst.rglob("*"):
        q.chmod(0o755 if q.is_dir() else 0o644)
    _edit_csv(dst / "tables" / "estimates.csv", lambda r: r["path"] == "spec", "decision", "exceeds")
    code, out = run_check(dst)
    assert code == 1
    assert any(
        l.startswith("MISMATCH tables/estimates.csv:") and "column decision" in l and "'too_few_sessions'" in l
        for l in mismatches(out)
    ), out


def test_data_seal_and_key_in_the_headline_are_the_archives(tmp_path):
    """Rendered from sealed data (as ./run main does), the report names that seal and the signer."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from refspec.provenance.keys import fingerprint
    from refspec.provenance.seal import seal

    key = signer()
    results = make_results(tmp_path / "results", draws=300)
    data = tmp_path / "sealed-data"
    seal(results, data, key=key, archive_id="data", created="2026-10-20T00:00:00Z")
    rendered = tmp_path / "rendered"
    shutil.copytree(data, rendered, ignore=shutil.ignore_patterns("SEAL.dsse.json"))
    for q in rendered.rglob("*"):
        q.chmod(0o755 if q.is_dir() else 0o644)
    report.render(rendered, pdf=False, data_seal=data / "SEAL.dsse.json")
    pub = fingerprint(key.public_key())
    doc = json.loads((rendered / "numbers.json").read_text())
    assert doc["provenance"]["pubkey_fingerprint"] == pub
    archive = tmp_path / "archive"
    seal(rendered, archive, key=key, archive_id="final", created="2026-10-20T00:00:01Z", previous=data)
    code, out = run_check(archive)
    assert code == 0, out
    # the chain, as `refspec verify --expect-previous` checks it
    prev = hashlib.sha256((data / "SEAL.dsse.json").read_bytes()).hexdigest()
    assert run_check(archive, "--expect-previous", prev)[0] == 0
    code, out = run_check(archive, "--expect-previous", "none")
    assert code == 1 and f"previous seal is {prev}, expected none" in out, out
    code, out = run_check(archive, "--expect-previous", "ab" * 32)
    assert code == 1 and "expected " + "ab" * 32 in out, out
    # a report naming another data seal than the one the archive follows is caught
    other = tmp_path / "other"
    seal(
        rendered,
        other,
        key=Ed25519PrivateKey.generate(),
        archive_id="final",
        created="2026-10-20T00:00:01Z",
        previous_sha256="0" * 64,
    )
    code, out = run_check(other)
    assert code == 1
    mm = mismatches(out)
    assert any("provenance.data_seal_sha256" in l for l in mm), out
    assert any("provenance.pubkey_fingerprint" in l and "did not sign" in l for l in mm), out
    # the headline's first row, right under the findings: the auditor's command with the signer's
    # fingerprint; another key's fingerprint or another command put there (and sealed again with
    # the valid key) is refused
    from refspec_check.render.sections.summary import VERIFY_COMMAND

    assert doc["headline"][0]["finding"] == "verify this report"
    assert doc["headline"][0]["parts"] == [VERIFY_COMMAND, pub]
    html = (rendered / "report.html").read_text()
    assert html.count(pub) >= 2 and VERIFY_COMMAND.strip() in html
    last = html.index(pub, html.index(VERIFY_COMMAND.strip()))  # the verify row's fingerprint
    headline = html[html.index('<table data-table="summary"') :]
    assert "verify this report" in headline[headline.index("<tbody>") :].split("</tr>")[0]  # its first row
    for name, forged_html in (
        ("other-key", html[:last] + fingerprint(Ed25519PrivateKey.generate().public_key()) + html[last + len(pub) :]),
        ("other-command", html.replace("--expect-keyid", "--unsealed")),
    ):
        forged = tmp_path / name
        shutil.copytree(rendered, forged)
        (forged / "report.html").write_text(forged_html)
        sealed = tmp_path / f"{name}-archive"
        seal(forged, sealed, key=key, archive_id="final", created="2026-10-20T00:00:01Z", previous=data)
        code, out = run_check(sealed)
        assert code == 1 and mismatches(out), (name, out)
