"""The tamper matrix: every kind of change to a sealed archive is detected, and a
clean archive passes. Plus a property-based test of random byte mutations."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refspec.hashing import canonical_json, sha256_bytes
from refspec.keys import load_private_key
from refspec.seal import PAYLOAD_TYPE, SEAL_NAME, envelope_bytes, pae, seal_sha256_of
from refspec.verify import verify_archive
from test_seal_util import copy_archive, seal_env  # noqa: F401  (fixture)

MEMBERS = [
    SEAL_NAME,
    "tables/qualification.parquet",
    "tables/qualification.csv",
    "manifest.json",
    "plan.json",
    "ledger.jsonl",
    "report/report.html",
]


def _flip(path: Path, pos: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if pos is None else pos
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def _envelope(d: Path) -> dict:
    return json.loads((d / SEAL_NAME).read_bytes())


def _statement(d: Path) -> dict:
    return json.loads(base64.b64decode(_envelope(d)["payload"]))


def _write_env(d: Path, env: dict) -> None:
    (d / SEAL_NAME).write_bytes(canonical_json(env) + b"\n")


def _ledger_lines(d: Path) -> list[bytes]:
    return (d / "ledger.jsonl").read_bytes().splitlines(keepends=True)


# --------------------------------------------------------------------------- mutations


def truncate_parquet(d, env):
    p = d / "tables/timings.parquet"
    p.write_bytes(p.read_bytes()[:-10])


def truncate_csv(d, env):
    p = d / "tables/qualification.csv"
    p.write_bytes(p.read_bytes()[:-1])


def delete_file(d, env):
    (d / "plan.json").unlink()


def add_file(d, env):
    (d / "extra.txt").write_text("not sealed\n")


def rename_file(d, env):
    (d / "report/report.html").rename(d / "report/index.html")


def swap_files(d, env):
    a, b = d / "manifest.json", d / "plan.json"
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)


def add_file_in_new_folder(d, env):
    (d / "new").mkdir()
    (d / "new" / "x.bin").write_bytes(b"\0" * 10)


def add_empty_folder(d, env):
    (d / "empty").mkdir()


def replace_file_by_symlink(d, env):
    target = env["base"] / "outside.html"
    shutil.copy(d / "report/report.html", target)
    (d / "report/report.html").unlink()
    os.symlink(target, d / "report/report.html")


def edit_parquet_metadata_only(d, env):
    p = d / "tables/qualification.parquet"
    t = pq.read_table(p)
    md = dict(t.schema.metadata)
    md[b"refspec.archive_id"] = b"archive-forged"
    pq.write_table(t.replace_schema_metadata(md), p, compression="zstd")


def replace_table_from_other_campaign(d, env):
    shutil.copy(env["other"] / "tables/qualification.parquet", d / "tables/qualification.parquet")


def edit_payload_after_signing(d, env_):
    env = _envelope(d)
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["campaign"] = "confirm"
    env["payload"] = base64.b64encode(canonical_json(stmt)).decode()
    _write_env(d, env)


def drop_subject_after_signing(d, env_):
    env = _envelope(d)
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["subject"] = [s for s in stmt["subject"] if s["name"] != "plan.json"]
    stmt["predicate"]["files"] -= 1
    env["payload"] = base64.b64encode(canonical_json(stmt)).decode()
    _write_env(d, env)
    (d / "plan.json").unlink()


def change_payload_type(d, env_):
    env = _envelope(d)
    env["payloadType"] = "application/json"
    _write_env(d, env)


def resign_with_other_key(d, env):
    stmt = _statement(d)
    (d / SEAL_NAME).write_bytes(envelope_bytes(stmt, load_private_key(env["b"].private_path)))


def resign_other_key_keep_keyid(d, env):
    """Another key's signature presented under the expected key id."""
    env_ = _envelope(d)
    payload = base64.b64decode(env_["payload"])
    sig = load_private_key(env["b"].private_path).sign(pae(PAYLOAD_TYPE, payload))
    env_["signatures"][0]["sig"] = base64.b64encode(sig).decode()
    _write_env(d, env_)


