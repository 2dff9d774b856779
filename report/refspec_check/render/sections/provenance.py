"""The provenance section (digests of the manifest, plan, ledger and seals, the host and the
signing key) and the ledger section (request attempts by status, the ledger's records by kind)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refspec_check.digests import sha256_file

from ..aggregates import status_counts
from ..document import Archive, Cell, Numbers, Section, ShownTable, Table, absent_note, read_json, rel_path

LEDGER_KIND_KEYS = ("kind", "event", "type")


def _host_text(h: dict) -> str | None:
    """One line of host facts from the manifest's host record (CPU, cores, memory, OS, GPUs).

    ``report/check.py`` recomputes this line on its own (``refspec_check/provenance.py``,
    ``host_text``); change one only together with the other."""
    cpu, os_, gpu = h.get("cpu") or {}, h.get("os") or {}, h.get("gpu") or {}
    parts = []
    if isinstance(cpu, dict) and cpu.get("model"):
        parts.append(f"{cpu['model']}, {cpu.get('usable_cores') or cpu.get('logical_cores')} cores")
    if h.get("memory_bytes"):
        parts.append(f"{int(h['memory_bytes']) / 2**30:.1f} GiB")
    if isinstance(os_, dict) and (os_.get("distribution") or os_.get("system")):
        parts.append(f"{os_.get('distribution') or os_.get('system')} {os_.get('machine', '')}".strip())
    if isinstance(gpu, dict):
        devs = gpu.get("devices") or []
        cuda = ", ".join(
            f"{what} {gpu[k]}"
            for what, k in (("CUDA driver", "cuda_driver_version"), ("CUDA runtime", "cuda_runtime_version"))
            if gpu.get(k)
        )
        parts.append(
            "GPU: "
            + (
                ", ".join(
                    (
                        f"{d.get('name')} (driver {d.get('driver_version')})"
                        if d.get("driver_version")
                        else str(d.get("name", d))
                    )
                    if isinstance(d, dict)
                    else str(d)
                    for d in devs
                )
                if devs
                else "none"
            )
            + (f"; {cuda}" if cuda else "")
        )
    return "; ".join(parts) or None


def reproduction_text(manifest: Any) -> dict[str, str]:
    """A reproduction's record (``refspec reproduce``, from the config the manifest records) as the
    report shows it: ``reproduces`` (the archive reproduced), ``reproduces_accepted`` (each pinned
    input accepted with a different value) and ``reproduces_host`` (the host facts that differ);
    empty for any other run. ``report/check.py`` recomputes these texts from the manifest."""
    cfg = (
        ((manifest.get("buildDefinition") or {}).get("externalParameters") or {}).get("config")
        if isinstance(manifest, dict)
        else None
    )
    rep = cfg.get("reproduces") if isinstance(cfg, dict) else None
    if not isinstance(rep, dict):
        return {}
    accepted = [
        f"{d.get('name')}: {d.get('archived') or '(absent)'} -> {d.get('here') or '(absent)'}"
        for d in rep.get("accepted") or []
    ]
    return {
        "reproduces": f"seal {rep.get('seal_sha256')} key {rep.get('keyid')} archive {rep.get('archive_id')}",
        "reproduces_accepted": "; ".join(accepted) or "none",
        "reproduces_host": ", ".join(str(d.get("name")) for d in rep.get("host") or []) or "none",
    }


def reproduction_rows(manifest: Any) -> list[list[Cell]]:
    """The provenance table's rows of a reproduction (:func:`reproduction_text`)."""
    t = reproduction_text(manifest)
    if not t:
        return []
    notes = {
        "reproduces": "the archive whose registered plan this run ran again (refspec reproduce)",
        "reproduces_accepted": "pinned inputs that differ from the reproduced archive's, accepted with --allow",
        "reproduces_host": "host facts that differ from the reproduced archive's (recorded, never refused)",
    }
    labels = {
        "reproduces": "reproduces",
        "reproduces_accepted": "accepted input differences",
        "reproduces_host": "host differences",
    }
    return [[Cell([labels[k]]), Cell([v], cls="mono"), Cell([notes[k]])] for k, v in t.items()]


@dataclass(frozen=True)
class ShownSeal:
    """What the report shows of a seal (the folder's own, or that of the data it was rendered from): its
    digest and signing key ids."""

    sha256: str
    keyids: tuple[str, ...] = ()


def read_seal(path: Path) -> ShownSeal | None:
    """The :class:`ShownSeal` of a SEAL.dsse.json file, or None when there is none."""
    if not path.is_file():
        return None
    env = read_json(path)
    keyids: list[str] = []
    if isinstance(env, dict):
        for s_ in env.get("signatures") or []:
            if isinstance(s_, dict) and isinstance(s_.get("keyid"), str):
                keyids.append(s_["keyid"])
    return ShownSeal(sha256_file(path), tuple(keyids))


