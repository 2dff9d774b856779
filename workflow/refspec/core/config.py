"""Configuration: YAML files validated against JSON Schemas at load.

The workflow config (``config/config.yaml``) is validated against
``workflow/schemas/config.schema.yaml``; the families file and arm files have
their own schemas. A config that does not validate is a usage error (exit 2)
whose message names the offending path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .paths import config_dir, schemas_dir


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    try:
        return yaml.safe_load(p.read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"{p}: no such file") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e


def validate(data: Any, schema_name: str, what: str) -> Any:
    """Validate ``data`` against ``workflow/schemas/<schema_name>``; fill defaults."""
    import jsonschema

    schema = read_yaml(schemas_dir() / schema_name)
    validator_cls = jsonschema.validators.validator_for(schema)

    # fill in defaults like snakemake.utils.validate(set_default=True)
    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(prop, sub["default"])
        yield from validator_cls.VALIDATORS["properties"](validator, properties, instance, schema)

    extended = jsonschema.validators.extend(validator_cls, {"properties": set_defaults})
    errors = sorted(extended(schema).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors:
            loc = "/".join(str(x) for x in e.absolute_path) or "(top level)"
            lines.append(f"  {loc}: {e.message}")
        raise ConfigError(f"{what} does not match {schema_name}:\n" + "\n".join(lines))
    return data


def read_config_file(path: str | Path) -> dict:
    """A config file (YAML, or JSON, its subset) as written: a mapping, not validated."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} is not a mapping")
    return data


def load_config(path: str | Path | None = None) -> dict:
    """The run's config (default ``config/config.yaml``), validated, defaults filled."""
    path = Path(path) if path else config_dir() / "config.yaml"
    return validate(read_config_file(path), "config.schema.yaml", str(path))


def preset_settings(config: dict, section: str) -> dict:
    """A stage's settings (``config[section]``, e.g. ``screen``) under the run's preset
    (``campaigns.preset``): the section's ``presets[<preset>]`` entries replace its own; a preset the
    section does not define leaves the embedded sizes. A preset key the section does not have is a
    configuration error. The result has no ``presets``."""
    settings = dict(config.get(section) or {})
    presets = settings.pop("presets", None) or {}
    preset = str((config.get("campaigns") or {}).get("preset", "default"))
    change = presets.get(preset) or {}
    unknown = sorted(set(change) - set(settings))
    if unknown:
        raise ConfigError(f"{section}.presets.{preset}: {', '.join(unknown)} not settings of {section}")
    return {**settings, **change}


def load_families(path: str | Path | None = None) -> dict:
    path = Path(path) if path else config_dir() / "families.yaml"
    data = read_yaml(path) or {}
    return validate(data, "families.schema.yaml", str(path))["families"]


def gpu_layers(config: dict | None) -> int:
    """The run's ``n_gpu_layers`` (-1 = every layer) from ``gpu_layers`` and ``native.backend``.

    ``auto`` (the default) offloads every layer when the native backend is ``cuda`` or
    ``vulkan`` and none on ``cpu``; ``all``/``none``/a count say so explicitly.
    """
    config = config or {}
    setting = config.get("gpu_layers", "auto")
    backend = str(((config.get("native") or {}).get("backend")) or "cpu")
    if setting == "auto":
        return -1 if backend in ("cuda", "vulkan") else 0
    if setting == "all":
        return -1
    if setting == "none":
        return 0
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise ConfigError(f"gpu_layers: {setting!r} is not auto, all, none or a count of layers")
    return int(setting)


def study_families(config: dict | None) -> list[str]:
    """The families one run studies side by side: ``families`` when given, else ``[family]``.

    With more than one, each family's campaigns live in ``campaigns/<family>/<name>`` of
    the one results folder, and one archive and one report hold them all.
    """
    config = config or {}
    fams = list(config.get("families") or [])
    if not fams:
        return [config["family"]] if config.get("family") else []
    if len(set(fams)) != len(fams):
        raise ConfigError(f"families: a family is listed twice: {fams}")
    return fams


def campaign_dir(results: str | Path, name: str, family: str, config: dict | None) -> Path:
    """Where a campaign of ``family`` writes in a results folder (one layout for the run)."""
    base = Path(results) / "campaigns"
    return base / family / name if len(study_families(config)) > 1 else base / name


def campaign_key(cdir: str | Path) -> str:
    """A campaign's name in the merged plan and tables of its run: ``<name>``, or ``<family>/<name>``
    for a study of several families (``campaigns/<family>/<name>``, :func:`campaign_dir`)."""
    cdir = Path(cdir)
    return cdir.name if cdir.parent.name == "campaigns" else f"{cdir.parent.name}/{cdir.name}"