def forge_subject_and_resign_other_key(d, env):
    (d / "plan.json").write_text('{"campaign": "probe", "arms": ["R"]}\n')
    stmt = _statement(d)
    for s in stmt["subject"]:
        if s["name"] == "plan.json":
            data = (d / "plan.json").read_bytes()
            s["digest"]["sha256"] = sha256_bytes(data)
            s["annotations"]["size"] = len(data)
    (d / SEAL_NAME).write_bytes(envelope_bytes(stmt, load_private_key(env["b"].private_path)))


def add_second_signature(d, env):
    env_ = _envelope(d)
    env_["signatures"].append(dict(env_["signatures"][0]))
    _write_env(d, env_)


def reformat_envelope(d, env):
    (d / SEAL_NAME).write_text(json.dumps(_envelope(d), indent=2))


def delete_seal(d, env):
    (d / SEAL_NAME).unlink()


def ledger_delete_line(d, env):
    lines = _ledger_lines(d)
    (d / "ledger.jsonl").write_bytes(b"".join(lines[:1] + lines[2:]))


def ledger_delete_last_line(d, env):
    lines = _ledger_lines(d)
    (d / "ledger.jsonl").write_bytes(b"".join(lines[:-1]))


def ledger_reorder_lines(d, env):
    lines = _ledger_lines(d)
    (d / "ledger.jsonl").write_bytes(b"".join([lines[0], lines[2], lines[1]]))


def ledger_edit_line(d, env):
    p = d / "ledger.jsonl"
    p.write_bytes(p.read_bytes().replace(b'"outcome":"failed"', b'"outcome":"ok"', 1))


def ledger_append_line(d, env):
    from refspec.ledger import Ledger

    Ledger(d / "ledger.jsonl").append({"event": "attempt", "reason": "added after sealing"})


# (case id, mutation, a substring one of the problems must contain)
CASES = [
    *[(f"flip-byte-{m}", (lambda m: lambda d, e: _flip(d / m))(m), m) for m in MEMBERS],
    ("truncate-parquet", truncate_parquet, "tables/timings.parquet: size"),
    ("truncate-csv", truncate_csv, "tables/qualification.csv: size"),
    ("delete-file", delete_file, "plan.json: listed in the seal but missing"),
    ("add-file", add_file, "extra.txt: not listed"),
    ("rename-file", rename_file, "report/index.html: not listed"),
    ("swap-two-files", swap_files, "manifest.json: size"),
    ("add-file-in-new-folder", add_file_in_new_folder, "new/x.bin: not listed"),
    ("add-empty-folder", add_empty_folder, "empty/: folder not implied"),
    ("symlink-instead-of-file", replace_file_by_symlink, "symbolic link"),
    ("edit-parquet-kv-metadata", edit_parquet_metadata_only, "Parquet archive id 'archive-forged'"),
    ("table-from-other-campaign", replace_table_from_other_campaign, "Parquet campaign 'confirm'"),
    ("edit-payload-after-signing", edit_payload_after_signing, "signature does not verify"),
    ("drop-subject-after-signing", drop_subject_after_signing, "signature does not verify"),
    ("change-payload-type", change_payload_type, "payload type 'application/json'"),
    ("resign-with-other-key", resign_with_other_key, "signature does not verify"),
    ("resign-other-key-same-keyid", resign_other_key_keep_keyid, "signature does not verify"),
    ("forge-subject-resign-other-key", forge_subject_and_resign_other_key, "signed by"),
    ("add-second-signature", add_second_signature, "exactly one signature"),
    ("reformat-envelope", reformat_envelope, "canonical form"),
    ("delete-seal", delete_seal, f"{SEAL_NAME}: missing"),
    ("ledger-delete-line", ledger_delete_line, "ledger.jsonl: line 2 breaks the chain"),
    ("ledger-delete-last-line", ledger_delete_last_line, "ledger.jsonl: has 2 lines, expected 3"),
    ("ledger-reorder-lines", ledger_reorder_lines, "ledger.jsonl: line 2 has seq 2"),
    ("ledger-edit-line", ledger_edit_line, "ledger.jsonl: line 3 breaks the chain"),
    ("ledger-append-line", ledger_append_line, "ledger.jsonl: has 4 lines, expected 3"),
]


