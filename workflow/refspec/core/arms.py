"""Arms: complete execution recipes, as data (``config/arms.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

# the reference arm and the A/A twin's name have one owner, the archive's names (the checker's package)
from refspec_check.names import REFERENCE_ARM, TWIN_SUFFIX, is_twin  # noqa: F401

from .errors import ConfigError
from .layouts import LAYOUTS
from .paths import config_dir

if TYPE_CHECKING:  # the configuration (YAML) is read only where arms are loaded
    from .config import Config

SERVER_BUILDS = ("stock", "patched")
KINDS = ("worker", "server", "openvino")
OPENVINO_PIPELINES = ("stateful", "continuous_batching")


def twin_name(arm: str) -> str:
    """The name of ``arm``'s A/A twin."""
    return arm + TWIN_SUFFIX


def twin_of(arm: str) -> str:
    """The arm a twin repeats (``M3_aa`` -> ``M3``)."""
    return arm[: -len(TWIN_SUFFIX)]


@dataclass(frozen=True)
class ServerSpec:
    """A black-box arm's server (``kind: server``): one that refspec starts or an existing loopback URL.

    ``binary``: a user's own ``llama-server`` (any llama.cpp version), started by refspec like a
    build; its command line is adapted to the options its ``--help`` lists.

    ``build``: ``stock`` (the pinned source, no patches) or ``patched`` ``llama-server`` of the
    native build, started by refspec on a loopback port, fresh per block; ``url``: a server that
    is already running on a loopback address (refspec cannot make it fresh: the report says so).
    ``attn_layout`` is the ``LLAMA_ATTN_LAYOUT`` value a patched server is started with; ``args``
    are extra command-line arguments; ``ready_timeout_s`` bounds the wait for ``/health``.
    """

    build: str | None = None
    url: str | None = None
    binary: str | None = None  # a user's llama-server binary (any llama.cpp version), started by refspec
    attn_layout: str | None = None
    args: tuple[str, ...] = ()
    ready_timeout_s: float = 120.0

    def record(self) -> dict:
        d = asdict(self)
        d["args"] = list(self.args)
        return {k: v for k, v in d.items() if v is not None and v != []}

    @classmethod
    def from_record(cls, rec: dict | ServerSpec) -> ServerSpec:
        if isinstance(rec, ServerSpec):
            return rec
        rec = dict(rec or {})
        rec["args"] = tuple(str(a) for a in rec.get("args") or ())
        if "ready_timeout_s" in rec:
            rec["ready_timeout_s"] = float(rec["ready_timeout_s"])
        return cls(**rec)


