"""The append-only, hash-chained ledger."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from refspec.core.errors import IntegrityError
from refspec.core.hashing import canonical_json, sha256_bytes
from refspec.provenance.ledger import GENESIS, Ledger, verify_chain


def _filled(tmp_path, n=4):
    led = Ledger(tmp_path / "ledger.jsonl")
    for i in range(n):
        led.append({"event": "attempt", "i": i, "reason": f"step {i}"})
    return led


def test_append_adds_seq_time_and_prev(tmp_path):
    led = Ledger(tmp_path / "sub" / "ledger.jsonl")
    r0 = led.append({"event": "attempt", "reason": "first", "nested": {"a": [1, 2.5, None]}})
    r1 = led.append({"event": "attempt", "reason": "second"})
    assert r0["seq"] == 0 and r0["prev_sha256"] == GENESIS
    assert r1["seq"] == 1
    lines = led.path.read_bytes().splitlines()
    assert r1["prev_sha256"] == sha256_bytes(lines[0])
    assert lines[0] == canonical_json(r0)
    assert r0["time"].endswith("Z") and "T" in r0["time"]
    assert led.records() == [r0, r1]
    assert led.head() == (2, sha256_bytes(lines[1]))
    assert verify_chain(led.path) == []
    assert led.verify(expect_count=2, expect_head=sha256_bytes(lines[1])) == []


def test_empty_and_missing_ledger(tmp_path):
    led = Ledger(tmp_path / "none.jsonl")
    assert led.records() == []
    assert led.head() == (0, GENESIS)
    assert verify_chain(led.path) == ["none.jsonl: ledger not found"]
    led.path.write_bytes(b"")
    assert verify_chain(led.path) == []


@pytest.mark.parametrize("key", ["seq", "time", "prev_sha256"])
def test_reserved_keys_are_refused(tmp_path, key):
    with pytest.raises(ValueError, match="reserved"):
        Ledger(tmp_path / "l.jsonl").append({key: 1})


@pytest.mark.parametrize("bad", [{"x": float("nan")}, {"x": float("inf")}, {"x": object()}, {"x": {1: 2}}])
def test_non_json_values_are_refused(tmp_path, bad):
    led = Ledger(tmp_path / "l.jsonl")
    with pytest.raises(ValueError):
        led.append(bad)
    assert not led.path.exists() or led.path.read_bytes() == b""


def test_unicode_is_kept(tmp_path):
    led = Ledger(tmp_path / "l.jsonl")
    led.append({"reason": "düsseldorf — ok"})
    assert led.records()[0]["reason"] == "düsseldorf — ok"
    assert verify_chain(led.path) == []


def _rewrite(led, lines):
    led.path.write_bytes(b"".join(lines))


def test_delete_a_middle_line(tmp_path):
    led = _filled(tmp_path)
    lines = led.path.read_bytes().splitlines(keepends=True)
    _rewrite(led, lines[:1] + lines[2:])
    problems = verify_chain(led.path)
    assert any("line 2 breaks the chain" in p for p in problems)
    assert any("line 2 has seq 2" in p for p in problems)


def test_delete_the_first_line(tmp_path):
    led = _filled(tmp_path)
    lines = led.path.read_bytes().splitlines(keepends=True)
    _rewrite(led, lines[1:])
    assert any("line 1 breaks the chain" in p for p in verify_chain(led.path))


def test_delete_the_last_line_needs_the_head(tmp_path):
    led = _filled(tmp_path)
    count, head = led.head()
    lines = led.path.read_bytes().splitlines(keepends=True)
    _rewrite(led, lines[:-1])
    assert verify_chain(led.path) == []  # the chain alone cannot see it ...
    problems = verify_chain(led.path, expect_count=count, expect_head=head)  # ... the recorded head can
    assert any("has 3 lines, expected 4" in p for p in problems)
    assert any("last line hashes to" in p for p in problems)


def test_reorder_lines(tmp_path):
    led = _filled(tmp_path)
    lines = led.path.read_bytes().splitlines(keepends=True)
    _rewrite(led, [lines[0], lines[2], lines[1], lines[3]])
    problems = verify_chain(led.path)
    assert any("line 2 has seq 2" in p for p in problems)
    assert any("breaks the chain" in p for p in problems)


def test_edit_a_line_keeping_json_valid(tmp_path):
    led = _filled(tmp_path)
    data = led.path.read_bytes().replace(b'"reason":"step 1"', b'"reason":"step X"')
    led.path.write_bytes(data)
    assert any("line 3 breaks the chain" in p for p in verify_chain(led.path))


def test_edit_that_rebuilds_the_chain_changes_the_head(tmp_path):
    """Recomputing every later prev_sha256 hides an edit from the chain but not from the head."""
    led = _filled(tmp_path)
    count, head = led.head()
    recs = led.records()
    recs[1]["reason"] = "rewritten"
    prev = GENESIS
    out = []
    for r in recs:
        r["prev_sha256"] = prev
        line = canonical_json(r)
        prev = sha256_bytes(line)
        out.append(line + b"\n")
    _rewrite(led, out)
    assert verify_chain(led.path) == []
    assert verify_chain(led.path, expect_count=count, expect_head=head) != []


def test_non_canonical_line(tmp_path):
    led = _filled(tmp_path, 2)
    lines = led.path.read_bytes().splitlines(keepends=True)
    rec = json.loads(lines[1])
    lines[1] = json.dumps(rec, indent=1).replace("\n", " ").encode() + b"\n"
    _rewrite(led, lines)
    assert any("line 2 is not in canonical form" in p for p in verify_chain(led.path))


def test_garbage_and_torn_lines(tmp_path):
    led = _filled(tmp_path, 2)
    with open(led.path, "ab") as f:
        f.write(b'{"seq": 2, "tim')
    problems = verify_chain(led.path)
    assert any("line 3 is incomplete" in p for p in problems)
    assert any("line 3 is not JSON" in p for p in problems)
    with pytest.raises(IntegrityError, match="incomplete line"):
        led.append({"event": "x"})  # never appends after a torn write


def test_append_refuses_a_last_line_that_is_not_a_record(tmp_path):
    p = tmp_path / "l.jsonl"
    p.write_bytes(b"hello\n")
    with pytest.raises(IntegrityError):
        Ledger(p).append({"a": 1})


def test_long_lines_chain(tmp_path):
    led = Ledger(tmp_path / "l.jsonl")
    big = "x" * 200_000  # longer than the tail block read on append
    led.append({"blob": big})
    led.append({"blob": big})
    led.append({"blob": "small"})
    assert verify_chain(led.path) == []
    assert [r["seq"] for r in led.records()] == [0, 1, 2]


def _worker(path, who, n):
    led = Ledger(path)
    for i in range(n):
        led.append({"who": who, "i": i})


def test_concurrent_appends_from_processes_keep_the_chain(tmp_path):
    path = tmp_path / "l.jsonl"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(path, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    recs = Ledger(path).records()
    assert [r["seq"] for r in recs] == list(range(100))
    assert verify_chain(path) == []
    for w in range(4):
        assert [r["i"] for r in recs if r["who"] == w] == list(range(25))
