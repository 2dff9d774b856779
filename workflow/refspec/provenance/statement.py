"""The signed statement of a seal: an in-toto Statement v1 with the refspec seal predicate.

Its subjects are every file of the archive but ``SEAL.dsse.json`` (path, sha256, size);
its predicate holds the seal format, the archive id, the campaign, the creation time,
the previous seal's sha256 (a chain of seals), the signer, the records (manifest, plan,
ledger head) and a table index (``anc/seal.md``). Every Parquet table of an archive
carries the archive id and campaign in its key-value metadata under
:data:`ARCHIVE_ID_KEY` and :data:`CAMPAIGN_KEY`.
"""

from __future__ import annotations

import re
from typing import Any

from .archive import parent_dirs, unsafe_name
from .dsse import SEAL_NAME

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://refspec.dev/seal/v1"
SEAL_FORMAT = 1
ARCHIVE_ID_KEY = b"refspec.archive_id"
CAMPAIGN_KEY = b"refspec.campaign"
MAX_SEAL_BYTES = 256 * 1024 * 1024
HEX64 = re.compile(r"[0-9a-f]{64}")


def check_statement(st: Any) -> list[str]:
    if not isinstance(st, dict):
        return ["statement: not a JSON object"]
    p = []
    if st.get("_type") != STATEMENT_TYPE:
        p.append(f"statement: _type {st.get('_type')!r} is not {STATEMENT_TYPE!r}")
    if st.get("predicateType") != PREDICATE_TYPE:
        p.append(f"statement: predicateType {st.get('predicateType')!r} is not {PREDICATE_TYPE!r}")
    pred = st.get("predicate")
    if not isinstance(pred, dict):
        return p + ["statement: no predicate"]
    if pred.get("seal_format") != SEAL_FORMAT:
        p.append(f"statement: seal format {pred.get('seal_format')!r} is not supported")
    for k in ("archive_id", "campaign", "created"):
        if not isinstance(pred.get(k), str):
            p.append(f"statement: predicate.{k} missing")
    prev = pred.get("previous_seal_sha256")
    if prev is not None and not (isinstance(prev, str) and HEX64.fullmatch(prev)):
        p.append("statement: predicate.previous_seal_sha256 is not a sha256")
    subj = st.get("subject")
    if not isinstance(subj, list):
        return p + ["statement: no subject list"]
    if pred.get("files") != len(subj):
        p.append(f"statement: predicate.files {pred.get('files')!r} != {len(subj)} subjects")
    return p


def signed_subjects(st: dict[str, Any]) -> tuple[dict[str, tuple[int, str]], list[str]]:
    out: dict[str, tuple[int, str]] = {}
    problems = []
    for i, s in enumerate(st["subject"]):
        try:
            name = s["name"]
            digest = s["digest"]["sha256"]
            size = s["annotations"]["size"]
        except (KeyError, TypeError):
            problems.append(f"statement: subject {i} lacks name, digest.sha256 or annotations.size")
            continue
        why = unsafe_name(name) if isinstance(name, str) else "not a string"
        if why:
            problems.append(f"statement: subject {name!r}: {why}")
            continue
        if name == SEAL_NAME:
            problems.append(f"statement: subject {name!r} is the seal itself")
            continue
        if not (isinstance(digest, str) and HEX64.fullmatch(digest)):
            problems.append(f"statement: subject {name!r}: bad sha256")
            continue
        if type(size) is not int or size < 0:
            problems.append(f"statement: subject {name!r}: bad size")
            continue
        if name in out:
            problems.append(f"statement: subject {name!r} listed twice")
            continue
        out[name] = (size, digest)
    for name in sorted(set(out) & parent_dirs(out)):
        inner = next(n for n in sorted(out) if n.startswith(name + "/"))
        problems.append(f"statement: subject {name!r} is both a file and the folder of {inner!r}")
    return out, problems
