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

from refspec.core.hashing import canonical_json, sha256_bytes
from refspec.provenance.dsse import SEAL_NAME, envelope_bytes
from refspec.provenance.keys import load_private_key
from refspec.provenance.verify import verify_archive
from support.sealing import copy_archive, seal_sha256_of
from support.tampering import (
    CANONICAL_CASES,
    TAR_CASES,
    edit_payload_after_signing,
    envelope,
    folder_files,
    gzip_tar,
    resign_other_key_keep_keyid,
    retar,
    signed_statement,
    signed_tar,
    statement,
    tar_with,
    write_envelope,
)

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


def drop_subject_after_signing(d, env_):
    env = envelope(d)
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["subject"] = [s for s in stmt["subject"] if s["name"] != "plan.json"]
    stmt["predicate"]["files"] -= 1
    env["payload"] = base64.b64encode(canonical_json(stmt)).decode()
    write_envelope(d, env)
    (d / "plan.json").unlink()


def change_payload_type(d, env_):
    env = envelope(d)
    env["payloadType"] = "application/json"
    write_envelope(d, env)


def resign_with_other_key(d, env):
    stmt = statement(d)
    (d / SEAL_NAME).write_bytes(envelope_bytes(stmt, load_private_key(env["b"].private_path)))


def forge_subject_and_resign_other_key(d, env):
    (d / "plan.json").write_text('{"campaign": "probe", "arms": ["R"]}\n')
    stmt = statement(d)
    for s in stmt["subject"]:
        if s["name"] == "plan.json":
            data = (d / "plan.json").read_bytes()
            s["digest"]["sha256"] = sha256_bytes(data)
            s["annotations"]["size"] = len(data)
    (d / SEAL_NAME).write_bytes(envelope_bytes(stmt, load_private_key(env["b"].private_path)))


def add_second_signature(d, env):
    env_ = envelope(d)
    env_["signatures"].append(dict(env_["signatures"][0]))
    write_envelope(d, env_)


def reformat_envelope(d, env):
    (d / SEAL_NAME).write_text(json.dumps(envelope(d), indent=2))


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
    from refspec.provenance.ledger import Ledger

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
    stmt = statement(seal_env["next"])
    want = sha256_bytes((seal_env["clean"] / SEAL_NAME).read_bytes())
    assert stmt["predicate"]["previous_seal_sha256"] == want
    assert seal_sha256_of(seal_env["clean_tar"]) == want


# --------------------------------------------------------------------------- tars


@pytest.mark.parametrize("case,extra,expected", TAR_CASES, ids=[c[0] for c in TAR_CASES])
def test_unsafe_tar_fails_verification(case, extra, expected, seal_env, tmp_path):
    t = tar_with(tmp_path / "evil.tar", seal_env["clean"], extra)
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
        res = verify_archive(d, seal_env["a"].public_path, threads=1)
        assert not res.ok, f"{kind} at {where:.3f} of {name} passed verification"
    finally:
        p.write_bytes(orig)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["flip", "truncate", "insert", "delete", "append"]),
    where=st.floats(min_value=0, max_value=1, exclude_max=True),
    value=st.integers(min_value=1, max_value=255),
)
def test_random_byte_mutations_of_the_tar_never_pass(kind, where, value, mutable, seal_env):
    _d, t, _names = mutable
    orig = t.read_bytes()
    mutated = _mutate(orig, kind, where, value)
    if mutated == orig:
        return
    try:
        t.write_bytes(mutated)
        res = verify_archive(t, seal_env["a"].public_path, threads=1)
        assert not res.ok, f"{kind} at byte {int(where * len(orig))} of the tar passed verification"
    finally:
        t.write_bytes(orig)


# --------------------------------------------------------------------------- pinned signer


def test_resealed_with_an_attackers_key_fails_against_the_pinned_key_id(seal_env, tmp_path):
    """An archive re-sealed with key B verifies against B's public key shipped next to
    it; the key id pinned from outside the archive (key A's) refuses it."""
    d = copy_archive(seal_env["clean"], tmp_path / "a")
    forge_subject_and_resign_other_key(d, seal_env)
    attacker_pub = seal_env["b"].public_path
    assert verify_archive(d, attacker_pub).ok  # what an unpinned check would accept
    res = verify_archive(d, attacker_pub, expect_keyid=seal_env["a"].fingerprint)
    assert not res.ok
    assert any(f"is not the pinned signer {seal_env['a'].fingerprint}" in p for p in res.problems), res.problems
    assert verify_archive(seal_env["clean"], seal_env["a"].public_path, expect_keyid=seal_env["a"].fingerprint).ok


# --------------------------------------------------------------------------- canonical tar


