"""Sealing: a results folder becomes a signed, closed-world archive.

``refspec seal RESULTS OUT`` copies every regular file of RESULTS into the fresh
folder OUT, with two changes: every Parquet table is rewritten as the project writes
its tables (GZIP, PLAIN values, version 1 data pages: ``refspec.core.tables.PARQUET_WRITE``,
which the standard-library checker reads) with the archive id (and campaign) in its
key-value metadata, and a CSV copy is written next to it for the standard-library checker. It then signs
``SEAL.dsse.json``: a DSSE envelope (payload type ``application/vnd.in-toto+json``)
over an in-toto statement whose subjects are every other file of OUT (path,
sha256, size) and whose predicate holds the archive id, the campaign, the
previous seal's sha256 (a chain of seals), the ledger head and a table index.
Optionally a deterministic ``.tar`` of OUT is written too.

RESULTS must hold ``manifest.json``, ``plan.json`` and ``ledger.jsonl`` (an
intact chain); everything else (report, figures, logs) is carried as is. The
archive format is documented field by field in ``anc/seal.md``; verification is
in :mod:`refspec.provenance.verify`, safe extraction in :mod:`refspec.provenance.restore`.

The private key never enters the archive: the key file must lie outside RESULTS
and OUT, and sealing fails if any archived file contains the key or any PEM
private key block, in its bytes, in the decompressed members of a gzip, bzip2,
xz or zip file (also a zip after a prefix), or in a Parquet table's metadata,
Arrow schema or cells (the forms searched are listed in
:mod:`refspec.provenance.leaks` and ``anc/seal.md``); a file the scan cannot read
completely (an encrypted zip member, a damaged stream or zip entry) is refused too.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .. import __version__
from ..core.clock import utc_now_seconds
from ..core.errors import IntegrityError, UsageError
from ..core.hashing import sha256_bytes
from ..core.tables import PARQUET_WRITE, csv_body
from .archive import CONTROL_CHARS, created_mtime, hashing_threads, scan_folder, sha256_stream, write_tar
from .dsse import SEAL_NAME, check_envelope, envelope_bytes
from .keys import check_private_location, default_private_key, fingerprint, load_private_key
from .leaks import KeyLeakScanner, hash_and_scan
from .ledger import LEDGER_NAME, verify_chain
from .manifest import MANIFEST_NAME
from .plan import PLAN_NAME
from .statement import (
    ARCHIVE_ID_KEY,
    CAMPAIGN_KEY,
    HEX64,
    PREDICATE_FIELDS,
    SEAL_FORMAT,
    build_statement,
)
from .verify import verify_archive

REQUIRED = (MANIFEST_NAME, PLAN_NAME, LEDGER_NAME)


# --------------------------------------------------------------------------- tables


class _HashSink:
    """A text sink that only hashes what is written (UTF-8)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def write(self, text: str) -> int:
        self.h.update(text.encode("utf-8"))
        return len(text)


def _stamp_metadata(md: dict[bytes, bytes] | None, archive_id: str, campaign: str) -> dict[bytes, bytes]:
    out = dict(md or {})
    out[ARCHIVE_ID_KEY] = archive_id.encode("utf-8")
    out[CAMPAIGN_KEY] = campaign.encode("utf-8")
    return out


def rewrite_parquet(
    src: Path,
    dst: Path,
    archive_id: str,
    campaign: str,
    table: str,
    csv_path: Path | None = None,
    csv_compare: Path | None = None,
) -> dict[str, Any]:
    """Copy a Parquet table as the project writes its tables (``PARQUET_WRITE``: GZIP, PLAIN values,
    version 1 data pages) with the archive stamp (other metadata kept).

    ``csv_path``: also write its CSV copy there. ``csv_compare``: an existing CSV
    copy that must be byte-identical to the CSV this table produces.
    """
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(src)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise IntegrityError(f"{table}: not a readable Parquet file ({e})") from e
    schema = pf.schema_arrow.with_metadata(_stamp_metadata(pf.schema_arrow.metadata, archive_id, campaign))
    rows = 0
    cf: Any = None
    sink: _HashSink | None = None
    if csv_path is not None:
        cf = open(csv_path, "w", encoding="utf-8", newline="")
    elif csv_compare is not None:
        cf = sink = _HashSink()
    writer_csv = csv.writer(cf, lineterminator="\n") if cf is not None else None
    if writer_csv is not None:
        writer_csv.writerow(schema.names)
    try:
        with pq.ParquetWriter(dst, schema, write_statistics=True, **PARQUET_WRITE) as w:
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i).replace_schema_metadata(schema.metadata)
                w.write_table(t)
                rows += t.num_rows
                if cf is not None:
                    cf.write(csv_body(t))
    finally:
        if csv_path is not None:
            cf.close()
    if sink is not None and csv_compare is not None:
        with open(csv_compare, "rb") as f:
            if sha256_stream(f) != sink.h.hexdigest():
                raise IntegrityError(
                    f"{csv_compare.name}: the CSV copy does not match {table} "
                    "(write both with refspec.core.tables.write_table, or seal with --no-csv-check)"
                )
    return {"rows": rows, "columns": list(schema.names)}


