"""Verification of a sealed archive (a folder or a tar).

Order of checks, all problems collected rather than stopping at the first
(like RECORD validation in pypa/installer):

1. the archive's structure: only regular files (and, in a folder, folders),
   safe member paths, no duplicates; ``SEAL.dsse.json`` present. A tar must be
   uncompressed and byte for byte in the canonical form ``seal --tar`` writes
   (every header regenerated and compared, sorted regular members, one mtime,
   zero padding, two end blocks, record padding, nothing after); a compressed
   tar is refused;
2. the envelope: canonical JSON of exactly ``payload``, ``payloadType`` and one
   signature ``{keyid, sig}``, canonical base64, payload type
   ``application/vnd.in-toto+json``, keyid equal to the given key's fingerprint
   (and, with ``--expect-keyid``, that fingerprint equal to the pinned one),
   and the Ed25519 signature over the DSSE pre-authentication encoding. Nothing
   in the payload is parsed before the signature verifies; a bad signature ends
   verification;
3. the statement: in-toto Statement v1 with the refspec seal predicate;
   ``--expect-previous`` against the previous seal's sha256; a tar's mtime
   equals the seal's creation time;
4. closed world: every subject exists with its size and sha256, no other file
   (or empty folder) exists besides ``SEAL.dsse.json``;
5. every Parquet file carries the archive id and campaign in its key-value
   metadata;
6. the ledger's hash chain, its line count and its last line's sha256;
7. every CSV copy (``x.csv`` next to ``x.parquet``) equals, byte for byte, the CSV
   its table gives under the one CSV encoding (:func:`refspec.core.tables.parquet_csv_text`);
   whether a copy was compared is computed here, never taken from the seal.

Everything printed is passed through :func:`printable`: a signed string (an
archive id, a creation time, a member name) cannot move the cursor or rewrite
a line on the terminal.

``refspec verify`` prints ``OK: PATH (N files) key K archive A created T seal S
previous P`` (and a ``NOTE:`` line per table without a CSV copy) or
one ``FAIL:`` line per problem; it exits 0 when verified, 1 when not, 2 on a
usage error (:mod:`refspec.core.errors`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..core.errors import UsageError
from ..core.hashing import sha256_bytes
from ..core.tables import parquet_csv_text
from .archive import TAR_ERRORS, DirSource, Source, TarSource, created_mtime, hashing_threads, parent_dirs
from .dsse import SEAL_NAME, check_envelope
from .keys import fingerprint, load_public_key
from .ledger import verify_lines
from .statement import ARCHIVE_ID_KEY, CAMPAIGN_KEY, HEX64, MAX_SEAL_BYTES, check_statement, signed_subjects


@dataclass
class VerifyResult:
    path: Path
    problems: list[str] = field(default_factory=list)
    files: int = 0
    statement: dict[str, Any] | None = None
    seal_sha256: str | None = None
    keyid: str | None = None
    notes: list[str] = field(default_factory=list)
    csv_checked: dict[str, bool] = field(default_factory=dict)  # table -> its CSV copy was compared equal

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self, shown: str | Path | None = None) -> list[str]:
        """``OK: PATH (N files) key K archive A created T seal S previous P`` and any
        ``NOTE:`` lines, or one ``FAIL:`` line per problem; every line :func:`printable`."""
        where = shown if shown is not None else self.path
        if not self.ok:
            return [printable(f"FAIL: {p}") for p in self.problems]
        pred = (self.statement or {}).get("predicate") or {}
        return [
            printable(
                f"OK: {where} ({self.files} files) key {self.keyid} archive {pred.get('archive_id')} "
                f"created {pred.get('created')} seal {self.seal_sha256} "
                f"previous {pred.get('previous_seal_sha256') or 'none'}"
            )
        ] + [printable(f"NOTE: {n}") for n in self.notes + self.references()]

    def references(self) -> list[str]:
        """The archives the signed predicate names (``reproduces``, ``compares``), one line each."""
        pred = (self.statement or {}).get("predicate") or {}
        refs = [("reproduces", pred.get("reproduces"))]
        cmp = pred.get("compares")
        if isinstance(cmp, dict):
            refs += [(f"compares {k}", cmp.get(k)) for k in ("a", "b")]
        return [
            f"{what} seal {r.get('seal_sha256')} key {r.get('keyid')} archive {r.get('archive_id')}"
            for what, r in refs
            if isinstance(r, dict)
        ]


def printable(text: str) -> str:
    """``text`` with every character that is not printable (terminal controls such as ESC
    and CR, other C0/C1 controls, Unicode format characters such as bidirectional
    overrides, line and paragraph separators) and the backslash escaped as in Python's
    string literals (``\\x1b``, ``\\u202e``, ``\\\\``), so a signed string cannot
    rewrite what a terminal shows."""
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)


_KEYID = re.compile(r"SHA256:[0-9a-f]{64}")


def parse_keyid(text: str) -> str:
    """A pinned key id ``SHA256:<64 hex>`` (hex case is ignored) or a usage error."""
    if isinstance(text, str) and text[:7].upper() == "SHA256:" and _KEYID.fullmatch("SHA256:" + text[7:].lower()):
        return "SHA256:" + text[7:].lower()
    raise UsageError(f"--expect-keyid {text!r} is not a key id of the form SHA256:<64 hex digits>")


def parse_expect_previous(text: str | None) -> str | None:
    if text is None:
        return None
    t = text.lower()
    if t != "none" and not HEX64.fullmatch(t):
        raise UsageError(f"--expect-previous {text!r} is not a sha256 or 'none'")
    return t


# --------------------------------------------------------------------------- checks


def _csv_twins(subjects: dict[str, Any]) -> dict[str, str | None]:
    """Each Parquet subject and its CSV copy (``x.parquet`` -> ``x.csv``), or None without one."""
    out: dict[str, str | None] = {}
    for name in sorted(n for n in subjects if n.endswith(".parquet")):
        twin = name[: -len(".parquet")] + ".csv"
        out[name] = twin if twin in subjects else None
    return out


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _check_csv(src: Source, table: str, copy: str, digest: str) -> str | None:
    """Compare a CSV copy with the CSV its Parquet table gives (:func:`refspec.core.tables.parquet_csv_text`,
    the one CSV encoding); the copy's bytes have already been checked against ``digest``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # the member's bytes in an Arrow buffer, never a Python file object: pyarrow reading through
        # a Python file object from worker threads can abort the interpreter at exit
        # ("terminate called without an active exception", seen once in the workflow test)
        with src.open(table) as f:
            pf = pq.ParquetFile(pa.BufferReader(f.read()))
            h = hashlib.sha256()
            for text in parquet_csv_text(pf):
                h.update(text.encode("utf-8"))
            if h.hexdigest() == digest:
                return None
            want = _lines("".join(parquet_csv_text(pf)))
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...; a cell that is not UTF-8
        return f"{copy}: its table {table} cannot be read to compare with it ({type(e).__name__}: {e})"
    with src.open(copy) as f:
        for n, (a, b) in enumerate(itertools.zip_longest(want, f), 1):
            got = b.decode("utf-8", "replace") if b is not None else None
            if a != got:
                if got is None:
                    return f"{copy}: ends after line {n - 1}; its table {table} gives {len(want)} lines"
                if a is None:
                    return f"{copy}: has more lines than its table {table} gives ({len(want)})"
                return f"{copy}: line {n} differs from its table {table}: {got[:120]!r}, the table gives {a[:120]!r}"
    return f"{copy}: differs from the CSV its table {table} gives"