@pytest.mark.parametrize("case,build,expected", CANONICAL_CASES, ids=[c[0] for c in CANONICAL_CASES])
def test_noncanonical_tar_fails_verification(case, build, expected, seal_env, tmp_path):
    t = build(tmp_path / "t.tar", seal_env["clean_tar"])
    assert t.read_bytes() != seal_env["clean_tar"].read_bytes()
    res = verify_archive(t, seal_env["a"].public_path)
    assert not res.ok, f"{case}: accepted"
    assert any(expected in p for p in res.problems), res.problems


def test_a_faithful_rewrite_of_the_tar_is_byte_identical_and_passes(seal_env, tmp_path):
    """The rewriting helper itself changes nothing when asked to change nothing (no false alarm)."""
    t = retar(tmp_path / "same.tar", seal_env["clean_tar"])
    assert t.read_bytes() == seal_env["clean_tar"].read_bytes()
    assert verify_archive(t, seal_env["a"].public_path).ok


def test_every_single_bit_flip_of_a_gzipped_tar_is_refused(seal_env, tmp_path):
    """A .tar.gz is refused outright: the clean one, and one flipped bit at every byte of it."""
    gz = gzip_tar(tmp_path / "clean.tar.gz", seal_env["clean_tar"]).read_bytes()
    t = tmp_path / "flipped.tar.gz"
    assert not verify_archive(gzip_tar(t, seal_env["clean_tar"]), seal_env["a"].public_path).ok
    passed = []
    for i in range(len(gz)):
        data = bytearray(gz)
        data[i] ^= 1 << (i % 8)
        t.write_bytes(bytes(data))
        if verify_archive(t, seal_env["a"].public_path, threads=1).ok:
            passed.append(i)
    print(f"gzip bit flips: {len(gz)} tried, {len(gz) - len(passed)} detected")
    assert passed == []


# --------------------------------------------------------------------------- fuzz: headers and framing


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    member=st.integers(min_value=0, max_value=100),
    at=st.integers(min_value=0, max_value=511),
    value=st.integers(min_value=1, max_value=255),
)
def test_fuzz_tar_header_bytes_never_pass(member, at, value, mutable, seal_env):
    """Any change of any byte of any member header (checksum updated or not) is refused."""
    _d, t, _names = mutable
    orig = t.read_bytes()
    with tarfile.open(t) as tf:
        offs = [m.offset for m in tf.getmembers()]
    off = offs[member % len(offs)] + at
    data = bytearray(orig)
    data[off] ^= value
    if member % 2:  # also make the header checksum agree, as a forger would
        start = off - off % 512
        hdr = data[start : start + 512]
        hdr[148:156] = b"        "
        hdr[148:156] = b"%06o\x00 " % sum(hdr)
        data[start : start + 512] = hdr
    if bytes(data) == orig:
        return
    try:
        t.write_bytes(bytes(data))
        assert not verify_archive(t, seal_env["a"].public_path, threads=1).ok, f"header byte {off} changed"
    finally:
        t.write_bytes(orig)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fmt=st.sampled_from([tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT]),
    mode=st.sampled_from([0o644, 0o600, 0o755, 0o4777]),
    uid=st.sampled_from([0, 1000]),
    uname=st.sampled_from(["", "root"]),
    dmtime=st.sampled_from([0, 1]),
    pax=st.sampled_from([None, "comment", "SCHILY.xattr.user.a", "mtime", "uname"]),
    reverse=st.booleans(),
)
def test_fuzz_rewritten_tars_pass_only_in_the_canonical_form(
    fmt, mode, uid, uname, dmtime, pax, reverse, seal_env, tmp_path_factory
):
    """Rewritten with random header choices, a tar verifies exactly when every choice is the
    canonical one (ustar and PAX write the same bytes when no PAX record is needed)."""

    def edit(ti):
        ti.mode, ti.uid, ti.uname, ti.mtime = mode, uid, uname, ti.mtime + dmtime
        if pax is not None:
            ti.pax_headers[pax] = "1" if pax == "mtime" else "x"

    if pax is not None and fmt != tarfile.PAX_FORMAT:
        return  # other formats drop PAX records
    t = retar(
        tmp_path_factory.mktemp("fuzz") / "t.tar",
        seal_env["clean_tar"],
        fmt=fmt,
        edit=edit,
        order=(lambda items: items[::-1]) if reverse else None,
    )
    canonical = (
        fmt != tarfile.GNU_FORMAT
        and mode == 0o644
        and uid == 0
        and uname == ""
        and dmtime == 0
        and pax is None
        and not reverse
    )
    res = verify_archive(t, seal_env["a"].public_path, threads=1)
    assert res.ok == canonical, res.problems


