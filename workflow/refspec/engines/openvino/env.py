"""The OpenVINO GenAI engine's own environment and its converted models (``anc/openvino.md``).

The engine is optional: nothing of it is installed until an ``openvino`` arm first runs.

* :func:`ensure_env`: a virtual environment of its own, ``$REFSPEC_CACHE/openvino-<key>``, created
  once from ``envs/openvino.txt`` (pinned versions with their sha256, installed with
  ``--require-hashes``) by the pinned uv beside refspec's own interpreter (pip where uv is missing).
  The key is the first 16 hex digits of the sha256 of that file and the interpreter's version, so a
  new pin makes a new environment and never changes an old one. ``install.json`` in it records the
  installer, the seconds and the bytes it took.
* :func:`ensure_ir`: the engine reads a GGUF file and builds an OpenVINO model from it; its
  speculative pipeline needs the draft as an IR folder, so every model file is converted once
  (:mod:`refspec.engines.openvino.convert`, a fresh process per conversion) into
  ``$REFSPEC_CACHE/openvino-ir/<key>``, keyed by the GGUF's sha256, the engine's version and the
  converter's own sha256. The IR files' sha256 (:attr:`IR.files`) go into the ready record of every
  process that loads them and into the run's source manifest.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import EXIT_RUNTIME, RefspecError
from ...core.fsutil import atomic_write_text
from ...core.hashing import sha256_file
from ...core.paths import REPO_ROOT, cache_dir

LOCK_FILE = REPO_ROOT / "envs" / "openvino.txt"
SERVER_SCRIPT = Path(__file__).resolve().with_name("program.py")
CONVERT_SCRIPT = Path(__file__).resolve().with_name("convert.py")
ENGINE_DISTRIBUTION = "openvino-genai"


class EngineUnavailable(RefspecError):
    """The OpenVINO environment could not be created or a model not converted (exit 5); the message
    carries the installer's or converter's last output."""

    exit_code = EXIT_RUNTIME


@dataclass(frozen=True)
class OpenVINOEnv:
    """The engine's environment: its interpreter, key, folder and the engine's version."""

    root: Path
    key: str
    version: str

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def site_packages(self) -> list[str]:
        return [str(p) for p in sorted((self.root / "lib").glob("python*/site-packages"))]

    def record(self) -> dict:
        inst = self.root / "install.json"
        return {
            "key": self.key,
            "version": self.version,
            "python": str(self.python),
            "lock_sha256": sha256_file(LOCK_FILE),
            "install": json.loads(inst.read_text()) if inst.is_file() else None,
        }


@dataclass(frozen=True)
class IR:
    """A model file converted to OpenVINO IR: its folder, the GGUF it came from, each file's sha256."""

    folder: Path
    gguf_sha256: str
    files: dict  # file name -> sha256

    def record(self) -> dict:
        return {"folder": str(self.folder), "gguf_sha256": self.gguf_sha256, "files": dict(self.files)}


def env_key() -> str:
    h = hashlib.sha256(LOCK_FILE.read_bytes())
    h.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    return h.hexdigest()[:16]


def _run(cmd: list[str], what: str, log: Path) -> None:
    with open(log, "ab") as f:
        f.write(f"$ {' '.join(cmd)}\n".encode())
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise EngineUnavailable(f"{what} failed (exit {r.returncode}); the last lines of {log}:\n" + "\n".join(tail))


