"""Putting a run's outputs together for sealing.

What the commands the Snakemake rules call do (their command lines are in
:mod:`refspec.commands`):

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

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core import tables as T
from ..core.config import study_families
from ..core.errors import CheckFailed, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_json
from ..core.stats import DEFAULT_DRAWS, DEFAULT_SEED, DEFAULT_THRESHOLD
from ..native import build as native
from ..native.models import config_families_file, ensure_family
from ..provenance import keys
from ..provenance.ledger import Ledger
from ..provenance.verify import verify_archive
from ..reporting.render import render

SEAL_FILE = "SEAL.dsse.json"
# per-campaign records copied next to the merged tables: data only. A campaign's summary.txt (the
# text `refspec campaign` prints) stays in the results folder: nothing in the sealed archive checks
# it, and report/check.py refuses a sealed archive carrying a document it does not check.
CAMPAIGN_RECORDS = (
    "plan.json",
    "screen.json",
    "exposed-panel.jsonl",
    "ledger.jsonl",
    "journal.jsonl",
    "timed_audit.json",
    "phase_mask_summary.json",
    "prediction.json",
    "e1_summary.json",
    "summary.json",
    "claim.json",
    "audit_summary.json",
    "partition-screen.json",
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
        Ledger(out / "ledger.jsonl").append({"kind": "assemble", "reason": "no campaign wrote a ledger entry"})
    return counts


# --------------------------------------------------------------------------- report stage


def report_stage(sealed: Path, out: Path, pubkey: Path | None) -> dict:
    res = verify_archive(sealed, pubkey)
    if not res.ok:
        raise CheckFailed(f"{sealed} does not verify:\n" + "\n".join(res.problems))
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(sealed, out, ignore=shutil.ignore_patterns(SEAL_FILE))
    return render(out, out, pdf=True, pubkey=pubkey, data_seal=sealed / SEAL_FILE)


# --------------------------------------------------------------------------- artifacts


def artifacts(cfg: dict, build_record: Path, panels: list[Path]) -> list[dict]:
    """The run's artifacts for config ``cfg`` (its native build, built if needed, must be the one
    ``build_record`` records), each ``{"role", "name", "path"}``."""
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
    for family in study_families(cfg):
        fam = ensure_family(family, models_dir=cfg.get("models_dir"), families_file=config_families_file(cfg))
        for f in fam.all():
            out.append({"role": "model", "name": f"{fam.family}/{f.name}", "path": str(f.path)})
    for p in panels:
        out.append({"role": "panel", "name": p.name, "path": str(p.resolve())})
    return out


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class KeysEnsured:
    generated: keys.KeyPair | None  # the pair made now; None when it existed
    fingerprint: str  # of the public key copied


def ensure_keys(pub_out: Path) -> KeysEnsured:
    """Create the signing key pair once (outside the repository), refuse a private key with loose
    permissions, and copy the public key to ``pub_out``."""
    priv, pub = keys.default_private_key(), keys.default_public_key()
    kp = keys.generate() if not priv.exists() else None
    keys.load_private_key(priv)  # refuses a key with loose permissions
    pub_out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pub, pub_out)
    return KeysEnsured(kp, keys.public_fingerprint(pub))
