"""The source manifest: everything a run depends on, with SHA-256 and size.

The manifest is a JSON object shaped like SLSA provenance v1
(``buildDefinition.resolvedDependencies`` is a list of in-toto resource
descriptors: ``name``, ``uri``, ``digest``, ``annotations``). It pins

- the artifacts the pipeline was given (roles ``sdist``, ``patch``,
  ``library``, ``tool``, ``model``, ``panel``), each with sha256 and size;
- the project source (``source:refspec``: a digest over the package, the rules,
  the report renderer and checker, the environment files and the native sources);
- the interpreter (the executable's sha256 and its version);
- every installed distribution (name, version and the sha256 of its
  ``RECORD`` file, or of ``METADATA`` where there is no ``RECORD``);
- the config and its canonical-JSON sha256;
- host facts: CPU model, SIMD flags, cores, memory, GPUs and driver, OS (:mod:`.host`).

The freeze check (:func:`freeze_check`) recomputes the manifest before a session
and refuses to start on any difference, listing every one. Only
``runDetails.metadata`` (creation time, git commit of the clone) is ignored: it
says when and from which checkout the manifest was written, not what runs. Every
field is documented in ``anc/manifest.md``.

The native build and model code is not imported here: callers pass artifacts
(:class:`Artifact`) in; ``refspec manifest`` reads them from a JSON/YAML listing
(:func:`load_listing`) or from ``--artifact ROLE=NAME=PATH`` flags.
"""

from __future__ import annotations

import importlib.metadata as _md
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from .. import __version__
from ..core.clock import utc_now_seconds
from ..core.config import config_of
from ..core.distributions import normalize
from ..core.errors import EXIT_FAILED, ConfigError, IntegrityError, RefspecError, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import canonical_json, file_digest, sha256_bytes, sha256_json
from ..core.paths import REPO_ROOT
from ..native import vulkan
from .host import host_facts

MANIFEST_NAME = "manifest.json"
MANIFEST_TYPE = "https://refspec.dev/manifest/v1"
BUILD_TYPE = "https://refspec.dev/pipeline/v1"
BUILDER_ID = "https://refspec.dev/refspec"
ROLES = ("sdist", "patch", "library", "tool", "model", "panel")
# Parts of the manifest the freeze check ignores (dotted prefixes). Documented in anc/manifest.md.
IGNORED = ("runDetails.metadata",)
# Roots of the project source digest, relative to the repository root.
SOURCE_ROOTS = ("Snakefile", "workflow", "report", "envs", "native", "run", "pyproject.toml")
_SOURCE_SKIP_DIRS = {
    "__pycache__",
    ".git",
    "build",
    ".snakemake",
    "results",
    ".pytest_cache",
    ".hypothesis",
    ".mypy_cache",
}
_SOURCE_SKIP_SUFFIXES = (".pyc", ".pyo", ".swp", "~")


class FreezeCheckError(RefspecError):
    """The recomputed manifest differs from the stored one."""

    exit_code = EXIT_FAILED

    def __init__(self, differences: list[str]):
        self.differences = differences
        super().__init__(f"{len(differences)} difference(s) from the frozen manifest:\n  " + "\n  ".join(differences))


@dataclass(frozen=True)
class Artifact:
    """A file the run depends on: ``role`` is one of :data:`ROLES`."""

    name: str
    role: str
    path: Path

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise UsageError(f"artifact {self.name!r}: role {self.role!r} is not one of {', '.join(ROLES)}")
        if not self.name or any(c in self.name for c in "\n\r\t"):
            raise UsageError(f"bad artifact name {self.name!r}")
        object.__setattr__(self, "path", Path(self.path))

    @property
    def key(self) -> str:
        return f"{self.role}:{self.name}"


# --------------------------------------------------------------------------- parts


def _file_uri(path: Path) -> str:
    return Path(os.path.abspath(path)).as_uri()


def artifact_entry(a: Artifact) -> dict[str, Any]:
    p = Path(a.path)
    if not p.is_file():
        raise IntegrityError(f"artifact {a.key}: {p} is not a file")
    d = file_digest(p)
    return {
        "name": a.key,
        "uri": _file_uri(p),
        "digest": {"sha256": d["sha256"]},
        "annotations": {"role": a.role, "size": d["size"]},
    }


