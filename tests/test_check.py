"""report/check.py: passes on a fresh archive, fails naming the place on each kind of tampering."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest_report import make_results, seal_archive
from refspec import report
from refspec.paths import REPO_ROOT

CHECK = REPO_ROOT / "report" / "check.py"


def run_check(archive: Path, *extra: str) -> tuple[int, str]:
    """Run the checker as an auditor would: isolated, without site-packages."""
    r = subprocess.run([sys.executable, "-I", "-S", str(CHECK), str(archive), *extra], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, r.stdout


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
    tree = ast.parse(CHECK.read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            mods.add(node.module.split(".")[0])
    assert mods and mods <= set(sys.stdlib_module_names) | {"__future__"}, mods - set(sys.stdlib_module_names)
    assert "refspec" not in mods


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
    p.write_text(html[: m.start(1)] + edited + html[m.end(1):])
    code, out = run_check(copy)
    assert code == 1
    assert any("report.html:" in l and nid in l and f"shows '{edited}'" in l for l in mismatches(out)), out
    assert any("subject 'report.html'" in l for l in mismatches(out))


def test_edited_number_in_numbers_json(copy):
    p = copy / "numbers.json"
    doc = json.loads(p.read_text())
    entry = next(n for n in doc["numbers"] if n["id"].startswith("est|") and n["column"] == "lo")
    entry["value"] = entry["value"] * 1.0000001
    p.write_text(json.dumps(doc, indent=1))
    code, out = run_check(copy)
    assert code == 1
    assert any(l.startswith(f"MISMATCH numbers.json: {entry['id']}:") and "recomputed" in l for l in mismatches(out)), out


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


def test_changed_seed_in_plan(copy):
    p = copy / "plan.json"
    plan = json.loads(p.read_text())
    plan["bootstrap"]["seed"] += 1
    p.write_text(json.dumps(plan, indent=1) + "\n")
    code, out = run_check(copy)
    assert code == 1
    mm = mismatches(out)
    assert any(l.startswith("MISMATCH tables/estimates.csv:") and "column seed" in l and "plan.json" in l for l in mm), out
    assert any(l.startswith("MISMATCH tables/estimates.csv:") and ("column lo" in l or "column hi" in l) for l in mm)
    assert any(l.startswith("MISMATCH numbers.json: est|") and "|seed" in l for l in mm)
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
    assert any(l.startswith("MISMATCH tables/ratios.csv:") and "column ratio" in l and "must have no value" in l
               for l in mismatches(out)), out


def test_unreadable_inputs(tmp_path, copy):
    code, out = run_check(tmp_path / "nope")
    assert code == 2 and "UNREADABLE" in out
    (copy / "numbers.json").write_text("{not json")
    code, out = run_check(copy)
    assert code == 2 and "UNREADABLE numbers.json" in out
