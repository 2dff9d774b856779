"""The pinned native build: cache key, no-op rebuild, patch application."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from refspec.core.config import load_config
from refspec.core.errors import BuildError, UsageError
from refspec.core.hashing import file_digest
from refspec.core.paths import REPO_ROOT
from refspec.native import build as native
from refspec.native import cmake, sdist, tools
from refspec.pipeline import provenance_inputs
from support import upstream_suite
from support.other_server import OLD_SERVER_SDIST


@pytest.fixture(scope="module")
def build():
    return native.current()


def test_second_build_is_a_no_op(build):
    libs = sorted(p for p in build.lib_dir.iterdir() if p.is_file() and not p.is_symlink())
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in libs}
    again = native.build(native.BuildOptions(), quiet=True)
    assert again.built is False
    assert again.key == build.key and again.lib_dir == build.lib_dir
    after = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in libs}
    assert after == before
    # the record names every library with the hash of the file on disk, and no upstream tool
    files = again.record["files"]
    assert not set(files) & set(tools.UPSTREAM_TOOLS)
    for name in ("libllama.so", "libggml-base.so", "libggml-cpu.so"):
        match = [n for n in files if n == name or n.startswith(name + ".")]
        assert match, f"{name} not recorded"
        for n in match:
            assert file_digest(build.lib_dir / n) == files[n]
    assert again.record["sdist"]["sha256"] == sdist.SDIST_SHA256
    assert [p["name"] for p in again.record["patches"]] == [p.name for p in native.patch_files()]


def test_upstream_tool_is_built_on_first_use_in_the_same_tree(build):
    """llama-speculative-simple is compiled into the build's own tree on first use, recorded in
    TOOLS.json with its digest, and leaves the recorded libraries as they were."""
    import json

    libs = {n: file_digest(build.lib_dir / n) for n in build.record["files"]}
    exe = build.tool("llama-speculative-simple")
    assert exe == build.lib_dir / "llama-speculative-simple" and exe.is_file()
    recorded = json.loads((build.root / tools.TOOLS_RECORD).read_text())
    assert recorded["llama-speculative-simple"] == file_digest(exe)
    assert {n: file_digest(build.lib_dir / n) for n in build.record["files"]} == libs
    mtime = exe.stat().st_mtime_ns
    assert build.tool("llama-speculative-simple") == exe and exe.stat().st_mtime_ns == mtime  # once
    with pytest.raises(BuildError, match="no program 'llama-cli'"):
        build.tool("llama-cli")


def test_native_tools_are_recorded(build):
    """refspec-replay and refspec-opreplay (native/tools) are programs of the build, each recorded in
    BUILD.json with the tools' key and its digest; a result the build did not make has neither."""
    key = tools.replay_tool_key(build)
    for name, field in tools.NATIVE_TOOLS.items():
        exe = build.tool(name)
        assert exe.is_file() and exe.parent == build.tool(tools.REPLAY_TOOL).parent
        assert build.record[field] == {"name": name, "key": key, **file_digest(exe)}
        bare = native.BuildResult(key=build.key, root=build.root, lib_dir=build.lib_dir, record=build.record)
        with pytest.raises(BuildError, match=f"{name} is built by build"):
            bare.tool(name)
    assert set(tools.NATIVE_TOOLS) == {"refspec-replay", "refspec-opreplay"}


def test_manifest_lists_the_native_tools(build, tmp_path):
    """refspec artifacts lists both native tools from the run's BUILD.json for the manifest, and
    refuses a record that does not name one (written before the tool was recorded)."""
    import json

    record = tmp_path / "BUILD.json"
    record.write_text(json.dumps(build.record))
    items = provenance_inputs.artifacts(load_config(REPO_ROOT / "config" / "config.yaml"), record, [])
    listed = {i["name"]: i["path"] for i in items if i["role"] == "tool"}
    assert listed == {name: str(build.tool(name)) for name in tools.NATIVE_TOOLS}
    record.write_text(json.dumps({k: v for k, v in build.record.items() if k != "opreplay_tool"}))
    with pytest.raises(UsageError, match="does not record refspec-opreplay"):
        provenance_inputs.artifacts(load_config(REPO_ROOT / "config" / "config.yaml"), record, [])


def test_record_mismatch_is_detected(build, tmp_path):
    fake = native.BuildResult(
        key=build.key,
        root=build.root,
        lib_dir=build.lib_dir,
        record={"files": {"libllama.so": {"sha256": "0" * 64, "size": 1}}},
    )
    assert cmake.check_record(fake) == ["libllama.so: sha256/size differs from BUILD.json"]


