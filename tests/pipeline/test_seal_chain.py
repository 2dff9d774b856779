"""The seal chain (:mod:`refspec.pipeline.seal_chain`): its steps on a synthetic results folder, and
the check step through ``refspec check-chain`` as the workflow's ``check`` rule calls it."""

from __future__ import annotations

from pathlib import Path

from refspec.cli import main
from refspec.pipeline import seal_chain
from refspec.pipeline.provenance_inputs import ensure_keys
from support.synthetic_archive import make_results


def _check_chain(f: seal_chain.Folders, sealed_data: Path, pub: Path, *extra: str) -> int:
    args = ["--archive", str(f.archive), "--sealed-data", str(sealed_data), "--pubkey", str(pub)]
    return main(["check-chain", *args, *extra])


def test_the_steps_seal_render_seal_again_chained_and_check(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("REFSPEC_KEY_DIR", str(tmp_path / "keys"))
    pub = tmp_path / "signer.pub"
    ensure_keys(pub)
    f = seal_chain.Folders(tmp_path / "results")
    assert [p.name for p in (f.assembled, f.sealed_data, f.rendered, f.archive)] == [
        "assembled",
        "sealed-data",
        "rendered",
        "archive",
    ]
    make_results(f.assembled, draws=300)  # what assemble leaves: tables, plan, manifest, ledger
    data = seal_chain.seal_data(f.assembled, f.sealed_data, campaign="default")
    assert data.previous_seal_sha256 is None and data.tar is None
    seal_chain.render(f.sealed_data, f.rendered, pub)
    assert (f.rendered / "report.html").is_file() and not (f.rendered / "SEAL.dsse.json").exists()
    arch = seal_chain.seal_archive(f.rendered, f.archive, sealed_data=f.sealed_data, campaign="default", tar=True)
    assert arch.previous_seal_sha256 == data.seal_sha256 and arch.tar == tmp_path / "results" / "archive.tar"

    # the check rule's command: both seals under the key directory's key id, then report/check.py
    assert _check_chain(f, f.sealed_data, pub) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"OK: {f.sealed_data} (") and lines[0].endswith(" previous none")
    assert any(ln.startswith(f"OK: {f.archive} (") and ln.endswith(f" previous {data.seal_sha256}") for ln in lines)
    assert len(lines) > 2  # the checker's report follows

    # a key id pinned from elsewhere refuses the signer.pub next to the results
    assert _check_chain(f, f.sealed_data, pub, "--expect-keyid", "SHA256:" + "0" * 64) == 1
    out = capsys.readouterr().out
    assert "is not the pinned signer" in out and "OK:" not in out

    # the archive must follow this data seal: another first seal of the same data is not its predecessor
    other = seal_chain.seal_data(f.assembled, tmp_path / "other", campaign="default")
    assert _check_chain(f, tmp_path / "other", pub) == 1
    out = capsys.readouterr().out
    assert f"previous seal is {data.seal_sha256}, expected {other.seal_sha256}" in out

    # the data seal must start the chain: the archive is no first seal
    assert _check_chain(f, f.archive, pub) == 1
    assert f"previous seal is {data.seal_sha256}, expected none" in capsys.readouterr().out
