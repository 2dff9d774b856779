"""The device the run's native backend used, as the report states it.

A run whose ``native.backend`` is not ``cpu`` names its device in every table caption, and a run
on Vulkan gets a section of its own with the facts its manifest records (device, driver, API
version, the pinned header packages, glslc, the device variable). A software Vulkan device
(Mesa's lavapipe/llvmpipe, SwiftShader) runs on the CPU: the report says, in that section, in
every caption and in the headline, that its timings are CPU timings and not a GPU speed.

Every string shown here is also a provenance value of ``numbers.json`` (``device_*``), which is
what lets ``report/check.py`` accept the digits of version strings in visible text; the checker
recomputes each of them from the manifest on its own (``refspec_check/device.py``,
``device_values``), so change one only together with the other.
"""

from __future__ import annotations

from typing import Any

from .document import Archive, Cell, Section, Table, read_json

SOFTWARE_NOTE = "a software Vulkan device that runs on the CPU: its timings are CPU timings, not GPU timings"


def device_facts(a: Archive) -> dict[str, Any] | None:
    """The backend and device of the run from its manifest (None for a CPU run or no manifest)."""
    man = a.files.get("manifest")
    m = read_json(man) if man else None
    if not isinstance(m, dict):
        return None
    bd = m.get("buildDefinition") or {}
    cfg = (bd.get("externalParameters") or {}).get("config") or {}
    backend = str(((cfg.get("native") or {}).get("backend")) or "cpu")
    if backend == "cpu":
        return None
    out: dict[str, Any] = {"backend": backend}
    vk = (bd.get("internalParameters") or {}).get("vulkan")
    if backend == "vulkan" and isinstance(vk, dict):
        sel = vk.get("selected") or {}
        out.update(
            software=bool(vk.get("software_device")),
            device=f"Vulkan{(cfg.get('native') or {}).get('vulkan_device', 0)} = {sel.get('name') or 'not found'}",
            driver=" ".join(x for x in (sel.get("driver_name"), sel.get("driver_info")) if x) or None,
            # "Vulkan 1.3.230": the version named as what it is, a whole text the checker binds to
            # this provenance value (the bare digits would read as a number nobody checked)
            api=f"Vulkan {sel['api_version']}" if sel.get("api_version") else None,
            device_type=sel.get("type"),
            headers=", ".join(
                f"{h.get('package')} {h.get('version')} (sha256 {h.get('sha256')})" for h in vk.get("headers") or []
            )
            or None,
            glslc=vk.get("glslc"),
            env=", ".join(f"{k}={v}" for k, v in sorted((vk.get("env") or {}).items())) or None,
        )
    return out


def device_caption(f: dict[str, Any] | None) -> str:
    """The sentence every table caption of a non-CPU run ends with."""
    if not f:
        return ""
    if f.get("device"):
        return f"Device: {f['device']}" + (f", {SOFTWARE_NOTE}." if f.get("software") else ".")
    return f"Backend: {f['backend']}."


def provenance_values(f: dict[str, Any] | None) -> dict[str, str]:
    """The device facts as ``numbers.json`` provenance strings (``device_*``)."""
    if not f:
        return {}
    keys = ("device", "driver", "api", "device_type", "headers", "glslc", "env")
    return {f"device_{k}" if k != "device" else "device": str(f[k]) for k in keys if f.get(k)}


def section_device(f: dict[str, Any] | None) -> Section | None:
    """The Vulkan section: the device's facts from the manifest, and what its timings are."""
    if not f or f.get("backend") != "vulkan":
        return None
    intro = (
        "This run used ggml's Vulkan backend with every layer on the device below (the requests table "
        "records the placement of every request). "
    )
    if f.get("software"):
        intro += (
            "The device is " + SOFTWARE_NOTE + ". They show where the layouts run and what they reproduce on "
            "ggml's Vulkan code path; no ratio of them is a speed claim, and the headline labels them so."
        )
    else:
        intro += "Its timings are the device's own."
    sec = Section("device", "Vulkan device", intro)
    rows = [
        [Cell([label]), Cell([f[k]], cls="mono"), Cell([note])]
        for label, k, note in (
            ("device", "device", "GGML_VK_VISIBLE_DEVICES selects it (config native.vulkan_device)"),
            ("device type", "device_type", "as the Vulkan driver reports it"),
            ("driver", "driver", "vulkaninfo"),
            ("Vulkan API", "api", "the device's API version"),
            ("header packages", "headers", "pinned by sha256, unpacked into the cache, not installed"),
            ("glslc", "glslc", "the shader compiler of the build"),
            ("environment", "env", "the device variables every process of the run had"),
        )
        if f.get(k)
    ]
    sec.items.append(Table("device", "Vulkan device (from the manifest)", [], ["record", "value", "note"], rows))
    return sec
