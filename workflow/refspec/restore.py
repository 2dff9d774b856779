"""Safe restoration of an archive tar into a fresh folder, then verification.

``refspec restore TAR DEST --pubkey KEY`` checks every member before writing
anything: only regular files and folders, relative paths without ``..``,
absolute paths, links or devices, no duplicates. It does not rely on
``tarfile``'s extraction filters: it writes each file itself, refusing to follow
or replace anything, into a staging folder next to DEST. The staging folder
is verified (:func:`refspec.verify.verify_archive`) and becomes DEST only if the
archive verifies; otherwise it is removed and nothing is left behind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .errors import EXIT_FAILED, EXIT_OK, UsageError
from .keys import load_public_key
from .verify import TAR_ERRORS, TarReadError, VerifyResult, member_name, member_problems, open_tar, read_members, verify_archive

_CHUNK = 1 << 20


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


def _extract(tf: tarfile.TarFile, members: list[tarfile.TarInfo], root: Path) -> None:
    root_real = os.path.realpath(root)
    for m in members:
        name = member_name(m)
        if name is None:  # the archive root itself
            continue
        target = os.path.join(root_real, *name.split("/"))
        if os.path.commonpath([root_real, os.path.realpath(os.path.dirname(target))]) != root_real:
            raise UsageError(f"tar member {m.name!r} escapes the destination")  # cannot happen after checks
        if m.isdir():
            os.makedirs(target, mode=0o755, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        src = tf.extractfile(m)
        if src is None:
            raise UsageError(f"tar member {m.name!r} has no data")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as out:
            left = m.size
            while left > 0:
                block = src.read(min(_CHUNK, left))
                if not block:
                    raise tarfile.ReadError(f"tar member {m.name!r} is truncated")
                out.write(block)
                left -= len(block)


def restore(
    tar: str | Path,
    dest: str | Path,
    public_key: Ed25519PublicKey | str | Path,
    expect_previous: str | None = None,
    workers: int | None = None,
) -> RestoreResult:
    """Extract ``tar`` into the fresh folder ``dest`` and verify it.

    Unsafe members: nothing is extracted and the result carries the problems.
    Verification failure: the staging folder is removed and ``dest`` is not created.
    """
    tar, dest = Path(tar), Path(dest)
    if not tar.is_file():
        raise UsageError(f"{tar} not found")
    if not isinstance(public_key, Ed25519PublicKey):
        public_key = load_public_key(public_key)
    _fresh(dest)
    try:
        tf, _plain = open_tar(tar)
    except TarReadError as e:
        return RestoreResult(tar, dest, 0, VerifyResult(path=tar, problems=[str(e)]))
    with tf:
        members, problem = read_members(tf, tar)
        problems = ([problem] if problem else []) + member_problems(members)
        if problems:
            return RestoreResult(tar, dest, len(members), VerifyResult(path=tar, problems=problems))
        dest.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.restoring-", dir=dest.parent))
        try:
            os.chmod(stage, 0o755)
            _extract(tf, members, stage)
        except TAR_ERRORS as e:
            shutil.rmtree(stage, ignore_errors=True)
            return RestoreResult(
                tar, dest, len(members), VerifyResult(path=tar, problems=[f"{tar}: extraction failed ({e})"])
            )
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    try:
        res = verify_archive(stage, public_key, expect_previous=expect_previous, workers=workers)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    res.path = dest
    if not res.ok:
        shutil.rmtree(stage, ignore_errors=True)
        return RestoreResult(tar, dest, len(members), res)
    if dest.exists():
        dest.rmdir()
    os.rename(stage, dest)
    return RestoreResult(tar, dest, len(members), res)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tar", type=Path, metavar="TAR", help="archive tar")
    parser.add_argument("dest", type=Path, metavar="DEST", help="folder to create (must not exist or be empty)")
    parser.add_argument("--pubkey", type=Path, required=True, metavar="KEY", help="the signer's public key (PEM)")
    parser.add_argument("--expect-previous", default=None, metavar="SHA",
                        help="sha256 of the seal this archive must follow ('none' for the first)")
    parser.add_argument("--jobs", type=int, default=None, help="hashing threads")


def run(args: argparse.Namespace) -> int:
    r = restore(args.tar, args.dest, args.pubkey, expect_previous=args.expect_previous, workers=args.jobs)
    for line in r.verify.lines(args.dest):
        print(line, file=sys.stdout)
    if r.ok:
        print(f"restored {r.members} members into {args.dest}")
        return EXIT_OK
    print(f"refused: {args.tar} was not restored ({r.members} members)", file=sys.stderr)
    return EXIT_FAILED
