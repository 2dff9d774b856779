"""Putting a run's outputs together for sealing.

``refspec assemble``     merge every campaign's tables (one table per name, rows
                         carry their campaign), the plan records and the run's
                         ledger into one staging folder with the manifest;
``refspec report-stage`` copy a sealed data archive (without its seal) into a new
                         folder and render the report into it, ready for the second
                         seal that chains to the first;
``refspec artifacts``    list the run's artifacts (sdist, patches, built libraries
                         and tools, model files, panels) for ``refspec manifest``;
``refspec keys-ensure``  create the signing key pair once, outside the repository,
                         and copy its public half where the workflow wants it.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from ..core.errors import CheckFailed, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_json
from ..core.stats import DEFAULT_DRAWS, DEFAULT_SEED, DEFAULT_THRESHOLD

SEAL_FILE = "SEAL.dsse.json"
# per-campaign records copied next to the merged tables
CAMPAIGN_RECORDS = (
    "plan.json",
    "ledger.jsonl",
    "journal.jsonl",
    "timed_audit.json",
    "summary.txt",
    "phase_mask_summary.json",
    "prediction.json",
    "e1_summary.json",
    "summary.json",
    "claim.json",
    "audit_summary.json",
    "partition.json",
    "crosses.json",
    "admission.json",
    "projection.json",
)


# --------------------------------------------------------------------------- assemble


def _merge_plans(plans: list[tuple[str, dict]]) -> dict:
    """One plan record for the run: each campaign's frozen plan, plus the shared bootstrap."""
    merged: dict = {"campaigns": {name: p for name, p in plans}}
    boots = [p.get("bootstrap") for _, p in plans if p.get("bootstrap")]
    if boots:
        if any(b != boots[0] for b in boots):
            raise UsageError("campaign plans disagree on the bootstrap settings; they cannot share one archive")
        merged["bootstrap"] = boots[0]
    else:
        merged["bootstrap"] = {"seed": DEFAULT_SEED, "draws": DEFAULT_DRAWS, "threshold": DEFAULT_THRESHOLD}
    merged["plan_sha256"] = sha256_json(merged["campaigns"])
    return merged


def _campaign_key(cdir: Path) -> str:
    """``<name>``, or ``<family>/<name>`` for a study of several families (``campaigns/<family>/<name>``)."""
    cdir = Path(cdir)
    return cdir.name if cdir.parent.name == "campaigns" else f"{cdir.parent.name}/{cdir.name}"


def assemble(results: Path, manifest: Path, campaigns: list[Path], out: Path) -> dict:
    import pandas as pd

    from ..core import tables as T

    if out.exists():
        shutil.rmtree(out)
    (out / "tables").mkdir(parents=True)
    frames: dict[str, list] = {}
    plans: list[tuple[str, dict]] = []
    for cdir in campaigns:
        if not cdir.is_dir():
            raise UsageError(f"campaign output {cdir} not found")
        for name in T.TABLES:
            if T.find_table(name, cdir) is not None:
                frames.setdefault(name, []).append(T.read_table(name, cdir))
        key = _campaign_key(cdir)
        plan = cdir / "plan.json"
        if plan.is_file():
            plans.append((key, json.loads(plan.read_text())))
        # the campaign's own records travel with the tables (the run ledger pins their heads)
        for rec in CAMPAIGN_RECORDS:
            src = cdir / rec
            if src.is_file():
                dst = out / "campaigns" / key / rec
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
    counts = {}
    for name, dfs in frames.items():
        df = pd.concat(dfs, ignore_index=True) if len(dfs) > 1 else dfs[0]
        T.write_table(df, name, out / "tables")
        counts[name] = len(df)
    atomic_write_text(out / "plan.json", json.dumps(_merge_plans(plans), indent=2, sort_keys=True) + "\n")
    shutil.copyfile(manifest, out / "manifest.json")
    ledger = results / "ledger.jsonl"
    if ledger.is_file():
        shutil.copyfile(ledger, out / "ledger.jsonl")
    else:
        from ..provenance.ledger import Ledger

        Ledger(out / "ledger.jsonl").append({"kind": "assemble", "reason": "no campaign wrote a ledger entry"})
    return counts


# --------------------------------------------------------------------------- report stage


def report_stage(sealed: Path, out: Path, pubkey: Path | None) -> dict:
    from ..provenance.verify import verify_archive
    from ..reporting.render import render

    res = verify_archive(sealed, pubkey)
    if not res.ok:
        raise CheckFailed(f"{sealed} does not verify:\n" + "\n".join(res.problems))
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(sealed, out, ignore=shutil.ignore_patterns(SEAL_FILE))
    return render(out, out, pdf=True, pubkey=pubkey, data_seal=sealed / SEAL_FILE)


