"""The seal chain: a run's results become a sealed archive with its report, in five steps.

1. **assemble** (:func:`assemble`, ``refspec assemble``): merge every campaign's tables (one table
   per name, rows carry their campaign), the plan records and the run's ledger into one folder
   with the manifest: ``assembled/``;
2. **seal the data** (:func:`seal_data`, ``refspec seal-data``): seal it, the first seal of the
   chain: ``sealed-data/``;
3. **render** (:func:`render`, ``refspec render``): copy the sealed data (without its seal, once it
   verifies) and render the report into the copy: ``rendered/``;
4. **seal the archive** (:func:`seal_archive`, ``refspec seal-archive``): seal that folder again,
   chained to the data seal (its predecessor): ``archive/`` (and ``archive.tar`` on request);
5. **check** (:func:`check`, ``refspec check-chain``): verify both seals under the pinned key id
   (the data seal starts the chain, the archive follows it) and run ``report/check.py`` isolated
   (``python3 -I -S``) on the archive.

The folder names (:data:`ASSEMBLED`, :data:`SEALED_DATA`, :data:`RENDERED`, :data:`ARCHIVE`) are
the chain's, under one root folder (:class:`Folders`): the workflow's results folder, whose rules
(``workflow/rules/seal.smk``, ``report.smk``) run one step each through its command so that
Snakemake can resume between them, or a server qualification's folder, which runs the whole chain
with :func:`run_chain` (its check only when given the key id to pin, which the server
qualification does not give).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core import tables as T
from ..core.config import campaign_key
from ..core.errors import CheckFailed, UsageError
from ..core.fsutil import atomic_write_text
from ..core.hashing import sha256_json
from ..core.paths import REPO_ROOT
from ..core.stats import DEFAULT_DRAWS, DEFAULT_SEED, DEFAULT_THRESHOLD
from ..provenance.dsse import SEAL_NAME
from ..provenance.ledger import Ledger
from ..provenance.seal import SealResult, seal
from ..provenance.verify import VerifyResult, verify_archive
from ..reporting import render as rendering

#: the chain's folders under its root, in the order the steps write them
ASSEMBLED = "assembled"
SEALED_DATA = "sealed-data"
RENDERED = "rendered"
ARCHIVE = "archive"
#: the checker the check step runs, isolated from the environment and the package
CHECKER = REPO_ROOT / "report" / "check.py"


@dataclass(frozen=True)
class Folders:
    """The chain's folders under ``root``."""

    root: Path

    @property
    def assembled(self) -> Path:
        return self.root / ASSEMBLED

    @property
    def sealed_data(self) -> Path:
        return self.root / SEALED_DATA

    @property
    def rendered(self) -> Path:
        return self.root / RENDERED

    @property
    def archive(self) -> Path:
        return self.root / ARCHIVE


# --------------------------------------------------------------------------- assemble

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


def assemble(results: Path, manifest: Path, campaigns: list[Path], out: Path) -> dict[str, int]:
    """Merge every campaign folder of ``campaigns`` into the fresh folder ``out`` (replaced if it
    exists): one table per name, the merged plan, the manifest ``manifest`` and the run's ledger
    (``results/ledger.jsonl``); return each table's row count."""
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
        key = campaign_key(cdir)
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


# --------------------------------------------------------------------------- seal the data


def _predicate_extra(reproduces: dict[str, str] | None) -> dict | None:
    """The seal's ``predicate.reproduces`` (the archive a reproduction reproduces), when given."""
    return {"reproduces": reproduces} if reproduces is not None else None


def seal_data(assembled: Path, out: Path, *, campaign: str, reproduces: dict[str, str] | None = None) -> SealResult:
    """Seal the assembled folder into the fresh folder ``out``: the first seal of the chain (no
    previous seal). ``reproduces`` names the archive a reproduction reproduces."""
    return seal(assembled, out, campaign=campaign, predicate_extra=_predicate_extra(reproduces))


# --------------------------------------------------------------------------- render