def section_provenance(
    a: Archive, pubkey_fingerprint: str | None, data_seal: ShownSeal | None = None
) -> tuple[Section, dict[str, Any]]:
    sec = Section("provenance", "Provenance")
    prov: dict[str, Any] = {}
    rows = []

    def kv(k, v, note=""):
        rows.append([Cell([k]), Cell([v if v else "not present"], cls="mono" if v else "missing"), Cell([note])])

    man = a.files.get("manifest")
    if man:
        prov["manifest_sha256"] = sha256_file(man)
        m = read_json(man)
        host = None
        if isinstance(m, dict):
            h = m.get("host") or m.get("buildDefinition", {}).get("internalParameters", {}).get("host")
            if isinstance(h, dict):
                host = _host_text(h)
            elif isinstance(h, str):
                host = h
        prov["host"] = host
    kv(
        "manifest.json sha256",
        prov.get("manifest_sha256"),
        "source manifest (sdist, patches, libraries, models, panels, packages)",
    )
    kv("host", prov.get("host"), "from the manifest")
    if man:
        prov.update(reproduction_text(m))
        rows.extend(reproduction_rows(m))
    plan = a.files.get("plan")
    if plan:
        prov["plan_sha256"] = sha256_file(plan)
    kv("plan.json sha256", prov.get("plan_sha256"), "registered plan (arms, panels, repeats, bootstrap)")
    led = a.files.get("ledger")
    if led:
        prov["ledger_sha256"] = sha256_file(led)
    kv("ledger.jsonl sha256", prov.get("ledger_sha256"), "append-only ledger of every attempt")
    seal = read_seal(a.files["seal"]) if "seal" in a.files else None
    keyids = list(seal.keyids) if seal else []
    if seal:
        prov["seal_sha256"] = seal.sha256
        kv("SEAL.dsse.json sha256", prov["seal_sha256"], "seal present when this report was rendered")
    else:
        # the archive's own seal covers this report, so the report cannot hold that seal's digest
        rows.append(
            [
                Cell(["archive seal (SEAL.dsse.json)"]),
                Cell(["in the sealed archive, beside this report"], cls="descriptive"),
                Cell(
                    [
                        "the seal covers this report, so the report cannot contain the seal's own digest: "
                        "`refspec verify ARCHIVE` and `./run main` print it"
                    ]
                ),
            ]
        )
    if data_seal is not None:
        # the seal of the data this report was rendered from; the archive's own seal (which covers
        # this report) names it as its previous seal
        prov["data_seal_sha256"] = data_seal.sha256
        keyids.extend(data_seal.keyids)
        kv(
            "data seal sha256",
            prov["data_seal_sha256"],
            "SEAL.dsse.json of the sealed data this report was rendered from",
        )
    fp = pubkey_fingerprint or (keyids[0] if keyids else None)
    prov["pubkey_fingerprint"] = fp
    kv("public-key fingerprint", fp, "signing key (DSSE keyid)" if fp else "no key given and no seal present")
    sec.items.append(Table("provenance", "Provenance", [], ["record", "value", "note"], rows))
    for k in ("manifest", "plan", "ledger"):
        if k not in a.files:
            sec.notes.append(f"{k} not present: not run or not copied into this folder")
    return sec, prov


def ledger_kinds(path: Path) -> tuple[int, dict[str, int], list[str]]:
    """(records, kind -> count, problems) of a ledger file; kind = first of kind/event/type."""
    kinds: dict[str, int] = defaultdict(int)
    problems: list[str] = []
    n = 0
    with open(path, "rb") as f:
        for i, raw in enumerate(f, start=1):
            n += 1
            try:
                rec = json.loads(raw)
            except ValueError:
                problems.append(f"line {i} is not JSON")
                continue
            kind = "(none)"
            if isinstance(rec, dict):
                for k in LEDGER_KIND_KEYS:
                    if isinstance(rec.get(k), str):
                        kind = rec[k]
                        break
            kinds[kind] += 1
    return n, dict(sorted(kinds.items())), problems


def section_ledger(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "ledger",
        "Ledger: attempts, failures and exclusions",
        "Every attempt is kept. Counts of request rows per campaign and status with the recorded reasons, "
        "and the ledger's records by kind.",
    )
    if a.has("requests"):
        src = a.src("requests")
        tid = "status"
        nums = ShownTable(N, a, "requests", tid)
        rows = []
        for r in status_counts(a.rows("requests")):
            key = dict(campaign=r["campaign"], status=r["status"])
            c = nums.add(("status", r["campaign"], r["status"], "count"), r["count"], "d", row=key, column="count")
            # a registered warm-up is excluded by design, not a failure: neutral
            status_cell = Cell([r["status"]], cls={"ok": "ok", "excluded_warmup": ""}.get(r["status"], "bad"))
            reasons = sorted(r["reasons"].items()) or [(None, 0)]
            # one table row per reason: a reason's count shares its row with that reason only (the
            # status's row count stands on its first row)
            for i, (reason, cnt) in enumerate(reasons):
                parts: list[Any] = []
                if reason is not None:
                    parts = [
                        reason,
                        " (",
                        nums.add(
                            ("reason", r["campaign"], r["status"], reason, "count"),
                            cnt,
                            "d",
                            row=dict(key, reason=reason),
                            column="count",
                        ),
                        ")",
                    ]
                rows.append(
                    [
                        Cell([r["campaign"]]),
                        status_cell,
                        Cell([c] if i == 0 else [""]),
                        Cell(parts or [""], cls="reason"),
                    ]
                )
        sec.items.append(
            Table(
                tid,
                "Request attempts by status",
                [src],
                ["campaign", "status", "rows", "reasons"],
                rows,
                numeric=[False, False, True, False],
            )
        )
    else:
        sec.notes.append(absent_note("requests"))
    led = a.files.get("ledger")
    if led is not None:
        n, kinds, problems = ledger_kinds(led)
        src = rel_path(led, a.out)
        tid = "ledger"
        rows = [[Cell(["all records"]), Cell([N.add(("ledger", "records"), n, "d", src, tid, {}, "records")])]]
        for k, v in kinds.items():
            rows.append(
                [
                    Cell([k], cls="mono"),
                    Cell([N.add(("ledger", "kind", k, "count"), v, "d", src, tid, {"kind": k}, "count")]),
                ]
            )
        sec.items.append(Table(tid, "Ledger records by kind", [src], ["kind", "records"], rows, numeric=[False, True]))
        for p in problems:
            sec.notes.append(f"ledger.jsonl: {p}")
    else:
        sec.notes.append("ledger.jsonl not present")
    return sec
