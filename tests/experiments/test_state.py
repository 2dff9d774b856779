"""State formation and transfer on the real SmolLM2 target: payloads, the common receiver, splices.

* An own-path sham (donor = recipient) restored into a fresh context reproduces
  the recipient's natural endpoint exactly.
* A KV payload of the wrong model (the Q2_K draft: same architecture and shape,
  so only the header's model hash tells them apart), of the wrong length or with
  a corrupted byte is refused with a clear error before anything reaches
  ``llama_state_seq_set_data``.
* Splices take exactly the selected regions (token-major K, feature-major V).
* Two independent processes give identical outcomes for the same intervention.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from refspec.core.errors import IntegrityError
from refspec.experiments.state import jobs, partition, receiver
from refspec.experiments.state import kvstate as kv
from refspec.native import runtime
from refspec.native.runtime import Context, ContextSpec

CAP = 8
N_CTX = 256


def _spec(ub: int = 512) -> ContextSpec:
    return ContextSpec(n_ctx=N_CTX, n_batch=512, n_ubatch=ub, threads=1)


@pytest.fixture(scope="module")
def models(lib_path, family_files):
    runtime.load(lib_path)
    t = runtime.Model(family_files.target.path, sha256=family_files.target.sha256)
    d = family_files.draft("q2_k")
    q2 = runtime.Model(d.path, sha256=d.sha256)
    yield {"target": t, "q2_k": q2, "target_sha": family_files.target.sha256, "q2_k_sha": d.sha256}
    t.close()
    q2.close()


@pytest.fixture(scope="module")
def prompt(models):
    m = models["target"]
    toks = m.tokenize(m.chat_prompt("Write a Python function that returns the n-th Fibonacci number."))
    assert 20 <= len(toks) <= 80
    return toks


def _natural(model, msha, prompt, chunks, ub=512):
    """Prefill with the given callers, export the state, continue greedily in the same context."""
    with Context(model, _spec(ub)) as ctx:
        logits = partition.prefill(ctx, prompt, chunks)
        raw = kv.export_state(ctx)
        ep, _ = partition.continue_greedy(ctx, model, logits, len(prompt), CAP)
    return {
        "logits": logits,
        "kv": kv.kv_payload(raw, model_sha256=msha, n_ctx=N_CTX),
        "lg": kv.logits_payload(logits, model_sha256=msha),
        "endpoint": ep,
    }


@pytest.fixture(scope="module")
def states(models, prompt):
    m, sha = models["target"], models["target_sha"]
    n = len(prompt)
    return {
        "A": _natural(m, sha, prompt, [n]),
        "U1": _natural(m, sha, prompt, [n], ub=1),  # physical micro-batch 1: a different KV on this backend
        "q2_k": _natural(models["q2_k"], models["q2_k_sha"], prompt, [n]),
    }


def _receive(models, payload, logits):
    with Context(models["target"], _spec()) as ctx:
        ep, _ = receiver.receive(ctx, models["target"], payload, logits, CAP, model_sha256=models["target_sha"])
    return ep


def test_payload_structure(states, prompt, models):
    pl = states["A"]["kv"]
    back = kv.parse_payload(pl.to_bytes())
    layout = kv.check_kv_payload(back, model_sha256=models["target_sha"], n_ctx=N_CTX)
    n = len(prompt)
    assert layout.cell_count == n and layout.positions == tuple(range(n))
    assert layout.n_layer == models["target"].n_layer and layout.v_trans  # non-flash attention: V transposed
    assert all(k.size == n * k.row_size for k in layout.k)
    assert all(v.size == v.n_rows * n * v.el_size for v in layout.v)
    assert kv.parse_payload(states["A"]["lg"].to_bytes()).logits().tobytes() == states["A"]["logits"].tobytes()


def test_own_path_shams_reproduce_the_natural_endpoint(models, states):
    for arm in ("A", "U1"):
        s = states[arm]
        assert _receive(models, s["kv"], s["logits"]) == s["endpoint"], arm


def test_wrong_model_payload_is_refused(models, states):
    draft_pl = states["q2_k"]["kv"]
    # same architecture and shape: the raw states are interchangeable as far as llama.cpp can tell
    a, d = kv.parse_state(states["A"]["kv"].body), kv.parse_state(draft_pl.body)
    assert (a.cell_count, a.n_layer, [r.size for r in a.k + a.v]) == (
        d.cell_count,
        d.n_layer,
        [r.size for r in d.k + d.v],
    )
    assert draft_pl.body != states["A"]["kv"].body
    with Context(models["target"], _spec()) as ctx:
        ctx.begin_request()
        with pytest.raises(
            IntegrityError, match="wrong model: payload exported from model sha256 " + models["q2_k_sha"]
        ):
            kv.import_state(ctx, draft_pl, model_sha256=models["target_sha"])
        assert ctx.pos_max() == -1  # nothing was restored


def test_wrong_length_and_corrupted_payloads_are_refused(models, states, tmp_path):
    data = states["A"]["kv"].to_bytes()
    (tmp_path / "short.kv").write_bytes(data[:-1])
    with pytest.raises(IntegrityError, match="wrong length: body has"):
        kv.read_payload(tmp_path / "short.kv")
    (tmp_path / "long.kv").write_bytes(data + b"\0")
    with pytest.raises(IntegrityError, match="wrong length"):
        kv.read_payload(tmp_path / "long.kv")
    bad = bytearray(data)
    bad[-1000] ^= 0x01
    (tmp_path / "flip.kv").write_bytes(bytes(bad))
    with pytest.raises(IntegrityError, match="corrupted: body sha256 .* differs from the .* recorded at export"):
        kv.read_payload(tmp_path / "flip.kv")
    with pytest.raises(IntegrityError, match="bad magic"):
        kv.parse_payload(b"X" + data[1:])
    # a body with a consistent hash but a structure other than its header's (one cell fewer)
    pl = states["A"]["kv"]
    raw = bytearray(pl.body)
    raw[12:16] = (int.from_bytes(raw[12:16], "little") - 1).to_bytes(4, "little")
    forged = kv.Payload({**pl.header, "body_sha256": kv.sha256_bytes(bytes(raw))}, bytes(raw))
    with Context(models["target"], _spec()) as ctx:
        ctx.begin_request()
        with pytest.raises(IntegrityError, match="KV state"):
            kv.import_state(ctx, kv.parse_payload(forged.to_bytes()), model_sha256=models["target_sha"])
        # another context size is refused too
        other = kv.Payload({**pl.header, "n_ctx": N_CTX * 2}, pl.body)
        with pytest.raises(IntegrityError, match="n_ctx 512"):
            kv.import_state(ctx, other, model_sha256=models["target_sha"])
        assert ctx.pos_max() == -1


def test_splice_takes_exactly_the_selected_regions(models, states, prompt):
    rec, don = states["A"]["kv"], states["U1"]["kv"]
    n = len(prompt)
    layout = kv.parse_state(rec.body)
    b = n // 2
    sel = kv.make_selector("TAIL", layout.n_layer, b)
    out, facts = kv.splice(rec, don, sel)
    assert facts["selected_bytes"] == facts["value_bytes"] * (n - b) // n
    rk, rv = kv.tensor_views(layout, rec.body)
    dk, dv = kv.tensor_views(layout, don.body)
    ok, ov = kv.tensor_views(layout, out.body)
    for il in range(layout.n_layer):
        assert np.array_equal(ok[il][:b], rk[il][:b]) and np.array_equal(ok[il][b:], dk[il][b:])
        assert np.array_equal(ov[il][:b], rv[il][:b]) and np.array_equal(ov[il][b:], dv[il][b:])
    l0k, facts = kv.splice(rec, don, kv.make_selector("L0_K", layout.n_layer, b))
    k0 = layout.k[0]
    assert facts["selected_bytes"] == k0.size
    assert (
        l0k.body[: k0.offset] == rec.body[: k0.offset]
        and l0k.body[k0.offset + k0.size :] == rec.body[k0.offset + k0.size :]
    )
    assert l0k.body[k0.offset : k0.offset + k0.size] == don.body[k0.offset : k0.offset + k0.size]
    empty, facts = kv.splice(rec, don, kv.make_selector("EMPTY", layout.n_layer, b))
    assert empty.body == rec.body and facts["changed_bytes"] == 0
    full, facts = kv.splice(rec, don, kv.make_selector("ALL", layout.n_layer, b))
    assert full.body == don.body and facts["changed_bytes"] > 0


def test_two_processes_give_identical_outcomes(models, states, tmp_path, lib_path, monkeypatch):
    # the job's files and the work folder relative to the caller's folder, as the workflow gives them
    monkeypatch.chdir(tmp_path)
    paths = {}
    for arm in ("A", "U1"):
        states[arm]["kv"].write(tmp_path / f"{arm}.kv")
        states[arm]["lg"].write(tmp_path / f"{arm}.logits")
        paths[arm] = (f"{arm}.kv", f"{arm}.logits")
    dirs = [
        {
            "direction": f"{d}->{r}",
            "donor": d,
            "recipient": r,
            "donor_kv": paths[d][0],
            "recipient_kv": paths[r][0],
            "recipient_logits": paths[r][1],
        }
        for d, r in (("U1", "A"), ("A", "U1"))
    ]
    job = {
        "lib_dir": str(lib_path),
        "model_path": str(models["target"].path),
        "model_sha256": models["target_sha"],
        "n_ctx": N_CTX,
        "n_batch": 512,
        "ub": 512,
        "threads": 1,
        "cap": CAP,
        "task_id": "t",
        "repeat": 1,
        "boundary": 8,
        "selectors": ["EMPTY", "LATE"],
        "directions": dirs,
        "frontier": False,
    }
    r1 = jobs.spawn_job(job, Path("work"), "r1")
    r2 = jobs.spawn_job({**job, "repeat": 2}, Path("work"), "r2")
    assert r1["pid"] != r2["pid"]
    assert r1["results"] == r2["results"]
    got = {(x["direction"], x["selector"]): x for x in r1["results"]}
    assert got[("U1->A", "LATE")]["changed_bytes"] > 0  # the intervention imported different bytes
    for (d, sel), x in got.items():
        if sel == "EMPTY":  # the shams inside the job process reproduce the natural endpoints
            assert x["endpoint_sha256"] == states[d.split("->")[1]]["endpoint"].sha256