def _check_parquet(src: Source, name: str, archive_id: str, campaign: str) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with src.open(name) as f:
            md = pq.read_metadata(pa.BufferReader(f.read())).metadata or {}
    except Exception as e:  # ArrowInvalid, OSError: a broken footer
        return [f"{name}: Parquet metadata unreadable ({e.__class__.__name__})"]
    p = []
    got = md.get(ARCHIVE_ID_KEY)
    if got != archive_id.encode("utf-8"):
        p.append(
            f"{name}: Parquet archive id {got.decode('utf-8', 'replace') if got else None!r} is not {archive_id!r}"
        )
    got_c = md.get(CAMPAIGN_KEY)
    if got_c != campaign.encode("utf-8"):
        p.append(
            f"{name}: Parquet campaign {got_c.decode('utf-8', 'replace') if got_c else None!r} is not {campaign!r}"
        )
    return p


def verify_archive(
    path: str | Path,
    public_key: Ed25519PublicKey | str | Path,
    expect_previous: str | None = None,
    threads: int | None = None,
    expect_keyid: str | None = None,
) -> VerifyResult:
    """Verify an archive folder or tar; never raises on a bad archive, only on usage errors.

    ``expect_previous`` is the sha256 the archive's seal must name as its
    predecessor, or ``"none"`` for the first archive of a chain. ``expect_keyid``
    pins the signer: the given public key must have this fingerprint (obtained
    from outside the archive), so a key file swapped next to the archive fails.
    """
    p = Path(path)
    if not isinstance(public_key, Ed25519PublicKey):
        public_key = load_public_key(public_key)
    expect_previous = parse_expect_previous(expect_previous)
    if expect_keyid is not None:
        expect_keyid = parse_keyid(expect_keyid)
    if p.is_dir():
        src: Source = DirSource(p)
    elif p.is_file():
        src = TarSource(p)
    else:
        raise UsageError(f"{p} not found")
    try:
        return verify_source(src, p, public_key, expect_previous, threads, expect_keyid)
    finally:
        src.close()