@dataclass(frozen=True)
class OpenVINOSpec:
    """An OpenVINO GenAI arm's pipeline (``kind: openvino``, ``anc/openvino.md``): ``stateful`` (one
    sequence, the model's own state: the engine's greedy reference) or ``continuous_batching`` (a
    paged KV cache and a scheduler that takes up to ``ub`` tokens a step; with ``mode: spec`` it
    verifies ``k`` draft tokens a step). ``execution_mode``: the CPU plugin's ``EXECUTION_MODE_HINT``,
    ``performance`` (its default: bf16 inference where the CPU has it) or ``accuracy`` (f32).
    ``ready_timeout_s`` bounds the wait for ``/health``."""

    pipeline: str = "stateful"
    execution_mode: str = "performance"  # the CPU plugin's EXECUTION_MODE_HINT: performance | accuracy
    ready_timeout_s: float = 300.0

    def record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, rec: dict | OpenVINOSpec) -> OpenVINOSpec:
        if isinstance(rec, OpenVINOSpec):
            return rec
        rec = dict(rec or {})
        if "ready_timeout_s" in rec:
            rec["ready_timeout_s"] = float(rec["ready_timeout_s"])
        return cls(**rec)


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
    kind: str = "worker"  # worker (refspec's own) | server (a black-box llama.cpp server) | openvino
    server: ServerSpec | None = None
    openvino: OpenVINOSpec | None = None

    def __post_init__(self):
        if self.server is not None and not isinstance(self.server, ServerSpec):
            object.__setattr__(self, "server", ServerSpec.from_record(self.server))
        if self.openvino is not None and not isinstance(self.openvino, OpenVINOSpec):
            object.__setattr__(self, "openvino", OpenVINOSpec.from_record(self.openvino))
        if self.kind not in KINDS:
            raise ConfigError(f"arm {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "openvino":
            o = self.openvino
            if o is None or self.server is not None:
                raise ConfigError(f"arm {self.name}: an openvino arm names its openvino.pipeline and no server")
            if o.pipeline not in OPENVINO_PIPELINES:
                raise ConfigError(
                    f"arm {self.name}: openvino.pipeline {o.pipeline!r} is not one of {', '.join(OPENVINO_PIPELINES)}"
                )
            if o.execution_mode not in ("performance", "accuracy"):
                raise ConfigError(
                    f"arm {self.name}: openvino.execution_mode {o.execution_mode!r} is not performance or accuracy"
                )
            if self.speculative and o.pipeline != "continuous_batching":
                raise ConfigError(f"arm {self.name}: OpenVINO GenAI speculates in the continuous_batching pipeline")
        elif self.openvino is not None:
            raise ConfigError(f"arm {self.name}: openvino settings need kind: openvino")
        if self.kind == "server":
            s = self.server
            if s is None or sum(x is not None for x in (s.build, s.url, s.binary)) != 1:
                raise ConfigError(
                    f"arm {self.name}: a server arm names exactly one of server.build, server.binary and server.url"
                )
            if s.build is not None and s.build not in SERVER_BUILDS:
                raise ConfigError(f"arm {self.name}: server.build {s.build!r} is not one of {', '.join(SERVER_BUILDS)}")
            if s.attn_layout is not None and s.build != "patched":
                raise ConfigError(
                    f"arm {self.name}: server.attn_layout needs a server refspec starts from the "
                    "patched build (build: patched)"
                )
            name, _, mask = (s.attn_layout or "").partition(":")
            if name in LAYOUTS and (mask.isdigit() or not mask):  # a malformed value reaches
                want = (name, int(mask) if mask else 15)  # the server, which refuses it
                if (self.layout, self.mask) != want:
                    raise ConfigError(
                        f"arm {self.name}: layout {self.layout} mask {self.mask} disagree with "
                        f"server.attn_layout {s.attn_layout!r} ({want[0]}, mask {want[1]})"
                    )
        elif self.server is not None:
            raise ConfigError(f"arm {self.name}: server settings need kind: server")

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
        if self.kind == "worker":  # refspec's own arms keep their record as it always was
            d.pop("kind")
            d.pop("server")
            d.pop("openvino")
        elif self.kind == "server":  # as server arms always were
            d["server"] = self.server.record()
            d.pop("openvino")
        else:
            d.pop("server")
            d["openvino"] = self.openvino.record()
        return d


def reference_of(defn: dict | None) -> str:
    """A campaign's reference arm: its definition's ``reference``, else refspec's R."""
    return str((defn or {}).get("reference") or REFERENCE_ARM)


def reference_problems(arm: Arm) -> list[str]:
    """Why ``arm`` cannot be a campaign's reference (empty: it can).

    The admission rule that R obeys: a micro-batch-1 recipe, i.e. target only (no draft) with a
    target micro-batch of one row per graph (``ub: 1``). OpenVINO GenAI has no micro-batch setting:
    its reference is the stateful single-sequence pipeline without a draft. A server arm must not override that
    with its own arguments (``-ub``, ``-b``, ``-np``, a draft model)."""
    problems = []
    if arm.speculative:
        problems.append("it speculates (mode spec): a reference runs the target alone")
    if arm.openvino is not None:  # the engine has no micro-batch setting: its single-sequence pipeline
        if arm.openvino.pipeline != "stateful":
            problems.append(f"its pipeline is {arm.openvino.pipeline}: an OpenVINO reference runs the stateful one")
        return problems
    if arm.ub != 1:
        problems.append(f"its micro-batch is {arm.ub} rows (ub {arm.ub}): a reference runs ub 1")
    if arm.server is not None:
        bad = {"-ub", "--ubatch-size", "-b", "--batch-size", "-np", "--parallel", "-md", "--model-draft"}
        given = [a for a in arm.server.args if a.split("=", 1)[0] in bad]
        if given:
            problems.append(
                f"server.args set {', '.join(given)}: refspec starts a reference with -ub 1 -np 1 (and -b 1 where accepted)"
            )
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
