"""``refspec qualify llama-cpp-python``: does llama-cpp-python's own speculative decoding,
``Llama(..., draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k))``, reproduce the same
``Llama`` decoding greedily without a draft, token for token? And does the repair reach it?

Every arm is a fresh process of the pinned package, unmodified, on the project's patched
llama.cpp build (:mod:`refspec.engines.llama_cpp_python.process`), on the prompt token IDs of the
pinned tokenizer; the campaign is the confirmation preset (:mod:`refspec.campaigns.arm_qualification`):

| arm | what runs |
| --- | --- |
| ``L_ref`` (the reference) | ``Llama`` greedy, no draft, ``n_ubatch`` 1: the engine's own micro-batch-1 reference |
| ``L_ub512`` | the same at the library's default ``n_ubatch`` 512, no draft |
| ``L_pld`` | the same with prompt-lookup speculation (``k`` tokens drafted, verified in one multi-row batch) |
| ``L_qb`` | ``L_ub512``'s decoding with the repair set from outside: ``LLAMA_ATTN_LAYOUT=qb:15``, ``n_ubatch`` 4 |
| ``L_pld_qb`` | ``L_pld`` with the same repair |
| ``R`` | refspec's own reference (its worker, micro-batch 1), on the same token IDs |

The repaired arms run at ``n_ubatch`` 4: the query-to-batch layout admits micro-batches up to the
size its guard allows, and llama.cpp refuses a context at the library's default of 512 with it.
``R`` is a candidate like the others: it reproduces ``L_ref`` when the library's greedy reference is
refspec's reference on the same native code. The unrepaired ``L_ub512`` and ``L_pld`` are the
controls whose divergence makes the qualification non-vacuous.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from ...core.engine_registry import QualifyPreset, QualifySetup
from ...provenance.manifest import Artifact

REFERENCE = "L_ref"
DISTRIBUTION = "llama_cpp_python"
REPAIR = {"layout": "qb", "mask": 15, "ub": 4}  # LLAMA_ATTN_LAYOUT=qb:15, n_ubatch 4


def arms(k: int = 4) -> dict:
    """The arms file of the qualification (``arms:`` mapping, validated by the arms schema)."""
    base = {"kind": "llama_cpp_python", "layout": "mq", "mask": 0}
    lookup = f"prompt-lookup speculation (LlamaPromptLookupDecoding, num_pred_tokens={k})"
    return {
        REFERENCE: {
            **base,
            "mode": "target",
            "ub": 1,
            "description": "llama-cpp-python's Llama, greedy, no draft, n_ubatch 1: the engine's own reference",
        },
        "L_ub512": {
            **base,
            "mode": "target",
            "ub": 512,
            "description": "the same Llama at the library's default n_ubatch 512, no draft",
        },
        "L_pld": {**base, "mode": "spec", "ub": 512, "k": k, "description": f"the same with {lookup}"},
        "L_qb": {
            **base,
            "mode": "target",
            **REPAIR,
            "description": "L_ub512 with the repair set from outside: LLAMA_ATTN_LAYOUT=qb:15, n_ubatch 4",
        },
        "L_pld_qb": {
            **base,
            "mode": "spec",
            **REPAIR,
            "k": k,
            "description": f"{lookup}, with LLAMA_ATTN_LAYOUT=qb:15, n_ubatch 4",
        },
        "R": {
            "mode": "target",
            "layout": "mq",
            "ub": 1,
            "mask": 0,
            "description": "refspec's reference R (its worker, physical micro-batch 1) on the same token IDs",
        },
    }


def setup(o: dict) -> QualifySetup:
    """The arms (the draft is prompt lookup: no draft model file is needed)."""
    version = importlib.metadata.version(DISTRIBUTION)
    record = {"llama_cpp_python": {"version": version, "k": o["k"]}}
    return QualifySetup(arms(o["k"]), version, "Llama greedy, n_ubatch 1", "llama-cpp-python", record)


def pins(files, draft: str | None, s: QualifySetup, lib_dir: Path) -> tuple[list, dict, dict]:
    """The package's Python files and the native libraries it loaded (the project's patched build)."""
    dist = importlib.metadata.distribution(DISTRIBUTION)
    pkg = Path(dist.locate_file("llama_cpp"))
    arts = [
        Artifact(f"llama-cpp-python/{p.relative_to(pkg.parent).as_posix()}", "library", p)
        for p in sorted(pkg.rglob("*.py"))
        if "__pycache__" not in p.parts
    ]
    arts += [
        Artifact(f"llama-cpp-python-native/{p.name}", "library", p)
        for p in sorted(Path(lib_dir).iterdir())
        if p.is_file()
    ]
    return arts, {}, {"engine": "llama-cpp-python", "engine_version": s.version}


PRESET = QualifyPreset(
    command="llama-cpp-python",
    help="llama-cpp-python's prompt-lookup speculation and default micro-batch against its own greedy "
    "micro-batch-1 Llama, with and without the repair, and refspec's R (exit 0 every candidate reproduces it, "
    "1 one does not, 5 a request or process failed)",
    reference=REFERENCE,
    default_k=4,
    setup=setup,
    pins=pins,
)