@pytest.mark.parametrize("case,mutate,expected", CASES, ids=[c[0] for c in CASES])
def test_tamper_is_detected(case, mutate, expected, seal_env, tmp_path):
    d = copy_archive(seal_env["clean"], tmp_path / "archive")
    assert verify_archive(d, seal_env["a"].public_path).ok  # the copy is clean before the change
    mutate(d, seal_env)
    res = verify_archive(d, seal_env["a"].public_path)
    assert not res.ok, f"{case}: tampering not detected"
    assert any(expected in p for p in res.problems), res.problems


def test_clean_archive_passes(seal_env):
    res = verify_archive(seal_env["clean"], seal_env["a"].public_path, expect_previous="none")
    assert res.ok, res.problems
    assert res.files == seal_env["clean_result"].files
    assert verify_archive(seal_env["clean_tar"], seal_env["a"].public_path).ok


def test_clean_archive_fails_with_another_key(seal_env):
    res = verify_archive(seal_env["clean"], seal_env["b"].public_path)
    assert not res.ok
    assert any("signed by" in p for p in res.problems)


def test_signature_failure_stops_before_the_payload(seal_env, tmp_path):
    """With a bad signature nothing of the payload is used: no file problems are reported."""
    d = copy_archive(seal_env["clean"], tmp_path / "a")
    edit_payload_after_signing(d, seal_env)
    (d / "extra.txt").write_text("x")
    res = verify_archive(d, seal_env["a"].public_path)
    assert res.statement is None
    assert all(p.startswith(SEAL_NAME) for p in res.problems), res.problems


def test_collects_every_problem(seal_env, tmp_path):
    d = copy_archive(seal_env["clean"], tmp_path / "a")
    add_file(d, seal_env)
    delete_file(d, seal_env)
    _flip(d / "tables/timings.csv")
    ledger_edit_line(d, seal_env)
    res = verify_archive(d, seal_env["a"].public_path)
    text = "\n".join(res.problems)
    for expected in ("extra.txt", "plan.json", "tables/timings.csv", "ledger.jsonl: line 3"):
        assert expected in text


def test_older_seal_where_newer_expected(seal_env):
    newer_prev = seal_sha256_of(seal_env["clean"])  # "next" follows "clean"
    assert seal_env["next_result"].previous_seal_sha256 == newer_prev
    ok = verify_archive(seal_env["next"], seal_env["a"].public_path, expect_previous=newer_prev)
    assert ok.ok, ok.problems
    # Presenting the older archive where the one following `clean` is expected:
    old = verify_archive(seal_env["clean"], seal_env["a"].public_path, expect_previous=newer_prev)
    assert not old.ok
    assert any("previous seal is none" in p for p in old.problems)
    # ... and the newer where the first of the chain is expected.
    res = verify_archive(seal_env["next"], seal_env["a"].public_path, expect_previous="none")
    assert not res.ok


def test_next_seal_chains_to_the_previous_seal_file_hash(seal_env):
    stmt = _statement(seal_env["next"])
    want = sha256_bytes((seal_env["clean"] / SEAL_NAME).read_bytes())
    assert stmt["predicate"]["previous_seal_sha256"] == want
    assert seal_sha256_of(seal_env["clean_tar"]) == want


# --------------------------------------------------------------------------- tars


def _tar_with(path: Path, base: Path, extra) -> Path:
    with tarfile.open(path, "w") as tf:
        for f in sorted(base.rglob("*")):
            if f.is_file():
                tf.add(f, arcname=f.relative_to(base).as_posix())
        extra(tf)
    return path


def _add_bytes(tf, name, data=b"x", type_=tarfile.REGTYPE, linkname=""):
    import io

    ti = tarfile.TarInfo(name)
    ti.type = type_
    ti.linkname = linkname
    ti.size = len(data) if type_ == tarfile.REGTYPE else 0
    tf.addfile(ti, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)