# --------------------------------------------------------------------------- seal


@dataclass
class SealResult:
    out: Path
    archive_id: str
    campaign: str
    seal_sha256: str
    files: int
    total_bytes: int
    keyid: str
    previous_seal_sha256: str | None
    tar: Path | None = None
    tables: list[dict[str, Any]] = field(default_factory=list)


def verified_previous(previous: str | Path, public_key: Any) -> str:
    """The seal sha256 of the archive this one follows, once it verifies under the signing key.

    A folder or tar is verified completely (``refspec verify`` with this key pinned; a
    compressed tar is refused like everywhere else); a lone ``SEAL.dsse.json`` has its
    envelope and signature checked. Anything else is an :class:`IntegrityError`.
    """
    p = Path(previous)
    if not p.exists():
        raise UsageError(f"previous archive {previous} not found")
    if p.is_dir() or p.name != SEAL_NAME:
        res = verify_archive(p, public_key, expect_keyid=fingerprint(public_key))
        if not res.ok or res.seal_sha256 is None:
            raise IntegrityError(
                f"the previous archive {previous} does not verify under the signing key "
                f"{fingerprint(public_key)}:\n  " + "\n  ".join(res.problems)
            )
        return res.seal_sha256
    data = p.read_bytes()
    _payload, problems = check_envelope(data, public_key)
    if problems:
        raise IntegrityError(
            f"the previous seal {previous} does not verify under the signing key "
            f"{fingerprint(public_key)}:\n  " + "\n  ".join(problems)
        )
    return sha256_bytes(data)


def _csv_selected(rel: str, csv_tables: str | Sequence[str] | None) -> bool:
    if csv_tables is None or csv_tables == "none":
        return False
    if csv_tables == "all":
        return True
    stem = rel[: -len(".parquet")]
    return rel in csv_tables or stem in csv_tables or Path(stem).name in csv_tables


def _check_folders(results: Path, out: Path) -> None:
    if not results.is_dir():
        raise UsageError(f"results folder {results} not found")
    res_real = Path(os.path.realpath(results))
    out_real = Path(os.path.realpath(out))
    if out_real == res_real or res_real in out_real.parents or out_real in res_real.parents:
        raise UsageError("the archive folder and the results folder must not contain each other")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder")


def _signing_key(key: Ed25519PrivateKey | str | Path | None, results: Path, out: Path) -> Ed25519PrivateKey:
    """The given private key, or the one loaded from its path (default: the key directory's),
    which must lie outside the results and archive folders."""
    if isinstance(key, Ed25519PrivateKey):
        return key
    kpath = Path(key) if key is not None else default_private_key()
    check_private_location(kpath, extra_forbidden=(results, out))
    return load_private_key(kpath)


def _previous_sha256(previous: str | Path | None, previous_sha256: str | None, skey: Ed25519PrivateKey) -> str | None:
    """The sha256 of the seal this one follows (lowercase hex), or None for the first of a chain."""
    if previous is not None and previous_sha256 is not None:
        raise UsageError("give either a previous archive or its seal sha256, not both")
    if previous is not None:
        previous_sha256 = verified_previous(previous, skey.public_key())
    if previous_sha256 is not None:
        previous_sha256 = previous_sha256.lower()
        if not HEX64.fullmatch(previous_sha256):
            raise UsageError(f"previous seal sha256 {previous_sha256!r} is not 64 hex digits")
    return previous_sha256


def _results_files(results: Path) -> list[str]:
    """The regular files of the results folder; refused when it holds anything else, is
    already an archive or lacks a required record."""
    files, problems = scan_folder(results)
    if SEAL_NAME in files:
        problems.append(f"{SEAL_NAME}: the results folder is already an archive")
    for req in REQUIRED:
        if req not in files:
            problems.append(f"{req}: required record missing")
    if problems:
        raise IntegrityError(f"cannot seal {results}:\n  " + "\n  ".join(problems))
    return files


