"""The engines are plugins: one folder each under refspec/engines/, one registry
(refspec/core/engine_registry.py) that the rest of the house reads. An engine is named nowhere else
in the package: no module outside its folder and the registry imports its folder, writes its kind
as a string, or names it (for the engines whose names are words of their own)."""

from __future__ import annotations

import ast
import re

import pytest

from refspec.core import engine_registry as reg
from refspec.core.arms import Arm
from refspec.core.errors import ConfigError
from support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "workflow" / "refspec"
REGISTRY = PACKAGE / "core" / "engine_registry.py"
# words that name one engine and nothing else in the package, and whose kind is checked as a string
# literal too (llama-server's kind, "server", is also the server interface's word, and "worker" the
# house's own: for those two, imports of their folders only)
NAMES = {"openvino": re.compile(r"openvino", re.I), "llama_cpp_python": re.compile(r"LlamaPromptLookup|L_pld")}


def _modules():
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts]


def _outside(e: reg.Engine):
    folder = PACKAGE / "engines" / e.folder
    return [p for p in _modules() if p != REGISTRY and folder not in p.parents]


def test_every_folder_declares_its_engine_and_the_registry_lists_every_folder():
    folders = sorted(p.name for p in (PACKAGE / "engines").iterdir() if (p / "__init__.py").is_file())
    assert sorted(reg.PLUGINS) == folders
    es = reg.engines()
    assert [e.folder for e in es.values()] == list(reg.PLUGINS)
    assert set(es) == {"worker", "server", "openvino", "llama_cpp_python"}
    for e in es.values():  # every launcher and preset the registry names exists
        assert callable(e.load(e.start))
        if e.qualify:
            assert isinstance(e.load(e.qualify), reg.QualifyPreset)
    assert set(reg.qualify_presets()) == {"server", "openvino", "llama-cpp-python"}


@pytest.mark.parametrize("kind", ["worker", "server", "openvino", "llama_cpp_python"])
def test_no_module_outside_an_engines_folder_and_the_registry_names_it(kind):
    e = reg.engine(kind)
    found = []
    for p in _outside(e):
        text = p.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rel = p.relative_to(PACKAGE).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and f"engines.{e.folder}" in f"{node.module}.":
                found.append(f"{rel}:{node.lineno}: imports {node.module}")
            elif isinstance(node, ast.Import):
                found += [
                    f"{rel}:{node.lineno}: imports {a.name}" for a in node.names if f"engines.{e.folder}" in a.name
                ]
            elif kind in NAMES and isinstance(node, ast.Constant) and node.value == kind:
                # a docstring is prose; a literal equal to the kind is code that branches on the engine
                found.append(f"{rel}:{node.lineno}: the literal {kind!r}")
        if kind in NAMES:
            found += [f"{rel}: names it ({m.group(0)!r})" for m in NAMES[kind].finditer(text)][:1]
    # the house's own launcher runs the worker's module by name; the engines' common layer names none
    allowed = {"commands/worker.py", "campaigns/pilot.py"} if kind == "worker" else set()
    found = [f for f in found if f.split(":")[0] not in allowed]
    assert not found, "\n".join(found)


def test_a_kind_the_registry_lacks_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match="kind 'vllm' is not one of worker, server, openvino, llama_cpp_python"):
        Arm.of("V", {"mode": "target", "layout": "mq", "ub": 1, "mask": 0, "kind": "vllm"})
    with pytest.raises(ConfigError, match="openvino settings need kind: openvino"):
        Arm.of("V", {"mode": "target", "layout": "mq", "ub": 1, "mask": 0, "openvino": {"pipeline": "stateful"}})
    with pytest.raises(ConfigError, match="takes no engine settings"):
        Arm(name="V", mode="target", layout="mq", ub=1, mask=0, kind="llama_cpp_python", settings={"x": 1})


def test_an_arm_record_keeps_its_engines_settings_under_the_engines_key():
    s = Arm.of("S", {"mode": "target", "layout": "qb", "ub": 4, "mask": 15, "kind": "server",
                     "server": {"build": "patched", "attn_layout": "qb"}})  # fmt: skip
    rec = s.record()
    assert rec["kind"] == "server" and rec["server"] == {
        "build": "patched",
        "attn_layout": "qb",
        "ready_timeout_s": 120.0,
    }
    assert "settings" not in rec
    r = Arm.of("R", {"mode": "target", "layout": "mq", "ub": 1, "mask": 0}).record()
    assert "kind" not in r and "settings" not in r  # refspec's own arms keep their record as it always was
    lcp = Arm.of("L", {"mode": "spec", "layout": "mq", "ub": 512, "mask": 0, "kind": "llama_cpp_python"}).record()
    assert lcp["kind"] == "llama_cpp_python" and "settings" not in lcp


def test_an_engine_without_a_micro_batch_setting_states_its_own_reference_rule():
    from refspec.core.arms import reference_problems

    ov = Arm.of("O", {"mode": "target", "layout": "mq", "ub": 256, "mask": 0, "kind": "openvino",
                      "openvino": {"pipeline": "stateful"}})  # fmt: skip
    assert reference_problems(ov) == []  # ub is not a micro-batch there
    lcp = Arm.of("L", {"mode": "target", "layout": "mq", "ub": 512, "mask": 0, "kind": "llama_cpp_python"})
    assert reference_problems(lcp) == ["its micro-batch is 512 rows (ub 512): a reference runs ub 1"]