TAR_CASES = [
    ("dotdot", lambda tf: _add_bytes(tf, "../x"), "'..' in path"),
    ("absolute", lambda tf: _add_bytes(tf, "/tmp/refspec-evil"), "absolute path"),
    ("symlink", lambda tf: _add_bytes(tf, "link", type_=tarfile.SYMTYPE, linkname="/etc/passwd"), "symbolic link"),
    ("hardlink", lambda tf: _add_bytes(tf, "hard", type_=tarfile.LNKTYPE, linkname="plan.json"), "hard link"),
    ("device", lambda tf: _add_bytes(tf, "dev", type_=tarfile.CHRTYPE), "device file"),
    ("fifo", lambda tf: _add_bytes(tf, "fifo", type_=tarfile.FIFOTYPE), "FIFO"),
    ("duplicate", lambda tf: _add_bytes(tf, "plan.json", b"{}"), "duplicate"),
]


@pytest.mark.parametrize("case,extra,expected", TAR_CASES, ids=[c[0] for c in TAR_CASES])
def test_unsafe_tar_fails_verification(case, extra, expected, seal_env, tmp_path):
    t = _tar_with(tmp_path / "evil.tar", seal_env["clean"], extra)
    res = verify_archive(t, seal_env["a"].public_path)
    assert not res.ok
    assert any(expected in p for p in res.problems), res.problems


def test_tar_flip_in_member_data_and_padding(seal_env, tmp_path):
    raw = seal_env["clean_tar"].read_bytes()
    with tarfile.open(seal_env["clean_tar"]) as tf:
        m = tf.getmember("plan.json")
    for pos, expected in ((m.offset_data + 1, "plan.json: sha256"), (m.offset_data + m.size + 3, "padding")):
        t = tmp_path / f"t{pos}.tar"
        data = bytearray(raw)
        data[pos] ^= 0x20
        t.write_bytes(bytes(data))
        res = verify_archive(t, seal_env["a"].public_path)
        assert any(expected in p for p in res.problems), res.problems


# --------------------------------------------------------------------------- property


@st.composite
def mutations(draw, names):
    name = draw(st.sampled_from(names))
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "append"]))
    where = draw(st.floats(min_value=0, max_value=1, exclude_max=True))
    value = draw(st.integers(min_value=1, max_value=255))
    return name, kind, where, value


def _mutate(data: bytes, kind: str, where: float, value: int) -> bytes:
    i = int(where * len(data)) if data else 0
    if kind == "flip" and data:
        return data[:i] + bytes([data[i] ^ value]) + data[i + 1 :]
    if kind == "truncate":
        return data[:i]
    if kind == "insert":
        return data[:i] + bytes([value]) + data[i:]
    if kind == "delete" and data:
        return data[:i] + data[i + 1 :]
    return data + bytes([value])


@pytest.fixture(scope="module")
def mutable(seal_env, tmp_path_factory):
    base = tmp_path_factory.mktemp("mutable")
    d = copy_archive(seal_env["clean"], base / "archive")
    t = base / "archive.tar"
    shutil.copy(seal_env["clean_tar"], t)
    names = sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    return d, t, names


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_byte_mutations_never_pass(data, mutable, seal_env):
    d, _t, names = mutable
    name, kind, where, value = data.draw(mutations(names))
    p = d / name
    orig = p.read_bytes()
    mutated = _mutate(orig, kind, where, value)
    if mutated == orig:
        return
    try:
        p.write_bytes(mutated)
        res = verify_archive(d, seal_env["a"].public_path, workers=1)
        assert not res.ok, f"{kind} at {where:.3f} of {name} passed verification"
    finally:
        p.write_bytes(orig)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["flip", "truncate", "insert", "delete", "append"]),
       where=st.floats(min_value=0, max_value=1, exclude_max=True),
       value=st.integers(min_value=1, max_value=255))
def test_random_byte_mutations_of_the_tar_never_pass(kind, where, value, mutable, seal_env):
    _d, t, _names = mutable
    orig = t.read_bytes()
    mutated = _mutate(orig, kind, where, value)
    if mutated == orig:
        return
    try:
        t.write_bytes(mutated)
        res = verify_archive(t, seal_env["a"].public_path, workers=1)
        assert not res.ok, f"{kind} at byte {int(where * len(orig))} of the tar passed verification"
    finally:
        t.write_bytes(orig)
