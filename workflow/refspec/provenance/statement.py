"""The signed statement of a seal: an in-toto Statement v1 with the refspec seal predicate.

Its subjects are every file of the archive but ``SEAL.dsse.json`` (path, sha256, size);
its predicate holds the seal format, the archive id, the campaign, the creation time,
the previous seal's sha256 (a chain of seals), the signer, the records (manifest, plan,
ledger head) and a table index (``anc/seal.md``), and any further fields the sealer adds
(:func:`build_statement`'s ``extra``: ``reproduces`` names the archive a reproduction
reproduces, ``compares`` the two archives a comparison compares). Every Parquet table of an archive
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
KEYID = re.compile(r"SHA256:[0-9a-f]{64}")
#: the seal's own predicate fields (``anc/seal.md``); further fields may only add to them
PREDICATE_FIELDS = (
    "seal_format",
    "archive_id",
    "campaign",
    "previous_seal_sha256",
    "created",
    "files",
    "total_bytes",
    "signer",
    "sealed_by",
    "records",
    "tables",
)


def build_statement(
    subjects: list[dict[str, Any]], predicate: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The statement over ``subjects`` with the seal's own ``predicate`` and the ``extra``
    predicate fields, which may add fields but never replace one of the seal's own."""
    pred = dict(predicate)
    for k, v in (extra or {}).items():
        if k in pred or k in PREDICATE_FIELDS:
            raise ValueError(f"predicate field {k!r} is the seal's own")
        pred[k] = v
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE, "predicate": pred}


def archive_reference_problems(name: str, ref: Any) -> list[str]:
    """Problems of a reference to a sealed archive: ``{seal_sha256, keyid, archive_id}``."""
    if not isinstance(ref, dict):
        return [f"statement: predicate.{name} is not an object"]
    p = []
    if not (isinstance(ref.get("seal_sha256"), str) and HEX64.fullmatch(ref["seal_sha256"])):
        p.append(f"statement: predicate.{name}.seal_sha256 is not a sha256")
    if not (isinstance(ref.get("keyid"), str) and KEYID.fullmatch(ref["keyid"])):
        p.append(f"statement: predicate.{name}.keyid is not a key id (SHA256:HEX)")
    if not isinstance(ref.get("archive_id"), str):
        p.append(f"statement: predicate.{name}.archive_id missing")
    return p


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
    if "reproduces" in pred:
        p += archive_reference_problems("reproduces", pred["reproduces"])
    if "compares" in pred:
        cmp = pred["compares"]
        if not (isinstance(cmp, dict) and set(cmp) == {"a", "b"}):
            p.append("statement: predicate.compares is not {a, b}")
        else:
            p += archive_reference_problems("compares.a", cmp["a"]) + archive_reference_problems("compares.b", cmp["b"])
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