# --------------------------------------------------------------------------- re-signed with the real key
#
# Each change below is made after sealing and the archive is then signed again with the
# signer's own key (subjects recomputed), so the signature, the digests and the closed
# world all hold: what must catch it is the content check itself.


def _resign(d: Path, env: dict, edit=None) -> None:
    stmt = signed_statement(statement(d), folder_files(d), edit)
    (d / SEAL_NAME).write_bytes(envelope_bytes(stmt, load_private_key(env["a"].private_path)))


def _edit(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data, (old, data[:300])
    path.write_bytes(data.replace(old, new, 1))


def csv_cell_changed(d, env):
    _edit(d / "tables/qualification.csv", b",0.1\n", b",0.2\n")
    _resign(d, env)


def csv_row_dropped(d, env):
    p = d / "tables/timings.csv"
    p.write_bytes(b"".join(p.read_bytes().splitlines(keepends=True)[:-1]))
    _resign(d, env)


def csv_row_added(d, env):
    p = d / "tables/timings.csv"
    p.write_bytes(p.read_bytes() + b"2,0.5\n")
    _resign(d, env)


def csv_header_renamed(d, env):
    _edit(d / "tables/timings.csv", b"session,t\n", b"session,t_ms\n")
    _resign(d, env)


def csv_float_respelled(d, env):
    """The same number in another spelling: the CSV encoding is one text per value."""
    _edit(d / "tables/timings.csv", b",0.0015\n", b",1.5e-3\n")
    _resign(d, env)


def parquet_value_changed(d, env):
    p = d / "tables/timings.parquet"
    t = pq.read_table(p)
    import pyarrow as pa

    t2 = t.set_column(1, "t", pa.array([9.0] + t.column("t").to_pylist()[1:])).replace_schema_metadata(
        t.schema.metadata
    )
    pq.write_table(t2, p, compression="zstd")
    _resign(d, env)


def csv_checked_claimed_for_a_differing_copy(d, env):
    """The signed table index says the copy was checked; the copy differs all the same."""
    _edit(d / "tables/qualification.csv", b"HumanEval/1", b"HumanEval/9")

    def claim(stmt):
        for t in stmt["predicate"]["tables"]:
            t["csv_checked"] = True

    _resign(d, env, claim)


RESIGNED_CASES = [
    ("csv-cell-changed", csv_cell_changed, "tables/qualification.csv: line 2 differs from its table"),
    ("csv-row-dropped", csv_row_dropped, "tables/timings.csv: ends after line 4"),
    ("csv-row-added", csv_row_added, "tables/timings.csv: has more lines than its table"),
    ("csv-header-renamed", csv_header_renamed, "tables/timings.csv: line 1 differs"),
    ("csv-float-respelled", csv_float_respelled, "tables/timings.csv: line 2 differs"),
    ("parquet-value-changed", parquet_value_changed, "tables/timings.csv: line 2 differs from its table"),
    ("csv-checked-claimed", csv_checked_claimed_for_a_differing_copy, "tables/qualification.csv: line 3 differs"),
]


@pytest.mark.parametrize("case,mutate,expected", RESIGNED_CASES, ids=[c[0] for c in RESIGNED_CASES])
def test_a_csv_copy_that_differs_from_its_table_fails_even_when_signed(case, mutate, expected, seal_env, tmp_path):
    d = copy_archive(seal_env["clean"], tmp_path / "archive")
    mutate(d, seal_env)
    res = verify_archive(d, seal_env["a"].public_path)
    assert not res.ok, f"{case}: not detected"
    assert any(expected in p for p in res.problems), res.problems
    assert all(not p.startswith(SEAL_NAME) for p in res.problems)  # the signature itself is good


def test_csv_checked_is_computed_not_read_from_the_seal(seal_env, tmp_path):
    res = verify_archive(seal_env["clean"], seal_env["a"].public_path)
    assert res.ok and res.csv_checked == {"tables/qualification.parquet": True, "tables/timings.parquet": True}
    d = copy_archive(seal_env["clean"], tmp_path / "a")

    def deny(stmt):  # the seal claims no copy was checked: verify compares them anyway
        for t in stmt["predicate"]["tables"]:
            t["csv_checked"] = False

    _resign(d, seal_env, deny)
    res = verify_archive(d, seal_env["a"].public_path)
    assert res.ok and all(res.csv_checked.values()) and res.notes == []
    (d / "tables/timings.csv").unlink()
    _resign(d, seal_env)
    res = verify_archive(d, seal_env["a"].public_path)
    assert res.ok and "tables/timings.parquet" not in res.csv_checked
    assert res.notes == ["tables/timings.parquet: no CSV copy (report/check.py cannot read this table)"]


@pytest.mark.parametrize(
    "extra,expected",
    [
        ({"x": b"1", "x/y": b"2"}, "subject 'x' is both a file and the folder of 'x/y'"),
        ({"report/" + "n" * 300: b"long"}, "path component longer than 255 bytes"),
        ({"/".join(["d" * 200] * 6): b"deep"}, "path longer than 1024 bytes"),
    ],
    ids=["file-and-folder", "long-component", "long-path"],
)
def test_signed_names_that_cannot_be_restored_fail_verification(extra, expected, seal_env, tmp_path):
    t = signed_tar(tmp_path / "signed.tar", seal_env["clean"], seal_env, extra)
    res = verify_archive(t, seal_env["a"].public_path)
    assert not res.ok and any(expected in p for p in res.problems), res.problems
    assert all(not p.startswith(SEAL_NAME) for p in res.problems)


def test_the_resigning_helpers_make_a_valid_archive(seal_env, tmp_path):
    """No false alarm: re-signing an unchanged archive, or a tar of it, verifies."""
    d = copy_archive(seal_env["clean"], tmp_path / "a")
    _resign(d, seal_env)
    assert verify_archive(d, seal_env["a"].public_path).ok
    t = signed_tar(tmp_path / "same.tar", seal_env["clean"], seal_env, {})
    res = verify_archive(t, seal_env["a"].public_path)
    assert res.ok, res.problems


@pytest.mark.parametrize(
    "field,value",
    [
        ("created", "2026-01-02T00:00:00Z\r\x1b[2KOK: all good\x1b[0m"),
        ("archive_id", "archive-0\u202eOK\u2028line"),
    ],
)
def test_signed_strings_are_printed_escaped(field, value, seal_env, tmp_path, capsys):
    """A signer's control characters cannot move the cursor or rewrite the OK line."""
    from refspec.cli import main

    d = copy_archive(seal_env["clean"], tmp_path / "a")
    if field == "archive_id":
        for p in d.rglob("*.parquet"):  # the tables' stamps follow the archive id
            t = pq.read_table(p)
            md = dict(t.schema.metadata)
            md[b"refspec.archive_id"] = value.encode()
            pq.write_table(t.replace_schema_metadata(md), p, compression="zstd")
    _resign(d, seal_env, lambda stmt: stmt["predicate"].__setitem__(field, value))
    rc = main(["verify", str(d), "--pubkey", str(seal_env["a"].public_path)])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 1 and lines[0].startswith("OK: "), repr(out)
    assert lines[0].isprintable() and out.endswith("\n"), repr(out)
    want = "".join(
        ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}" for ch in value
    )
    assert want in lines[0], (want, lines[0])


