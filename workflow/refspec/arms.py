"""Arms: complete execution recipes, as data (``config/arms.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .config import read_yaml, validate
from .errors import ConfigError
from .paths import config_dir


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

    def placed(self, config: dict | None) -> "Arm":
        """This arm with the run's GPU setting (:func:`refspec.config.gpu_layers`) unless it has its own."""
        from .config import gpu_layers

        return self if self.gpu_layers is not None else replace(self, gpu_layers=gpu_layers(config))

    @property
    def speculative(self) -> bool:
        return self.mode == "spec"

    def with_(self, **kw) -> "Arm":
        return replace(self, **kw)

    def record(self) -> dict:
        return asdict(self)


def load_arms(path: str | Path | None = None) -> dict[str, Arm]:
    path = Path(path) if path else config_dir() / "arms.yaml"
    data = validate(read_yaml(path) or {}, "arms.schema.yaml", str(path))
    defaults = data.get("defaults", {}) or {}
    return {name: Arm(name=name, **{**defaults, **spec}) for name, spec in data["arms"].items()}


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