def test_key_depends_on_options_and_patches(tmp_path, monkeypatch):
    cpu = native.build_key(native.BuildOptions())
    cuda = native.build_key(native.BuildOptions(backend="cuda", cuda_arch="90"))
    assert cpu != cuda
    assert "-DGGML_CUDA=ON" in native.BuildOptions(backend="cuda").cmake_flags()
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in native.BuildOptions(backend="cuda").cmake_flags()
    assert not any("CUDA" in f for f in native.BuildOptions().cmake_flags())
    # a changed patch changes the key
    patches = tmp_path / "patches"
    shutil.copytree(native.PATCH_DIR, patches)
    monkeypatch.setattr(native, "PATCH_DIR", patches)
    assert native.build_key(native.BuildOptions()) == cpu
    p = sorted(patches.glob("*.patch"))[0]
    p.write_text(p.read_text() + "\n")
    assert native.build_key(native.BuildOptions()) != cpu
    with pytest.raises(BuildError, match="unknown native backend"):
        native.BuildOptions(backend="metal").cmake_flags()


def test_patch_that_does_not_apply_is_an_error(build, tmp_path):
    tree = tmp_path / "llama.cpp"
    (tree / "include").mkdir(parents=True)
    # a pristine header: the shipped patch applies to it
    pristine = subprocess.run(
        [
            "git",
            "apply",
            "-R",
            "--include=include/llama.h",
            "--directory=.",
            "-p1",
            "--check",
            str(native.patch_files()[0]),
        ],
        cwd=build.src_dir,
        capture_output=True,
    )
    assert pristine.returncode == 0, "the shipped patch must be applied in the build tree"
    shutil.copyfile(build.src_dir / "include" / "llama.h", tree / "include" / "llama.h")
    bad = tmp_path / "0001-bad.patch"
    bad.write_text(
        "--- a/include/llama.h\n+++ b/include/llama.h\n@@ -1,3 +1,3 @@\n"
        "-this line is not in the file\n+replacement\n context\n context\n"
    )
    with pytest.raises(BuildError, match="does not apply"):
        native.apply_patches(tree, [bad])
    # and the tree was left untouched by the failed check
    assert (tree / "include" / "llama.h").read_bytes() == (build.src_dir / "include" / "llama.h").read_bytes()


@pytest.mark.cuda
def test_cuda_build_when_available():
    if shutil.which("nvcc") is None or shutil.which("nvidia-smi") is None:
        pytest.skip("hardware: no CUDA device (and toolkit) on this machine: the CUDA build runs on GPU hosts only")
    res = native.build(native.BuildOptions(backend="cuda"), quiet=True)
    assert any(n.startswith("libggml-cuda") for n in res.record["files"])


def test_one_build_key_for_the_libraries_the_server_and_the_tests():
    """build_key serves the library build, the optional server and test builds (the tests' build
    kind: support.upstream_suite) and another release's server: the same digest layout, so each
    build keeps its cache folder."""
    from refspec.core.hashing import sha256_file, sha256_json

    opts = native.BuildOptions()
    patches = [{"name": p.name, "sha256": sha256_file(p)} for p in native.patch_files()]
    pinned = {"name": sdist.SDIST_NAME, "version": sdist.SDIST_VERSION, "sha256": sdist.SDIST_SHA256}
    base = {"sdist": pinned, "options": {"backend": "cpu", "cuda_arch": "90", "build_type": "Release"}}
    assert native.build_key(opts) == sha256_json(
        {**base, "patches": patches, "flags": opts.cmake_flags(), "targets": native.LIB_TARGETS}
    )
    srv = {**base, "flags": native.server_flags(opts), "targets": [native.SERVER_TARGET]}
    assert native.build_key(opts, "server", "patched") == sha256_json({**srv, "patches": patches, "variant": "patched"})
    assert native.build_key(opts, "server", "stock") == sha256_json({**srv, "patches": [], "variant": "stock"})
    tst = {
        **base,
        "flags": upstream_suite.tests_flags(opts),
        "targets": upstream_suite.TEST_TARGETS,
        "patches": [],
        "variant": "stock",
    }
    assert native.build_key(opts, upstream_suite.TESTS_BUILD, "stock") == sha256_json(tst)
    old = OLD_SERVER_SDIST
    other = {**srv, "sdist": {"name": old.name, "version": old.version, "sha256": old.sha256}}
    assert native.build_key(opts, "server", "stock", pin=old) == sha256_json(
        {**other, "patches": [], "variant": "stock"}
    )
    with pytest.raises(BuildError, match="unknown llama-server variant 'x'"):
        native.build_key(opts, "server", "x")
