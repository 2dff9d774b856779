"""Safe restoration of an archive tar into a fresh folder.

``refspec restore TAR DEST --pubkey KEY`` first verifies the tar in place, with
the same checks as ``refspec verify`` (canonical uncompressed tar, safe member
paths, envelope and signature before the payload is parsed, closed world,
Parquet stamps, ledger): nothing is written before the whole archive is
authenticated. Only then are the signed subjects and the seal written, each
exactly its signed size and hashed again while it is written, by refspec itself
(``O_EXCL | O_NOFOLLOW``, never ``tarfile``'s extraction), into a staging folder
next to DEST that becomes DEST only when every file matches its signed digest;
otherwise it is removed and nothing is left behind. No member that the seal does
not list ever touches the disk.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..core.errors import UsageError
from .archive import CHUNK, TarSource
from .dsse import SEAL_NAME
from .keys import load_public_key
from .verify import VerifyResult, parse_expect_previous, parse_keyid, verify_source


@dataclass
class RestoreResult:
    tar: Path
    dest: Path
    members: int
    verify: VerifyResult

    @property
    def ok(self) -> bool:
        return self.verify.ok


def _fresh(dest: Path) -> None:
    if dest.is_symlink():
        raise UsageError(f"{dest} is a symbolic link")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} exists and is not an empty folder")


def _write_member(src: TarSource, name: str, size: int, root: Path) -> str:
    """Write one signed member (exactly ``size`` bytes) under ``root``; return its sha256."""
    target = root.joinpath(*name.split("/"))
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as out, src.open(name) as f:
        left = size
        while left > 0:
            block = f.read(min(CHUNK, left))
            if not block:
                raise OSError(f"{name}: shorter than its signed size")
            h.update(block)
            out.write(block)
            left -= len(block)
    return h.hexdigest()


def restore(
    tar: str | Path,
    dest: str | Path,
    public_key: Ed25519PublicKey | str | Path,
    expect_previous: str | None = None,
    threads: int | None = None,
    expect_keyid: str | None = None,
) -> RestoreResult:
    """Verify ``tar`` in place, then write its signed files into the fresh folder ``dest``.

    A tar that does not verify: nothing is written and the result carries the problems.
    """
    tar, dest = Path(tar), Path(dest)
    if not tar.is_file():
        raise UsageError(f"{tar} not found")
    if not isinstance(public_key, Ed25519PublicKey):
        public_key = load_public_key(public_key)
    expect_previous = parse_expect_previous(expect_previous)
    if expect_keyid is not None:
        expect_keyid = parse_keyid(expect_keyid)
    _fresh(dest)
    src = TarSource(tar)
    try:
        res = verify_source(src, tar, public_key, expect_previous, threads, expect_keyid)
        members = len(src.members)
        if not res.ok:
            return RestoreResult(tar, dest, members, res)
        assert res.statement is not None and res.seal_sha256 is not None
        signed = {s["name"]: (s["annotations"]["size"], s["digest"]["sha256"]) for s in res.statement["subject"]}
        signed[SEAL_NAME] = (src.files[SEAL_NAME], res.seal_sha256)
        stage: Path | None = None
        name = "(staging folder)"
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.restoring-", dir=dest.parent))
            os.chmod(stage, 0o755)
            changed = []
            for name in sorted(signed):
                size, digest = signed[name]
                if _write_member(src, name, size, stage) != digest:
                    changed.append(f"{name}: changed while it was restored (sha256 differs from the signed one)")
            if changed:
                shutil.rmtree(stage, ignore_errors=True)
                return RestoreResult(tar, dest, members, VerifyResult(path=tar, problems=changed))
            name = str(dest)
            if dest.exists():
                dest.rmdir()
            os.rename(stage, dest)
        except OSError as e:  # a name the file system refuses, no room, DEST taken meanwhile: nothing is left
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)
            why = f"{name}: cannot be written under {dest} ({e.strerror or e}); nothing was restored"
            return RestoreResult(tar, dest, members, VerifyResult(path=tar, problems=[why]))
        except BaseException:
            if stage is not None:
                shutil.rmtree(stage, ignore_errors=True)
            raise
    finally:
        src.close()
    res.path = dest
    return RestoreResult(tar, dest, len(signed), res)
