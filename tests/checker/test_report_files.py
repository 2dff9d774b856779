"""Every file of a sealed archive a reader opens is checked, or plainly marked as not checked.

report.pdf is report.tex compiled reproducibly; check.py compiles report.tex again where pdflatex is
present and compares the bytes (a PDF showing another number, sealed again with the signer's own
valid key, is refused); where it cannot rebuild the PDF (no pdflatex, another pdfTeX) it prints that
report.pdf is not checked, counts it so and fails, unless the auditor passes --pdf-unchecked, which
the last line then states. A campaign's summary.txt stays in the results folder; a sealed archive carrying a
document nothing checks (a rewritten summary.txt, a README) is refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from refspec_check.render.render import PDF_NOTE

from refspec.pipeline import seal_chain
from refspec.reporting import render as report
from support.synthetic_archive import CHECK_PATH, check_module, make_results, run_check, seal_archive, signer_pubkey

needs_pdflatex = pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex")


@pytest.fixture(scope="module")
def pdf_stage(tmp_path_factory) -> Path:
    """A rendered synthetic results folder with report.pdf (compiled by the renderer)."""
    if shutil.which("pdflatex") is None:
        pytest.skip("no pdflatex")
    base = tmp_path_factory.mktemp("files")
    results = make_results(base / "results", draws=300)
    paths = report.render(results, pdf=True)
    assert "pdf" in paths
    return results


def sealed(pdf_stage: Path, dst: Path, edit=None) -> Path:
    """``pdf_stage`` copied, ``edit(folder)`` applied, then sealed by the signer (a valid seal)."""
    work = dst.with_name(dst.name + "-stage")
    shutil.copytree(pdf_stage, work)
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    if edit is not None:
        edit(work)
    return seal_archive(work, dst)


def not_checked(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("NOT CHECKED ")]


def summary_line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("check: "))


@needs_pdflatex
def test_clean_pdf_is_rebuilt_and_accepted(pdf_stage, tmp_path):
    arch = sealed(pdf_stage, tmp_path / "archive")
    code, out = run_check(arch)
    assert code == 0, out
    assert not [ln for ln in out.splitlines() if ln.startswith("MISMATCH")], out
    assert not not_checked(out), out
    assert "; 0 not checked; 0 mismatches;" in summary_line(out), out
    # the report says how report.pdf is checked
    assert PDF_NOTE in (arch / "report.html").read_text()


@needs_pdflatex
def test_forged_pdf_resealed_with_a_valid_key_is_refused(pdf_stage, tmp_path):
    """A genuine pdfTeX PDF of report.tex with one checked number changed, beside the genuine
    report.tex, the archive sealed again with the signer's own key."""

    def forge(work: Path) -> None:
        tex = (work / "report.tex").read_text()
        m = re.search(r"\\rsnum\{(ratio\|[^}]*)\}\{([0-9.]+)\}", tex)
        assert m, "no ratio number in report.tex"
        fake = work / "forge"
        fake.mkdir()
        (fake / "report.tex").write_text(tex.replace(m.group(0), f"\\rsnum{{{m.group(1)}}}{{9.999999}}", 1))
        pdf = report.compile_pdf(fake / "report.tex")
        assert pdf is not None
        forged = pdf.read_bytes()
        assert forged != (work / "report.pdf").read_bytes()
        (work / "report.pdf").write_bytes(forged)
        shutil.rmtree(fake)

    arch = sealed(pdf_stage, tmp_path / "archive", forge)
    code, out = run_check(arch)
    assert code == 1, out
    bad = [ln for ln in out.splitlines() if ln.startswith("MISMATCH")]
    assert len(bad) == 1 and bad[0].startswith("MISMATCH report.pdf: is not report.tex compiled"), out
    print("\n" + bad[0])


@needs_pdflatex
def test_a_pdf_of_another_pdftex_is_named_not_checked(pdf_stage, tmp_path):
    """A PDF whose banner names another pdfTeX cannot be rebuilt byte for byte here: said, and a failure
    unless the auditor accepts it with --pdf-unchecked, which the last line then states."""

    def other(work: Path) -> None:
        data = (work / "report.pdf").read_bytes()
        m = re.search(rb"This is pdfTeX, Version ([!-~]+) \(", data)
        new = data.replace(m.group(0), m.group(0).replace(m.group(1), b"9" * len(m.group(1))), 1)
        (work / "report.pdf").write_bytes(new)

    arch = sealed(pdf_stage, tmp_path / "archive", other)
    code, out = run_check(arch)
    assert (
        code == 1
        and out.splitlines()[-1] == f"FAIL: {arch} (report.pdf not checked here; --pdf-unchecked accepts that)"
    )
    code, out = run_check(arch, "--pdf-unchecked")
    assert code == 0, out
    assert out.splitlines()[-1] == f"OK: {arch} (report.pdf NOT CHECKED: accepted by --pdf-unchecked)"
    lines = not_checked(out)
    assert len(lines) == 1 and re.fullmatch(
        r"NOT CHECKED report\.pdf: not checked: pdfTeX \S+ \(.*\) here, 9+ \(.*\) made it", lines[0]
    ), out
    assert "; 1 not checked;" in summary_line(out)
    print("\n" + lines[0])


