"""Arms: complete execution recipes, as data (``config/arms.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

# the reference arm and the A/A twin's name have one owner, the archive's names (the checker's package)
from refspec_check.names import REFERENCE_ARM, TWIN_SUFFIX, is_twin  # noqa: F401

from .engine_registry import engine, engines
from .errors import ConfigError
from .paths import config_dir

if TYPE_CHECKING:  # the configuration (YAML) is read only where arms are loaded
    from .config import Config


def twin_name(arm: str) -> str:
    """The name of ``arm``'s A/A twin."""
    return arm + TWIN_SUFFIX


def twin_of(arm: str) -> str:
    """The arm a twin repeats (``M3_aa`` -> ``M3``)."""
    return arm[: -len(TWIN_SUFFIX)]


@dataclass(frozen=True)
class Arm:
    name: str
    mode: str  # target | spec
    layout: str  # mq | pq | qb | gs
    ub: int  # target micro-batch capacity U
    mask: int  # phase mask
    k: int = 3
    draft_ub: int = 512
    cap: int = 128
    threads: int = 2
    kv_type: str = "f16"
    n_ctx: int = 2048
    description: str = ""
    gpu_layers: int | None = None  # n_gpu_layers (-1 every layer); None: the run's setting
    kind: str = "worker"  # the engine that serves it (refspec.core.engine_registry): worker is refspec's own
    settings: Any = None  # the engine's settings (its record's key and class: the engine's declaration)

    def __post_init__(self):
        e = engine(self.kind, self.name)
        if e.settings_key is None:
            if self.settings is not None:
                raise ConfigError(f"arm {self.name}: a {self.kind} arm takes no engine settings")
        elif self.settings is not None and not isinstance(self.settings, e.settings):
            object.__setattr__(self, "settings", e.settings.from_record(self.settings))
        problems = e.check(self) if e.check is not None else []
        if problems:
            raise ConfigError(f"arm {self.name}: " + "; ".join(problems))

    @classmethod
    def of(cls, name: str, fields: dict) -> Arm:
        """An arm from its fields as the arms file writes them: the engine's settings under the key
        its engine declares (its ``settings_key``); a settings key of another engine is refused."""
        fields = dict(fields)
        kind = str(fields.get("kind", "worker"))
        key = engine(kind, name).settings_key
        for other in engines().values():
            if other.settings_key and other.settings_key != key and other.settings_key in fields:
                raise ConfigError(f"arm {name}: {other.settings_key} settings need kind: {other.kind}")
        settings = fields.pop(key, None) if key else None
        return cls(name=name, **fields, settings=settings)

    def placed(self, config: Config | None) -> Arm:
        """This arm with the run's GPU setting (:func:`refspec.core.config.gpu_layers`) unless it has its own."""
        from .config import gpu_layers  # lazy: YAML; the report (and the checker) read arm names without it

        return self if self.gpu_layers is not None else replace(self, gpu_layers=gpu_layers(config))

    @property
    def speculative(self) -> bool:
        return self.mode == "spec"

    def with_(self, **kw) -> Arm:
        return replace(self, **kw)

    def record(self) -> dict:
        d = asdict(self)
        d.pop("settings")
        if self.kind == "worker":  # refspec's own arms keep their record as it always was
            d.pop("kind")
            return d
        key = engine(self.kind).settings_key
        if key is not None:
            d[key] = self.settings.record()
        return d


def reference_of(defn: dict | None) -> str:
    """A campaign's reference arm: its definition's ``reference``, else refspec's R."""
    return str((defn or {}).get("reference") or REFERENCE_ARM)


def reference_problems(arm: Arm) -> list[str]:
    """Why ``arm`` cannot be a campaign's reference (empty: it can).

    The admission rule that R obeys: a micro-batch-1 recipe, i.e. target only (no draft) with a
    target micro-batch of one row per graph (``ub: 1``). An engine without a micro-batch setting
    states its own rule instead, and an engine may add to it (its declaration's
    ``reference_problems``, ``micro_batch``)."""
    problems = []
    if arm.speculative:
        problems.append("it speculates (mode spec): a reference runs the target alone")
    e = engine(arm.kind, arm.name)
    if e.micro_batch and arm.ub != 1:
        problems.append(f"its micro-batch is {arm.ub} rows (ub {arm.ub}): a reference runs ub 1")
    if e.reference_problems is not None:
        problems += e.reference_problems(arm) or []
    return problems


def check_reference(arm: Arm, where: str = "campaign") -> None:
    """Refuse (:class:`ConfigError`, exit 2) an arm that is not a micro-batch-1 recipe as the reference."""
    problems = reference_problems(arm)
    if problems:
        raise ConfigError(
            f"{where}: arm {arm.name} cannot be the reference (a micro-batch-1 recipe, as R): " + "; ".join(problems)
        )


def load_arms(path: str | Path | None = None) -> dict[str, Arm]:
    path = Path(path) if path else config_dir() / "arms.yaml"
    from .config import read_yaml, validate  # lazy: YAML; the report (and the checker) read arm names without it

    data = validate(read_yaml(path) or {}, "arms.schema.yaml", str(path))
    defaults = data.get("defaults", {}) or {}
    return {name: Arm.of(name, {**defaults, **spec}) for name, spec in data["arms"].items()}


def select(names: str | list[str], arms: dict[str, Arm] | None = None) -> list[Arm]:
    arms = arms or load_arms()
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    out = []
    for n in names:
        if n not in arms:
            raise ConfigError(f"unknown arm {n!r} (known: {', '.join(arms)})")
        out.append(arms[n])
    return out
