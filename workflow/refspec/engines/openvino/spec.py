"""An OpenVINO GenAI arm's settings (``openvino:`` in its record) and the checks of its recipe."""

from __future__ import annotations

from dataclasses import asdict, dataclass

PIPELINES = ("stateful", "continuous_batching")
EXECUTION_MODES = ("performance", "accuracy")


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


def check(arm) -> list[str]:
    """The problems of an OpenVINO arm's recipe: a known pipeline and execution mode; speculation
    only in the continuous-batching pipeline."""
    o = arm.settings
    if o is None:
        return ["an openvino arm names its openvino.pipeline"]
    if o.pipeline not in PIPELINES:
        return [f"openvino.pipeline {o.pipeline!r} is not one of {', '.join(PIPELINES)}"]
    if o.execution_mode not in EXECUTION_MODES:
        return [f"openvino.execution_mode {o.execution_mode!r} is not performance or accuracy"]
    if arm.speculative and o.pipeline != "continuous_batching":
        return ["OpenVINO GenAI speculates in the continuous_batching pipeline"]
    return []


def reference_problems(arm) -> list[str]:
    """The engine has no micro-batch setting: its reference is the stateful single-sequence pipeline
    (replaces the house's ``ub 1`` rule)."""
    if arm.settings.pipeline != "stateful":
        return [f"its pipeline is {arm.settings.pipeline}: an OpenVINO reference runs the stateful one"]
    return []
