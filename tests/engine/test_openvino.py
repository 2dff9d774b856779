"""OpenVINO GenAI as a second engine (anc/openvino.md): the engine's own environment, installed from
the pinned lock on first use; the embedded default's GGUF files converted to IR; real engine
processes on 127.0.0.1 speaking the llama-server subset refspec uses; ``refspec qualify openvino``
end to end, sealed and checked by report/check.py.

What a wrong implementation gets wrong here:
- a speculative arm whose draft is not loaded (the greedy pipeline answering in its place) is
  refused, and so is a target-only arm whose process runs a draft;
- an IR file changed after its conversion is refused before a process starts;
- the conversion is byte-reproducible, so the IR's sha256 in the manifest pins what ran;
- the manifest lists the engine environment's distributions, and its freeze check recomputes them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from support.paths import REPO_ROOT as REPO


@pytest.fixture(scope="module")
def ov_env():
    from refspec.engines.openvino.env import ensure_env

    return ensure_env()


@pytest.fixture(scope="module")
def irs(ov_env, family_files):
    from refspec.engines.openvino.env import ensure_ir

    d = family_files.draft(family_files.default_draft)
    return {
        "target": ensure_ir(ov_env, Path(family_files.target.path), family_files.target.sha256),
        "draft": ensure_ir(ov_env, Path(d.path), d.sha256),
    }


# --------------------------------------------------------------------------- arms, without the engine


def _arm(**kw):
    from refspec.core.arms import Arm

    base = {"name": "O_x", "mode": "target", "layout": "mq", "ub": 256, "mask": 0, "kind": "openvino"}
    f = {**base, **kw}
    return Arm.of(f.pop("name"), f)


def test_an_openvino_arm_names_its_pipeline_and_speculates_only_in_continuous_batching():
    from refspec.core.errors import ConfigError

    with pytest.raises(ConfigError, match="openvino.pipeline"):
        _arm()
    with pytest.raises(ConfigError, match="continuous_batching"):
        _arm(mode="spec", openvino={"pipeline": "stateful"})
    with pytest.raises(ConfigError, match="not one of"):
        _arm(openvino={"pipeline": "paged"})
    with pytest.raises(ConfigError, match="need kind: openvino"):
        _arm(kind="worker", openvino={"pipeline": "stateful"})
    a = _arm(mode="spec", k=4, openvino={"pipeline": "continuous_batching"})
    assert a.record()["openvino"] == {
        "pipeline": "continuous_batching",
        "execution_mode": "performance",
        "ready_timeout_s": 300.0,
    }
    assert "server" not in a.record() and a.record()["kind"] == "openvino"


def test_only_the_stateful_pipeline_without_a_draft_can_be_the_reference():
    from refspec.core.arms import Arm, reference_problems
    from refspec.engines.openvino.qualify import openvino_arms

    arms = {n: Arm.of(n, spec) for n, spec in openvino_arms(speculative=True, k=4).items()}
    assert reference_problems(arms["O_ref"]) == []
    assert any("stateful" in p for p in reference_problems(arms["O_cb"]))
    assert any("speculates" in p for p in reference_problems(arms["O_spec"]))
    assert arms["O_spec"].k == 4 and arms["O_cb"].ub == arms["O_spec"].ub == 256


def test_the_arms_file_validates_against_the_schema(tmp_path):
    from refspec.core.arms import load_arms
    from refspec.engines.openvino.qualify import openvino_arms
    from refspec.pipeline.engine_qualification import write_arms

    arms = load_arms(write_arms(tmp_path, openvino_arms(speculative=True)))
    assert {a.settings.pipeline for a in arms.values()} == {"stateful", "continuous_batching"}


def test_the_lock_pins_every_distribution_with_hashes():
    from refspec.engines.openvino.env import LOCK_FILE

    text = LOCK_FILE.read_text()
    pins = [line.split(" ")[0] for line in text.splitlines() if line and line[0] not in "# "]
    assert {p.split("==")[0] for p in pins} >= {"openvino-genai", "openvino", "openvino-tokenizers", "numpy"}
    for block in text.split("\n")[3:]:
        assert not block.startswith(("openvino", "numpy")) or block.endswith("\\"), block  # a hash follows


# --------------------------------------------------------------------------- the engine


def test_the_conversion_is_byte_reproducible(ov_env, irs, tmp_path):
    """A second conversion of the draft, in a fresh process, gives the same bytes as the cached one."""
    from refspec.engines.openvino.env import CONVERT_SCRIPT

    d = irs["draft"]
    src = Path(json.loads((d.folder / "conversion.json").read_text())["gguf"])
    out = tmp_path / "again"
    subprocess.run(
        [str(ov_env.python), "-I", str(CONVERT_SCRIPT), "--gguf", str(src), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    from refspec.core.hashing import sha256_file

    assert {n: sha256_file(out / n) for n in d.files} == d.files


def test_an_ir_changed_after_its_conversion_is_found(irs, tmp_path):
    from refspec.engines.openvino.env import IR, verify_ir

    folder = tmp_path / "ir"
    shutil.copytree(irs["draft"].folder, folder)
    ir = IR(folder, irs["draft"].gguf_sha256, irs["draft"].files)
    assert verify_ir(ir) == []
    xml = folder / "openvino_model.xml"
    xml.write_text(xml.read_text().replace('version="11"', 'version="12"', 1))
    (folder / "openvino_tokenizer.bin").unlink()
    problems = verify_ir(ir)
    assert any("openvino_model.xml: sha256 differs" in p for p in problems)
    assert any("openvino_tokenizer.bin: missing" in p for p in problems)


class _Engine:
    """A real engine process started by hand (not by refspec's launcher), to see what refspec refuses."""

    def __init__(self, ov_env, irs, tmp_path, *, draft: bool, pipeline="continuous_batching"):
        from refspec.engine.server import free_port
        from refspec.engines.openvino.env import SERVER_SCRIPT, environ

        self.port = free_port()
        cmd = [str(ov_env.python), "-I", str(SERVER_SCRIPT), "--model", str(irs["target"].folder)]
        cmd += ["--gguf", "x.gguf", "--pipeline", pipeline, "--eog", "0,2,4", "--port", str(self.port)]
        if draft:
            cmd += ["--draft", str(irs["draft"].folder), "--proposals", "4"]
        self.log = tmp_path / f"engine-{self.port}.log"
        import os

        self.proc = subprocess.Popen(
            cmd, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, env={**os.environ, **environ(ov_env)}
        )
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                break
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(self.log.read_text()[-3000:]) from None
                time.sleep(0.2)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def process(self, arm):
        from refspec.engine.server import Vocabulary
        from refspec.engines.openvino.process import OpenVINOProcess

        vocab = Vocabulary(n_vocab=49152, vocab_type=2, eog=frozenset({0, 2, 4}), pieces={})
        return OpenVINOProcess("w-test", arm, self.url, self.proc, self.log, {}, vocab)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


PROMPT = [1, 4093, 198, 7084, 253, 1789, 2165, 338, 16295, 216, 32, 7706, 30, 2, 198, 1, 520, 9531, 198]


def test_a_speculative_arm_served_without_its_draft_is_refused_and_a_target_arm_with_one(ov_env, irs, tmp_path):
    """The greedy continuous-batching pipeline answering for O_spec (its draft not loaded) is refused,
    never scored as speculative; a draft running behind a target-only arm is refused too. Served by
    the right pipeline, both complete, and only the speculative one has draft counters."""
    from refspec.engine.server import ResponseRefused

    spec = _arm(name="O_spec", mode="spec", k=4, openvino={"pipeline": "continuous_batching"})
    target = _arm(name="O_cb", openvino={"pipeline": "continuous_batching"})
    plain = _Engine(ov_env, irs, tmp_path, draft=False)
    try:
        with pytest.raises(ResponseRefused, match="no draft counters"):
            plain.process(spec).complete(PROMPT, 16)
        c = plain.process(target).complete(PROMPT, 16)
        assert c.counters == {} and c.endpoint.n >= 4
    finally:
        plain.stop()
    drafted = _Engine(ov_env, irs, tmp_path, draft=True)
    try:
        with pytest.raises(ResponseRefused, match="a draft ran"):
            drafted.process(target).complete(PROMPT, 16)
        s = drafted.process(spec).complete(PROMPT, 16)
        assert s.counters["proposals"] > 0 and 0 <= s.counters["accepted"] <= s.endpoint.n
        assert s.extra["engine_ns"] > 0
    finally:
        drafted.stop()


def test_a_response_of_the_engine_is_a_complete_endpoint(ov_env, irs, tmp_path):
    """The engine's finish reason maps to the endpoint: EOG ends with a reference EOG token, the cap
    with cap tokens; the prompt length it counted is the prompt's."""
    e = _Engine(ov_env, irs, tmp_path, draft=False, pipeline="stateful")
    try:
        body = json.dumps({"prompt": PROMPT, "n_predict": 200}).encode()
        req = urllib.request.Request(e.url + "/completion", data=body, method="POST")
        obj = json.loads(urllib.request.urlopen(req, timeout=300).read())
        assert obj["tokens_evaluated"] == len(PROMPT) and obj["tokens_predicted"] == len(obj["tokens"])
        from refspec.engine.server import endpoint_from_response

        ep, counters = endpoint_from_response(
            obj, n_prompt=len(PROMPT), cap=200, eog=frozenset({0, 2, 4}), speculative=False
        )
        assert (ep.stop_reason, ep.eog) == (("eog", True) if obj["stop_type"] == "eos" else ("cap", False))
        assert ep.stop_reason == "eog" and ep.tokens[-1] in (0, 2, 4)  # a short answer to a greeting ends
    finally:
        e.stop()


# --------------------------------------------------------------------------- end to end


def qualify(*args, timeout=1800):
    return subprocess.run(
        [sys.executable, "-m", "refspec.cli", "qualify", "openvino", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_usage_errors_exit_2_before_anything_is_installed_or_run(tmp_path):
    p = qualify("--model", tmp_path / "nope.gguf", "--out", tmp_path / "a")
    assert p.returncode == 2 and "--model" in p.stderr and "no such file" in p.stderr
    p = qualify("--out", tmp_path / "b")
    assert p.returncode == 2 and "--model" in p.stderr
    assert not (tmp_path / "a" / "campaigns").exists()


def test_qualify_openvino_end_to_end_sealed_and_checked(tmp_path, ov_env, irs, family_files):
    out = tmp_path / "q"
    draft = family_files.draft(family_files.default_draft).path
    p = qualify(
        "--model", family_files.target.path, "--draft", draft, "--panel", "humaneval:0-0", "--cap", "24",
        "--out", out, "--json", "--no-progress",
    )  # fmt: skip
    assert p.returncode in (0, 1), p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["reference"] == "O_ref" and doc["exit"] == p.returncode and doc["engine"] == "openvino"
    assert doc["openvino"]["version"] == ov_env.version
    vs = {v["arm"]: v for v in doc["verdicts"]}
    assert set(vs) == {"O_cb", "O_spec"}
    assert vs["O_cb"]["acceptance"] is None and 0 < vs["O_spec"]["acceptance"] <= 1
    for v in vs.values():
        assert v["required"] == 1 and (v["first_divergence"] is None) == v["reproduces"]
    # every timed row of the speculative arm carries the engine's draft counters; no other arm's does
    rows = [json.loads(line) for line in (out / "campaigns/confirmation/journal.jsonl").read_text().splitlines()]
    ok = [r["row"] for r in rows if r.get("type") == "request" and r["row"]["status"] == "ok"]
    assert {r["arm"] for r in ok} == {"O_ref", "O_cb", "O_spec"}
    for r in ok:
        assert (r["proposals"] is not None and r["proposals"] > 0) == (r["arm"] == "O_spec"), r
    # the ready records name the engine, its pipeline and the IR it loaded
    ready = {p.name.split("-", 1)[1].split(".")[0]: json.loads(p.read_text())
             for p in (out / "campaigns/confirmation/workers").glob("*.ready.json")}  # fmt: skip
    assert ready["O_spec"]["engine"]["pipeline"] == "continuous_batching"
    assert ready["O_spec"]["ir"]["draft"]["files"] == irs["draft"].files
    assert ready["O_ref"]["engine"]["pipeline"] == "stateful" and "draft" not in ready["O_ref"]["ir"]
    # the manifest pins the IR and the engine environment
    man = json.loads((out / "manifest.json").read_text())
    deps = {d["name"]: d for d in man["buildDefinition"]["resolvedDependencies"]}
    for role, ir in irs.items():
        for name, sha in ir.files.items():
            assert deps[f"model:openvino-ir/{role}/{name}"]["digest"]["sha256"] == sha
    assert deps["openvino:pkg:pypi/openvino-genai"]["annotations"]["version"] == "2026.4.1.0"
    from refspec.provenance.manifest import freeze_check

    freeze_check(out / "manifest.json")  # recomputes the engine environment's entries too
    # sealed, with its report, and accepted by the checker
    archive = Path(doc["archive"])
    c = subprocess.run(
        [sys.executable, "-I", "-S", str(REPO / "report/check.py"), str(archive), "--quiet", "--pdf-unchecked",
         "--pubkey", str(out / "signer.pub")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-2000:]
    assert "0 mismatches" in c.stdout
    # the report's arms table names the engine and pipeline of each arm (refspec's worker vocabulary alone
    # would present O_cb as a llama.cpp arm at micro-batch 256)
    arms = re.search(r'<table data-table="arms".*?</table>', (archive / "report.html").read_text(), flags=re.S)
    shown = dict(re.findall(r'<tr><td class="mono">(O_\w+)</td><td>([^<]*)</td>', arms.group(0)))
    assert shown == {
        "O_ref": "OpenVINO GenAI, stateful",
        "O_cb": "OpenVINO GenAI, continuous batching",
        "O_spec": "OpenVINO GenAI, continuous batching",
    }


def test_an_ir_changed_in_the_cache_refuses_the_arm_with_its_failure_in_the_ledger(tmp_path, irs, family_files):
    """A cached IR file edited after its conversion: ``qualify openvino`` exits 5 naming the file, and
    the refused start is a ``failure`` line of the campaign ledger; nothing is scored from it."""
    from refspec.core.paths import cache_dir

    cache = tmp_path / "cache"
    cache.mkdir()
    for p in cache_dir().iterdir():  # the same cache, but its own copy of the target's IR
        if p.name != "openvino-ir" and not p.name.endswith(".lock"):
            (cache / p.name).symlink_to(p)
    ir_dir = cache / "openvino-ir"
    ir_dir.mkdir()
    for ir in irs.values():
        (ir_dir / ir.folder.name).symlink_to(ir.folder)
    target = ir_dir / irs["target"].folder.name
    target.unlink()
    shutil.copytree(irs["target"].folder, target)
    xml = target / "openvino_model.xml"
    xml.write_text(xml.read_text().replace('version="11"', 'version="12"', 1))
    out = tmp_path / "q"
    import os

    p = subprocess.run(
        [sys.executable, "-m", "refspec.cli", "qualify", "openvino", "--model", str(family_files.target.path),
         "--panel", "humaneval:0-0", "--cap", "8", "--out", str(out), "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=900, env={**os.environ, "REFSPEC_CACHE": str(cache)},
    )  # fmt: skip
    assert p.returncode == 5, p.stdout[-2000:] + p.stderr[-2000:]
    assert "openvino_model.xml: sha256 differs from its conversion's" in p.stderr
    ledger = [json.loads(x) for x in (out / "campaigns/confirmation/ledger.jsonl").read_text().splitlines()]
    failures = [x for x in ledger if x.get("kind") == "failure"]
    assert failures and "changed since its conversion" in json.dumps(failures[-1])
    assert not (out / "archive").exists()