def _campaign(results: Path, campaign: str | None) -> str:
    """The given campaign name, or the one ``plan.json`` names."""
    if campaign is None:
        try:
            plan = json.loads((results / PLAN_NAME).read_bytes())
            campaign = plan.get("campaign") if isinstance(plan, dict) else None
        except ValueError:
            campaign = None
        if not campaign:
            raise UsageError(f"no campaign given and {PLAN_NAME} names none")
    if not isinstance(campaign, str) or CONTROL_CHARS.search(campaign):
        raise UsageError(f"bad campaign name {campaign!r}")
    return campaign


def _ledger_info(results: Path) -> dict[str, Any]:
    """The ledger record of the predicate (path, line count, last line's sha256); a broken chain is refused."""
    ledger_problems = verify_chain(results / LEDGER_NAME)
    if ledger_problems:
        raise IntegrityError("the ledger is broken; refusing to seal it:\n  " + "\n  ".join(ledger_problems))
    with open(results / LEDGER_NAME, "rb") as f:
        lines = f.read().splitlines()
    return {
        "path": LEDGER_NAME,
        "records": len(lines),
        "head_sha256": sha256_bytes(lines[-1]) if lines else "0" * 64,
    }


def _output_plan(files: list[str], csv_tables: str | Sequence[str] | None) -> dict[str, tuple[str, str]]:
    """Every output path first: out rel -> (kind, source rel), kind ``copy``, ``parquet`` or ``csv``.
    A table's CSV copy is carried when the results folder has one (and checked against the
    table), otherwise written if selected."""
    fileset = set(files)
    targets: dict[str, tuple[str, str]] = {}
    for rel in files:
        if rel.endswith(".parquet"):
            targets[rel] = ("parquet", rel)
            crel = rel[: -len(".parquet")] + ".csv"
            if crel not in fileset and _csv_selected(rel, csv_tables):
                targets[crel] = ("csv", rel)
        else:
            targets[rel] = ("copy", rel)
    return targets


def _write_outputs(
    results: Path,
    stage: Path,
    targets: dict[str, tuple[str, str]],
    fileset: set[str],
    archive_id: str,
    campaign: str,
    check_csv: bool,
) -> list[dict[str, Any]]:
    """Copy the files and rewrite the tables (with their CSV copies) into ``stage``; return the table index."""
    tables = []
    for rel, (kind, src) in sorted(targets.items()):
        if kind == "csv":
            continue
        dst = stage / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if kind == "copy":
            shutil.copyfile(results / src, dst, follow_symlinks=False)
            continue
        crel = rel[: -len(".parquet")] + ".csv"
        written = targets.get(crel) == ("csv", rel)
        carried = crel in fileset
        info = rewrite_parquet(
            results / src,
            dst,
            archive_id,
            campaign,
            rel,
            csv_path=stage / crel if written else None,
            csv_compare=results / crel if carried and check_csv else None,
        )
        tables.append(
            {
                "path": rel,
                "csv": crel if written or carried else None,
                "csv_origin": "sealed" if written else "results" if carried else None,
                "csv_checked": bool(written or (carried and check_csv)),
                **info,
            }
        )
    return tables


def _scanned_subjects(stage: Path, names: list[str], skey: Ed25519PrivateKey, threads: int | None) -> list[dict]:
    """The statement's subjects (name, sha256, size) of the staged files, each scanned for the
    private key; a leak or a part the scan cannot read refuses the seal."""
    scanner = KeyLeakScanner(skey)
    with ThreadPoolExecutor(max_workers=threads or hashing_threads()) as ex:
        hashed = list(ex.map(lambda n: hash_and_scan(stage / n, scanner), names))
    leaks = [f"{n} ({'; '.join(found)})" for n, (_d, _s, found, _u) in zip(names, hashed) if found]
    blind = [f"{n} ({'; '.join(u)})" for n, (_d, _s, _f, u) in zip(names, hashed) if u]
    refusals = []
    if leaks:
        refusals.append("private key material found in " + ", ".join(leaks))
    if blind:
        refusals.append("cannot scan every part of " + ", ".join(blind) + " for private key material (anc/seal.md)")
    if refusals:
        raise IntegrityError("refusing to seal: " + "; ".join(refusals))
    return [
        {"annotations": {"size": size}, "digest": {"sha256": digest}, "name": n}
        for n, (digest, size, _f, _u) in zip(names, hashed)
    ]


