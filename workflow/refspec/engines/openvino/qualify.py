"""``refspec qualify openvino``: OpenVINO GenAI's continuous-batching pipeline and its speculative
decoding against the engine's own greedy reference, its stateful pipeline, on the same GGUF files
(``anc/openvino.md``; the engine's environment is created on first use).

``O_ref`` is the stateful greedy pipeline, ``O_cb`` the continuous-batching pipeline without a draft
(the control that separates that pipeline's geometry from speculation), ``O_spec`` the same with the
draft. The sealed archive's manifest adds the IR files every arm loaded (converted from the run's
pinned GGUF files) and the engine environment's distributions.
"""

from __future__ import annotations

from pathlib import Path

from ...core.engine_registry import QualifyOption, QualifyPreset, QualifySetup
from ...core.errors import IntegrityError
from ...provenance.manifest import Artifact
from .env import ensure_env, ensure_ir, verify_ir

OV_REFERENCE = "O_ref"
OV_BATCHED = "O_cb"
OV_SPEC = "O_spec"
OV_BATCHED_TOKENS = 256  # SchedulerConfig.max_num_batched_tokens, the engine's default


def openvino_arms(
    *, speculative: bool, k: int = 4, execution_mode: str = "performance", ready_timeout_s: float = 600.0
) -> dict:
    """The arms file of an OpenVINO GenAI qualification (``anc/openvino.md``): the engine's own greedy
    reference (the stateful pipeline), the same model in its continuous-batching pipeline (the control
    that separates that pipeline's geometry from speculation) and, with a draft, its speculative
    decoding (``k`` draft tokens a step); every arm in the CPU plugin's ``execution_mode``."""
    base = {"kind": "openvino", "layout": "mq", "mask": 0}
    mode = {"execution_mode": execution_mode, "ready_timeout_s": ready_timeout_s}
    cb = {"pipeline": "continuous_batching", **mode}
    arms = {
        OV_REFERENCE: {
            **base,
            "mode": "target",
            "ub": 1,
            "openvino": {"pipeline": "stateful", **mode},
            "description": "OpenVINO GenAI's stateful LLMPipeline, greedy, no draft: the engine's reference "
            "(the whole prompt in one inference, then one token a step; ub does not apply)",
        },
        OV_BATCHED: {
            **base,
            "mode": "target",
            "ub": OV_BATCHED_TOKENS,
            "openvino": cb,
            "description": f"the same model in the continuous-batching pipeline (paged KV cache, "
            f"{OV_BATCHED_TOKENS} tokens a step), greedy, no draft",
        },
    }
    if speculative:
        arms[OV_SPEC] = {
            **base,
            "mode": "spec",
            "ub": OV_BATCHED_TOKENS,
            "k": k,
            "openvino": cb,
            "description": f"the continuous-batching pipeline with the draft model, {k} draft tokens a step",
        }
    return arms


def setup(o: dict) -> QualifySetup:
    """The three pipelines; the engine's environment is created here, before the campaign starts."""
    mode = o.get("execution_mode") or "performance"
    arms = openvino_arms(speculative=o.get("draft") is not None, k=o["k"], execution_mode=mode)
    version = ensure_env().version
    record = {"openvino": {"version": version, "execution_mode": mode}}
    return QualifySetup(arms, version, f"the stateful LLMPipeline, execution mode {mode}", "openvino-genai", record)


def pins(files, draft: str | None, s: QualifySetup, lib_dir: Path) -> tuple[list, dict, dict]:
    """The IR files the arms loaded (converted from the family's pinned GGUF ``files``, cached by their
    inputs' hashes) as model artifacts, and the engine environment's distributions."""
    env = ensure_env()
    models = {"target": files.target}
    if draft is not None:
        models["draft"] = files.draft(draft)
    arts = []
    for role, m in models.items():
        ir = ensure_ir(env, Path(m.path), m.sha256)
        bad = verify_ir(ir)
        if bad:
            raise IntegrityError("OpenVINO IR changed since its conversion: " + "; ".join(bad))
        arts += [Artifact(f"openvino-ir/{role}/{name}", "model", ir.folder / name) for name in sorted(ir.files)]
    return arts, {"openvino": env.site_packages()}, {"engine": "openvino-genai", "engine_version": s.version}


PRESET = QualifyPreset(
    command="openvino",
    help="OpenVINO GenAI's batched and speculative pipelines against its own stateful greedy pipeline "
    "(exit 0 every candidate reproduces it, 1 one does not, 5 a request or process failed)",
    reference=OV_REFERENCE,
    default_k=4,
    setup=setup,
    pins=pins,
    options=(
        QualifyOption(
            ("--execution-mode",),
            "the CPU plugin's EXECUTION_MODE_HINT for every arm (performance, its default: bf16 where the "
            "CPU has it; accuracy: f32)",
            default="performance",
            choices=("performance", "accuracy"),
        ),
    ),
)
