"""A llama-server's command line follows what the binary's ``--help`` lists (engines/llama_server/cli.py).

The help texts are captured from two versions: ``llama-server-help-0c1e570.txt`` from refspec's
stock build of the pinned source (llama-cpp-python 0.3.36), ``llama-server-help-4227c9b.txt`` from
the stock build of llama-cpp-python 0.3.16 (``native.OLD_SERVER_SDIST``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from refspec.core.arms import Arm
from refspec.engine.server import endpoint_from_response
from refspec.engines.llama_server.cli import ServerOptions, parse_help, server_command
from support.paths import DATA

NEW = (DATA / "llama-server-help-0c1e570.txt").read_text()
OLD = (DATA / "llama-server-help-4227c9b.txt").read_text()


def arm(**kw):
    base = dict(
        name="S", mode="target", layout="mq", ub=512, mask=0, kind="server", server={"binary": "/b/llama-server"}
    )
    f = {**base, **kw}
    return Arm.of(f.pop("name"), f)


def test_options_of_both_versions():
    new, old = parse_help(NEW), parse_help(OLD)
    assert new == ServerOptions()  # the pinned version: what refspec always passed
    assert not new.legacy_draft
    assert old.no_ui == "--no-webui" and not old.fa_value and not old.fit and not old.cram
    assert not old.spec_type and old.spec_prefix == "--draft-" and old.legacy_draft and old.slot_save_path


def test_command_lines_of_both_versions():
    t, d = Path("/m/t.gguf"), Path("/m/d.gguf")
    new = server_command(Path("/b/s"), arm(mode="spec"), t, d, 8080, parse_help(NEW))
    assert new[new.index("-fa") + 1] == "off" and new[new.index("-fit") + 1] == "off" and "-cram" in new
    assert "--no-ui" in new and "--spec-type" in new
    assert new[new.index("--spec-draft-n-max") + 1] == "3" and "--draft-max" not in new
    assert "--slot-save-path" not in new
    old = server_command(Path("/b/s"), arm(mode="spec"), t, d, 8080, parse_help(OLD), Path("/w/slots"))
    for absent in ("-fa", "-fit", "-cram", "--no-ui", "--spec-type", "--spec-draft-n-max"):
        assert absent not in old, absent
    assert "--no-webui" in old
    assert old[old.index("--draft-max") + 1] == "3" and old[old.index("--draft-p-min") + 1] == "0"
    assert old[old.index("--slot-save-path") + 1] == "/w/slots"
    # a reference: -ub 1 -np 1 and no draft on both versions; -b 1 only on the older one (the newer
    # server aborts at -b 1: get_sub_batch: failed to add token)
    for opts in (parse_help(NEW), parse_help(OLD)):
        ref = server_command(Path("/b/s"), arm(ub=1), t, None, 8080, opts)
        assert ref[ref.index("-ub") + 1] == "1" and ref[ref.index("-np") + 1] == "1" and "-md" not in ref
        assert (ref[ref.index("-b") + 1] == "1") if opts.batch_one else ("-b" not in ref)
    assert parse_help(OLD).batch_one and not parse_help(NEW).batch_one
    plain = server_command(Path("/b/s"), arm(), t, None, 8080, parse_help(OLD))
    assert "-b" not in plain and plain[plain.index("-ub") + 1] == "512"


def response(n, *, predicted=None, stop="limit", eog_last=False):
    toks = list(range(10, 10 + n)) + ([2] if eog_last else [])
    return {
        "tokens": toks,
        "tokens_predicted": predicted if predicted is not None else len(toks),
        "tokens_evaluated": 5,
        "stop_type": stop,
        "timings": {"draft_n": 9, "draft_n_accepted": 7},
    }


def test_older_draft_path_counts_are_recorded_never_hidden():
    eog = frozenset({2})
    # EOG inside an accepted run: the IDs end at the EOG, the count is larger
    with pytest.raises(Exception, match="tokens_predicted"):
        endpoint_from_response(
            response(5, predicted=9, stop="eos", eog_last=True), n_prompt=5, cap=8, eog=eog, speculative=True
        )
    ep, counters, notes = endpoint_from_response(
        response(5, predicted=9, stop="eos", eog_last=True),
        n_prompt=5,
        cap=8,
        eog=eog,
        speculative=True,
        legacy_draft=True,
        with_notes=True,
    )
    assert ep.n == 6 and ep.stop_reason == "eog" and notes == {"tokens_predicted": 9}
    assert counters == {"proposals": 9, "accepted": 7}
    # a stop before the cap stays short: the endpoint has fewer IDs than a capped reference
    with pytest.raises(Exception, match="tokens_predicted 8 != 6"):
        endpoint_from_response(response(6, predicted=8), n_prompt=5, cap=8, eog=eog, speculative=True)
    ep, _, notes = endpoint_from_response(
        response(6, predicted=8), n_prompt=5, cap=8, eog=eog, speculative=True, legacy_draft=True, with_notes=True
    )
    assert ep.n == 6 and ep.stop_reason == "cap" and notes == {"tokens_predicted": 8, "short_of_cap": 2}