def _publish(stage: Path, out: Path, names: list[str], env: bytes) -> None:
    """Write the seal into ``stage``, fix the modes and make ``stage`` the archive folder ``out``."""
    seal_path = stage / SEAL_NAME
    with open(seal_path, "wb") as f:
        f.write(env)
        f.flush()
        os.fsync(f.fileno())
    for dirpath, _dirs, _files in os.walk(stage):
        os.chmod(dirpath, 0o755)
    for n in names + [SEAL_NAME]:
        os.chmod(stage / n, 0o644)
    if out.exists():
        out.rmdir()
    os.rename(stage, out)


def seal(
    results: str | Path,
    out: str | Path,
    *,
    key: Ed25519PrivateKey | str | Path | None = None,
    campaign: str | None = None,
    previous: str | Path | None = None,
    previous_sha256: str | None = None,
    archive_id: str | None = None,
    tar: bool | str | Path = False,
    csv_tables: str | Sequence[str] | None = "all",
    check_csv: bool = True,
    created: str | None = None,
    threads: int | None = None,
    predicate_extra: dict[str, Any] | None = None,
) -> SealResult:
    """Seal ``results`` into the fresh folder ``out`` (see the module docstring).

    ``key`` is a private key or the path of one (default: the key directory's key).
    ``previous`` (an archive folder, seal file or tar) or ``previous_sha256`` links
    this seal to the one before it; without either the seal starts a chain.
    ``csv_tables`` selects the Parquet tables without a CSV copy in ``results``
    that get one written: ``"all"``, ``"none"``/None or a list of table paths or
    names. A CSV copy already in ``results`` is carried and, with ``check_csv``,
    must equal the CSV its table produces. ``predicate_extra`` adds fields to the
    predicate (``reproduces``: the archive a reproduction reproduces; ``compares``: the
    archives a comparison compares); it cannot replace one of the predicate's own fields.
    """
    results = Path(results)
    out = Path(out)
    _check_folders(results, out)
    own = sorted(set(predicate_extra or {}) & set(PREDICATE_FIELDS))
    if own:
        raise UsageError(f"predicate field(s) {', '.join(own)} are the seal's own")
    skey = _signing_key(key, results, out)
    archive_id = archive_id or str(uuid.uuid4())
    if CONTROL_CHARS.search(archive_id) or not archive_id.strip():
        raise UsageError(f"bad archive id {archive_id!r}")
    files = _results_files(results)
    ledger_info = _ledger_info(results)
    head = {
        "archive_id": archive_id,
        "campaign": _campaign(results, campaign),
        "previous_seal_sha256": _previous_sha256(previous, previous_sha256, skey),
        "created": created or utc_now_seconds(),
        "keyid": fingerprint(skey.public_key()),
    }
    targets = _output_plan(files, csv_tables)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.sealing-", dir=out.parent))
    try:
        tables = _write_outputs(results, stage, targets, set(files), archive_id, head["campaign"], check_csv)
        names = sorted(targets)
        subjects = _scanned_subjects(stage, names, skey, threads)
        statement = _statement(subjects, head, ledger_info, tables, predicate_extra)
        env = envelope_bytes(statement, skey)
        _publish(stage, out, names, env)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    tar_path: Path | None = None
    if tar:
        tar_path = Path(str(out) + ".tar") if tar is True else Path(tar)
        write_tar(out, tar_path, mtime=created_mtime(head["created"]))
    return SealResult(
        out=out,
        archive_id=archive_id,
        campaign=head["campaign"],
        seal_sha256=sha256_bytes(env),
        files=len(subjects),
        total_bytes=statement["predicate"]["total_bytes"],
        keyid=head["keyid"],
        previous_seal_sha256=head["previous_seal_sha256"],
        tar=tar_path,
        tables=tables,
    )


def _statement(subjects: list[dict], head: dict, ledger_info, tables, predicate_extra) -> dict:
    """The seal's statement over the scanned ``subjects``: the predicate's own fields from ``head``
    (archive id, campaign, previous seal, creation time, signer key id), the records and tables."""
    return build_statement(
        subjects,
        {
            "seal_format": SEAL_FORMAT,
            "archive_id": head["archive_id"],
            "campaign": head["campaign"],
            "previous_seal_sha256": head["previous_seal_sha256"],
            "created": head["created"],
            "files": len(subjects),
            "total_bytes": sum(s["annotations"]["size"] for s in subjects),
            "signer": {"keyid": head["keyid"]},
            "sealed_by": {"refspec": __version__},
            "records": {"manifest": MANIFEST_NAME, "plan": PLAN_NAME, "ledger": ledger_info},
            "tables": tables,
        },
        predicate_extra,
    )