def verify_source(
    src: Source,
    path: Path,
    public_key: Ed25519PublicKey,
    expect_previous: str | None,
    threads: int | None,
    expect_keyid: str | None,
) -> VerifyResult:
    """Verify an opened archive (arguments already parsed); :func:`verify_archive` and restore use it."""
    res = VerifyResult(path=path, keyid=fingerprint(public_key))
    if expect_keyid is not None and res.keyid != expect_keyid:
        res.problems.append(
            f"public key {res.keyid} is not the pinned signer {expect_keyid} "
            "(take the key id from a source outside the archive)"
        )
    _verify(src, public_key, expect_previous, threads or hashing_threads(), res)
    return res


def _verify(src: Source, key: Ed25519PublicKey, expect_previous: str | None, threads: int, res: VerifyResult) -> None:
    problems = res.problems
    problems.extend(src.problems)
    st = _authenticated_statement(src, key, res)
    if st is None:
        return
    res.statement = st
    pred = st["predicate"]
    subjects, subj_problems = signed_subjects(st)
    problems.extend(subj_problems)
    res.files = len(st["subject"])
    problems.extend(_chain_and_time(src, pred, expect_previous))
    present = dict(src.files)
    present.pop(SEAL_NAME)
    hashed_ok = _closed_world(src, subjects, present, threads, problems)
    _csv_copies(src, subjects, hashed_ok, threads, res)
    # Parquet stamps.
    aid, camp = pred.get("archive_id"), pred.get("campaign")
    if isinstance(aid, str) and isinstance(camp, str):
        for name in sorted(n for n in subjects if n.endswith(".parquet") and n in present):
            problems.extend(_check_parquet(src, name, aid, camp))
    problems.extend(_ledger_problems(src, pred, subjects, present))


def _authenticated_statement(src: Source, key: Ed25519PublicKey, res: VerifyResult) -> dict[str, Any] | None:
    """The signed statement once the envelope verifies (its problems recorded in ``res``), or
    None when there is nothing further to check."""
    problems = res.problems
    if SEAL_NAME not in src.files:
        problems.append(f"{SEAL_NAME}: missing")
        return None
    try:
        env = src.read(SEAL_NAME, MAX_SEAL_BYTES)
    except (ValueError, *TAR_ERRORS) as e:
        problems.append(f"{SEAL_NAME}: unreadable ({e})")
        return None
    res.seal_sha256 = sha256_bytes(env)
    payload, env_problems = check_envelope(env, key)
    if payload is None:
        problems.extend(env_problems)
        return None
    # Authenticated: now the payload may be parsed.
    try:
        st = json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        problems.append("statement: signed payload is not JSON")
        return None
    problems.extend(check_statement(st))
    if not isinstance(st, dict) or not isinstance(st.get("subject"), list) or not isinstance(st.get("predicate"), dict):
        return None
    return st