def test_every_printed_problem_is_escaped(seal_env, tmp_path, capsys):
    from refspec.cli import main

    d = copy_archive(seal_env["clean"], tmp_path / "a")
    (d / "evil\x1b[2Kname.txt").write_text("x")
    rc = main(["verify", str(d), "--pubkey", str(seal_env["a"].public_path)])
    out = capsys.readouterr().out
    assert rc == 1 and "\x1b" not in out and "\\x1b" in out


# --------------------------------------------------------------------------- seal --previous


def test_seal_previous_verifies_the_previous_archive(seal_env, tmp_path):
    from refspec.core.errors import IntegrityError
    from refspec.provenance.seal import seal

    key = seal_env["a"].private_path
    ok = seal(seal_env["results"], tmp_path / "ok", key=key, previous=seal_env["clean_tar"])
    assert ok.previous_seal_sha256 == seal_sha256_of(seal_env["clean"])
    assert seal(seal_env["results"], tmp_path / "ok2", key=key, previous=seal_env["clean"] / SEAL_NAME)
    bad = copy_archive(seal_env["clean"], tmp_path / "bad")
    _flip(bad / "plan.json")
    other = tmp_path / "other-key"
    seal(seal_env["results"], other, key=seal_env["b"].private_path)
    lone = tmp_path / "lone" / SEAL_NAME
    lone.parent.mkdir()
    env = envelope(seal_env["clean"])
    env["signatures"][0]["sig"] = base64.b64encode(b"\0" * 64).decode()
    write_envelope(lone.parent, env)
    cases = {
        "tampered": (bad, "plan.json: sha256"),
        "other-key": (other, "signed by"),
        "gzip-tar": (gzip_tar(tmp_path / "prev.tar.gz", seal_env["clean_tar"]), "gzip-compressed tar refused"),
        "lone-seal-bad-signature": (lone, "signature does not verify"),
    }
    for case, (prev, expected) in cases.items():
        out = tmp_path / f"out-{case}"
        with pytest.raises(IntegrityError, match="does not verify under the signing key") as e:
            seal(seal_env["results"], out, key=key, previous=prev)
        assert expected in str(e.value), (case, str(e.value))
        assert not out.exists()
