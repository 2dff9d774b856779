"""``refspec qualify server --server-binary PATH`` (or ``--url URL --reference-url URL``): is a llama.cpp
server's batching and speculative decoding lossless against that same server's own greedy
micro-batch-1 output? ``refspec qualify openvino`` asks the same of OpenVINO GenAI
(:func:`openvino_arms`: ``O_ref`` its stateful greedy pipeline, ``O_cb`` its continuous-batching
pipeline without a draft, ``O_spec`` the same with the draft).

A preset of the confirmation campaign (:mod:`refspec.campaigns.arm_qualification`) with server arms only
(``anc/servers.md``), written to ``DIR/qualify-arms.yaml`` and run by the campaign engine:

| arm | what runs |
| --- | --- |
| ``S_ref`` (the reference) | the binary with ``-ub 1 -np 1`` (``-b 1`` where accepted), no draft (or the server at ``--reference-url``) |
| ``S_ub512`` | the same binary and model at llama.cpp's default micro-batch, ``-ub 512`` (or the server at ``--url``) |
| ``S_spec`` | the same, with the draft model (``--draft``), k proposals per cycle |

Every candidate is qualified against ``S_ref``, not against refspec's own R: a server of another
llama.cpp version has other kernels, so only its own micro-batch-1 output says whether batching or
speculation changed its tokens. ``--model`` is a GGUF file (pinned by its sha256 for this run in
``DIR/qualify-families.yaml``) or a family of the config's families file.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..core.errors import UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_file

REFERENCE = "S_ref"
PLAIN = "S_ub512"
SPEC = "S_spec"
# OpenVINO GenAI (refspec qualify openvino, anc/openvino.md)
OV_REFERENCE = "O_ref"
OV_BATCHED = "O_cb"
OV_SPEC = "O_spec"
OV_BATCHED_TOKENS = 256  # SchedulerConfig.max_num_batched_tokens, the engine's default
ARMS_FILE = "qualify-arms.yaml"
FAMILIES_FILE = "qualify-families.yaml"
DEFAULT_PANEL = "humaneval:0-11"
DEFAULT_CAP = 128


def server_arms(
    *,
    binary: str | None,
    url: str | None,
    reference_url: str | None,
    speculative: bool,
    k: int = 3,
    ready_timeout_s: float = 300.0,
) -> dict:
    """The arms file of a server qualification (``arms:`` mapping, validated by the arms schema)."""
    if (binary is None) == (url is None):
        raise UsageError("name exactly one of --server-binary PATH and --url URL")
    if url is not None and reference_url is None:
        raise UsageError("--url needs --reference-url: a server you start with -ub 1 -b 1 -np 1 and no draft")
    if binary is not None and reference_url is not None:
        raise UsageError("--reference-url goes with --url; with --server-binary refspec starts the reference")
    if binary is not None:
        p = Path(binary).expanduser()
        if not p.is_file():
            raise UsageError(f"--server-binary {binary}: no such file")
        where = {"binary": str(p.resolve())}
        ref_where, plain_where = where, where
    else:
        ref_where, plain_where = {"url": reference_url}, {"url": url}
    base = {"kind": "server", "layout": "mq", "mask": 0}
    arms = {
        REFERENCE: {
            **base,
            "mode": "target",
            "ub": 1,
            "server": {**ref_where, "ready_timeout_s": ready_timeout_s},
            "description": "the server's own reference: micro-batch 1 (-ub 1), one slot, no draft",
        },
        PLAIN: {
            **base,
            "mode": "spec" if (url is not None and speculative) else "target",
            "ub": 512,
            "k": k,
            "server": {**plain_where, "ready_timeout_s": ready_timeout_s},
            "description": "the same server at -ub 512" if binary else "the server at --url",
        },
    }
    if binary is not None and speculative:
        arms[SPEC] = {
            **base,
            "mode": "spec",
            "ub": 512,
            "k": k,
            "server": {**where, "ready_timeout_s": ready_timeout_s},
            "description": "the same server at -ub 512 with the draft model",
        }
    return arms


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


def write_arms(root: Path, arms: dict) -> Path:
    path = root / ARMS_FILE
    text = "# refspec qualify: the arms (anc/servers.md, anc/openvino.md)\n" + yaml.safe_dump(
        {"arms": arms}, sort_keys=False
    )
    atomic_write_text(path, text, mode=0o644)
    return path


def model_family(root: Path, model: str, draft: str | None) -> tuple[dict, str, str | None]:
    """(config entries, family, draft name) for ``--model``: a GGUF file, pinned by its sha256 in
    ``DIR/qualify-families.yaml`` with the draft beside it (both linked into ``DIR/models``), or the
    name of a family of the config's families file (``--draft`` then names one of its drafts)."""
    p = Path(model).expanduser()
    if not p.is_file():
        if "/" in model or model.endswith(".gguf"):
            raise UsageError(f"--model {model}: no such file")
        return {}, model, draft
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)

    def link(src: Path) -> dict:
        dst = models / src.name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        dst.symlink_to(src.resolve())
        return {"file": src.name, "sha256": sha256_file(src)}

    target = link(p)
    drafts = {}
    name = None
    if draft is not None:
        d = Path(draft).expanduser()
        if not d.is_file():
            raise UsageError(f"--draft {draft}: no such file")
        if d.name == p.name:
            raise UsageError("--draft is the target file itself")
        name = "draft"
        drafts[name] = link(d)
    else:  # the file format lists a draft; no arm speculates, so it is never loaded
        drafts["none"] = dict(target)
    family = "qualify-" + p.stem.lower().replace(" ", "-")
    doc = {
        "families": {
            family: {
                "description": f"refspec qualify: {p.name}" + (f" with draft {Path(draft).name}" if draft else ""),
                "target": target,
                "drafts": drafts,
                "default_draft": name or "none",
                "chat_template": "model",
                "stop": "eog",
            }
        }
    }
    path = root / FAMILIES_FILE
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False), mode=0o644)
    return {"families_file": str(path), "models_dir": str(models)}, family, name