# --------------------------------------------------------------------------- artifacts


def artifacts(config_path: str | None, build_record: Path, panels: list[Path]) -> list[dict]:
    from ..core.config import load_config
    from ..native import build as native
    from ..native.models import config_families_file, ensure_family

    cfg = load_config(config_path)
    rec = json.loads(build_record.read_text())
    b = native.current(cfg)
    if b.key != rec["key"]:
        raise UsageError(f"{build_record} records build {rec['key'][:16]}, the config selects {b.key[:16]}")
    out = [{"role": "sdist", "name": native.SDIST_FILE, "path": str(native.fetch_sdist())}]
    out += [{"role": "patch", "name": p.name, "path": str(p)} for p in native.patch_files()]
    out += [{"role": "library", "name": name, "path": str(b.lib_dir / name)} for name in sorted(rec["files"])]
    for name, key in native.NATIVE_TOOLS.items():  # refspec-replay, refspec-opreplay
        if key not in rec:
            raise UsageError(f"{build_record} does not record {name}: run again with --forcerun native_build")
        if rec[key].get("sha256") != (b.record.get(key) or {}).get("sha256"):
            raise UsageError(f"{build_record} records another {name} than the build's {b.tool(name)}")
        out.append({"role": "tool", "name": name, "path": str(b.tool(name))})
    if "servers" in ((cfg.get("campaigns") or {}).get("run") or []):  # llama-server, stock and patched
        opts = native.BuildOptions.from_config(cfg)
        for variant in native.SERVER_VARIANTS:
            sb = native.build_server(opts, variant)
            for name in sorted(sb.record["files"]):
                role = "tool" if name == native.SERVER_TARGET else "library"
                out.append({"role": role, "name": f"{variant}/{name}", "path": str(sb.lib_dir / name)})
    from ..core.config import study_families

    for family in study_families(cfg):
        fam = ensure_family(family, models_dir=cfg.get("models_dir"), families_file=config_families_file(cfg))
        for f in fam.all():
            out.append({"role": "model", "name": f"{fam.family}/{f.name}", "path": str(f.path)})
    for p in panels:
        out.append({"role": "panel", "name": p.name, "path": str(p.resolve())})
    return out


# --------------------------------------------------------------------------- CLI


def _add_assemble(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", required=True)
    p.add_argument("--manifest", required=True)
    p.add_argument("--campaign", action="append", default=[], help="a campaign output folder (repeatable)")
    p.add_argument("--out", required=True)


def _run_assemble(a: argparse.Namespace) -> int:
    counts = assemble(Path(a.results), Path(a.manifest), [Path(c) for c in a.campaign], Path(a.out))
    for name, n in sorted(counts.items()):
        print(f"{name:14s} {n:6d} rows")
    return 0


def _add_report_stage(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sealed", required=True)
    p.add_argument("--pubkey", required=True)
    p.add_argument("--out", required=True)


def _run_report_stage(a: argparse.Namespace) -> int:
    paths = report_stage(Path(a.sealed), Path(a.out), Path(a.pubkey))
    for k, v in paths.items():
        print(f"{k}: {v}")
    return 0


def _add_artifacts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config")
    p.add_argument("--build", required=True, help="BUILD.json of the run")
    p.add_argument("--panel", action="append", default=[])
    p.add_argument("--out", required=True)


def _run_artifacts(a: argparse.Namespace) -> int:
    items = artifacts(a.config, Path(a.build), [Path(p) for p in a.panel])
    atomic_write_text(a.out, json.dumps({"artifacts": items}, indent=2) + "\n")
    print(f"{len(items)} artifacts -> {a.out}")
    return 0


def _add_keys_ensure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pub-out", required=True, help="copy the public key here")


def _run_keys_ensure(a: argparse.Namespace) -> int:
    from ..provenance import keys

    priv, pub = keys.default_private_key(), keys.default_public_key()
    if not priv.exists():
        kp = keys.generate()
        print(f"generated {kp.public_path} ({kp.fingerprint})")
    keys.load_private_key(priv)  # refuses a key with loose permissions
    Path(a.pub_out).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pub, a.pub_out)
    print(f"public key {keys.public_fingerprint(pub)} -> {a.pub_out}")
    return 0


COMMANDS = {
    "assemble": (_add_assemble, _run_assemble),
    "report-stage": (_add_report_stage, _run_report_stage),
    "artifacts": (_add_artifacts, _run_artifacts),
    "keys-ensure": (_add_keys_ensure, _run_keys_ensure),
}
