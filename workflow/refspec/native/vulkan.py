"""What a Vulkan build and run of the pinned llama.cpp need from the host.

A Vulkan build needs three things the machine may lack:

* the **runtime** from the distribution: the loader (``libvulkan1``), a driver (Mesa's
  ``mesa-vulkan-drivers``, whose lavapipe/llvmpipe is a conformant Vulkan device that runs on
  the CPU) and the shader compiler ``glslc``; ``vulkan-tools`` gives ``vulkaninfo``;
* **headers** new enough for the pinned ``ggml-vulkan.cpp`` (it uses ``VK_EXT_layer_settings``,
  in the public headers from 1.3.272). Debian 12 ships 1.3.239, so the pinned headers are
  Debian 13's ``libvulkan-dev`` and ``spirv-headers`` (:data:`HEADER_DEBS`, header-only,
  nothing links against them): downloaded by name with ``apt-get download`` through a
  private copy of the machine's own Debian source entry with the suite changed, checked
  against their sha256 pins and unpacked into the cache with ``dpkg-deb -x``. Nothing is
  installed into the system from them;
* at run time, **an explicit device**: ggml-vulkan skips a device whose type is CPU (lavapipe
  is one) unless ``GGML_VK_VISIBLE_DEVICES`` names it. refspec therefore always names the
  configured device (``native.vulkan_device``, default 0) in that variable
  (:func:`device_env`), so the device is chosen, never silently skipped; a run whose layers
  do not land on it is refused by the placement check (exit 5).

As root with apt the runtime packages are installed when missing; elsewhere
:func:`host_setup` fails with the list of what is missing (exit 4, a build error).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core.config import Config
from ..core.errors import BuildError, ConfigError
from ..core.hashing import sha256_file, sha256_json
from ..core.paths import cache_dir

# the distribution's packages a Vulkan build and run need (Debian names)
RUNTIME_PACKAGES = ("libvulkan1", "mesa-vulkan-drivers", "glslc", "vulkan-tools")
# header-only packages of a newer Debian release, pinned: (package, version, suite, file, sha256)
HEADER_SUITE = "trixie"
HEADER_DEBS = (
    (
        "libvulkan-dev",
        "1.4.309.0-1",
        "libvulkan-dev_1.4.309.0-1_amd64.deb",
        "8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a",
    ),
    (
        "spirv-headers",
        "1.6.1+1.4.309.0-1",
        "spirv-headers_1.6.1+1.4.309.0-1_all.deb",
        "dc18db866d63680351c40ac6b6bece34cb52da64a7799ce1cc4f16f6bff4d064",
    ),
)
LOADER_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libvulkan.so.1",
    "/usr/lib/aarch64-linux-gnu/libvulkan.so.1",
    "/usr/lib64/libvulkan.so.1",
    "/usr/lib/libvulkan.so.1",
)
DEVICE_VAR = "GGML_VK_VISIBLE_DEVICES"


def loader() -> Path | None:
    for c in LOADER_CANDIDATES:
        if Path(c).exists():
            return Path(c)
    return None


def missing_runtime() -> list[str]:
    """What of the Vulkan runtime is absent: the loader, glslc, a driver manifest (ICD)."""
    missing = []
    if loader() is None:
        missing.append("the Vulkan loader libvulkan.so.1 (Debian: libvulkan1)")
    if shutil.which("glslc") is None:
        missing.append("the shader compiler glslc (Debian: glslc)")
    icd_dirs = [Path("/usr/share/vulkan/icd.d"), Path("/etc/vulkan/icd.d")]
    if not any(d.is_dir() and any(d.glob("*.json")) for d in icd_dirs):
        missing.append("a Vulkan driver (no ICD manifest in /usr/share/vulkan/icd.d; Debian: mesa-vulkan-drivers)")
    return missing


def _can_apt() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None and shutil.which("dpkg-deb") is not None


def _apt_env() -> dict[str, str]:
    return dict(os.environ, DEBIAN_FRONTEND="noninteractive")


def unavailable() -> str | None:
    """Why this machine cannot build and run the Vulkan backend (None when it can, possibly
    after installing the runtime and fetching the pinned headers as root with apt)."""
    if _can_apt():
        return None
    missing = missing_runtime()
    if missing:
        return "missing " + "; ".join(missing) + " (and no root with apt-get to install them)"
    if not (cache_dir() / "vulkan-headers" / headers_key()[:16] / ".complete").is_file():
        return "the pinned Vulkan headers are not cached and this machine cannot fetch them (no root with apt-get)"
    return None


def ensure_runtime() -> None:
    """Install the runtime packages as root with apt when something is missing; else name it."""
    missing = missing_runtime()
    if not missing:
        return
    if not _can_apt():
        raise BuildError("backend vulkan: missing " + "; ".join(missing) + f" (install: {' '.join(RUNTIME_PACKAGES)})")
    subprocess.run(["apt-get", "update", "-qq"], env=_apt_env(), check=False, capture_output=True)
    r = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *RUNTIME_PACKAGES],
        env=_apt_env(),
        capture_output=True,
        text=True,
    )
    still = missing_runtime()
    if r.returncode != 0 or still:
        raise BuildError(
            f"backend vulkan: apt-get install {' '.join(RUNTIME_PACKAGES)} failed (exit {r.returncode}); "
            f"missing: {'; '.join(still) or 'nothing'}; {r.stderr.strip()[-600:]}"
        )


def debian_source_entry(text: str, suite: str) -> str | None:
    """The machine's Debian archive entry with its suites replaced by ``suite``.

    ``text`` is a deb822 ``.sources`` file or a one-line ``sources.list``; the entry chosen is
    the first whose components include ``main`` and whose suites have no ``-security`` (the
    archive itself, not the security mirror). Nothing but the suite is changed, so the
    registry is the one this machine is already set up for."""
    if "Types:" in text:
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(
                (m.group(1).lower(), m.group(2).strip())
                for m in re.finditer(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M)
            )
            suites = fields.get("suites", "").split()
            if "deb" in fields.get("types", "").split() and "main" in fields.get("components", "").split():
                if suites and not any(s.endswith("-security") for s in suites):
                    stanza = re.sub(r"^Suites:.*$", f"Suites: {suite}", stanza, flags=re.M)
                    stanza = re.sub(r"^Components:.*$", "Components: main", stanza, flags=re.M)
                    return stanza.strip() + "\n"
        return None
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) >= 4 and parts[0] == "deb" and "main" in parts[3:] and not parts[2].endswith("-security"):
            opts = [p for p in parts[1:] if p.startswith("[")]
            uri = next(p for p in parts[1:] if not p.startswith("["))
            return " ".join(["deb", *opts, uri, suite, "main"]) + "\n"
    return None


def _machine_sources() -> str:
    texts = []
    main = Path("/etc/apt/sources.list")
    if main.is_file():
        texts.append(main.read_text(errors="replace"))
    d = Path("/etc/apt/sources.list.d")
    if d.is_dir():
        for p in sorted(d.iterdir()):
            if p.suffix in (".sources", ".list") and p.is_file():
                texts.append(p.read_text(errors="replace"))
    return "\n\n".join(texts)


def headers_key() -> str:
    return sha256_json([list(d) for d in HEADER_DEBS])


def headers_dir() -> Path:
    """The pinned headers unpacked into the cache (fetched once): the folder holding ``usr/``."""
    dest = cache_dir() / "vulkan-headers" / headers_key()[:16]
    if (dest / ".complete").is_file():
        return dest
    if not _can_apt():
        raise BuildError(
            "backend vulkan: the pinned Vulkan headers "
            + ", ".join(f"{p} {v}" for p, v, _, _ in HEADER_DEBS)
            + f" are not in {dest} and this machine cannot fetch them (needs root with apt-get and dpkg-deb)"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".hdr-", dir=dest.parent))
    try:
        sources = _machine_sources()
        suffix = ".sources" if "Types:" in sources else ".list"
        entry = debian_source_entry(sources, HEADER_SUITE)
        if entry is None:
            raise BuildError("backend vulkan: no Debian archive entry in /etc/apt to derive the header source from")
        src = work / f"headers{suffix}"
        src.write_text(entry)
        (work / "lists" / "partial").mkdir(parents=True)
        opts = [
            "-o",
            f"Dir::Etc::sourcelist={src}",
            "-o",
            "Dir::Etc::sourceparts=-",
            "-o",
            f"Dir::State::Lists={work / 'lists'}",
            "-o",
            "APT::Get::List-Cleanup=0",
        ]
        r = subprocess.run(["apt-get", *opts, "update", "-qq"], capture_output=True, text=True, env=_apt_env())
        if r.returncode != 0:
            raise BuildError(f"backend vulkan: apt-get update for the header packages failed: {r.stderr[-600:]}")
        debs = work / "debs"
        debs.mkdir()
        want = [f"{p}={v}" for p, v, _, _ in HEADER_DEBS]
        r = subprocess.run(
            ["apt-get", *opts, "download", *want], cwd=debs, capture_output=True, text=True, env=_apt_env()
        )
        if r.returncode != 0:
            raise BuildError(f"backend vulkan: apt-get download {' '.join(want)} failed: {r.stderr[-600:]}")
        tree = work / "tree"
        for pkg, _version, fname, sha in HEADER_DEBS:
            deb = debs / fname
            if not deb.is_file():
                raise BuildError(f"backend vulkan: {fname} was not downloaded (got {sorted(os.listdir(debs))})")
            got = sha256_file(deb)
            if got != sha:
                raise BuildError(f"backend vulkan: {fname} sha256 {got} differs from the pin {sha}")
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
        (tree / ".complete").write_text(json.dumps([list(d) for d in HEADER_DEBS]) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tree, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def host_setup() -> tuple[list[str], dict]:
    """CMake flags of a Vulkan build on this host, and the facts they were derived from."""
    ensure_runtime()
    hdr = headers_dir()
    lib = loader()
    assert lib is not None  # ensure_runtime checked it
    flags = [
        f"-DVulkan_INCLUDE_DIR={hdr / 'usr' / 'include'}",
        f"-DCMAKE_PREFIX_PATH={hdr / 'usr'}",
        f"-DVulkan_LIBRARY={lib}",
    ]
    return flags, {"headers": header_facts(), "loader": str(lib), "glslc": glslc_version()}


def host_variant() -> dict:
    """What of the host changes a Vulkan build (its key), without fetching anything."""
    return {"headers": [{"package": p, "version": v, "sha256": s} for p, v, _, s in HEADER_DEBS]}


def header_facts() -> list[dict]:
    return [{"package": p, "version": v, "suite": HEADER_SUITE, "file": f, "sha256": s} for p, v, f, s in HEADER_DEBS]


def glslc_version() -> str | None:
    exe = shutil.which("glslc")
    if exe is None:
        return None
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    first = (r.stdout or r.stderr).strip().splitlines()
    return first[0] if first else None


def device_env(config: Config | None) -> dict[str, str]:
    """The environment that selects the configured Vulkan device (empty for other backends).

    ``GGML_VK_VISIBLE_DEVICES`` set by the caller wins only when it names the same device; a
    different value is a configuration error, so the device a run used is always the one its
    config (and so its manifest) names."""
    if config is None or config.native.backend != "vulkan":
        return {}
    want = str(config.native.vulkan_device)
    have = os.environ.get(DEVICE_VAR)
    if have is not None and have != want:
        raise ConfigError(f"{DEVICE_VAR}={have} in the environment, but the config's native.vulkan_device is {want}")
    return {DEVICE_VAR: want}


def process_device_env() -> dict[str, str]:
    """The device selection this process runs under, for the records of the processes it starts
    later from a record (the state crosses start from the partition's)."""
    return {k: os.environ[k] for k in (DEVICE_VAR,) if k in os.environ}


def select_device(config: Config | None) -> None:
    """Put :func:`device_env` into this process's environment (before ggml is loaded)."""
    os.environ.update(device_env(config))


def vulkaninfo(timeout: float = 30.0, env: dict | None = None) -> dict:
    """The devices ``vulkaninfo --summary`` lists (name, type, API and driver versions, driver)."""
    exe = shutil.which("vulkaninfo")
    out: dict = {"query": "vulkaninfo --summary", "devices": [], "loader": str(loader()) if loader() else None}
    if exe is None:
        out["query"] = "absent (vulkaninfo not installed; Debian: vulkan-tools)"
        return out
    try:
        r = subprocess.run([exe, "--summary"], capture_output=True, text=True, timeout=timeout, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        out["query"] = f"failed: {e}"
        return out
    out["devices"] = parse_vulkaninfo(r.stdout)
    m = re.search(r"Vulkan Instance Version:\s*(\S+)", r.stdout)
    out["instance_version"] = m.group(1) if m else None
    return out


def parse_vulkaninfo(text: str) -> list[dict]:
    devices = []
    for block in re.split(r"\n(?=GPU\d+:)", text.split("Devices:", 1)[-1]):
        m = re.match(r"\s*GPU(\d+):", block)
        if not m:
            continue
        kv = dict(re.findall(r"^\s+(\w+)\s*=\s*(.*?)\s*$", block, re.M))
        devices.append(
            {
                "index": int(m.group(1)),
                "name": kv.get("deviceName"),
                "type": kv.get("deviceType"),
                "api_version": kv.get("apiVersion"),
                "driver_version": kv.get("driverVersion"),
                "driver_id": kv.get("driverID"),
                "driver_name": kv.get("driverName"),
                "driver_info": kv.get("driverInfo"),
            }
        )
    return devices


def is_software_device(name: str | None) -> bool:
    """Whether a Vulkan device is a software rasterizer on the CPU (lavapipe's llvmpipe, SwiftShader):
    its timings are CPU timings, never a GPU speed."""
    n = (name or "").lower()
    return "llvmpipe" in n or "lavapipe" in n or "swiftshader" in n


def facts(config: Config | None, timeout: float = 30.0) -> dict:
    """The Vulkan facts the manifest records: devices, the selected one, headers, glslc, variables."""
    env = dict(os.environ, **device_env(config))
    info = vulkaninfo(timeout, env=env)
    want = int(config.native.vulkan_device) if config is not None else 0
    chosen = next((d for d in info["devices"] if d["index"] == want), None)
    return {
        **info,
        "selected": chosen,
        "software_device": is_software_device(chosen and chosen.get("name")),
        "env": {k: env[k] for k in (DEVICE_VAR, "GGML_VK_DISABLE_F16", "GGML_VK_DISABLE_COOPMAT") if k in env},
        "headers": header_facts(),
        "glslc": glslc_version(),
    }
