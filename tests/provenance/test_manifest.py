"""The source manifest and the freeze check."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import stat
from pathlib import Path

import pytest

from refspec.cli import main
from refspec.commands.manifest import parse_artifact_flag
from refspec.core.config import read_config_file
from refspec.core.errors import UsageError
from refspec.core.hashing import sha256_file, sha256_json
from refspec.provenance import host
from refspec.provenance import manifest as M


@pytest.fixture
def arts(tmp_path):
    d = tmp_path / "inputs"
    d.mkdir()
    files = {
        ("sdist", "llama_cpp_python-0.3.36.tar.gz"): b"sdist bytes",
        ("patch", "0001-qb-layout.patch"): b"--- a\n+++ b\n",
        ("library", "libllama.so"): b"\x7fELF lib",
        ("tool", "llama-quantize"): b"\x7fELF tool",
        ("model", "smollm2-135m/target.Q8_0.gguf"): b"GGUF" + bytes(100),
        ("panel", "humaneval-probe"): b'{"task": "HumanEval/0"}\n',
    }
    out = []
    for (role, name), data in files.items():
        p = d / name.replace("/", "_")
        p.write_bytes(data)
        out.append(M.Artifact(name, role, p))
    return out


CONFIG = {"family": "smollm2-135m", "k": 3, "caps": [64, 128], "panel": {"role": "probe"}}


def _deps(m):
    return {d["name"]: d for d in m["buildDefinition"]["resolvedDependencies"]}


def test_manifest_pins_every_artifact(arts, tmp_path):
    m = M.build_manifest(arts, CONFIG, include_host=False)
    deps = _deps(m)
    for a in arts:
        d = deps[f"{a.role}:{a.name}"]
        assert d["digest"]["sha256"] == sha256_file(a.path)
        assert d["annotations"] == {"role": a.role, "size": a.path.stat().st_size}
        assert d["uri"] == a.path.resolve().as_uri()
    ext = m["buildDefinition"]["externalParameters"]
    assert ext["config"] == CONFIG and ext["config_sha256"] == sha256_json(CONFIG)
    assert m["_type"] == M.MANIFEST_TYPE
    assert m["runDetails"]["metadata"]["created"].endswith("Z")
    json.dumps(m, allow_nan=False)  # strict JSON


def test_manifest_pins_interpreter_and_every_distribution(arts):
    m = M.build_manifest([], {}, include_host=False, include_source=False)
    deps = _deps(m)
    interp = deps["interpreter:" + __import__("sys").implementation.name]
    assert interp["digest"]["sha256"] == sha256_file(os.path.realpath(__import__("sys").executable))
    dists = {k: v for k, v in deps.items() if k.startswith("pkg:pypi/")}
    for name in ("pyarrow", "cryptography", "pytest", "hypothesis"):
        d = dists[f"pkg:pypi/{name}"]
        dist = md.distribution(name)
        assert d["annotations"]["version"] == dist.version
        assert d["uri"] == f"pkg:pypi/{name}@{dist.version}"
        if d["annotations"]["digest_of"] == "RECORD":
            record = Path(dist._path) / "RECORD"  # type: ignore[attr-defined]
            assert d["digest"]["sha256"] == sha256_file(record)
            assert d["annotations"]["size"] == record.stat().st_size
    assert len(dists) >= 20


def test_host_facts_shape():
    h = host.host_facts(gpu=False)
    assert h["cpu"]["logical_cores"] == os.cpu_count()
    assert h["cpu"]["model"]
    assert isinstance(h["memory_bytes"], int) and h["memory_bytes"] > 0
    assert h["os"]["system"] and h["os"]["machine"]
    assert h["gpu"] == {"query": "skipped", "devices": []}


def test_gpu_facts_without_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert host.gpu_facts() == {"query": "absent", "devices": []}


def test_gpu_facts_parse_nvidia_smi(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA H200, 570.86.15, 143771, GPU-1234, 9.0'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    g = host.gpu_facts()
    assert g["query"] == "ok"
    assert g["devices"] == [
        {
            "name": "NVIDIA H200",
            "driver_version": "570.86.15",
            "memory_mib": 143771,
            "uuid": "GPU-1234",
            "compute_capability": "9.0",
        }
    ]
    fake.write_text("#!/bin/sh\nexit 9\n")
    assert host.gpu_facts() == {"query": "error", "devices": []}


def test_artifact_roles_and_duplicates(tmp_path):
    with pytest.raises(UsageError, match="role"):
        M.Artifact("x", "weights", tmp_path / "x")
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(UsageError, match="duplicate"):
        M.build_manifest([M.Artifact("a", "model", f), M.Artifact("a", "model", f)], {}, include_host=False)


def test_listing_formats(tmp_path, arts):
    listing = [{"role": a.role, "name": a.name, "path": os.path.relpath(a.path, tmp_path)} for a in arts]
    (tmp_path / "a.json").write_text(json.dumps({"artifacts": listing}))
    import yaml

    (tmp_path / "a.yaml").write_text(yaml.safe_dump(listing))
    assert M.load_listing(tmp_path / "a.json") == arts
    assert M.load_listing(tmp_path / "a.yaml") == arts
    assert parse_artifact_flag("model=target=/x=y.gguf") == M.Artifact("target", "model", Path("/x=y.gguf"))
    with pytest.raises(UsageError):
        parse_artifact_flag("model=/x")


# --------------------------------------------------------------------------- freeze check


def _stored(arts, tmp_path, **kw):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("family: smollm2-135m\nk: 3\n")
    m = M.build_manifest(arts, read_config_file(cfg), config_path=cfg, include_gpu=False, **kw)
    M.write_manifest(m, tmp_path / "manifest.json")
    return m, cfg


def test_freeze_check_passes_when_nothing_changed(arts, tmp_path):
    stored, cfg = _stored(arts, tmp_path)
    current = M.freeze_check(tmp_path / "manifest.json")
    assert current["runDetails"]["metadata"]["created"]  # recomputed
    assert M.diff_manifests(stored, current) == []


def test_freeze_check_lists_every_difference(arts, tmp_path):
    _stored(arts, tmp_path)
    by_role = {a.role: a for a in arts}
    by_role["model"].path.write_bytes(b"GGUF changed")
    by_role["patch"].path.write_bytes(b"--- a\n+++ b\n+x\n")
    with pytest.raises(M.FreezeCheckError) as e:
        M.freeze_check(tmp_path / "manifest.json", config={"family": "qwen3-8b", "k": 3})
    diffs = e.value.differences
    text = "\n".join(diffs)
    assert "resolvedDependencies[model:smollm2-135m/target.Q8_0.gguf].digest.sha256" in text
    assert "resolvedDependencies[model:smollm2-135m/target.Q8_0.gguf].annotations.size" in text
    assert "resolvedDependencies[patch:0001-qb-layout.patch].digest.sha256" in text
    assert 'config.family: "smollm2-135m" -> "qwen3-8b"' in text
    assert "config_sha256" in text
    assert e.value.exit_code == 1


def test_freeze_check_sees_added_removed_and_missing_artifacts(arts, tmp_path):
    _stored(arts, tmp_path)
    extra = tmp_path / "draft.gguf"
    extra.write_bytes(b"GGUF draft")
    new = [a for a in arts if a.role != "tool"] + [M.Artifact("draft", "model", extra)]
    with pytest.raises(M.FreezeCheckError) as e:
        M.freeze_check(tmp_path / "manifest.json", artifacts=new)
    text = "\n".join(e.value.differences)
    assert "removed buildDefinition.resolvedDependencies[tool:llama-quantize]" in text
    assert "added buildDefinition.resolvedDependencies[model:draft]" in text
    next(a for a in arts if a.role == "library").path.unlink()
    with pytest.raises(M.FreezeCheckError, match="missing library:libllama.so"):
        M.freeze_check(tmp_path / "manifest.json")


def test_freeze_check_sees_environment_and_host_changes(arts, tmp_path):
    stored, _cfg = _stored(arts, tmp_path)
    deps = stored["buildDefinition"]["resolvedDependencies"]
    numpy = next(d for d in deps if d["name"] == "pkg:pypi/numpy")
    numpy["annotations"]["version"] = "0.0.1"
    stored["buildDefinition"]["internalParameters"]["host"]["cpu"]["logical_cores"] = 4096
    deps.append({"name": "pkg:pypi/gone", "digest": {"sha256": "0" * 64}, "annotations": {"role": "distribution"}})
    with pytest.raises(M.FreezeCheckError) as e:
        M.freeze_check(stored)
    text = "\n".join(e.value.differences)
    assert "resolvedDependencies[pkg:pypi/numpy].annotations.version" in text
    assert "host.cpu.logical_cores: 4096 ->" in text
    assert "removed buildDefinition.resolvedDependencies[pkg:pypi/gone]" in text


def test_freeze_check_ignores_only_run_metadata(arts, tmp_path):
    stored, _ = _stored(arts, tmp_path)
    stored["runDetails"]["metadata"] = {"created": "1999-01-01T00:00:00Z", "git_commit": "f" * 40}
    M.freeze_check(stored)
    stored["runDetails"]["builder"]["id"] = "https://example.org/other"
    with pytest.raises(M.FreezeCheckError, match="builder.id"):
        M.freeze_check(stored)


def test_freeze_check_sees_source_changes(arts, tmp_path):
    repo = tmp_path / "repo"
    (repo / "workflow" / "refspec").mkdir(parents=True)
    (repo / "workflow" / "refspec" / "engine.py").write_text("x = 1\n")
    (repo / "workflow" / "refspec" / "__pycache__").mkdir()
    (repo / "workflow" / "refspec" / "__pycache__" / "engine.pyc").write_bytes(b"ignored")
    m = M.build_manifest(arts, {}, repo_root=repo, include_host=False, include_environment=False)
    assert _deps(m)["source:refspec"]["annotations"]["files"] == 1
    M.freeze_check(m, repo_root=repo)
    (repo / "workflow" / "refspec" / "__pycache__" / "engine.pyc").write_bytes(b"still ignored")
    M.freeze_check(m, repo_root=repo)
    (repo / "workflow" / "refspec" / "engine.py").write_text("x = 2\n")
    with pytest.raises(M.FreezeCheckError, match=r"source:refspec\]\.digest\.sha256"):
        M.freeze_check(m, repo_root=repo)


def test_manifest_cli(arts, tmp_path, capsys):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("k: 3\n")
    flags = [x for a in arts for x in ("--artifact", f"{a.role}={a.name}={a.path}")]
    out = tmp_path / "m.json"
    assert main(["manifest", *flags, "--config", str(cfg), "-o", str(out), "--no-gpu"]) == 0
    assert "dependencies, sha256" in capsys.readouterr().out
    m = json.loads(out.read_text())
    assert len([d for d in m["buildDefinition"]["resolvedDependencies"] if d["annotations"]["role"] in M.ROLES]) == 6
    assert main(["manifest", "--check", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"OK: {out}")
    cfg.write_text("k: 4\n")
    arts[0].path.write_bytes(b"a different sdist")
    assert main(["manifest", "--check", str(out), "--config", str(cfg)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("DIFF: ") for line in lines)
    assert len(lines) == 5  # config value, config hash, config file hash, sdist sha256, sdist size
    assert main(["manifest", "--artifact", "bogus=x=y"]) == 2
