"""``refspec restore``: safe extraction into a fresh folder, then verification."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from refspec.cli import main
from refspec.core.errors import UsageError
from refspec.provenance.restore import restore
from refspec.provenance.verify import verify_archive
from support.tampering import CANONICAL_CASES, TAR_CASES, signed_tar, tar_with


def test_restore_clean_tar(seal_env, tmp_path):
    dest = tmp_path / "restored"
    r = restore(seal_env["clean_tar"], dest, seal_env["a"].public_path)
    assert r.ok, r.verify.problems
    assert r.members == seal_env["clean_result"].files + 1  # the subjects and the seal
    assert verify_archive(dest, seal_env["a"].public_path).ok
    for p in seal_env["clean"].rglob("*"):
        if p.is_file():
            rel = p.relative_to(seal_env["clean"])
            assert (dest / rel).read_bytes() == p.read_bytes()
            assert (dest / rel).stat().st_mode & 0o777 == 0o644


def test_restore_into_existing_empty_folder(seal_env, tmp_path):
    dest = tmp_path / "empty"
    dest.mkdir()
    assert restore(seal_env["clean_tar"], dest, seal_env["a"].public_path).ok


def test_restore_refuses_nonempty_destination(seal_env, tmp_path):
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "keep.txt").write_text("x")
    with pytest.raises(UsageError):
        restore(seal_env["clean_tar"], dest, seal_env["a"].public_path)
    assert (dest / "keep.txt").read_text() == "x"


@pytest.mark.parametrize("case,extra,expected", TAR_CASES, ids=[c[0] for c in TAR_CASES])
def test_restore_refuses_unsafe_members_and_writes_nothing(case, extra, expected, seal_env, tmp_path):
    t = tar_with(tmp_path / "evil.tar", seal_env["clean"], extra)
    work = tmp_path / "work"
    work.mkdir()
    r = restore(t, work / "dest", seal_env["a"].public_path)
    assert not r.ok
    assert any(expected in p for p in r.verify.problems), r.verify.problems
    assert list(work.iterdir()) == []  # neither DEST nor a staging folder
    assert not Path("/tmp/refspec-evil").exists()  # abspath: where the refused member would have gone


@pytest.mark.parametrize("case,build,expected", CANONICAL_CASES, ids=[c[0] for c in CANONICAL_CASES])
def test_restore_refuses_noncanonical_tars_and_writes_nothing(case, build, expected, seal_env, tmp_path):
    t = build(tmp_path / "t.tar", seal_env["clean_tar"])
    work = tmp_path / "work"
    work.mkdir()
    r = restore(t, work / "dest", seal_env["a"].public_path)
    assert not r.ok
    assert any(expected in p for p in r.verify.problems), r.verify.problems
    assert list(work.iterdir()) == []


def test_restore_of_tampered_tar_leaves_nothing(seal_env, tmp_path):
    raw = bytearray(seal_env["clean_tar"].read_bytes())
    with tarfile.open(seal_env["clean_tar"]) as tf:
        m = tf.getmember("ledger.jsonl")
    raw[m.offset_data + 5] ^= 0x01
    t = tmp_path / "tampered.tar"
    t.write_bytes(bytes(raw))
    work = tmp_path / "work"
    work.mkdir()
    r = restore(t, work / "dest", seal_env["a"].public_path)
    assert not r.ok
    assert any("ledger.jsonl: sha256" in p for p in r.verify.problems)
    assert list(work.iterdir()) == []


@pytest.mark.parametrize(
    "mode,suffix,expected",
    [
        ("w:gz", ".tar.gz", "gzip-compressed tar refused"),
        ("w:bz2", ".tar.bz2", "bzip2-compressed tar refused"),
        ("w:xz", ".tar.xz", "xz-compressed tar refused"),
        ("w", ".tar", "not in canonical form"),
    ],
)
def test_restore_refuses_a_tar_written_by_another_tool(mode, suffix, expected, seal_env, tmp_path):
    """Only the canonical tar `seal --tar` writes restores: another tool's tar (compressed,
    with a "./" root and folder entries, its own modes and times) is refused, nothing written."""
    t = tmp_path / f"retarred{suffix}"
    with tarfile.open(t, mode) as tf:
        tf.add(seal_env["clean"], arcname=".")  # like `tar -C DIR -czf T .`
    work = tmp_path / "work"
    work.mkdir()
    r = restore(t, work / "dest", seal_env["a"].public_path)
    assert not r.ok
    assert any(expected in p for p in r.verify.problems), r.verify.problems
    assert list(work.iterdir()) == []
    assert not verify_archive(t, seal_env["a"].public_path).ok


def test_restore_writes_nothing_unlisted_before_authenticating(seal_env, tmp_path):
    """A large member the seal does not list is never written (the tar is verified in place first)."""
    big = 64 * 1024 * 1024
    t = tmp_path / "big.tar"
    with tarfile.open(seal_env["clean_tar"]) as src, tarfile.open(t, "w", format=tarfile.PAX_FORMAT) as tf:
        for m in src.getmembers():
            tf.addfile(m, src.extractfile(m))
        ti = tarfile.TarInfo("zz-unlisted.bin")
        ti.size, ti.mtime, ti.mode = big, src.getmembers()[0].mtime, 0o644
        tf.addfile(ti, io.BytesIO(bytes(big)))
    work = tmp_path / "work"
    work.mkdir()
    r = restore(t, work / "dest", seal_env["a"].public_path)
    assert not r.ok
    assert any("zz-unlisted.bin: not listed in the seal" in p for p in r.verify.problems), r.verify.problems
    assert list(work.iterdir()) == []


def test_restore_pins_the_signer_and_the_previous_seal(seal_env, tmp_path):
    from refspec.provenance.keys import public_fingerprint

    good, other = public_fingerprint(seal_env["a"].public_path), public_fingerprint(seal_env["b"].public_path)
    r = restore(
        seal_env["clean_tar"], tmp_path / "d1", seal_env["a"].public_path, expect_keyid=good, expect_previous="none"
    )
    assert r.ok, r.verify.problems
    work = tmp_path / "work"
    work.mkdir()
    r = restore(seal_env["clean_tar"], work / "d2", seal_env["a"].public_path, expect_keyid=other)
    assert not r.ok and any("not the pinned signer" in p for p in r.verify.problems)
    r = restore(seal_env["clean_tar"], work / "d3", seal_env["a"].public_path, expect_previous="0" * 64)
    assert not r.ok and any("previous seal is none" in p for p in r.verify.problems)
    assert list(work.iterdir()) == []


def test_restore_cli(seal_env, tmp_path, capsys):
    dest = tmp_path / "cli-dest"
    rc = main(["restore", str(seal_env["clean_tar"]), str(dest), "--pubkey", str(seal_env["a"].public_path)])
    out = capsys.readouterr().out
    assert rc == 0
    n = seal_env["clean_result"].files
    r0 = seal_env["clean_result"]
    assert (
        f"OK: {dest} ({n} files) key {r0.keyid} archive {r0.archive_id} created 2026-01-02T00:00:00Z "
        f"seal {r0.seal_sha256} previous none"
    ) in out
    assert f"restored {n + 1} members into {dest}" in out


def test_restore_cli_refuses_evil_tar(seal_env, tmp_path, capsys):
    def evil(tf):
        ti = tarfile.TarInfo("../escape.txt")
        ti.size = 1
        tf.addfile(ti, io.BytesIO(b"x"))

    t = tar_with(tmp_path / "evil.tar", seal_env["clean"], evil)
    rc = main(["restore", str(t), str(tmp_path / "d"), "--pubkey", str(seal_env["a"].public_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL: tar member '../escape.txt': '..' in path" in out
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "extra,expected",
    [
        ({"x": b"1", "x/y": b"2"}, "FAIL: statement: subject 'x' is both a file and the folder of 'x/y'"),
        ({"report/" + "n" * 300: b"long"}, "path component longer than 255 bytes"),
    ],
    ids=["file-and-folder", "long-name"],
)
def test_restore_cli_refuses_signed_names_it_cannot_write_with_a_fail_line(extra, expected, seal_env, tmp_path, capsys):
    """Signed by the real key, yet not restorable: a FAIL line and exit 1, no traceback, nothing written."""
    t = signed_tar(tmp_path / "signed.tar", seal_env["clean"], seal_env, extra)
    work = tmp_path / "work"
    work.mkdir()
    rc = main(["restore", str(t), str(work / "d"), "--pubkey", str(seal_env["a"].public_path)])
    captured = capsys.readouterr()
    assert rc == 1 and expected in captured.out, captured.out
    assert all(line.startswith("FAIL: ") for line in captured.out.splitlines())
    assert "Traceback" not in captured.err and list(work.iterdir()) == []


def test_restore_cli_answers_a_destination_it_cannot_create_with_a_fail_line(seal_env, tmp_path, capsys):
    """DEST under a regular file: the file system refuses; a FAIL line, exit 1, nothing left behind."""
    (tmp_path / "a-file").write_text("x")
    dest = tmp_path / "a-file" / "dest"
    rc = main(["restore", str(seal_env["clean_tar"]), str(dest), "--pubkey", str(seal_env["a"].public_path)])
    captured = capsys.readouterr()
    assert rc == 1 and captured.out.startswith("FAIL: ") and "cannot be written under" in captured.out, captured
    assert "Traceback" not in captured.err and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
