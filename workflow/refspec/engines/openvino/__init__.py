"""OpenVINO GenAI (``kind: openvino``, ``anc/openvino.md``): its stateful, continuous-batching and
speculative pipelines on the run's GGUF files, in an environment of its own created on first use.

``spec.py``: an arm's ``openvino:`` settings and their checks; ``env.py``: the engine's environment
and its IR conversions (``convert.py``, run by the engine's interpreter); ``program.py``: the
engine's process (its own interpreter); ``process.py``: the launcher; ``qualify.py``: ``refspec
qualify openvino``.
"""

from ...core.engine_registry import Engine
from .spec import OpenVINOSpec, check, reference_problems

ENGINE = Engine(
    kind="openvino",
    name="OpenVINO GenAI",
    folder="openvino",
    start=".process:start_openvino",
    settings_key="openvino",
    settings=OpenVINOSpec,
    check=check,
    reference_problems=reference_problems,
    micro_batch=False,
    qualify=".qualify:PRESET",
)
