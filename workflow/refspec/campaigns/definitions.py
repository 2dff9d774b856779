"""Campaign definitions: the names, the definition files and their presets, each campaign's module."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from ..core.campaign_names import CAMPAIGNS
from ..core.config import read_yaml, validate
from ..core.errors import ConfigError, UsageError
from ..core.paths import config_dir


def module_for(name: str) -> ModuleType:
    """The module of campaign ``name`` (``refspec.campaigns.<name>``)."""
    return importlib.import_module(f"{__package__}.{name}")


def normalize_name(name: str) -> str:
    n = name.strip().lower().replace("-", "_")
    aliases = {"phase_masks": "phase_mask", "phasemask": "phase_mask", "e2": "replication", "predict": "prediction"}
    n = aliases.get(n, n)
    if n not in CAMPAIGNS:
        raise UsageError(f"unknown campaign {name!r} (one of {', '.join(CAMPAIGNS)})")
    return n


def deep_merge(base: Any, over: Any) -> Any:
    """Mappings merge key by key; anything else in ``over`` replaces ``base``."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = deep_merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def definition_path(name: str) -> Path:
    return config_dir() / "campaigns" / f"{name}.yaml"


def load_definition(name: str, preset: str = "default", path: str | Path | dict | None = None) -> tuple[dict, Path]:
    """The validated definition of campaign ``name`` with ``preset`` applied (defaults filled).

    ``path``: the definition file (default ``config/campaigns/NAME.yaml``), or a definition already
    in hand (a mapping, validated the same way; its folder is the working folder for relative panel
    files)."""
    if isinstance(path, dict):
        p, raw = Path.cwd() / f"{name}.yaml", copy.deepcopy(path)
    else:
        p = Path(path) if path else definition_path(name)
        raw = read_yaml(p)
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: a campaign definition is a mapping")
    validate(copy.deepcopy(raw), "campaign.schema.yaml", str(p))
    if raw.get("campaign") != name:
        raise ConfigError(f"{p} defines campaign {raw.get('campaign')!r}, not {name!r}")
    presets = raw.pop("presets", {}) or {}
    if preset not in ("default", None, ""):
        if preset not in presets:
            raise ConfigError(f"{p}: no preset {preset!r} (has: default{''.join(', ' + k for k in presets)})")
        over = dict(presets[preset])
        if "campaign" in over and over["campaign"] != name:
            raise ConfigError(f"{p}: preset {preset!r} changes the campaign name")
        raw = deep_merge(raw, over)
    defn = validate(raw, "campaign.schema.yaml", f"{p} (preset {preset or 'default'})")
    defn.pop("presets", None)
    return defn, p
