"""llama-cpp-python (``kind: llama_cpp_python``): the pinned package's ``Llama``, greedy, and its own
speculative decoding, ``LlamaPromptLookupDecoding``, on the project's patched llama.cpp build.

``program.py``: the engine's process (refspec's interpreter, the package unmodified);
``process.py``: the launcher (an arm's ``ub`` is ``n_ubatch``, ``mode: spec`` drafts ``k`` tokens by
prompt lookup, a layout is set from outside as ``LLAMA_ATTN_LAYOUT``); ``qualify.py``: ``refspec
qualify llama-cpp-python``.
"""

from ...core.engine_registry import Engine

ENGINE = Engine(
    kind="llama_cpp_python",
    name="llama-cpp-python",
    folder="llama_cpp_python",
    start=".process:start",
    qualify=".qualify:PRESET",
)