@needs_pdflatex
def test_without_pdflatex_report_pdf_is_plainly_not_checked(pdf_stage, tmp_path):
    arch = sealed(pdf_stage, tmp_path / "archive")
    empty = tmp_path / "bin"
    empty.mkdir()
    env = dict(os.environ, PATH=str(empty))
    args = [sys.executable, "-I", "-S", str(CHECK_PATH), str(arch), "--pubkey", str(signer_pubkey())]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=120)
    assert r.returncode == 1 and r.stdout.splitlines()[-1].startswith(f"FAIL: {arch} (report.pdf not checked here"), (
        r.stdout
    )
    args.append("--pdf-unchecked")  # the auditor accepts a PDF this machine cannot rebuild
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout
    assert r.stdout.splitlines()[-1].endswith("(report.pdf NOT CHECKED: accepted by --pdf-unchecked)"), r.stdout
    lines = not_checked(r.stdout)
    assert len(lines) == 1 and lines[0].startswith("NOT CHECKED report.pdf: pdflatex is not on the PATH"), r.stdout
    assert "; 1 not checked;" in summary_line(r.stdout)
    print("\n" + lines[0])


@needs_pdflatex
def test_two_compiles_are_byte_identical(pdf_stage, tmp_path):
    """The renderer's compile is reproducible, in another folder, and the checker's compile makes the same bytes."""
    pdf = (pdf_stage / "report.pdf").read_bytes()
    other = tmp_path / "again"
    other.mkdir()
    shutil.copyfile(pdf_stage / "report.tex", other / "report.tex")
    again = report.compile_pdf(other / "report.tex")
    assert again is not None and again.read_bytes() == pdf
    pdfmod = check_module().pdf
    got, log = pdfmod.compile_report(shutil.which("pdflatex"), (pdf_stage / "report.tex").read_bytes())
    assert got == pdf, log
    assert pdfmod.pdf_pdftex(pdf) == pdfmod.local_pdftex(shutil.which("pdflatex"))


def test_summary_txt_stays_out_of_the_sealed_archive(tmp_path):
    """assemble copies a campaign's data records, not its summary.txt (which stays in the results folder)."""
    cdir = tmp_path / "results" / "campaigns" / "implementation"
    cdir.mkdir(parents=True)
    (cdir / "plan.json").write_text(json.dumps({"campaign": "implementation"}))
    (cdir / "ledger.jsonl").write_text("")
    (cdir / "summary.txt").write_text("campaign implementation: every arm qualified\n")
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    out = tmp_path / "assembled"
    seal_chain.assemble(tmp_path / "results", manifest, [cdir], out)
    assert (out / "campaigns" / "implementation" / "plan.json").is_file()
    assert not (out / "campaigns" / "implementation" / "summary.txt").exists()
    assert (cdir / "summary.txt").is_file()


@pytest.mark.parametrize(
    "name",
    ["campaigns/implementation/summary.txt", "README.md", "campaigns/implementation/notes"],
)
def test_a_document_nothing_checks_is_refused(tmp_path, name):
    """A rewritten summary.txt (or any other document) sealed into the archive with a valid key."""
    results = make_results(tmp_path / "results", draws=300)
    report.render(results, pdf=False)
    p = results / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("Every arm qualified: 8/8 tasks pass on rerun.\n")
    arch = seal_archive(results, tmp_path / "archive")
    code, out = run_check(arch)
    assert code == 1, out
    bad = [ln for ln in out.splitlines() if ln.startswith("MISMATCH")]
    assert bad == [
        f"MISMATCH {name}: a file a reader can open that check.py does not check (a sealed archive "
        "holds its report and data records only; the campaign summaries stay in the results folder)"
    ], out
    print("\n" + bad[0])


def test_snakemakes_empty_folder_marker_is_accepted_and_a_full_one_refused(tmp_path):
    """Snakemake writes an empty .snakemake_timestamp into a folder output (the sealed archive of
    ``./run main``): accepted while empty, refused as an unchecked document once it holds text."""
    from refspec_check.files import check_archive_files
    from refspec_check.problems import Checker

    (tmp_path / "SEAL.dsse.json").write_text("{}")
    marker = tmp_path / ".snakemake_timestamp"
    marker.write_bytes(b"")
    c = Checker(str(tmp_path))
    c.tree = {"SEAL.dsse.json", ".snakemake_timestamp"}
    check_archive_files(c, str(tmp_path))
    assert c.problems == []
    marker.write_text("every timing reproduced\n")
    check_archive_files(c, str(tmp_path))
    assert len(c.problems) == 1 and ".snakemake_timestamp" in c.problems[0]
