"""The command line: ``python3 -I -S report/check.py ARCHIVE --pubkey KEY.pub ...`` (options, output, exit status)."""

from __future__ import annotations

import os
import sys
import traceback

from refspec_check.archive import check
from refspec_check.problems import EXIT_INTERNAL, EXIT_MISMATCH, EXIT_OK, EXIT_UNREADABLE, printable
from refspec_check.seal import _HEX64_RE, _KEYID_RE, Trust, read_public_key


def parse_args(argv: list[str]):
    import argparse

    ap = argparse.ArgumentParser(
        prog="check.py", description="Recompute and check every number of a refspec archive (standard library only)."
    )
    ap.add_argument("archive", metavar="ARCHIVE")
    ap.add_argument("--quiet", action="store_true", help="print only the summary lines")
    ap.add_argument("--unsealed", action="store_true", help="check a results folder before it is sealed")
    ap.add_argument("--pubkey", metavar="KEY.pub", help="the signer's Ed25519 public key (PEM or OpenSSH)")
    ap.add_argument("--expect-keyid", metavar="SHA256:HEX", help="the signer's key id; the public key must have it")
    ap.add_argument("--expect-previous", metavar="SHA", help="sha256 of the seal this archive follows ('none': first)")
    ap.add_argument(
        "--input-pubkey",
        metavar="LABEL=KEY.pub",
        action="append",
        default=[],
        help="a comparison archive: the public key of compared archive LABEL's signer (a or b); "
        "not needed for an input signed with --pubkey's key",
    )
    ap.add_argument(
        "--pdf-unchecked",
        action="store_true",
        help="accept an archive whose report.pdf this machine cannot rebuild (no pdflatex, another pdfTeX); "
        "without it such an archive fails, and with it the last line says the PDF was not checked",
    )
    ap.add_argument("--debug", action="store_true", help="on an internal error, print its traceback")
    a = ap.parse_args(argv)
    if a.expect_keyid is not None:
        k = a.expect_keyid
        k = "SHA256:" + k[7:].lower() if k[:7].upper() == "SHA256:" else k
        if not _KEYID_RE.fullmatch(k):
            ap.error(f"--expect-keyid {a.expect_keyid!r} is not of the form SHA256:<64 hex digits>")
        a.expect_keyid = k
    inputs = {}
    for spec in a.input_pubkey:
        label, sep, path = spec.partition("=")
        if not sep or label not in ("a", "b") or not path:
            ap.error(f"--input-pubkey {spec!r} is not a=KEY.pub or b=KEY.pub")
        inputs[label] = path
    a.input_pubkey = inputs  # label -> key file
    if a.expect_previous is not None:
        a.expect_previous = a.expect_previous.lower()
        if a.expect_previous != "none" and not _HEX64_RE.fullmatch(a.expect_previous):
            ap.error(f"--expect-previous {a.expect_previous!r} is not a sha256 or 'none'")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run(a)
    except Exception as e:  # a defect of the checker, not a finding about the archive
        if a.debug:
            traceback.print_exc()
        print(
            f"check.py: internal error: {type(e).__name__}: {e} (run with --debug for the traceback)", file=sys.stderr
        )
        return EXIT_INTERNAL


def run(a) -> int:
    """Check the archive ``a.archive`` as the parsed options ask; print the findings and the summary."""
    trust = Trust(a.pubkey, a.expect_keyid, a.expect_previous)
    keys = ([(None, a.pubkey)] if a.pubkey is not None else []) + list(a.input_pubkey.items())
    for label, path in keys:  # the signer's key, then the compared archives' signers' keys
        try:
            public = read_public_key(path)
        except (OSError, ValueError) as e:
            print(printable(f"UNREADABLE {path}: not an Ed25519 public key ({e})"))
            print(printable("FAIL: " + a.archive))
            return EXIT_UNREADABLE
        if label is None:
            trust.public = public
        else:
            trust.inputs[label] = public
    code, c = check(a.archive, a.quiet, a.unsealed, trust)
    if not a.quiet:
        for p in c.unreadable:
            print(f"UNREADABLE {p}")
        for p in c.problems:
            print(f"MISMATCH {p}")
    for rel, why in sorted(c.unchecked.items()):  # printed even with --quiet: the reader must know
        print(printable(f"NOT CHECKED {rel}: {why}"))
    checked = [p for p in c.files if os.path.relpath(p, c.archive).replace(os.sep, "/") not in c.unchecked]
    print(
        f"check: {c.recomputed} numbers recomputed; {c.matched} of {c.compared} comparisons matched; "
        f"{c.identities} identities; {len(checked)} files checked; {len(c.unchecked)} not checked; "
        f"{len(c.problems)} mismatches; {len(c.unreadable)} unreadable"
    )
    if c.reproduces is not None:
        print(printable("reproduces: " + c.reproduces))
    unchecked = printable(", ".join(sorted(c.unchecked)))
    if unchecked and not a.pdf_unchecked:  # what a reader opens is checked, or the auditor says it is not
        code = code if code != EXIT_OK else EXIT_MISMATCH
        print(printable(f"FAIL: {a.archive} ({unchecked} not checked here; --pdf-unchecked accepts that)"))
        return code
    tail = f" ({unchecked} NOT CHECKED: accepted by --pdf-unchecked)" if unchecked else ""
    print(printable(("OK: " if code == EXIT_OK else "FAIL: ") + a.archive + tail))
    return code
