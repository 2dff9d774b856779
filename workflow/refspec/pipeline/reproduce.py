"""Reproduce a sealed archive on this machine (``refspec reproduce``, ``anc/reproduce.md``).

1. **Verify** the archive under its pinned key (:func:`refspec.compare.load_verified`).
2. **Rebuild its config** from its manifest (``buildDefinition.externalParameters.config``,
   the whole config; its canonical-JSON sha256 must be the manifest's ``config_sha256``):
   :func:`archived_config`.
3. **Check this machine's pinned inputs** against the manifest (:func:`input_differences`):
   the sdist, the patches, the model files, the panel (by sha256), the package set (each
   distribution's version) and the native build (the build key, a digest of the sdist, the
   patches, the build options and cmake flags, and the host variant the build depends on).
   This machine's values come from the manifest writer's own code: the artifacts are hashed
   and the distributions listed by :func:`refspec.provenance.manifest.build_manifest`, the
   panel is written by the panel code into a scratch folder, and the build key is
   :func:`refspec.native.build.build_key`; nothing is built. A model file not yet on this
   machine counts as its pin in the families file (the ``models`` rule derives it and refuses
   a file that differs from that pin). Each pinned difference refuses the reproduction
   (exit 3) unless it is allowed by name; the host's differences are recorded, never refused.
4. **Run the registered plan**: Snakemake runs the main job with the rebuilt config, whose
   ``results`` is the reproduction's folder and whose ``reproduces`` names the archive, the
   accepted differences, the host's, and the costs each sized campaign's pilot measured, which
   the reproduction's campaigns are sized from again instead of measuring their own
   (:func:`reproduction_config`); the seal rules pass
   ``reproduces`` to ``refspec seal-data`` and ``refspec seal-archive`` (``predicate.reproduces``).
5. **Check the plan and compare**: the reproduction's registered plan must equal the
   archive's (:func:`plan_check`, :func:`refspec.compare.inputs.plan_differences`), and
   ``refspec compare`` compares the two archives.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ..compare.inputs import PINNED_ROLES, plan_differences, registered_plan_sha256
from ..compare.model import ArchiveData
from ..core.config import Config, config_of, load_families, study_families
from ..core.errors import IntegrityError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_json
from ..core.panels import humaneval_tasks, parse_range, write_panel
from ..core.paths import REPO_ROOT
from ..native import build as native
from ..native import sdist
from ..native.models import config_families_file, family_dir
from ..provenance.manifest import Artifact, build_manifest, flatten

#: the name of the native build's entry among the pinned inputs
NATIVE_BUILD = "native:build"
#: inside the reproduction's folder: the rebuilt config and the input check
RECORD_DIR = "reproduce"
PINNED = "pinned"
HOST = "host"


@dataclass(frozen=True)
class InputDifference:
    """One input whose value on this machine differs from the archive's manifest."""

    name: str  # e.g. model:smollm2-135m/target, pkg:pypi/numpy, native:build, host.cpu.model
    archived: str | None  # None: absent from the archive's manifest
    here: str | None  # None: absent on this machine
    kind: str  # pinned | host

    def line(self) -> str:
        return f"{self.name}: archived {self.archived or '(absent)'}, here {self.here or '(absent)'}"

    def record(self) -> dict[str, str | None]:
        return {"name": self.name, "archived": self.archived, "here": self.here}


def default_out(seal_sha256: str) -> Path:
    """The reproduction's default results folder: ``results/reproduce-<first 12 hex of the seal>``."""
    return Path("results") / f"reproduce-{seal_sha256[:12]}"


# --------------------------------------------------------------------------- config


def archived_config(manifest: dict[str, Any]) -> dict[str, Any]:
    """The config an archive's run ran with, from its manifest (checked against ``config_sha256``)."""
    ext = (manifest.get("buildDefinition") or {}).get("externalParameters") or {}
    cfg = ext.get("config")
    if not isinstance(cfg, dict):
        raise IntegrityError("the archive's manifest holds no config (buildDefinition.externalParameters.config)")
    if sha256_json(cfg) != ext.get("config_sha256"):
        raise IntegrityError("the archive's manifest config does not match its config_sha256")
    return copy.deepcopy(cfg)


