"""The report's provenance: the manifest and plan digests it shows, the reproduction it names, the data seal."""

from __future__ import annotations

import base64
import os

from refspec_check import jsonio
from refspec_check.digests import sha256_file
from refspec_check.problems import Checker
from refspec_check.report import Report


def check_provenance(c: Checker, rep: Report) -> dict:
    """The provenance digests of numbers.json: manifest_sha256, plan_sha256 and ledger_sha256 are the
    sha256 of the archive's files and are shown in report.html; a present file must have its digest.
    Returns the provenance block ({} when absent)."""
    numbers_doc = rep.numbers_doc
    prov = numbers_doc.get("provenance") if isinstance(numbers_doc.get("provenance"), dict) else {}
    for key, fname in (
        ("manifest_sha256", "manifest.json"),
        ("plan_sha256", "plan.json"),
        ("ledger_sha256", "ledger.jsonl"),
    ):
        p = os.path.join(c.archive, fname)
        if prov.get(key) is not None:
            if not os.path.isfile(p):
                c.bad(f"numbers.json: provenance.{key}", f"{fname} is missing from the archive")
            else:
                c.same(f"numbers.json: provenance.{key}", prov[key], sha256_file(p), f"{fname} digest")
                if prov[key] not in rep.html_text:
                    c.bad(rep.html_rel, f"provenance digest of {fname} is not shown")
        elif os.path.isfile(p):
            c.bad(f"numbers.json: provenance.{key}", f"{fname} is present but the report shows no digest for it")
    check_reproduction_provenance(c, rep, prov)
    return prov


def read_manifest(c: Checker) -> dict | None:
    """The archive's manifest.json as a dict (None when absent or unreadable: the file checks say so)."""
    p = os.path.join(c.archive, "manifest.json")
    try:
        with open(p, encoding="utf-8") as f:
            m = jsonio.load(f)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return m if isinstance(m, dict) else None


def check_reproduction_provenance(c: Checker, rep: Report, prov: dict) -> None:
    """A reproduction (refspec reproduce) records what it reproduces in the config its manifest
    holds (``reproduces``); the report's provenance texts of it are recomputed from there
    (refspec_check.render.sections.provenance.reproduction_text) and must be shown."""
    p = os.path.join(c.archive, "manifest.json")
    try:
        with open(p, encoding="utf-8") as f:
            m = jsonio.load(f)
    except (OSError, ValueError):
        return
    ext = (m.get("buildDefinition") or {}).get("externalParameters") if isinstance(m, dict) else None
    cfg = ext.get("config") if isinstance(ext, dict) else None
    r = cfg.get("reproduces") if isinstance(cfg, dict) else None
    keys = ("reproduces", "reproduces_accepted", "reproduces_host")
    if not isinstance(r, dict):
        for k in keys:
            if k in prov:
                c.bad(f"numbers.json: provenance.{k}", "the manifest's config records no reproduction")
        return
    accepted = [
        f"{d.get('name')}: {d.get('archived') or '(absent)'} -> {d.get('here') or '(absent)'}"
        for d in (r.get("accepted") or [])
        if isinstance(d, dict)
    ]
    want = {
        "reproduces": f"seal {r.get('seal_sha256')} key {r.get('keyid')} archive {r.get('archive_id')}",
        "reproduces_accepted": "; ".join(accepted) or "none",
        "reproduces_host": ", ".join(str(d.get("name")) for d in (r.get("host") or []) if isinstance(d, dict))
        or "none",
    }
    for k in keys:
        if c.same(f"numbers.json: provenance.{k}", prov.get(k), want[k], "reproduction record"):
            if not rep.shows(want[k]):
                c.bad(rep.html_rel, f"the reproduction record ({k}) is not shown")


