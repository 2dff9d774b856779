"""Ed25519 signing keys for seals.

``refspec keygen`` writes a key pair into the key directory
(``$REFSPEC_KEY_DIR``, default ``~/.config/refspec/keys``):

- ``<name>.key``: the private key, PKCS#8 PEM, unencrypted, mode 0600, in a
  directory of mode 0700;
- ``<name>.pub``: the public key, SubjectPublicKeyInfo PEM, mode 0644.

A private key is never written inside the repository (:data:`refspec.core.paths.REPO_ROOT`)
or a results folder (``$REFSPEC_RESULTS`` and any folder the caller names), and a
private key file that the group or others may read or write, or that another user
owns, is refused when loaded.

The key fingerprint (also the DSSE ``keyid``) is ``"SHA256:"`` followed by the
lowercase hex SHA-256 of the raw 32-byte public key (RFC 8032 encoding). It
appears in every seal and every report; the private key appears in neither.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..core.errors import UsageError
from ..core.hashing import sha256_bytes
from ..core.paths import REPO_ROOT

DEFAULT_NAME = "refspec_ed25519"
PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"
_MAX_KEY_FILE = 64 * 1024


class KeyFileError(UsageError):
    """A key that cannot be used: missing, malformed, unsafe permissions or location."""


@dataclass(frozen=True)
class KeyPair:
    private_path: Path
    public_path: Path
    fingerprint: str


def key_dir() -> Path:
    """The default key directory: ``$REFSPEC_KEY_DIR`` or ``~/.config/refspec/keys``."""
    env = os.environ.get("REFSPEC_KEY_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".config" / "refspec" / "keys"


def default_private_key() -> Path:
    return key_dir() / (DEFAULT_NAME + PRIVATE_SUFFIX)


def default_public_key() -> Path:
    return key_dir() / (DEFAULT_NAME + PUBLIC_SUFFIX)


def raw_public_bytes(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """``"SHA256:" + hex(sha256(raw 32-byte public key))``."""
    return "SHA256:" + sha256_bytes(raw_public_bytes(public_key))


def public_fingerprint(path: str | Path | None = None) -> str:
    """The fingerprint of a public key file (default: the key directory's public key).

    Reports print this so that a reader knows which key must verify the archive.
    """
    return fingerprint(load_public_key(path if path is not None else default_public_key()))


def forbidden_roots(extra: Iterable[str | Path] = ()) -> list[Path]:
    """Folders a private key must never be written to or loaded from."""
    roots = [REPO_ROOT]
    env = os.environ.get("REFSPEC_RESULTS")
    if env:
        roots.append(Path(env))
    roots.extend(Path(p) for p in extra)
    return [Path(os.path.realpath(r.expanduser())) for r in roots]


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def check_private_location(path: str | Path, extra_forbidden: Iterable[str | Path] = ()) -> None:
    """Raise if ``path`` lies inside the repository or a results folder."""
    real = Path(os.path.realpath(Path(path).expanduser()))
    for root in forbidden_roots(extra_forbidden):
        if _inside(real, root):
            raise KeyFileError(
                f"refusing a private key inside {root}: keep it outside the repository and "
                f"results folders (default {key_dir()})"
            )


def public_key_pem(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def generate(
    directory: str | Path | None = None,
    name: str = DEFAULT_NAME,
    force: bool = False,
    extra_forbidden: Iterable[str | Path] = (),
) -> KeyPair:
    """Write a new Ed25519 key pair and return its paths and fingerprint."""
    if not name or "/" in name or name.startswith("."):
        raise KeyFileError(f"bad key name {name!r}")
    d = Path(directory).expanduser() if directory is not None else key_dir()
    priv = d / (name + PRIVATE_SUFFIX)
    pub = d / (name + PUBLIC_SUFFIX)
    check_private_location(priv, extra_forbidden)
    if not force and (priv.exists() or pub.exists()):
        raise KeyFileError(f"{priv} or {pub} exists; use --force to replace it")
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    if d.stat().st_mode & 0o077:
        os.chmod(d, 0o700)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _write_new(priv, pem, 0o600, replace=force)
    _write_new(pub, public_key_pem(key.public_key()), 0o644, replace=force)
    return KeyPair(priv, pub, fingerprint(key.public_key()))


def _write_new(path: Path, data: bytes, mode: int, replace: bool) -> None:
    """Write ``data`` to a new file created with ``mode`` (never briefly wider)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have narrowed it; never widen beyond mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if path appeared meanwhile
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _read_small(path: Path, what: str) -> tuple[bytes, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as e:
        raise KeyFileError(f"{what} {path} not found") from e
    except OSError as e:
        raise KeyFileError(f"cannot open {what} {path}: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{what} {path} is not a regular file")
        if st.st_size > _MAX_KEY_FILE:
            raise KeyFileError(f"{what} {path} is too large to be a key")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(_MAX_KEY_FILE + 1)
        return data, st
    finally:
        os.close(fd)


def load_private_key(path: str | Path | None = None) -> Ed25519PrivateKey:
    """Load a private key, refusing unsafe permissions, owners and locations."""
    p = Path(path).expanduser() if path is not None else default_private_key()
    check_private_location(p)
    data, st = _read_small(p, "private key")
    if st.st_mode & 0o077:
        raise KeyFileError(
            f"private key {p} has mode {stat.S_IMODE(st.st_mode):04o}: group or others may access it; run chmod 600 {p}"
        )
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise KeyFileError(f"private key {p} is owned by uid {st.st_uid}, not by this user")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise KeyFileError(f"private key {p} is not an unencrypted PEM key ({e})") from e
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"private key {p} is not an Ed25519 key")
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """Load an Ed25519 public key (PEM SubjectPublicKeyInfo or OpenSSH one-line format)."""
    p = Path(path).expanduser()
    data, _st = _read_small(p, "public key")
    try:
        if data.lstrip().startswith(b"ssh-ed25519 "):
            key = serialization.load_ssh_public_key(data.strip())
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise KeyFileError(f"public key {p} is not a PEM or OpenSSH public key ({e})") from e
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"public key {p} is not an Ed25519 key")
    return key


__all__ = [
    "KeyPair",
    "KeyFileError",
    "check_private_location",
    "default_private_key",
    "default_public_key",
    "fingerprint",
    "forbidden_roots",
    "generate",
    "key_dir",
    "load_private_key",
    "load_public_key",
    "public_fingerprint",
    "public_key_pem",
    "raw_public_bytes",
]
