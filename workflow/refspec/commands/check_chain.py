"""``refspec check-chain``: check a sealed archive and its data seal, the last step of the seal
chain (:func:`refspec.pipeline.seal_chain.check`).

Verifies the data seal (the first of its chain) and the archive (which must follow it) under
``--pubkey`` pinned to ``--expect-keyid`` (default: the key id of the key directory's public key,
as ``refspec key-id`` prints it), then runs ``python3 -I -S report/check.py`` on the archive with
the same pins. Prints each verification's lines and the checker's output, and stops at the first
failure: exit 0 when all pass, 1 when a seal does not verify, else the checker's exit status.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core.errors import EXIT_FAILED, EXIT_OK
from ..pipeline.seal_chain import check
from ..provenance.keys import public_fingerprint
from .verify import report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archive", required=True, help="the sealed archive (refspec seal-archive)")
    p.add_argument("--sealed-data", required=True, help="the sealed data archive it follows")
    p.add_argument("--pubkey", required=True, help="the signer's public key (PEM)")
    p.add_argument(
        "--expect-keyid",
        default=None,
        metavar="SHA256:HEX",
        help="the signer's key id, from outside the archive (default: the key directory's public key)",
    )


def run(a: argparse.Namespace) -> int:
    keyid = a.expect_keyid or public_fingerprint()
    res = check(Path(a.archive), Path(a.sealed_data), Path(a.pubkey), keyid)
    if report(res.data, Path(a.sealed_data)) != EXIT_OK or res.archive is None:
        return EXIT_FAILED
    if report(res.archive, Path(a.archive)) != EXIT_OK or res.checker is None:
        return EXIT_FAILED
    sys.stdout.write(res.checker.stdout)
    return res.checker.returncode
