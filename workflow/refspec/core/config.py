"""Configuration: YAML files validated against JSON Schemas at load.

The workflow config (``config/config.yaml``) is validated against
``workflow/schemas/config.schema.yaml``; the families file and arm files have
their own schemas. A config that does not validate is a usage error (exit 2)
whose message names the offending path.

The command layer resolves the workflow config once, into a :class:`Config`: an immutable tree of
frozen dataclasses built from the schema itself (one class per object the schema declares with
``properties``, one field per property, the schema's defaults filled in; arrays become tuples,
free-form mappings read-only mappings). Nothing below the command layer reads the raw mapping;
``Config.to_dict()`` gives it back, key for key, where a config is written out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType
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


@cache
def _schema(schema_name: str) -> dict:
    """``workflow/schemas/<schema_name>``, read once per process (the validator and the typed config share it)."""
    return read_yaml(schemas_dir() / schema_name)


def validate(data: Any, schema_name: str, what: str) -> Any:
    """Validate ``data`` against ``workflow/schemas/<schema_name>``; fill defaults."""
    import jsonschema

    schema = _schema(schema_name)
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


CONFIG_SCHEMA = "config.schema.yaml"


class Section:
    """Base of the generated configuration classes: a frozen dataclass whose fields are one schema
    object's properties. A property the file leaves out and the schema gives no default is ``None``
    (and absent from :meth:`to_dict`)."""

    _present: frozenset

    def to_dict(self) -> dict:
        """The mapping this section was built from, defaults filled (JSON-able)."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name in self._present}

    def replace(self, **changes) -> Any:
        """A copy with ``changes``; a whole config is validated again (defaults filled)."""
        data = {**self.to_dict(), **{k: plain(v) for k, v in changes.items()}}
        if not self._path():
            return config_of(data)
        return _typed(self._schema(), data, self._path())


def plain(value: Any) -> Any:
    """A configuration value as JSON data: sections and mappings as dicts, tuples as lists."""
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _schema_root() -> dict:
    return _schema(CONFIG_SCHEMA)


def _node(path: tuple[str, ...]) -> dict:
    node = _schema_root()
    for key in path:
        node = _object_branch(node["properties"][key]) or node["properties"][key]
    return node


def _object_branch(node: dict) -> dict | None:
    """The branch of ``node`` (itself, or one of its ``oneOf``/``anyOf``) that declares properties."""
    if "properties" in node:
        return node
    for branch in node.get("oneOf", []) + node.get("anyOf", []):
        if "properties" in branch:
            return branch
    return None


@cache
def _section_class(path: tuple[str, ...]) -> type:
    node = _node(path)
    name = "Config" if not path else "".join(w.capitalize() for p in path for w in p.split("_")) + "Settings"
    cls = dataclasses.make_dataclass(
        name,
        [(key, Any) for key in node["properties"]] + [("_present", frozenset, dataclasses.field(repr=False))],
        bases=(Section,),
        frozen=True,
        namespace={"_schema": lambda self, _p=path: _node(_p), "_path": lambda self, _p=path: _p},
    )
    cls.__module__ = __name__
    cls.__doc__ = node.get("description") or f"The configuration's {'.'.join(path) or 'top level'}."
    return cls


def _typed(node: dict, data: Any, path: tuple[str, ...]) -> Any:
    obj = _object_branch(node)
    if obj is None or not isinstance(data, Mapping):
        return _frozen(data)
    values = {
        key: _typed(sub, data[key], (*path, key)) if key in data else None for key, sub in obj["properties"].items()
    }
    return _section_class(path)(**values, _present=frozenset(k for k in data if k in obj["properties"]))


def config_of(data: Mapping, what: str = "config") -> Config:
    """``data`` (a workflow config as written) validated against the schema, defaults filled, as
    a :class:`Config`."""
    return _typed(_schema_root(), validate(plain(data), CONFIG_SCHEMA, what), ())


Config = _section_class(())


def load_config(path: str | Path | None = None) -> Config:
    """The run's config (default ``config/config.yaml``), validated, defaults filled, typed."""
    path = Path(path) if path else config_dir() / "config.yaml"
    return config_of(read_config_file(path), str(path))


def preset_settings(config: Config, section: str) -> Section:
    """A stage's settings (``config.<section>``, e.g. ``screen``) under the run's preset
    (``campaigns.preset``): the section's ``presets[<preset>]`` entries replace its own; a preset the
    section does not define leaves the embedded sizes. A preset key the section does not have is a
    configuration error. The result's ``presets`` is empty."""
    settings = getattr(config, section)
    preset = str(config.campaigns.preset)
    change = dict(settings.presets.get(preset) or {})
    unknown = sorted(set(change) - {f.name for f in dataclasses.fields(settings)} - {"_present"})
    if unknown:
        raise ConfigError(f"{section}.presets.{preset}: {', '.join(unknown)} not settings of {section}")
    return settings.replace(**change, presets={})


def load_families(path: str | Path | None = None) -> dict:
    path = Path(path) if path else config_dir() / "families.yaml"
    data = read_yaml(path) or {}
    return validate(data, "families.schema.yaml", str(path))["families"]


def gpu_layers(config: Config | None, backend: str | None = None) -> int:
    """The run's ``n_gpu_layers`` (-1 = every layer) from ``gpu_layers`` and ``native.backend``, or
    ``backend`` where the caller runs another build's (no config: ``auto``, on the CPU).

    ``auto`` (the default) offloads every layer when the native backend is ``cuda`` or
    ``vulkan`` and none on ``cpu``; ``all``/``none``/a count say so explicitly.
    """
    setting = config.gpu_layers if config is not None else "auto"
    backend = str(backend or (config.native.backend if config is not None else "cpu"))
    if setting == "auto":
        return -1 if backend in ("cuda", "vulkan") else 0
    if setting == "all":
        return -1
    if setting == "none":
        return 0
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise ConfigError(f"gpu_layers: {setting!r} is not auto, all, none or a count of layers")
    return int(setting)


def study_families(config: Config | None) -> list[str]:
    """The families one run studies side by side: ``families`` when given, else ``[family]``.

    With more than one, each family's campaigns live in ``campaigns/<family>/<name>`` of
    the one results folder, and one archive and one report hold them all.
    """
    if config is None:
        return []
    fams = list(config.families or [])
    if not fams:
        return [config.family] if config.family else []
    if len(set(fams)) != len(fams):
        raise ConfigError(f"families: a family is listed twice: {fams}")
    return fams


def campaign_dir(results: str | Path, name: str, family: str, config: Config | None) -> Path:
    """Where a campaign of ``family`` writes in a results folder (one layout for the run)."""
    base = Path(results) / "campaigns"
    return base / family / name if len(study_families(config)) > 1 else base / name


def campaign_key(cdir: str | Path) -> str:
    """A campaign's name in the merged plan and tables of its run: ``<name>``, or ``<family>/<name>``
    for a study of several families (``campaigns/<family>/<name>``, :func:`campaign_dir`)."""
    cdir = Path(cdir)
    return cdir.name if cdir.parent.name == "campaigns" else f"{cdir.parent.name}/{cdir.name}"
