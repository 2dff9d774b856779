"""``refspec seal`` and ``refspec verify``: archive contents, Parquet and CSV,
refusals, determinism, key handling and the command line."""

from __future__ import annotations

import base64
import csv
import json
import math
import os
import shutil

import pyarrow.parquet as pq
import pytest

from refspec.cli import main
from refspec.core.errors import IntegrityError, UsageError
from refspec.core.hashing import sha256_file
from refspec.provenance.dsse import SEAL_NAME
from refspec.provenance.keys import KeyFileError, load_private_key
from refspec.provenance.ledger import Ledger
from refspec.provenance.seal import seal
from refspec.provenance.statement import ARCHIVE_ID_KEY, CAMPAIGN_KEY
from refspec.provenance.verify import verify_archive
from support.sealing import make_results, seal_sha256_of


def _statement(d):
    env = json.loads((d / SEAL_NAME).read_bytes())
    return env, json.loads(base64.b64decode(env["payload"]))


def _files(d):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())


def test_archive_members_are_closed_world(seal_env):
    d = seal_env["clean"]
    env, stmt = _statement(d)
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == "https://refspec.dev/seal/v1"
    names = [s["name"] for s in stmt["subject"]]
    assert names == sorted(names)
    assert set(names) | {SEAL_NAME} == set(_files(d))
    assert set(names) == set(_files(seal_env["results"])) | {"tables/qualification.csv", "tables/timings.csv"}
    for s in stmt["subject"]:
        p = d / s["name"]
        assert s["digest"]["sha256"] == sha256_file(p)
        assert s["annotations"]["size"] == p.stat().st_size
    pred = stmt["predicate"]
    assert pred["archive_id"] == "archive-0"
    assert pred["campaign"] == "probe"  # from plan.json
    assert pred["previous_seal_sha256"] is None
    assert pred["files"] == len(names)
    assert pred["signer"]["keyid"] == seal_env["a"].fingerprint == env["signatures"][0]["keyid"]
    led = Ledger(seal_env["results"] / "ledger.jsonl")
    assert pred["records"]["ledger"] == {
        "path": "ledger.jsonl",
        "records": 3,
        "head_sha256": led.head()[1],
    }
    assert {t["path"] for t in pred["tables"]} == {"tables/qualification.parquet", "tables/timings.parquet"}


def test_parquet_is_gzip_stamped_and_unchanged(seal_env):
    """The seal's copy of a table is written as the project writes tables (GZIP, PLAIN values, version 1 data
    pages: what the standard-library checker reads), stamped, with the same values."""
    for name in ("qualification", "timings"):
        src = seal_env["results"] / "tables" / f"{name}.parquet"
        dst = seal_env["clean"] / "tables" / f"{name}.parquet"
        md = pq.read_metadata(dst)
        assert md.metadata[ARCHIVE_ID_KEY] == b"archive-0"
        assert md.metadata[CAMPAIGN_KEY] == b"probe"
        for rg in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(rg).column(c)
                assert col.compression == "GZIP" and not col.has_dictionary_page
                assert set(col.encodings) <= {"PLAIN", "RLE"}
        a, b = pq.read_table(dst), pq.read_table(src)
        assert a.schema.remove_metadata() == b.schema.remove_metadata()
        assert repr(a.to_pydict()) == repr(b.to_pydict())  # NaN compares equal by repr