def _engine_version(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-I", "-c", f"import importlib.metadata as m; print(m.version({ENGINE_DISTRIBUTION!r}))"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise EngineUnavailable(f"{python}: {ENGINE_DISTRIBUTION} is not importable: {out.stderr.strip()[-500:]}")
    return out.stdout.strip()


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def ensure_env(cache: Path | None = None) -> OpenVINOEnv:
    """The OpenVINO environment, created on first use (``--require-hashes``; uv, else pip)."""
    cache = cache or cache_dir()
    key = env_key()
    root = cache / f"openvino-{key}"
    done = root / ".complete"
    if not done.is_file():
        with open(cache / f"openvino-{key}.lock", "w") as lockf:  # one creator; the others find it done
            fcntl.flock(lockf, fcntl.LOCK_EX)
            if not done.is_file():
                _create(root)
    return OpenVINOEnv(root, key, json.loads((root / "install.json").read_text())["engine_version"])


def _create(root: Path) -> None:
    print(
        f"refspec: creating the OpenVINO GenAI environment {root} (about 300 MB, once)", file=sys.stderr
    )  # contract: progress
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    log = root.parent / f"{root.name}.install.log"
    log.unlink(missing_ok=True)
    t0 = time.monotonic()
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)], "creating the OpenVINO environment", log)
    py = root / "bin" / "python"
    uv = Path(sys.executable).with_name("uv")
    installer = "uv"
    if uv.is_file():
        cmd = [str(uv), "pip", "install", "-q", "--python", str(py), "--require-hashes", "-r", str(LOCK_FILE)]
    else:  # pip from refspec's own environment, into the new one
        installer = "pip"
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--require-hashes"]
        cmd += ["--python", str(py), "-r", str(LOCK_FILE)]
    _run(cmd, f"installing {LOCK_FILE.name} with {installer}", log)
    rec = {
        "installer": installer,
        "seconds": round(time.monotonic() - t0, 1),
        "bytes": _size(root),
        "engine_version": _engine_version(py),
        "lock_sha256": sha256_file(LOCK_FILE),
    }
    atomic_write_text(root / "install.json", json.dumps(rec, indent=1, sort_keys=True) + "\n", mode=0o644)
    (root / ".complete").touch()
    mb = rec["bytes"] / 2**20
    done = f"refspec: OpenVINO GenAI {rec['engine_version']}: {mb:.0f} MiB in {rec['seconds']:.0f} s ({installer})"
    print(done, file=sys.stderr)  # contract: progress


def ir_key(env: OpenVINOEnv, gguf_sha256: str) -> str:
    h = hashlib.sha256()
    for part in (gguf_sha256, env.version, sha256_file(CONVERT_SCRIPT)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def ensure_ir(env: OpenVINOEnv, gguf: Path, gguf_sha256: str, cache: Path | None = None) -> IR:
    """``gguf`` converted to IR by the engine, once per (GGUF, engine, converter); its files' sha256."""
    cache = cache or cache_dir()
    base = cache / "openvino-ir"
    base.mkdir(parents=True, exist_ok=True)
    key = ir_key(env, gguf_sha256)
    folder = base / key
    sums = folder / "sha256.json"
    if not sums.is_file():
        with open(base / f"{key}.lock", "w") as lockf:  # one converter; the others find its IR
            fcntl.flock(lockf, fcntl.LOCK_EX)
            if not sums.is_file():
                if sha256_file(gguf) != gguf_sha256:
                    raise EngineUnavailable(f"{gguf}: its sha256 is not the pinned {gguf_sha256}")
                shutil.rmtree(folder, ignore_errors=True)
                print(
                    f"refspec: converting {gguf.name} to OpenVINO IR ({folder})", file=sys.stderr
                )  # contract: progress
                log = base / f"{key}.convert.log"
                log.unlink(missing_ok=True)
                _run(
                    [str(env.python), "-I", str(CONVERT_SCRIPT), "--gguf", str(gguf), "--out", str(folder)],
                    f"converting {gguf.name} to OpenVINO IR",
                    log,
                )
                files = {p.name: sha256_file(p) for p in sorted(folder.glob("openvino_*")) if p.is_file()}
                atomic_write_text(sums, json.dumps(files, indent=1, sort_keys=True) + "\n", mode=0o644)
    files = json.loads(sums.read_text())
    return IR(folder, gguf_sha256, files)


def verify_ir(ir: IR) -> list[str]:
    """How the IR folder differs from the sha256 recorded at its conversion (empty: it does not)."""
    out = []
    for name, sha in ir.files.items():
        p = ir.folder / name
        if not p.is_file():
            out.append(f"{p}: missing")
        elif sha256_file(p) != sha:
            out.append(f"{p}: sha256 differs from its conversion's")
    return out


def environ(env: OpenVINOEnv) -> dict[str, str]:
    """What the engine's process gets beyond the worker environment: its own environment first."""
    return {"VIRTUAL_ENV": str(env.root), "PATH": f"{env.root / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
