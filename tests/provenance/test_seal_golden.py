"""Golden archives sealed by earlier versions keep verifying.

Each ``tests/golden/<version>/`` holds an archive folder, its tar, the public key
of a signing key that no longer exists and the expected seal facts
(``make_golden.py`` writes a new one; existing ones are never regenerated).
"""

from __future__ import annotations

import json
import shutil

import pytest

from refspec.cli import main
from refspec.provenance import keys
from refspec.provenance.restore import restore
from refspec.provenance.verify import verify_archive
from support.paths import GOLDEN
from support.sealing import seal_sha256_of

VERSIONS = sorted(p.name for p in GOLDEN.iterdir() if (p / "expected.json").is_file())


def test_there_is_a_golden_archive():
    assert "v1" in VERSIONS


@pytest.fixture(params=VERSIONS)
def golden(request):
    d = GOLDEN / request.param
    return d, json.loads((d / "expected.json").read_text())


def test_golden_folder_verifies(golden):
    d, exp = golden
    res = verify_archive(d / "archive", d / "signer.pub", expect_previous=exp["previous_seal_sha256"] or "none")
    assert res.ok, res.problems
    assert res.files == exp["files"]
    assert res.seal_sha256 == exp["seal_sha256"]
    pred = res.statement["predicate"]
    assert pred["archive_id"] == exp["archive_id"] and pred["campaign"] == exp["campaign"]
    assert pred["signer"]["keyid"] == exp["keyid"]


def test_golden_tar_verifies_and_restores(golden, tmp_path):
    d, exp = golden
    assert verify_archive(d / "archive.tar", d / "signer.pub").ok
    assert seal_sha256_of(d / "archive.tar") == exp["seal_sha256"]
    r = restore(d / "archive.tar", tmp_path / "restored", d / "signer.pub")
    assert r.ok, r.verify.problems


def test_golden_cli(golden, capsys):
    d, exp = golden
    pin = ["--expect-keyid", exp["keyid"], "--expect-previous", "none"]
    assert main(["verify", str(d / "archive"), "--pubkey", str(d / "signer.pub"), *pin]) == 0
    assert capsys.readouterr().out == (
        f"OK: {d / 'archive'} ({exp['files']} files) key {exp['keyid']} archive {exp['archive_id']} "
        f"created 2026-01-02T00:00:00Z seal {exp['seal_sha256']} previous none\n"
    )


def test_golden_fails_when_changed_or_with_another_key(golden, tmp_path):
    d, _exp = golden
    copy = tmp_path / "archive"
    shutil.copytree(d / "archive", copy)
    ledger = copy / "ledger.jsonl"
    ledger.write_bytes(ledger.read_bytes().replace(b'"outcome":"ok"', b'"outcome":"no"', 1))
    assert not verify_archive(copy, d / "signer.pub").ok
    other = keys.generate(tmp_path / "keys", name="other")
    res = verify_archive(d / "archive", other.public_path)
    assert not res.ok and any("signed by" in p for p in res.problems)