def _chain_and_time(src: Source, pred: dict[str, Any], expect_previous: str | None) -> list[str]:
    """The previous seal against ``--expect-previous``; a tar's mtime against the creation time."""
    problems = []
    if expect_previous is not None:
        prev = pred.get("previous_seal_sha256")
        want = None if expect_previous == "none" else expect_previous
        if prev != want:
            problems.append(
                f"{SEAL_NAME}: previous seal is {prev or 'none'}, expected {want or 'none'} "
                f"(an older or unrelated seal?)"
            )
    tar_mtime = getattr(src, "mtime", None)
    if tar_mtime is not None and isinstance(pred.get("created"), str) and tar_mtime != created_mtime(pred["created"]):
        problems.append(f"tar members' mtime {tar_mtime} is not the seal's creation time {pred['created']}")
    return problems


def _closed_world(
    src: Source, subjects: dict[str, tuple[int, str]], present: dict[str, int], threads: int, problems: list[str]
) -> set[str]:
    """Every subject present with its size and sha256, nothing else; return the members that hash as sealed."""
    for name in sorted(set(present) - set(subjects)):
        problems.append(f"{name}: not listed in the seal (extra file)")
    for name in sorted(set(subjects) - set(present)):
        problems.append(f"{name}: listed in the seal but missing")
    for d in sorted(src.dirs - parent_dirs(subjects)):
        problems.append(f"{d}/: folder not implied by the seal (extra folder)")
    to_hash = []
    for name in sorted(set(subjects) & set(present)):
        size, _digest = subjects[name]
        if present[name] != size:
            problems.append(f"{name}: size {present[name]} != sealed size {size}")
        else:
            to_hash.append(name)
    hashes = src.hash_all(to_hash, threads)
    for name in to_hash:
        got = hashes[name]
        if isinstance(got, Exception):
            problems.append(f"{name}: unreadable ({got})")
        elif got != subjects[name][1]:
            problems.append(f"{name}: sha256 {got[:16]}... != sealed {subjects[name][1][:16]}...")
    return {n for n in to_hash if hashes[n] == subjects[n][1]}


def _csv_copies(
    src: Source, subjects: dict[str, tuple[int, str]], hashed_ok: set[str], threads: int, res: VerifyResult
) -> None:
    """Each CSV copy compared with its table (csv_checked is computed here, never read from the seal)."""
    pairs = [(t, c) for t, c in _csv_twins(subjects).items() if c is not None and {t, c} <= hashed_ok]
    with ThreadPoolExecutor(max_workers=threads) as ex:
        compared = list(ex.map(lambda tc: _check_csv(src, tc[0], tc[1], subjects[tc[1]][1]), pairs))
    for (table, _copy), problem in zip(pairs, compared):
        res.csv_checked[table] = problem is None
        if problem is not None:
            res.problems.append(problem)
    for table, copy in _csv_twins(subjects).items():
        if copy is None:
            res.notes.append(f"{table}: no CSV copy (report/check.py cannot read this table)")


def _ledger_problems(
    src: Source, pred: dict[str, Any], subjects: dict[str, tuple[int, str]], present: dict[str, int]
) -> list[str]:
    """The ledger's hash chain, its line count and its last line's sha256 as the seal records them."""
    led = (pred.get("records") or {}).get("ledger") if isinstance(pred.get("records"), dict) else None
    if not isinstance(led, dict) or not isinstance(led.get("path"), str):
        return ["statement: predicate.records.ledger missing"]
    if led["path"] not in subjects:
        return [f"{led['path']}: ledger not among the sealed files"]
    if led["path"] not in present:
        return []
    try:
        with src.open(led["path"]) as f:
            return verify_lines(
                f,
                expect_count=led.get("records"),
                expect_head=led.get("head_sha256"),
                name=led["path"],
            )
    except TAR_ERRORS as e:
        return [f"{led['path']}: unreadable ({e})"]