def reproduction_config(
    manifest: dict[str, Any],
    results: str | Path,
    reproduces: dict[str, str],
    accepted: Iterable[InputDifference] = (),
    host: Iterable[InputDifference] = (),
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The archive's config with the reproduction's ``results`` folder and ``reproduces`` record;
    with the archive's ``plan``, the record also carries its campaigns' pilots (:func:`archived_pilots`)."""
    cfg = archived_config(manifest)
    cfg["results"] = str(results)
    cfg["reproduces"] = {
        "seal_sha256": reproduces["seal_sha256"],
        "keyid": reproduces["keyid"],
        "archive_id": reproduces["archive_id"],
        "accepted": [d.record() for d in accepted],
        "host": [d.record() for d in host],
    }
    pilots = archived_pilots(plan or {})
    if pilots:
        cfg["reproduces"]["pilots"] = pilots
    return cfg


def archived_pilots(plan: dict[str, Any]) -> dict[str, dict]:
    """campaign key -> ``sizing.pilot`` of every sized campaign of the archive's merged plan: the
    costs its pilot measured, which the reproduction sizes from again instead of measuring its own
    (:mod:`refspec.campaigns.pilot`), so that it runs the registered plan and its timings stay
    comparable with the archive's."""
    out = {}
    for key, c in (plan.get("campaigns") or {}).items():
        pilot = (((c or {}).get("definition") or {}).get("sizing") or {}).get("pilot")
        if isinstance(pilot, dict):
            out[key] = pilot
    return out


def write_config(cfg: dict[str, Any], path: Path) -> Path:
    """The config as a file Snakemake and the CLI read (JSON, which is YAML)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(cfg, indent=1, sort_keys=True) + "\n", mode=0o644)
    return path


# --------------------------------------------------------------------------- pinned inputs


def _build_key_of(uri: str) -> str | None:
    """The build key in a built library's path (``.../native/<key>/build/...``), or None."""
    parts = Path(unquote(urlparse(uri).path)).parts
    for i, part in enumerate(parts[:-1]):
        if part == "native" and i + 1 < len(parts):
            return parts[i + 1]
    return None


def pinned_inputs(manifest: dict[str, Any]) -> dict[str, str]:
    """The pinned inputs a manifest records, ``{name: value}``: sdist, patch, model and panel
    files by sha256, distributions by version, and the native build by its key."""
    out: dict[str, str] = {}
    for dep in (manifest.get("buildDefinition") or {}).get("resolvedDependencies") or []:
        ann = dep.get("annotations") or {}
        role, name = ann.get("role"), str(dep.get("name"))
        if role in PINNED_ROLES:
            out[name] = str((dep.get("digest") or {}).get("sha256"))
        elif role == "distribution":
            out[name] = str(ann.get("version"))
        elif role == "library" and NATIVE_BUILD not in out:
            key = _build_key_of(str(dep.get("uri", "")))
            if key is not None:
                out[NATIVE_BUILD] = key
    return out


def _model_files(cfg: Config) -> tuple[list[Artifact], dict[str, str]]:
    """The config's model files that are on this machine (artifacts), and the pins of those
    that are not yet (``{name: pin}``: the ``models`` rule derives them and checks them)."""
    families = load_families(config_families_file(cfg))
    arts, pins = [], {}
    for family in study_families(cfg):
        fam = families.get(family) or {}
        base = Path(cfg.models_dir) if fam.get("source") is None and cfg.models_dir else family_dir(family)
        for key, ent in {"target": fam.get("target") or {}, **(fam.get("drafts") or {})}.items():
            path = base / str(ent.get("file"))
            if path.is_file():
                arts.append(Artifact(f"{family}/{key}", "model", path))
            else:
                pins[f"model:{family}/{key}"] = str(ent.get("sha256"))
    return arts, pins


def _panel_files(cfg: Config, scratch: Path) -> list[Artifact]:
    """The run's panel, written by the panel code (as the ``panel`` rule writes it)."""
    path = scratch / "panels" / f"{cfg.panel.source}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_panel(humaneval_tasks(parse_range(str(cfg.panel.tasks))), path)
    return [Artifact(path.name, "panel", path)]


def current_inputs(cfg: dict[str, Any], scratch: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """This machine's pinned inputs for the config ``cfg`` as written (as :func:`pinned_inputs`
    reads them from a manifest) and its host record. Nothing is built; the sdist is fetched when absent."""
    typed = config_of(cfg, "the reproduced config")
    arts = [Artifact(sdist.SDIST_FILE, "sdist", sdist.fetch_sdist())]
    arts += [Artifact(p.name, "patch", p) for p in native.patch_files()]
    models, pending = _model_files(typed)
    arts += models + _panel_files(typed, scratch)
    m = build_manifest(arts, cfg, include_source=False, include_host=True, repo_root=REPO_ROOT)
    values = pinned_inputs(m)
    values.update(pending)
    values[NATIVE_BUILD] = native.build_key(native.BuildOptions.from_config(typed))[:16]
    host = ((m.get("buildDefinition") or {}).get("internalParameters") or {}).get("host") or {}
    return values, host


def _text(v: Any) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def input_differences(
    archived: dict[str, Any], here: dict[str, str], host_here: dict[str, Any]
) -> list[InputDifference]:
    """The differences of this machine's pinned inputs and host from an archive's manifest."""
    pins = pinned_inputs(archived)
    diffs = [
        InputDifference(name, pins.get(name), here.get(name), PINNED)
        for name in sorted(set(pins) | set(here))
        if pins.get(name) != here.get(name)
    ]
    host_archived = ((archived.get("buildDefinition") or {}).get("internalParameters") or {}).get("host") or {}
    fa, fb = flatten({"host": host_archived}), flatten({"host": host_here})
    diffs += [
        InputDifference(k, _text(fa.get(k)), _text(fb.get(k)), HOST)
        for k in sorted(set(fa) | set(fb))
        if fa.get(k) != fb.get(k)
    ]
    return diffs


def allowed(d: InputDifference, allow: Iterable[str]) -> bool:
    """Whether ``--allow`` names the difference (a name, or a shell pattern such as ``pkg:pypi/*``)."""
    return any(d.name == a or fnmatch.fnmatchcase(d.name, a) for a in allow)


@dataclass
class InputCheck:
    differences: list[InputDifference]
    allow: tuple[str, ...]

    @property
    def host(self) -> list[InputDifference]:
        return [d for d in self.differences if d.kind == HOST]

    @property
    def accepted(self) -> list[InputDifference]:
        return [d for d in self.differences if d.kind == PINNED and allowed(d, self.allow)]

    @property
    def refused(self) -> list[InputDifference]:
        return [d for d in self.differences if d.kind == PINNED and not allowed(d, self.allow)]

    @property
    def unused_allow(self) -> list[str]:
        pinned = [d for d in self.differences if d.kind == PINNED]
        return [a for a in self.allow if not any(allowed(d, (a,)) for d in pinned)]

    def raise_if_refused(self) -> None:
        if self.refused:
            n = len(self.refused)
            raise IntegrityError(
                f"{n} pinned input{'s' if n > 1 else ''} of this machine differ{'' if n > 1 else 's'} from the "
                "archive's manifest (name: archived value, this machine's value); --allow NAME accepts one:\n  "
                + "\n  ".join(d.line() for d in self.refused)
            )

    def record(self) -> dict[str, Any]:
        return {
            "accepted": [d.record() for d in self.accepted],
            "refused": [d.record() for d in self.refused],
            "host": [d.record() for d in self.host],
            "allow": list(self.allow),
        }


def check_inputs(archive: ArchiveData, cfg: dict[str, Any], allow: Iterable[str] = ()) -> InputCheck:
    """This machine's inputs against the archive's manifest, for the rebuilt config ``cfg``."""
    with tempfile.TemporaryDirectory(prefix="refspec-reproduce-") as scratch:
        here, host = current_inputs(cfg, Path(scratch))
    return InputCheck(input_differences(archive.manifest, here, host), tuple(allow))


# --------------------------------------------------------------------------- after the run


@dataclass(frozen=True)
class PlanCheck:
    archived: str  # registered-plan sha256 of the archive
    reproduced: str
    differences: dict[str, list[str]]

    @property
    def same(self) -> bool:
        return self.archived == self.reproduced and not self.differences


def plan_check(archived_plan: dict[str, Any], reproduced_plan: dict[str, Any]) -> PlanCheck:
    """The reproduction's registered plan against the archive's (derived fields left out)."""
    return PlanCheck(
        registered_plan_sha256(archived_plan),
        registered_plan_sha256(reproduced_plan),
        plan_differences(archived_plan, reproduced_plan),
    )


def record_inputs(out: Path, archive: ArchiveData, check: InputCheck) -> Path:
    """``DIR/reproduce/inputs.json``: what was reproduced and every difference found."""
    doc = {"reproduces": reproduces_ref(archive), **check.record()}
    path = out / RECORD_DIR / "inputs.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n", mode=0o644)
    return path


def reproduces_ref(archive: ArchiveData) -> dict[str, str]:
    return {"seal_sha256": archive.seal_sha256, "keyid": archive.keyid, "archive_id": archive.archive_id}
