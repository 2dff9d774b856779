"""The device a run's timed arms and native backend used, as the report states it.

The renderer (``refspec_check.render.device``) writes three kinds of device text, each a provenance
value of ``numbers.json`` that the visible-text checks then accept as a name:

* ``device``, ``device_driver``, ``device_api``, ``device_type``, ``device_headers``,
  ``device_glslc``, ``device_env``: a Vulkan run's device facts, from the manifest's
  ``internalParameters.vulkan`` record and the config's ``native`` block;
* ``devices``: where the timed arms ran, from the ``requests`` table's placement columns
  (``device``, ``device_description``, ``gpu_layers``, ``draft_gpu_layers``);
* on a software Vulkan device (lavapipe, llvmpipe, SwiftShader: the CPU), the headline's timing rows
  (qualified ratios, E2 estimates) say that their timings are CPU timings, not a GPU speed.

Each is recomputed here from the archive, so a signer who re-seals cannot name another device,
hide where an arm ran or drop the software device's warning.
"""

from __future__ import annotations

from refspec_check.problems import Checker
from refspec_check.report import Report

DEVICE_KEYS = ("device", "driver", "api", "device_type", "headers", "glslc", "env")
SOFTWARE_TIMING = " (software Vulkan device: CPU timing, not a GPU speed)"
TIMING_FINDINGS = ("qualified ratios", "E2 estimate")
PLACED = ("ok", "excluded_warmup")  # the requests whose placement the report states
SOFTWARE_NAMES = ("llvmpipe", "lavapipe", "swiftshader")  # refspec.native.vulkan.is_software_device


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _vulkan_record(m: dict | None) -> tuple[dict, dict | None]:
    """The config's ``native`` block and, for a Vulkan run, the manifest's ``internalParameters.vulkan``
    record (None for any other backend or without the record)."""
    bd = _dict(_dict(m).get("buildDefinition"))
    native = _dict(_dict(_dict(bd.get("externalParameters")).get("config")).get("native"))
    vk = _dict(bd.get("internalParameters")).get("vulkan")
    return native, vk if native.get("backend") == "vulkan" and isinstance(vk, dict) else None


def device_values(m: dict | None) -> tuple[dict[str, str], bool]:
    """The device facts as provenance values (``device``, ``device_<fact>``) and whether the device
    is a software one; ({}, False) for a CPU run. A Vulkan run: the selected device
    ``Vulkan<n> = <name>``, the driver's name and info, ``Vulkan <api version>``, the device type,
    the header packages ``<package> <version> (sha256 <hex>)`` joined by ", ", the glslc version and
    the device variables ``K=V`` (sorted by name) joined by ", "."""
    native, vk = _vulkan_record(m)
    if vk is None:
        return {}, False
    sel = _dict(vk.get("selected"))
    facts = {
        "device": f"Vulkan{native.get('vulkan_device', 0)} = {sel.get('name') or 'not found'}",
        "driver": " ".join(x for x in (sel.get("driver_name"), sel.get("driver_info")) if x) or None,
        "api": f"Vulkan {sel['api_version']}" if sel.get("api_version") else None,
        "device_type": sel.get("type"),
        "headers": ", ".join(
            f"{_dict(h).get('package')} {_dict(h).get('version')} (sha256 {_dict(h).get('sha256')})"
            for h in vk.get("headers") or []
        )
        or None,
        "glslc": vk.get("glslc"),
        "env": ", ".join(f"{k}={v}" for k, v in sorted(_dict(vk.get("env")).items())) or None,
    }
    values = {(k if k == "device" else f"device_{k}"): str(facts[k]) for k in DEVICE_KEYS if facts.get(k)}
    return values, software_device(sel.get("name"))


def software_device(name) -> bool:
    """Whether a Vulkan device name is a software rasterizer's (runs on the CPU), by its name: the
    manifest's own ``software_device`` flag must agree (``check_device``)."""
    n = str(name or "").lower()
    return any(s in n for s in SOFTWARE_NAMES)


def devices_text(requests: list[dict]) -> str:
    """Where the timed arms ran: "Device: every arm ran on <where>." for one placement, else
    "Devices: <arms> on <where>; ..." (placements in the order of their (device, description,
    gpu_layers, draft_gpu_layers) tuple's text); <where> is the device, its description in
    parentheses, then "no layer offloaded" or "<n> target layers offloaded" (and "(<m> draft layers)").
    Empty without a placed request."""
    by: dict[tuple, set] = {}
    for r in requests:
        if r.get("status") not in PLACED:
            continue
        key = (
            r.get("device") or "CPU",
            r.get("device_description") or "",
            r.get("gpu_layers"),
            r.get("draft_gpu_layers"),
        )
        by.setdefault(key, set()).add(r["arm"])
    if not by:
        return ""

    def where(key: tuple) -> str:
        dev, desc, g, dg = key
        what = f"{dev} ({desc})" if desc else dev
        if not g:
            return f"{what}, no layer offloaded"
        return f"{what}, {g} target layers offloaded" + (f" ({dg} draft layers)" if dg else "")

    if len(by) == 1:
        return f"Device: every arm ran on {where(next(iter(by)))}."
    placed = sorted(by.items(), key=lambda kv: str(kv[0]))
    return "Devices: " + "; ".join(f"{', '.join(sorted(arms))} on {where(k)}" for k, arms in placed) + "."


def check_device(c: Checker, rep: Report, prov: dict, head: list, manifest: dict | None) -> None:
    """The device texts of numbers.json's provenance are the archive's (recomputed from the manifest
    and the requests table; no other ``device*`` value), each is shown in report.html, and on a
    software device every timing row of the headline carries ``SOFTWARE_TIMING``."""
    want, software = device_values(manifest)
    _native, vk = _vulkan_record(manifest)
    if vk is not None and bool(vk.get("software_device")) != software:
        c.bad(
            "manifest.json: internalParameters.vulkan.software_device",
            f"{vk.get('software_device')!r}, but the selected device "
            f"{_dict(vk.get('selected')).get('name')!r} is {'a' if software else 'not a'} software device",
        )
    t = c.tables.get("requests")
    placed = devices_text(t.rows if t is not None else [])
    if placed:
        want["devices"] = placed
    for k in sorted(set(want) | {k for k in prov if k == "devices" or k.startswith("device")}):
        where = f"numbers.json: provenance.{k}"
        if k not in want:
            c.bad(where, f"{prov[k]!r}: the archive records no such device fact")
            continue
        if c.same(where, prov.get(k), want[k], "recomputed from the manifest and the requests table") and not rep.shows(
            want[k]
        ):
            c.bad(rep.html_rel, f"the device fact {k} ({want[k]!r}) is not shown")
    for j, h in enumerate(head):
        finding = h.get("finding") if isinstance(h, dict) else None
        if not isinstance(finding, str) or not finding.startswith(TIMING_FINDINGS):
            continue
        c.identities += 1
        if software != finding.endswith(SOFTWARE_TIMING):
            c.bad(
                f"numbers.json: headline[{j}]",
                f"{finding!r} "
                + (
                    "leaves out that its timings come from a software device (CPU timings, not a GPU speed)"
                    if software
                    else "calls its device a software one, which the manifest does not record"
                ),
            )