def check_data_seal(c: Checker, rep: Report, prov: dict, head: list) -> None:
    """The data seal and key of the headline: provenance.data_seal_sha256 is shown in report.html and
    in the headline and is the previous seal named by the archive's SEAL.dsse.json statement;
    provenance.pubkey_fingerprint is among the keys that signed the archive."""
    sp = os.path.join(c.archive, "SEAL.dsse.json")
    ds = prov.get("data_seal_sha256")
    if ds is not None:
        if ds not in rep.html_text:
            c.bad(rep.html_rel, "the data seal digest is not shown")
        if not any(isinstance(h, dict) and ds in h.get("parts", []) for h in head):
            c.bad("numbers.json: headline", "the data seal digest is not in the headline")
    fp = prov.get("pubkey_fingerprint")
    if os.path.isfile(sp):
        try:
            with open(sp, encoding="utf-8") as f:
                env = jsonio.load(f)
            stmt = jsonio.loads(base64.b64decode(env["payload"], validate=True))
            prev = (stmt.get("predicate") or {}).get("previous_seal_sha256")
            keyids = [s.get("keyid") for s in env.get("signatures") or [] if isinstance(s, dict)]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            prev, keyids = None, None  # check_seal reports an unreadable seal
        if keyids is not None:
            if ds is not None:
                c.same(
                    "numbers.json: provenance.data_seal_sha256",
                    ds,
                    prev,
                    "data seal vs the archive seal's previous seal:",
                )
            if fp is not None and fp not in keyids:
                c.bad(
                    "numbers.json: provenance.pubkey_fingerprint",
                    f"{fp} did not sign this archive (signed by {', '.join(map(str, keyids))})",
                )


def host_text(m: dict | None) -> str | None:
    """One line of host facts from the manifest's host record (``host``, else
    ``buildDefinition.internalParameters.host``), "; "-joined: "<cpu model>, <usable or logical cores>
    cores", "<memory / 2^30, one decimal> GiB", "<distribution or system> <machine>", and "GPU: " with
    each device "<name> (driver <version>)" (or "none"), then "; CUDA driver <v>, CUDA runtime <v>"
    where recorded. A host recorded as a string is that string."""
    if not isinstance(m, dict):
        return None
    h = m.get("host") or ((m.get("buildDefinition") or {}).get("internalParameters") or {}).get("host")
    if isinstance(h, str):
        return h
    if not isinstance(h, dict):
        return None
    cpu, os_, gpu = h.get("cpu") or {}, h.get("os") or {}, h.get("gpu") or {}
    parts = []
    if isinstance(cpu, dict) and cpu.get("model"):
        parts.append(f"{cpu['model']}, {cpu.get('usable_cores') or cpu.get('logical_cores')} cores")
    if h.get("memory_bytes"):
        parts.append(f"{int(h['memory_bytes']) / 2**30:.1f} GiB")
    if isinstance(os_, dict) and (os_.get("distribution") or os_.get("system")):
        parts.append(f"{os_.get('distribution') or os_.get('system')} {os_.get('machine', '')}".strip())
    if isinstance(gpu, dict):
        names = []
        for d in gpu.get("devices") or []:
            if isinstance(d, dict):
                names.append(
                    f"{d.get('name')} (driver {d['driver_version']})"
                    if d.get("driver_version")
                    else str(d.get("name", d))
                )
            else:
                names.append(str(d))
        cuda = ", ".join(
            f"{what} {gpu[k]}"
            for what, k in (("CUDA driver", "cuda_driver_version"), ("CUDA runtime", "cuda_runtime_version"))
            if gpu.get(k)
        )
        parts.append("GPU: " + (", ".join(names) or "none") + (f"; {cuda}" if cuda else ""))
    return "; ".join(parts) or None


def check_host(c: Checker, rep: Report, prov: dict, manifest: dict | None) -> None:
    """provenance.host is the manifest's host record as one line (``host_text``) and is shown."""
    if "host" not in prov and manifest is None:
        return
    want = host_text(manifest)
    if c.same("numbers.json: provenance.host", prov.get("host"), want, "the manifest's host record") and want:
        if not rep.shows(want):
            c.bad(rep.html_rel, "the host record is not shown")