def _source_files(repo_root: Path, roots: Iterable[str]) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for r in roots:
        top = repo_root / r
        if top.is_file():
            out.append((r, top))
            continue
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in _SOURCE_SKIP_DIRS and not d.startswith("."))
            for fn in sorted(filenames):
                if fn.endswith(_SOURCE_SKIP_SUFFIXES) or fn.startswith("."):
                    continue
                full = Path(dirpath) / fn
                if full.is_symlink() or not full.is_file():
                    continue
                out.append((full.relative_to(repo_root).as_posix(), full))
    return sorted(out)


def source_paths(repo_root: Path = REPO_ROOT, roots: Iterable[str] = SOURCE_ROOTS) -> list[str]:
    """The files of the source digest (:func:`source_entry`), relative to ``repo_root``, sorted: also the
    inputs of the workflow's manifest rule, so that a change to any of them makes a new manifest."""
    return [rel for rel, _ in _source_files(repo_root, roots)]


def source_entry(repo_root: Path = REPO_ROOT, roots: Iterable[str] = SOURCE_ROOTS) -> dict[str, Any] | None:
    """A digest over the project's own source: sha256 of the canonical JSON of {path: [sha256, size]}."""
    files = _source_files(repo_root, roots)
    if not files:
        return None
    table = {}
    total = 0
    for rel, full in files:
        d = file_digest(full)
        table[rel] = [d["sha256"], d["size"]]
        total += d["size"]
    return {
        "name": "source:refspec",
        "uri": _file_uri(repo_root),
        "digest": {"sha256": sha256_json(table)},
        "annotations": {"role": "source", "files": len(table), "size": total, "version": __version__},
    }


def interpreter_entry() -> dict[str, Any]:
    exe = Path(os.path.realpath(sys.executable))
    d = file_digest(exe)
    impl = sys.implementation.name
    ver = platform.python_version()
    return {
        "name": f"interpreter:{impl}",
        "uri": _file_uri(exe),
        "digest": {"sha256": d["sha256"]},
        "annotations": {
            "role": "interpreter",
            "size": d["size"],
            "version": ver,
            "implementation": impl,
            "compiler": platform.python_compiler(),
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
        },
    }


def _dist_file(dist: _md.Distribution, filename: str) -> Path | None:
    base = getattr(dist, "_path", None)  # PathDistribution: the .dist-info / .egg-info folder
    if base is not None:
        p = Path(base) / filename
        return p if p.is_file() else None
    for f in dist.files or ():
        if f.name == filename and f.parent.name.endswith((".dist-info", ".egg-info")):
            p = Path(f.locate())
            return p if p.is_file() else None
    return None


def distribution_entries(path: list[str] | None = None, prefix: str = "") -> list[dict[str, Any]]:
    """Every installed distribution visible on ``path`` (default ``sys.path``), first one wins;
    ``prefix`` names another environment's (``ENV:pkg:pypi/numpy``, ENV its name)."""
    seen: dict[str, dict[str, Any]] = {}
    for dist in _md.distributions(path=path if path is not None else sys.path):
        name = dist.metadata.get("Name") if dist.metadata is not None else None
        if not name:
            continue
        key = normalize(name)
        if key in seen:
            continue
        version = dist.version
        entry: dict[str, Any] = {
            "name": f"{prefix}pkg:pypi/{key}",
            "uri": f"pkg:pypi/{key}@{version}",
            "digest": {},
            "annotations": {"role": "distribution", "version": version},
        }
        for digest_of in ("RECORD", "METADATA", "PKG-INFO"):
            f = _dist_file(dist, digest_of)
            if f is not None:
                d = file_digest(f)
                entry["digest"] = {"sha256": d["sha256"]}
                entry["annotations"].update(digest_of=digest_of, size=d["size"])
                break
        else:
            entry["annotations"].update(digest_of=None, size=None)
        seen[key] = entry
    return [seen[k] for k in sorted(seen)]