def test_csv_copy_round_trips_with_the_standard_library(seal_env):
    with open(seal_env["clean"] / "tables" / "qualification.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["family", "task", "arm", "qualified", "tokens", "latency_s"]
    assert rows[1] == ["smollm2-135m", "HumanEval/0", "R", "true", "1 2 3", "0.1"]
    assert rows[2][3] == "false" and float(rows[2][5]) == 1 / 3
    assert rows[3][3] == "" and rows[3][4] == "" and math.isnan(float(rows[3][5]))
    with open(seal_env["clean"] / "tables" / "timings.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["t"]) for r in rows] == [1.5e-3, 2.25e-3, 1e20, -0.0]
    assert math.copysign(1, float(rows[3]["t"])) == -1


def _endpoint_rows():
    from refspec.core.endpoint import Endpoint

    rows = []
    for i, (toks, eog) in enumerate((([5, 17, 2], True), ([5, 17, 9, 11], False), ([], True))):
        stop = "eog" if eog else "cap"
        rows.append(
            {
                "campaign": "confirmation",
                "family": "smollm2-135m",
                "task_id": f"HumanEval/{i}",
                "arm": "R",
                "cap": 4,
                "session": "s0",
                "repeat": 1,
                "endpoint_sha256": Endpoint(tuple(toks), eog, stop).sha256,
                "tokens": toks,
                "n": len(toks),
                "eog": eog,
                "last_token": toks[-1] if toks else None,
                "stop_reason": stop,
            }
        )
    return rows


def test_project_tables_keep_their_csv_copy(tmp_path, seal_env):
    """Tables written by refspec.core.tables (Parquet + CSV) are carried, checked and stamped."""
    from refspec.core import tables

    res = make_results(tmp_path / "r")
    paths = tables.write_table(_endpoint_rows(), "endpoints", res / "tables")
    csv_bytes = paths["csv"].read_bytes()
    r = seal(res, tmp_path / "out", key=seal_env["a"].private_path)
    assert (tmp_path / "out" / "tables" / "endpoints.csv").read_bytes() == csv_bytes
    entry = next(t for t in r.tables if t["path"] == "tables/endpoints.parquet")
    assert entry["csv_origin"] == "results" and entry["csv_checked"]
    md = pq.read_metadata(tmp_path / "out" / "tables" / "endpoints.parquet").metadata
    assert md[b"refspec.table"] == b"endpoints"  # the table's own metadata is kept
    assert md[ARCHIVE_ID_KEY] == r.archive_id.encode()
    assert tables.read_records("endpoints", tmp_path / "out") == tables.read_records("endpoints", res)
    # Without the CSV copy, sealing writes the identical one.
    paths["csv"].unlink()
    seal(res, tmp_path / "out2", key=seal_env["a"].private_path)
    assert (tmp_path / "out2" / "tables" / "endpoints.csv").read_bytes() == csv_bytes


def test_a_csv_copy_that_disagrees_with_its_table_is_refused(tmp_path, seal_env):
    from refspec.core import tables

    res = make_results(tmp_path / "r")
    paths = tables.write_table(_endpoint_rows(), "endpoints", res / "tables")
    paths["csv"].write_bytes(paths["csv"].read_bytes().replace(b"5 17 2", b"5 17 3"))
    with pytest.raises(IntegrityError, match="endpoints.csv: the CSV copy does not match"):
        seal(res, tmp_path / "out", key=seal_env["a"].private_path)
    assert not (tmp_path / "out").exists()
    r = seal(res, tmp_path / "out", key=seal_env["a"].private_path, check_csv=False)
    entry = next(t for t in r.tables if t["path"] == "tables/endpoints.parquet")
    assert entry["csv_checked"] is False
    # carried unchecked, it is compared all the same when the archive is verified
    v = verify_archive(tmp_path / "out", seal_env["a"].public_path)
    assert not v.ok and v.csv_checked["tables/endpoints.parquet"] is False
    assert any(p.startswith("tables/endpoints.csv: line ") and "differs from its table" in p for p in v.problems)


def test_csv_selection(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    seal(res, tmp_path / "none", key=seal_env["a"].private_path, csv_tables="none")
    assert not list((tmp_path / "none").rglob("*.csv"))
    seal(res, tmp_path / "one", key=seal_env["a"].private_path, csv_tables=["timings"])
    assert [p.name for p in (tmp_path / "one").rglob("*.csv")] == ["timings.csv"]
    assert verify_archive(tmp_path / "one", seal_env["a"].public_path).ok


def test_sealing_is_deterministic_given_id_and_time(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    kw = dict(key=seal_env["a"].private_path, archive_id="x", created="2026-02-03T04:05:06Z", tar=True)
    r1 = seal(res, tmp_path / "one", **kw)
    r2 = seal(res, tmp_path / "two", **kw)
    assert r1.seal_sha256 == r2.seal_sha256
    assert r1.tar.read_bytes() == r2.tar.read_bytes()


def test_seal_refuses_missing_records(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    (res / "plan.json").unlink()
    (res / "ledger.jsonl").unlink()
    with pytest.raises(IntegrityError) as e:
        seal(res, tmp_path / "out", key=seal_env["a"].private_path, campaign="probe")
    assert "plan.json" in str(e.value) and "ledger.jsonl" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_seal_refuses_symlinks(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    os.symlink("/etc/hostname", res / "report" / "link")
    with pytest.raises(IntegrityError, match="report/link: symbolic link"):
        seal(res, tmp_path / "out", key=seal_env["a"].private_path)


def test_seal_refuses_a_broken_ledger(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    lines = (res / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    (res / "ledger.jsonl").write_bytes(lines[0] + lines[2])
    with pytest.raises(IntegrityError, match="ledger is broken"):
        seal(res, tmp_path / "out", key=seal_env["a"].private_path)


def test_seal_refuses_a_used_output_and_nesting(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    with pytest.raises(UsageError):
        seal(res, tmp_path / "out", key=seal_env["a"].private_path)
    with pytest.raises(UsageError):
        seal(res, res / "archive", key=seal_env["a"].private_path)


def test_seal_needs_a_campaign(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    (res / "plan.json").write_text("{}")
    with pytest.raises(UsageError, match="campaign"):
        seal(res, tmp_path / "out", key=seal_env["a"].private_path)
    r = seal(res, tmp_path / "out", key=seal_env["a"].private_path, campaign="width-sweep")
    assert r.campaign == "width-sweep"


def test_private_key_inside_results_is_refused(tmp_path, seal_env):
    res = make_results(tmp_path / "r")
    key = res / "secret.key"
    shutil.copy(seal_env["a"].private_path, key)
    os.chmod(key, 0o600)
    with pytest.raises(KeyFileError):
        seal(res, tmp_path / "out", key=key)
    assert not (tmp_path / "out").exists()


def _leaks(seal_env) -> dict:
    """Every form of the private key the seal's scan must find, each as (file name, bytes)."""
    import gzip
    import io
    import zipfile

    import pyarrow as pa

    k = load_private_key(seal_env["a"].private_path)
    from cryptography.hazmat.primitives import serialization as s

    seed = k.private_bytes(s.Encoding.Raw, s.PrivateFormat.Raw, s.NoEncryption())
    der = k.private_bytes(s.Encoding.DER, s.PrivateFormat.PKCS8, s.NoEncryption())
    pem = seal_env["a"].private_path.read_bytes()
    hx = seed.hex()
    # what `openssl pkey -text -noout` prints: 15 colon-separated bytes per indented line
    text = "ED25519 Private-Key:\npriv:\n" + "".join(
        "    " + ":".join(hx[j : j + 2] for j in range(i, min(i + 30, 64), 2)) + (":\n" if i + 30 < 64 else "\n")
        for i in range(0, 64, 30)
    )
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("notes/key.txt", b"key " + hx.encode())
    table = io.BytesIO()
    pq.write_table(pa.table({"note": ["ok", "debug " + hx, "ok"]}), table, compression="zstd")

    def b64_at(prefix: bytes, secret: bytes, url=False) -> bytes:
        enc = base64.urlsafe_b64encode if url else base64.b64encode
        return enc(prefix + secret + b"tail")

    key_zip = zbuf.getvalue()
    harmless = b"harmless text\n" * 50
    wrapped = pa.list_(pa.field("item", pa.int32(), metadata={"note": "k=" + hx}))
    field_md = io.BytesIO()
    pq.write_table(
        pa.table({"x": pa.array([1, 2])}).cast(pa.schema([pa.field("x", pa.int64(), metadata={"n": hx})])), field_md
    )
    nested_md = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array([[1], [2]], type=wrapped)}), nested_md)
    return {
        "zip-with-prefix": ("tool.sh", b"#!/bin/sh\nexit 0\n" * 20 + key_zip),
        "zip-after-encrypted-member": (
            "bundle.zip",
            patch_first_zip_member(zip_of(("a.bin", harmless, 0), ("k.txt", hx.encode(), 8)), flags=0x1),
        ),
        "zip-after-unsupported-method": (
            "bundle.zip",
            patch_first_zip_member(zip_of(("a.bin", harmless, 0), ("k.txt", hx.encode(), 8)), method=93),
        ),
        "zip-local-entry-without-directory": ("data.bin", b"\0" * 64 + key_zip[: key_zip.find(b"PK\x01\x02")]),
        "arrow-field-metadata": ("extra.parquet", field_md.getvalue()),
        "arrow-nested-field-metadata": ("extra.parquet", nested_md.getvalue()),
        "pem": ("log.txt", pem),
        "hex": ("log.txt", b"debug: key=" + hx.encode()),
        "hex-upper": ("log.txt", hx.upper().encode()),
        "raw": ("log.bin", b"\x00" * 100 + seed + b"\x00"),
        "gzipped-pem": ("key.pem.gz", gzip.compress(pem)),
        "gzip-second-member": ("log.gz", gzip.compress(b"harmless\n") + gzip.compress(hx.encode())),
        "openssl-text": ("pkey.txt", text.encode()),
        "colon-hex": ("log.txt", b"priv=" + ":".join(hx[i : i + 2] for i in range(0, 64, 2)).encode()),
        "c-array": ("key.h", ("{" + ", ".join(f"0x{c:02X}" for c in seed) + "}").encode()),
        "json-int-list": ("key.json", json.dumps({"seed": list(seed)}).encode()),
        "der-int-list": ("key.json", json.dumps(list(der)).encode()),
        "base64-offset-1": ("log.txt", b"blob=" + b64_at(b"\x01", seed)),
        "base64-offset-2": ("log.txt", b"blob=" + b64_at(b"\x01\x02", der)),
        "base64-url-offset-1": ("log.txt", b64_at(b"\xff", seed, url=True)),
        "base64-wrapped": ("log.txt", b"\n".join(base64.b64encode(b"xy" + seed)[i : i + 10] for i in range(0, 48, 10))),
        "parquet-string-cell": ("extra.parquet", table.getvalue()),
        "zip-member": ("bundle.zip", zbuf.getvalue()),
    }


def zip_of(*members: tuple[str, bytes, int]) -> bytes:
    """A zip of (name, data, compression method) members."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data, method in members:
            z.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data, compress_type=method)
    return buf.getvalue()


def patch_first_zip_member(data: bytes, *, flags: int = 0, method: int | None = None) -> bytes:
    """Mark the first member encrypted (flag bit 0) or of another compression method, in
    its local header and its central directory entry alike."""
    import struct

    d = bytearray(data)
    for at in (0, d.find(b"PK\x01\x02") + 2):  # the central entry has its fields 2 bytes later
        (f,) = struct.unpack("<H", d[at + 6 : at + 8])
        d[at + 6 : at + 8] = struct.pack("<H", f | flags)
        if method is not None:
            d[at + 8 : at + 10] = struct.pack("<H", method)
    return bytes(d)


LEAK_FORMS = [
    "zip-with-prefix",
    "zip-after-encrypted-member",
    "zip-after-unsupported-method",
    "zip-local-entry-without-directory",
    "arrow-field-metadata",
    "arrow-nested-field-metadata",
    "pem",
    "hex",
    "hex-upper",
    "raw",
    "gzipped-pem",
    "gzip-second-member",
    "openssl-text",
    "colon-hex",
    "c-array",
    "json-int-list",
    "der-int-list",
    "base64-offset-1",
    "base64-offset-2",
    "base64-url-offset-1",
    "base64-wrapped",
    "parquet-string-cell",
    "zip-member",
]


@pytest.mark.parametrize("form", LEAK_FORMS)
def test_private_key_material_never_enters_an_archive(tmp_path, seal_env, form):
    res = make_results(tmp_path / "r")
    name, leak = _leaks(seal_env)[form]
    (res / "report" / name).write_bytes(leak)
    with pytest.raises(IntegrityError, match=f"private key material found in report/{name}"):
        seal(res, tmp_path / "out", key=seal_env["a"].private_path, csv_tables="none")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if "sealing" in p.name]  # staging removed


def _unscannable() -> dict:
    import gzip

    harmless = b"harmless text\n" * 200
    gz = gzip.compress(harmless, mtime=0)
    z = zip_of(("a.txt", harmless, 8), ("b.txt", harmless, 0))
    return {
        "zip-encrypted-member": ("bundle.zip", patch_first_zip_member(z, flags=0x1), "is encrypted"),
        "zip-unsupported-method": ("bundle.zip", patch_first_zip_member(z, method=93), "compression method 93"),
        "zip-damaged-member": ("bundle.zip", z.replace(b"harmless", b"harmlesS", 1), "unreadable"),
        "zip-central-directory-cut": ("bundle.zip", z[:-30], "central directory unreadable"),
        "gzip-truncated": ("log.gz", gz[:-12], "gzip stream"),
        "gzip-trailing-bytes": ("log.gz", gz + b"not a gzip member", "gzip stream damaged"),
        "xz-truncated": ("log.xz", __import__("lzma").compress(harmless)[:-8], "xz stream"),
        # a zip entry that no central directory lists, its deflate data damaged (block type 3 does not exist)
        "zip-local-entry-damaged": ("data.bin", b"\0" * 64 + _local_entry(b"\xff" * 64), "zip entry at byte 64"),
    }


def _local_entry(deflate_data: bytes) -> bytes:
    """A zip local header (deflate, no flags, name ``k.txt``) followed by ``deflate_data``."""
    import struct

    name = b"k.txt"
    return (
        b"PK\x03\x04"
        + struct.pack("<HHHHHIIIHH", 20, 0, 8, 0, 0, 0, len(deflate_data), 0, len(name), 0)
        + name
        + deflate_data
    )


@pytest.mark.parametrize("case", list(_unscannable()))
def test_a_file_the_scan_cannot_read_completely_refuses_the_seal(tmp_path, seal_env, case):
    res = make_results(tmp_path / "r")
    name, data, why = _unscannable()[case]
    (res / "report" / name).write_bytes(data)
    with pytest.raises(IntegrityError, match=f"cannot scan every part of report/{name} .*{why}"):
        seal(res, tmp_path / "out", key=seal_env["a"].private_path, csv_tables="none")
    assert not (tmp_path / "out").exists()


def test_the_deeper_scan_has_no_false_alarm_on_clean_files(tmp_path, seal_env):
    """Zips (also after a prefix, stored and deflated), multi-member gzip and xz, Parquet with
    field metadata and stray zip signatures, all without the key: sealed and verified."""
    import gzip
    import io
    import lzma

    import pyarrow as pa

    res = make_results(tmp_path / "r")
    harmless = b"harmless text\n" * 200
    z = zip_of(("a.txt", harmless, 8), ("b.txt", harmless, 0), ("c.txt", harmless, 12), ("d.txt", harmless, 14))
    files = {
        "plain.zip": z,
        "prefixed.sh": b"#!/bin/sh\n" * 30 + z,
        "two.gz": gzip.compress(b"one\n", mtime=0) + gzip.compress(b"two\n", mtime=0),
        "log.xz": lzma.compress(harmless),
        "stray.bin": b"data PK\x03\x04" + bytes(range(256)) * 4 + b"PK\x03\x04\x14\x00\x00\x00\x08\x00",
        "empty.gz": b"",
        "tail-signature.bin": b"x" * 1000 + b"PK\x05\x06" + bytes([0, 0, 0, 0, 5, 0, 5, 0]) + b"\xff" * 10,
    }
    for name, data in files.items():
        (res / "report" / name).write_bytes(data)
    buf = io.BytesIO()
    schema = pa.schema([pa.field("x", pa.int64(), metadata={"unit": "tokens"})], metadata={"k": "v"})
    pq.write_table(pa.table({"x": [1, 2]}).cast(schema), buf)
    (res / "tables" / "extra.parquet").write_bytes(buf.getvalue())
    r = seal(res, tmp_path / "out", key=seal_env["a"].private_path)
    assert r.files > 10 and verify_archive(tmp_path / "out", seal_env["a"].public_path).ok


def test_key_scan_has_no_false_alarm_on_another_keys_material(tmp_path, seal_env):
    """Key B's seed in every form is not key A's: sealing with A succeeds."""
    import copy

    env_b = copy.copy(seal_env)
    env_b["a"] = seal_env["b"]
    res = make_results(tmp_path / "r")
    for form, (name, data) in _leaks(env_b).items():
        # any PEM private key block is refused, whoever's it is; an encrypted zip member or one of
        # an unknown compression method is refused whatever it holds
        if form not in ("pem", "gzipped-pem", "zip-after-encrypted-member", "zip-after-unsupported-method"):
            (res / "report" / f"{form}-{name}").write_bytes(data)
    assert seal(res, tmp_path / "out", key=seal_env["a"].private_path).files > 10


def test_archive_holds_no_private_key(seal_env):
    k = load_private_key(seal_env["a"].private_path)
    from cryptography.hazmat.primitives import serialization as s

    seed = k.private_bytes(s.Encoding.Raw, s.PrivateFormat.Raw, s.NoEncryption())
    for p in seal_env["clean"].rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert seed not in data and seed.hex().encode() not in data and b"PRIVATE KEY" not in data


# --------------------------------------------------------------------------- CLI


def test_cli_seal_and_verify(tmp_path, seal_env, capsys):
    res = make_results(tmp_path / "r")
    out = tmp_path / "archive"
    key = str(seal_env["a"].private_path)
    assert main(["seal", str(res), str(out), "--key", key, "--tar", "--previous", str(seal_env["clean"])]) == 0
    text = capsys.readouterr().out
    assert seal_env["a"].fingerprint in text
    n = len(_files(out)) - 1
    pub = str(seal_env["a"].public_path)
    pred = _statement(out)[1]["predicate"]
    prev = pred["previous_seal_sha256"]
    tail = (
        f"({n} files) key {seal_env['a'].fingerprint} archive {pred['archive_id']} created {pred['created']} "
        f"seal {seal_sha256_of(out)} previous {prev}\n"
    )
    assert main(["verify", str(out), "--pubkey", pub]) == 0
    assert capsys.readouterr().out == f"OK: {out} {tail}"
    assert main(["verify", str(out) + ".tar", "--pubkey", pub, "--expect-keyid", seal_env["a"].fingerprint]) == 0
    assert capsys.readouterr().out == f"OK: {out}.tar {tail}"
    assert main(["verify", str(out), "--pubkey", pub, "--expect-previous", prev]) == 0
    capsys.readouterr()
    (out / "plan.json").write_text("{}")
    (out / "extra").write_text("")
    assert main(["verify", str(out), "--pubkey", pub]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("FAIL: ") for line in lines)


def test_cli_verify_usage_errors(tmp_path, seal_env, capsys):
    pub = str(seal_env["a"].public_path)
    d = str(seal_env["clean"])
    assert main(["verify", d]) == 2  # no --pubkey
    assert main(["verify", str(tmp_path / "nothing"), "--pubkey", pub]) == 2
    assert main(["verify", d, "--pubkey", str(tmp_path / "missing.pub")]) == 2
    (tmp_path / "bad.pub").write_text("not a key")
    assert main(["verify", d, "--pubkey", str(tmp_path / "bad.pub")]) == 2
    assert main(["verify", d, "--pubkey", str(seal_env["a"].private_path)]) == 2
    assert main(["verify", d, "--pubkey", pub, "--expect-previous", "abc"]) == 2
    assert main(["verify", d, "--pubkey", pub, "--expect-previous", "none"]) == 0
    assert main(["verify", d, "--pubkey", pub, "--expect-keyid", "abc"]) == 2
    assert main(["verify", d, "--pubkey", pub, "--expect-keyid", "SHA256:" + "0" * 63]) == 2
    assert (
        main(
            [
                "verify",
                d,
                "--pubkey",
                pub,
                "--expect-keyid",
                seal_env["a"].fingerprint.upper()[:7] + seal_env["a"].fingerprint[7:].upper(),
            ]
        )
        == 0
    )
    assert main(["verify", d, "--pubkey", pub, "--expect-keyid", seal_env["b"].fingerprint]) == 1
