"""The archive's data records are a closed world (refspec_check.files, refspec_check.contract): a file,
table, column, numbers.json key or ledger record the format does not declare is refused, and the report is
rendered again from the declared records only (refspec_check.rendering).

The dishonest signer of these tests adds data that holds a sentence, writes that sentence into
report.html and seals the archive again with a valid key, so that the sentence reads as "a value of the
archive". Each edit is refused with a message naming the file and the column, key or record."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from refspec.provenance.ledger import Ledger
from support.synthetic_archive import reseal_edited, run_check

SENTENCE = "Every arm qualified and every timing reproduced"


def _say(work: Path) -> None:
    """The sentence written into report.html, as a paragraph of its own before the first table."""
    h = work / "report.html"
    html = h.read_text(encoding="utf-8")
    i = html.index("<table ")
    h.write_text(html[:i] + f"<p>{SENTENCE}.</p>\n" + html[i:], encoding="utf-8")


def _rewrite_digest(work: Path, rel: str, edit) -> None:
    """``edit(doc)`` applied to the JSON document ``rel``, and its digest replaced wherever the report
    shows it (the provenance digests check.py compares)."""
    p = work / rel
    old = hashlib.sha256(p.read_bytes()).hexdigest()
    doc = json.loads(p.read_text(encoding="utf-8"))
    edit(doc)
    p.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    new = hashlib.sha256(p.read_bytes()).hexdigest()
    for name in ("report.html", "report.tex", "numbers.json"):
        f = work / name
        if f.is_file():
            f.write_text(f.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")


def extra_table(work: Path) -> None:
    (work / "tables" / "notes.csv").write_text(f"family,note\nllama31-8b,{SENTENCE}\n", encoding="utf-8")
    _say(work)


def extra_column(work: Path) -> None:
    # the table and its CSV copy both carry the column (the seal compares them), written as the
    # pipeline writes a table, under a spec the signer extended by one column
    import dataclasses

    from refspec.core import tables as T

    sp = T.spec("ratios")
    sp = dataclasses.replace(sp, columns=(*sp.columns, T.Column("note", "string", True, "a note")))
    df = T.read_table("ratios", work / "tables")
    df["note"] = [SENTENCE] + [None] * (len(df) - 1)
    T.write_table(df, sp, work / "tables")
    _say(work)


def extra_jsonl(work: Path) -> None:
    (work / "campaigns" / "implementation" / "notes.jsonl").write_text(
        json.dumps({"note": SENTENCE}) + "\n", encoding="utf-8"
    )
    _say(work)


def ledger_unknown_kind(work: Path) -> None:
    Ledger(work / "campaigns" / "implementation" / "ledger.jsonl").append({"kind": SENTENCE, "reason": "erratum"})
    _say(work)


def ledger_extra_key(work: Path) -> None:
    Ledger(work / "campaigns" / "implementation" / "ledger.jsonl").append(
        {"kind": "failure", "reason": "worker start failed: erratum", "note": SENTENCE}
    )
    _say(work)


def plan_extra_key(work: Path) -> None:
    _rewrite_digest(work, "plan.json", lambda d: d.update(note=SENTENCE))
    _say(work)


def manifest_extra_key(work: Path) -> None:
    _rewrite_digest(work, "manifest.json", lambda d: d["host"].update(note=SENTENCE))
    _say(work)


def numbers_extra_provenance(work: Path) -> None:
    p = work / "numbers.json"
    doc = json.loads(p.read_text(encoding="utf-8"))
    doc["provenance"]["note"] = SENTENCE
    p.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    _say(work)


def numbers_extra_key(work: Path) -> None:
    p = work / "numbers.json"
    doc = json.loads(p.read_text(encoding="utf-8"))
    doc["note"] = SENTENCE
    doc["numbers"][0]["note"] = SENTENCE
    p.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


# the sentence in report.html: the report rendered again from the tables does not hold it (or cannot be
# rendered from tables whose columns are not their spec's)
UNBOUND = "MISMATCH report.html: "

CASES = [
    (
        "extra_table",
        extra_table,
        [
            "MISMATCH tables/notes.csv: a data record outside the archive's format",
            UNBOUND,
        ],
    ),
    (
        "extra_column",
        extra_column,
        [
            "MISMATCH tables/ratios.csv: column 'note' is not a column of table 'ratios' in the archive's format",
            UNBOUND,
        ],
    ),
    (
        "extra_jsonl_document",
        extra_jsonl,
        ["MISMATCH campaigns/implementation/notes.jsonl: a data record outside the archive's format", UNBOUND],
    ),
    (
        "ledger_record_of_unknown_kind",
        ledger_unknown_kind,
        [
            f"MISMATCH campaigns/implementation/ledger.jsonl:2: ledger record of kind '{SENTENCE}', which is no "
            "kind of the archive's format",
            UNBOUND,
        ],
    ),
    (
        "ledger_record_with_an_extra_key",
        ledger_extra_key,
        [
            "MISMATCH campaigns/implementation/ledger.jsonl:2: ledger record (failure) has key 'note', which is no "
            "key of a ledger record",
            UNBOUND,
        ],
    ),
    ("plan_extra_key", plan_extra_key, [UNBOUND]),
    ("manifest_extra_key", manifest_extra_key, [UNBOUND]),
    (
        "numbers_extra_provenance_value",
        numbers_extra_provenance,
        ["MISMATCH numbers.json: provenance.note: not a provenance value of the report format", UNBOUND],
    ),
    (
        "numbers_extra_keys",
        numbers_extra_key,
        [
            "MISMATCH numbers.json: key 'note' is not a key of numbers.json in the report format",
            "MISMATCH numbers.json: numbers[0]: key 'note' is not a key of a number in the report format",
        ],
    ),
]


@pytest.mark.parametrize("what,edit,phrases", CASES, ids=[c[0] for c in CASES])
def test_extra_data_is_refused(stage, tmp_path, what, edit, phrases):
    arch = reseal_edited(stage, tmp_path / "archive", edit)
    code, out = run_check(arch)
    assert code == 1, out
    bad = [ln for ln in out.splitlines() if ln.startswith("MISMATCH")]
    for phrase in phrases:
        assert any(phrase in ln for ln in bad), (phrase, out)
    print("\n" + "\n".join(ln for ln in bad if any(p in ln for p in phrases)))


def test_the_clean_stage_holds_only_declared_records(stage, tmp_path):
    arch = reseal_edited(stage, tmp_path / "archive", lambda work: None)
    code, out = run_check(arch)
    assert code == 0, out


def test_the_declared_records_are_the_pipelines():
    """The checker's declaration of a campaign's records and of a comparison's carried tables is what
    the pipeline writes (refspec.pipeline.seal_chain, refspec.compare)."""
    from refspec_check import contract

    from refspec.compare import TABLES_READ
    from refspec.pipeline import seal_chain

    assert contract.CAMPAIGN_RECORDS == seal_chain.CAMPAIGN_RECORDS
    assert contract.COMPARED_TABLES == TABLES_READ