def render(sealed_data: Path, out: Path, pubkey: Path | None) -> dict[str, Path]:
    """Copy the sealed data, once it verifies under ``pubkey``, without its seal into ``out``
    (replaced if it exists) and render the report into it; return the files rendered."""
    res = verify_archive(sealed_data, pubkey)
    if not res.ok:
        raise CheckFailed(f"{sealed_data} does not verify:\n" + "\n".join(res.problems))
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(sealed_data, out, ignore=shutil.ignore_patterns(SEAL_NAME))
    return rendering.render(out, out, pdf=True, pubkey=pubkey, data_seal=sealed_data / SEAL_NAME)


# --------------------------------------------------------------------------- seal the archive


def seal_archive(
    rendered: Path,
    out: Path,
    *,
    sealed_data: Path,
    campaign: str,
    tar: bool = False,
    reproduces: dict[str, str] | None = None,
) -> SealResult:
    """Seal the rendered folder into the fresh folder ``out``, chained to the data seal of
    ``sealed_data``; with ``tar``, also ``out.tar``."""
    return seal(
        rendered, out, campaign=campaign, previous=sealed_data, tar=tar, predicate_extra=_predicate_extra(reproduces)
    )


# --------------------------------------------------------------------------- check


@dataclass
class ChainCheck:
    """The check of a chain, in its order; it stops at the first failure (``None``: not reached)."""

    data: VerifyResult  # the data seal, which must start the chain
    archive: VerifyResult | None  # the archive, which must follow the data seal
    checker: subprocess.CompletedProcess | None  # report/check.py on the archive (stdout with stderr)

    @property
    def ok(self) -> bool:
        return self.checker is not None and self.checker.returncode == 0


def check(archive: Path, sealed_data: Path, pubkey: Path, keyid: str) -> ChainCheck:
    """Verify the data seal (``--expect-previous none``) and the archive (its previous seal must
    be the data seal) under ``pubkey`` pinned to the key id ``keyid`` (taken from outside the
    results and the archive), then run ``python3 -I -S report/check.py`` on the archive with the
    same pins."""
    data = verify_archive(sealed_data, pubkey, expect_previous="none", expect_keyid=keyid)
    if not data.ok:
        return ChainCheck(data, None, None)
    previous = data.seal_sha256
    arch = verify_archive(archive, pubkey, expect_previous=previous, expect_keyid=keyid)
    if not arch.ok:
        return ChainCheck(data, arch, None)
    cmd = ["python3", "-I", "-S", str(CHECKER), str(archive), "--pubkey", str(pubkey)]
    cmd += ["--expect-keyid", keyid, "--expect-previous", str(previous)]
    checker = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return ChainCheck(data, arch, checker)


# --------------------------------------------------------------------------- the whole chain


@dataclass
class ChainRun:
    """A chain run: its folders, both seals and, when asked for, its check."""

    folders: Folders
    data: SealResult
    archive: SealResult
    check: ChainCheck | None


def run_chain(
    root: Path,
    manifest: Path,
    campaigns: list[Path],
    pubkey: Path,
    *,
    campaign: str,
    tar: bool = False,
    reproduces: dict[str, str] | None = None,
    keyid: str | None = None,
) -> ChainRun:
    """Run the chain under ``root`` (:class:`Folders`): assemble ``campaigns`` (the run's
    results folder is ``root``) with ``manifest``, seal the data, render, seal the archive (the
    seals name ``campaign``; a folder of an earlier run is replaced) and, given the pinned key id
    ``keyid``, check both seals and the archive."""
    f = Folders(root)
    assemble(root, manifest, campaigns, f.assembled)
    for d in (f.sealed_data, f.rendered, f.archive):
        if d.exists():
            shutil.rmtree(d)
    data = seal_data(f.assembled, f.sealed_data, campaign=campaign, reproduces=reproduces)
    render(f.sealed_data, f.rendered, pubkey)
    arch = seal_archive(
        f.rendered, f.archive, sealed_data=f.sealed_data, campaign=campaign, tar=tar, reproduces=reproduces
    )
    checked = check(f.archive, f.sealed_data, pubkey, keyid) if keyid is not None else None
    return ChainRun(f, data, arch, checked)
