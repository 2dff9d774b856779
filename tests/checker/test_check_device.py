"""The device a report names, recomputed (refspec_check.device, refspec_check.provenance.check_host).

A run on lavapipe (Vulkan on the CPU) must say so: its device section, the device under every table,
where the timed arms ran, and on each timing row of the headline that its timings are CPU timings,
not a GPU speed. These texts are provenance values of numbers.json, which the visible-text checks
accept as names; so a dishonest signer who edits numbers.json and report.html together, and seals
again with a valid key, could name a GPU the run never had. Each such edit must be refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from refspec.reporting import render as report
from support.synthetic_archive import make_results, reseal_edited, run_check, seal_archive

SOFTWARE_TIMING = " (software Vulkan device: CPU timing, not a GPU speed)"
LAVAPIPE = "llvmpipe (LLVM 15.0.6, 256 bits)"


@pytest.fixture(scope="module")
def vulkan(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("device")
    results = make_results(base / "results", draws=300, vulkan=True)
    report.render(results, pdf=False)
    return results


def _numbers(folder: Path) -> dict:
    return json.loads((folder / "numbers.json").read_text(encoding="utf-8"))


def _replace_everywhere(folder: Path, old: str, new: str) -> None:
    """``old`` -> ``new`` in report.html, report.tex and numbers.json (the signer's consistent edit)."""
    hits = 0
    for name in ("report.html", "report.tex", "numbers.json"):
        p = folder / name
        if not p.is_file():
            continue
        text = p.read_text(encoding="utf-8")
        hits += text.count(old)
        p.write_text(text.replace(old, new), encoding="utf-8")
    assert hits, f"{old!r} is nowhere in the report"


def test_the_vulkan_report_names_its_software_device_and_checks(vulkan, tmp_path):
    doc = _numbers(vulkan)
    prov = doc["provenance"]
    assert prov["device"] == f"Vulkan0 = {LAVAPIPE}"
    assert prov["device_api"] == "Vulkan 1.3.230"
    # target-only arms have no draft: two placements, each on Vulkan0 with all 31 target layers
    assert prov["devices"].startswith("Devices: C0, "), prov["devices"]
    assert f" on Vulkan0 ({LAVAPIPE}), 31 target layers offloaded (31 draft layers); " in prov["devices"]
    assert prov["devices"].endswith(f" on Vulkan0 ({LAVAPIPE}), 31 target layers offloaded.")
    timing = [h for h in doc["headline"] if h["finding"].startswith(("qualified ratios", "E2 estimate"))]
    assert timing and all(h["finding"].endswith(SOFTWARE_TIMING) for h in timing)
    rc, out = run_check(seal_archive(vulkan, tmp_path / "archive"))
    assert rc == 0, out


@pytest.mark.parametrize(
    "old,new,why",
    [
        # the device section and every caption name a GPU the manifest does not record
        (f"Vulkan0 = {LAVAPIPE}", "Vulkan0 = NVIDIA H200", "provenance.device"),
        # where the timed arms ran: the requests table says Vulkan0 with 31 layers
        ("31 target layers offloaded", "30 target layers offloaded", "provenance.devices"),
        (" on Vulkan0 (", " on CUDA0 (", "provenance.devices"),
        # the host line of the provenance table
        ("GPU: none", "GPU: NVIDIA H200 (driver 570.86)", "provenance.host"),
        # a timing row of the headline no longer says its timings are a software device's
        (SOFTWARE_TIMING, "", "software device"),
    ],
)
def test_a_resealed_device_text_is_refused(vulkan, tmp_path, old, new, why):
    archive = reseal_edited(vulkan, tmp_path / "archive", lambda w: _replace_everywhere(w, old, new))
    rc, out = run_check(archive)
    assert rc == 1, out
    assert why in out, out


def test_a_device_fact_the_manifest_does_not_record_is_refused(vulkan, tmp_path):
    def add(w: Path) -> None:
        doc = _numbers(w)
        doc["provenance"]["device_memory"] = "141 GiB HBM3e"
        (w / "numbers.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")

    rc, out = run_check(reseal_edited(vulkan, tmp_path / "archive", add))
    assert rc == 1, out
    assert "provenance.device_memory" in out and "no such device fact" in out, out


def test_a_manifest_that_calls_lavapipe_a_hardware_device_is_refused(vulkan, tmp_path):
    """The signer also rewrites the manifest (and its digest wherever the report shows it) so that
    the device is no software one, and drops the timing rows' warning to match: the device's own
    name still says llvmpipe."""

    def flip(w: Path) -> None:
        man = w / "manifest.json"
        before = hashlib.sha256(man.read_bytes()).hexdigest()
        m = json.loads(man.read_text(encoding="utf-8"))
        m["buildDefinition"]["internalParameters"]["vulkan"]["software_device"] = False
        man.write_text(json.dumps(m, indent=1) + "\n", encoding="utf-8")
        _replace_everywhere(w, before, hashlib.sha256(man.read_bytes()).hexdigest())
        _replace_everywhere(w, SOFTWARE_TIMING, "")

    rc, out = run_check(reseal_edited(vulkan, tmp_path / "archive", flip))
    assert rc == 1, out
    assert "software_device" in out and "is a software device" in out, out
    assert "leaves out that its timings come from a software device" in out, out
    assert "manifest_sha256" not in out, out  # the digest edit itself was consistent


def test_a_cpu_report_that_calls_its_device_software_is_refused(tmp_path):
    results = make_results(tmp_path / "results", draws=300)
    report.render(results, pdf=False)

    def mark(w: Path) -> None:
        doc = _numbers(w)
        for h in doc["headline"]:
            if h["finding"].startswith("E2 estimate"):
                h["finding"] += SOFTWARE_TIMING
        (w / "numbers.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")

    rc, out = run_check(reseal_edited(results, tmp_path / "archive", mark))
    assert rc == 1, out
    assert "calls its device a software one" in out, out