def _git_commit(repo_root: Path) -> str | None:
    if not (repo_root / ".git").exists():
        return None
    try:
        r = subprocess.run(
            ["git", "-C", str(repo_root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = r.stdout.strip()
    return out if r.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", out) else None


# --------------------------------------------------------------------------- manifest


def build_manifest(
    artifacts: Iterable[Artifact],
    config: Mapping[str, Any],
    *,
    config_path: str | Path | None = None,
    include_source: bool = True,
    include_environment: bool = True,
    include_host: bool = True,
    include_gpu: bool = True,
    repo_root: Path = REPO_ROOT,
    created: str | None = None,
    environments: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The source manifest of a run (see the module docstring and ``anc/manifest.md``).

    ``include_*`` switches exist for small fixtures; a run's manifest includes everything.
    ``environments``: other Python environments the run's processes used (name -> their
    ``site-packages``), whose distributions are listed as ``<name>:pkg:pypi/<distribution>``.
    """
    arts = list(artifacts)
    keys = [a.key for a in arts]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise UsageError(f"duplicate artifact(s): {', '.join(dup)}")
    try:
        config_json = json.loads(canonical_json(config))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config is not JSON-serialisable: {e}") from e
    deps: list[dict[str, Any]] = [artifact_entry(a) for a in sorted(arts, key=lambda a: a.key)]
    if include_source:
        src = source_entry(repo_root)
        if src is not None:
            deps.append(src)
    if include_environment:
        deps.append(interpreter_entry())
        deps.extend(distribution_entries())
        for env_name, paths in sorted((environments or {}).items()):
            for entry in distribution_entries(list(paths), prefix=f"{env_name}:"):
                entry["annotations"].update(environment=env_name, paths=list(paths))
                deps.append(entry)
    external: dict[str, Any] = {"config": config_json, "config_sha256": sha256_json(config_json)}
    if config_path is not None:
        cp = Path(config_path)
        d = file_digest(cp)
        external["config_file"] = {"uri": _file_uri(cp), "sha256": d["sha256"], "size": d["size"]}
    internal: dict[str, Any] = {}
    if include_host:
        internal["host"] = host_facts(gpu=include_gpu)
        if include_gpu and ((config.get("native") or {}).get("backend")) == "vulkan":  # the config as written
            # the Vulkan device the run selected, its driver and API versions, the pinned headers
            internal["vulkan"] = vulkan.facts(config_of(config))
    return {
        "_type": MANIFEST_TYPE,
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": external,
            "internalParameters": internal,
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": {"refspec": __version__}},
            "metadata": {"created": created or utc_now_seconds(), "git_commit": _git_commit(repo_root)},
        },
    }


def artifacts_of(manifest: Mapping[str, Any]) -> list[Artifact]:
    """The artifacts a stored manifest was built from (to recompute it)."""
    out = []
    for dep in manifest.get("buildDefinition", {}).get("resolvedDependencies", []):
        role = dep.get("annotations", {}).get("role")
        if role in ROLES:
            name = dep["name"].split(":", 1)[1]
            uri = dep.get("uri", "")
            if not uri.startswith("file://"):
                raise IntegrityError(f"manifest artifact {dep['name']} has no file uri")
            out.append(Artifact(name, role, Path(unquote(urlparse(uri).path))))
    return out


def _options_of(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The include_* switches a stored manifest was built with."""
    deps = manifest.get("buildDefinition", {}).get("resolvedDependencies", [])
    roles = {d.get("annotations", {}).get("role") for d in deps}
    host = manifest.get("buildDefinition", {}).get("internalParameters", {}).get("host")
    envs = {
        a["environment"]: a["paths"]
        for a in (d.get("annotations", {}) for d in deps)
        if a.get("role") == "distribution" and a.get("environment")
    }
    return {
        **({"environments": envs} if envs else {}),
        "include_source": "source" in roles,
        "include_environment": "interpreter" in roles,
        "include_host": host is not None,
        "include_gpu": host is not None and host.get("gpu", {}).get("query") != "skipped",
    }


# --------------------------------------------------------------------------- diff


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        if not obj:
            out[prefix] = {}
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list):
        if prefix.endswith("resolvedDependencies") and all(isinstance(d, dict) and "name" in d for d in obj):
            for d in obj:
                rest = {k: v for k, v in d.items() if k != "name"}
                _flatten(rest, f"{prefix}[{d['name']}]", out)
            if not obj:
                out[prefix] = []
            return
        if not obj:
            out[prefix] = []
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = obj


def flatten(obj: Any) -> dict[str, Any]:
    """The fields of a manifest (or a part of one) as ``{dotted path: value}``, as
    :func:`diff_manifests` compares them (dependencies named by their ``name``)."""
    out: dict[str, Any] = {}
    _flatten(obj, "", out)
    return out


def _ignored(path: str, ignored: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p + ".") or path.startswith(p + "[") for p in ignored)


def _short(v: Any, n: int = 80) -> str:
    s = json.dumps(v, ensure_ascii=False, sort_keys=True)
    return s if len(s) <= n else s[: n - 3] + "..."


def diff_manifests(
    stored: Mapping[str, Any], current: Mapping[str, Any], ignored: Iterable[str] = IGNORED
) -> list[str]:
    """Every difference between two manifests, one line each, ignoring ``ignored`` prefixes."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    _flatten(stored, "", a)
    _flatten(current, "", b)
    ign = tuple(ignored)
    out = []
    for k in sorted(set(a) | set(b)):
        if _ignored(k, ign):
            continue
        if k not in b:
            out.append(f"removed {k} (was {_short(a[k])})")
        elif k not in a:
            out.append(f"added {k} = {_short(b[k])}")
        elif a[k] != b[k] or type(a[k]) is not type(b[k]):
            out.append(f"changed {k}: {_short(a[k])} -> {_short(b[k])}")
    return out


def load_manifest(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        m = json.loads(p.read_bytes())
    except FileNotFoundError as e:
        raise UsageError(f"manifest {p} not found") from e
    except ValueError as e:
        raise IntegrityError(f"manifest {p} is not JSON: {e}") from e
    if not isinstance(m, dict) or m.get("_type") != MANIFEST_TYPE:
        raise IntegrityError(
            f"{p} is not a refspec manifest (_type {m.get('_type') if isinstance(m, dict) else None!r})"
        )
    return m


def write_manifest(manifest: Mapping[str, Any], path: str | Path) -> str:
    """Write the manifest (indented, sorted keys) atomically; return its file sha256."""
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_text(path, text)
    return sha256_bytes(text.encode("utf-8"))


def freeze_check(
    stored: Mapping[str, Any] | str | Path,
    config: Mapping[str, Any] | None = None,
    artifacts: Iterable[Artifact] | None = None,
    *,
    config_path: str | Path | None = None,
    repo_root: Path = REPO_ROOT,
) -> dict[str, Any]:
    """Recompute the manifest and raise :class:`FreezeCheckError` listing every difference.

    Artifacts and the include switches default to those of the stored manifest;
    ``config`` defaults to the stored config (pass the config the session will run
    with). Returns the recomputed manifest when nothing differs.
    """
    if not isinstance(stored, Mapping):
        stored = load_manifest(stored)
    ext = stored.get("buildDefinition", {}).get("externalParameters", {})
    if config is None:
        config = ext.get("config", {})
    if config_path is None and "config_file" in ext:
        config_path = Path(unquote(urlparse(ext["config_file"]["uri"]).path))
    arts = list(artifacts) if artifacts is not None else artifacts_of(stored)
    missing = [f"missing {a.key}: {a.path}" for a in arts if not Path(a.path).is_file()]
    if config_path is not None and not Path(config_path).is_file():
        missing.append(f"missing config file {config_path}")
    if missing:
        raise FreezeCheckError(missing)
    current = build_manifest(arts, config, config_path=config_path, repo_root=repo_root, **_options_of(stored))
    diffs = diff_manifests(stored, current)
    if diffs:
        raise FreezeCheckError(diffs)
    return current


# --------------------------------------------------------------------------- listings


def load_listing(path: str | Path) -> list[Artifact]:
    """Artifacts from a JSON or YAML listing: ``{"artifacts": [{role, name, path}]}`` or a list.

    Relative paths are relative to the listing's folder.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise UsageError(f"artifact listing {p} not found") from e
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise UsageError(f"artifact listing {p} is not JSON: {e}") from e
    if isinstance(data, dict):
        data = data.get("artifacts")
    if not isinstance(data, list):
        raise UsageError(f"artifact listing {p}: expected a list of {{role, name, path}}")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not {"role", "name", "path"} <= set(item):
            raise UsageError(f"artifact listing {p}: entry {i} needs role, name and path")
        ap = Path(str(item["path"])).expanduser()
        if not ap.is_absolute():
            ap = p.parent / ap
        out.append(Artifact(str(item["name"]), str(item["role"]), ap))
    return out
