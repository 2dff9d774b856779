"""``refspec reproduce ARCHIVE`` (anc/reproduce.md) on copies of the sealed data archive of a small
real study (the session's ``small_study``): the config rebuilt from the manifest, a changed pinned
input refused (exit 3) with its difference named and accepted with ``--allow``, the Snakemake rules
resolved (dry run), the ``reproduces`` predicate verified and shown, and the small study reproduced
end to end and compared with its archive (every preservation finding the same). The full
reproduction of the default study is opt-in (``./run test -m reproduce_full``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from refspec_check.render.sections.provenance import reproduction_rows

from refspec.cli import main
from refspec.core.config import read_config_file
from refspec.core.errors import IntegrityError, UsageError
from refspec.core.hashing import sha256_json
from refspec.core.paths import REPO_ROOT
from refspec.pipeline import reproduce as R
from refspec.provenance import keys
from refspec.provenance.seal import seal
from refspec.provenance.verify import verify_archive
from refspec.reporting.render import render
from support.small_study import run_main, study_env

MODEL = "model:smollm2-135m/target"
PACKAGE = "pkg:pypi/numpy"


@pytest.fixture(scope="module")
def same_machine(study_copy):
    """This machine's pinned inputs are the archive's: the study was made here."""
    check = R.check_inputs(study_copy["archive"], R.archived_config(study_copy["archive"].manifest))
    assert not check.refused, [d.line() for d in check.refused]
    return check


def _changed(study_copy, name: str, change) -> Path:
    """A copy of A whose manifest is changed by ``change(manifest)`` and sealed again with the test key."""
    res = study_copy["base"] / f"{name}-results"
    shutil.copytree(study_copy["a"], res)
    (res / "SEAL.dsse.json").unlink()
    m = json.loads((res / "manifest.json").read_text())
    change(m)
    (res / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    out = study_copy["base"] / name
    seal(
        res,
        out,
        key=study_copy["key"].private_path,
        campaign="default",
        created="2026-01-01T00:00:00Z",
        archive_id=name,
    )
    return out


def _dep(m: dict, name: str) -> dict:
    return next(d for d in m["buildDefinition"]["resolvedDependencies"] if d["name"] == name)


def _reproduce(study_copy, archive: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "reproduce",
            str(archive),
            "--expect-keyid",
            study_copy["keyid"],
            "--pubkey",
            str(study_copy["key"].public_path),
            "--out",
            str(out),
            "--dry-run",
            *extra,
        ]
    )


def test_the_config_rebuilt_from_the_manifest_is_the_config_that_made_the_archive(study_copy, tmp_path):
    cfg = R.archived_config(study_copy["archive"].manifest)
    ext = study_copy["archive"].manifest["buildDefinition"]["externalParameters"]
    assert sha256_json(cfg) == ext["config_sha256"]
    copy = tmp_path / "config.yaml"
    shutil.copyfile(study_copy["config"], copy)
    assert cfg == read_config_file(copy)
    rep = {"seal_sha256": "0" * 64, "keyid": "SHA256:" + "1" * 64, "archive_id": "x"}
    again = R.reproduction_config(study_copy["archive"].manifest, "results/r", rep)
    assert {k: v for k, v in again.items() if k not in ("results", "reproduces")} == {
        k: v for k, v in cfg.items() if k != "results"
    }
    assert again["results"] == "results/r" and again["reproduces"]["seal_sha256"] == "0" * 64


def test_a_manifest_whose_config_was_edited_is_refused(study_copy):
    m = json.loads(json.dumps(study_copy["archive"].manifest))
    m["buildDefinition"]["externalParameters"]["config"]["threads"] = 7
    with pytest.raises(IntegrityError, match="config_sha256"):
        R.archived_config(m)


def test_pinned_inputs_of_the_manifest(study_copy):
    pins = R.pinned_inputs(study_copy["archive"].manifest)
    assert pins[MODEL] == _dep(study_copy["archive"].manifest, MODEL)["digest"]["sha256"]
    assert pins[PACKAGE] == _dep(study_copy["archive"].manifest, PACKAGE)["annotations"]["version"]
    assert any(k.startswith("sdist:") for k in pins) and any(k.startswith("patch:") for k in pins)
    assert any(k.startswith("panel:") for k in pins) and len(pins[R.NATIVE_BUILD]) == 16


def test_this_machine_matches_the_default_archive(same_machine):
    assert same_machine.refused == [] and same_machine.accepted == []


def test_a_changed_model_is_refused_then_allowed_and_recorded(study_copy, same_machine, capsys):
    edited = "ab" * 32
    b = _changed(study_copy, "model-changed", lambda m: _dep(m, MODEL)["digest"].update(sha256=edited))
    real = _dep(study_copy["archive"].manifest, MODEL)["digest"]["sha256"]
    out = study_copy["base"] / "out-model"
    assert _reproduce(study_copy, b, out) == 3
    err = capsys.readouterr().err
    assert f"{MODEL}: archived {edited}, here {real}" in err
    assert not (out / "reproduce" / "config.yaml").exists()  # refused before anything is written

    assert _reproduce(study_copy, b, out, "--allow", MODEL) == 0  # Snakemake's dry run resolves every rule
    text = capsys.readouterr().out
    assert f"pinned input differs, accepted (--allow): {MODEL}" in text and "dry run" in text
    cfg = json.loads((out / "reproduce" / "config.yaml").read_text())
    seal_sha = verify_archive(b, study_copy["key"].public_path).seal_sha256
    assert cfg["reproduces"]["seal_sha256"] == seal_sha and cfg["reproduces"]["keyid"] == study_copy["keyid"]
    assert cfg["reproduces"]["accepted"] == [{"name": MODEL, "archived": edited, "here": real}]
    assert cfg["results"] == str(out)
    rec = json.loads((out / "reproduce" / "inputs.json").read_text())
    assert rec["accepted"] == cfg["reproduces"]["accepted"] and rec["refused"] == []
    # the report's provenance section shows it
    manifest = {"buildDefinition": {"externalParameters": {"config": cfg}}}
    shown = [" ".join(str(p) for c in row for p in c.parts) for row in reproduction_rows(manifest)]
    assert any(seal_sha in s for s in shown) and any(MODEL in s and edited in s for s in shown)


def test_a_changed_package_version_is_refused(study_copy, same_machine, capsys):
    real = _dep(study_copy["archive"].manifest, PACKAGE)["annotations"]["version"]
    b = _changed(study_copy, "package-changed", lambda m: _dep(m, PACKAGE)["annotations"].update(version="0.0.1"))
    assert _reproduce(study_copy, b, study_copy["base"] / "out-package") == 3
    err = capsys.readouterr().err
    assert f"{PACKAGE}: archived 0.0.1, here {real}" in err
    assert _reproduce(study_copy, b, study_copy["base"] / "out-package", "--allow", "pkg:pypi/*") == 0


def test_an_archive_under_another_key_is_refused(study_copy, capsys):
    code = main(
        [
            "reproduce",
            str(study_copy["a"]),
            "--expect-keyid",
            study_copy["keyid"],
            "--pubkey",
            str(study_copy["signer"]),
            "--dry-run",
        ]
    )
    assert code == 3 and "does not verify" in capsys.readouterr().err


def test_the_seal_names_what_it_reproduces(study_copy, tmp_path, capsys):
    res = tmp_path / "res"
    shutil.copytree(study_copy["a"], res)
    (res / "SEAL.dsse.json").unlink()
    a = study_copy["archive"]
    args = ["--reproduces-seal", a.seal_sha256, "--reproduces-keyid", a.keyid, "--reproduces-archive-id", a.archive_id]
    out = tmp_path / "sealed"
    assert (
        main(["seal", str(res), str(out), "--key", str(study_copy["key"].private_path), "--campaign", "default", *args])
        == 0
    )
    v = verify_archive(out, study_copy["key"].public_path)
    assert v.ok and v.statement["predicate"]["reproduces"] == R.reproduces_ref(a)
    assert v.statement["predicate"]["previous_seal_sha256"] is None  # kept apart from the chain
    assert f"NOTE: reproduces seal {a.seal_sha256} key {a.keyid} archive {a.archive_id}" in v.lines()
    capsys.readouterr()
    assert (
        main(
            [
                "seal",
                str(res),
                str(tmp_path / "bad"),
                "--key",
                str(study_copy["key"].private_path),
                "--campaign",
                "default",
                *args[:2],
            ]
        )
        == 2
    )
    bad = ["--reproduces-seal", "xyz", *args[2:]]
    assert (
        main(
            [
                "seal",
                str(res),
                str(tmp_path / "bad"),
                "--key",
                str(study_copy["key"].private_path),
                "--campaign",
                "default",
                *bad,
            ]
        )
        == 2
    )
    with pytest.raises(UsageError, match="seal's own"):
        seal(res, tmp_path / "own", key=study_copy["key"].private_path, predicate_extra={"archive_id": "x"})


def test_check_py_shows_and_checks_the_reproduces_field():
    from refspec_check.problems import Checker
    from refspec_check.seal import check_reproduces

    good = {"seal_sha256": "a" * 64, "keyid": "SHA256:" + "b" * 64, "archive_id": "x"}
    c = Checker(".")
    check_reproduces(c, {"predicate": {"reproduces": good}})
    assert c.problems == [] and c.reproduces == f"seal {'a' * 64} key SHA256:{'b' * 64} archive x"
    c = Checker(".")
    check_reproduces(c, {"predicate": {"reproduces": dict(good, keyid="SHA256:zz")}})
    assert any("keyid" in p for p in c.problems)


def test_the_report_shows_the_reproduction_and_check_py_recomputes_it(study_copy, tmp_path):
    res = tmp_path / "res"
    shutil.copytree(study_copy["a"], res)
    (res / "SEAL.dsse.json").unlink()
    m = json.loads((res / "manifest.json").read_text())
    m["buildDefinition"]["externalParameters"]["config"]["reproduces"] = {
        "seal_sha256": "a" * 64,
        "keyid": "SHA256:" + "b" * 64,
        "archive_id": "x-1",
        "accepted": [{"name": MODEL, "archived": "ab" * 32, "here": "cd" * 32}],
        "host": [{"name": "host.cpu.model", "archived": "AMD EPYC", "here": "Intel Xeon"}],
    }
    (res / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    render(res, pdf=False)
    check = [sys.executable, "-I", "-S", str(REPO_ROOT / "report" / "check.py"), str(res), "--unsealed"]
    r = subprocess.run(check, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    html = (res / "report.html").read_text()
    assert f"{MODEL}: {'ab' * 32} -&gt; {'cd' * 32}" in html and "host.cpu.model" in html
    doc = json.loads((res / "numbers.json").read_text())
    doc["provenance"]["reproduces_accepted"] = "none"
    (res / "numbers.json").write_text(json.dumps(doc, indent=1))
    r = subprocess.run(check, capture_output=True, text=True)
    assert r.returncode == 1 and "provenance.reproduces_accepted" in r.stdout


def test_reproducing_the_small_study_gives_the_same_preservation_findings(small_study, tmp_path):
    """``refspec reproduce`` end to end on the small study's archive: the registered plan run again
    by the workflow, the reproduction sealed, and ``refspec compare`` of the two exits 0 with every
    preservation finding "same" (and the findings with rows hold rows in both)."""
    a = tmp_path / "a"
    shutil.copytree(small_study.sealed, a)
    keyid = keys.public_fingerprint(small_study.signer)
    out = tmp_path / "reproduction"
    r = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "reproduce", str(a), "--expect-keyid", keyid]
        + ["--pubkey", str(small_study.signer), "--out", str(out), "--cores", "2"],
        cwd=REPO_ROOT,
        env=small_study.env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "pinned inputs: the same as the archive's" in r.stdout
    assert "reproduction archive:" in r.stdout and "registered plan: the same" in r.stdout
    assert "preservation: 7 of 7 findings same" in r.stdout, r.stdout[-4000:]
    b = out / "archive"
    v = verify_archive(b, out / "provenance" / "signer.pub")
    assert (
        v.ok
        and v.statement["predicate"]["reproduces"]["seal_sha256"] == verify_archive(a, small_study.signer).seal_sha256
    )
    # refspec compare of the two, as a user runs it
    c = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "compare", str(a), str(b), "--pubkey-a", str(small_study.signer)]
        + ["--pubkey-b", str(out / "provenance" / "signer.pub"), "--json"],
        cwd=REPO_ROOT,
        env=small_study.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert c.returncode == 0, c.stdout[-4000:] + c.stderr[-4000:]
    doc = json.loads(c.stdout)
    pres = {f["finding"]: f for f in doc["preservation"]}
    assert {k: f["verdict"] for k, f in pres.items()} == dict.fromkeys(
        ("qualification", "first_divergence", "endpoints", "replay", "phase_masks", "partition", "crosses"), "same"
    )
    for k in ("qualification", "first_divergence", "endpoints", "partition", "crosses"):
        assert pres[k]["rows_a"] > 0 and pres[k]["rows_a"] == pres[k]["rows_b"], pres[k]
    assert {t["kind"] for t in doc["timings"]} == {"ratio", "estimate"}
    # the registered plan ran again: its sized campaigns reused the archive's pilots (their costs),
    # so no timing is "not comparable" for a plan that differs
    assert not [t for t in doc["timings"] if t["verdict"] == "not comparable"], doc["timings"]
    repro_cfg = json.loads((out / "reproduce" / "config.yaml").read_text())
    archived = json.loads((a / "plan.json").read_text())
    assert repro_cfg["reproduces"]["pilots"] == R.archived_pilots(archived)
    assert set(repro_cfg["reproduces"]["pilots"]) == {"implementation", "replication"}
    shown = r.stdout[r.stdout.index("reproduction archive:") :]
    print(shown)


def _default_study(tmp: Path) -> Path:
    """The default study's results folder: the clone's own (``./run main``'s results/default) when
    it is sealed, else the default study run here first (the ``./run main`` job, results in ``tmp``)."""
    own = REPO_ROOT / "results" / "default"
    if (own / "sealed-data" / "SEAL.dsse.json").is_file():
        return own
    cfg = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    cfg["results"] = str(tmp / "default")
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = run_main(["--configfile", str(path)], tmp, timeout=3600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return tmp / "default"


@pytest.mark.reproduce_full
def test_reproducing_the_default_archive_gives_the_same_preservation_findings(tmp_path):
    """The whole default study again (about 12 minutes on 2 cores, after the default study itself
    where this clone has not run it), then compare: every preservation finding is "same"."""
    default = _default_study(tmp_path)
    signer = default / "provenance" / "signer.pub"
    a = tmp_path / "a"
    shutil.copytree(default / "sealed-data", a)
    keyid = keys.public_fingerprint(signer)
    out = tmp_path / "reproduction"
    r = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "reproduce", str(a), "--expect-keyid", keyid]
        + ["--pubkey", str(signer), "--out", str(out)],
        cwd=REPO_ROOT,
        env=study_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "reproduction archive:" in r.stdout and "registered plan: the same" in r.stdout
    assert "preservation: 7 of 7 findings same" in r.stdout
    v = verify_archive(out / "archive", out / "provenance" / "signer.pub")
    assert v.ok and v.statement["predicate"]["reproduces"]["seal_sha256"] == verify_archive(a, signer).seal_sha256
