"""refspec's own worker as an arm's process: started with ``python -m`` under the worker environment,
asked over loopback HTTP with a bearer secret (the worker protocol, ``anc/worker.md``).

:func:`start_worker` starts a fresh :class:`WorkerProcess` for a block (it waits for the worker's
ready file, checks that the worker is the one asked for and placed as the arm says), ledgers
the start and records the worker's registered warmup as an excluded row.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.arms import Arm
from ...core.endpoint import Endpoint
from ...core.errors import PlacementError
from ...core.fsutil import atomic_write_text
from ...core.hashing import sha256_json
from ...engine.client import get_json, open_request
from ...engine.context import RunContext, ledger_line, record
from ...engine.errors import InvalidResponse, ProcessStartError, SequenceGap
from ...engine.process import WARMUP_TASK, Completion
from ...engine.rows import placement_columns, request_row, warmup_record
from ...engine.spawn import describe_exit, kill_process, log_tail, record_process, spawn
from ...engine.transaction import COUNTER_KEYS
from ...native.models import FamilyFiles
from ...native.runtime import placement_shortfall

WORKER_MODULE = "refspec.commands.worker"


def placement_problems(arm: Arm, placement: dict) -> list[str]:
    """What the worker's reported placement lacks compared with the arm's ``gpu_layers``."""
    want = 0 if arm.gpu_layers is None else int(arm.gpu_layers)
    problems = []
    roles = ["target"] + (["draft"] if arm.speculative else [])
    for role in roles:
        p = placement.get(role)
        if p is None:
            problems.append(f"the worker reported no placement for its {role} model")
            continue
        if int(p.get("requested", 0)) != want:
            problems.append(f"{role}: the worker loaded with gpu_layers {p.get('requested')}, not {want}")
        short = placement_shortfall({**p, "devices": placement.get("devices", [])})
        if short:
            problems.append(f"{role}: {short}")
    return problems


@dataclass
class WorkerSpec:
    family: str
    arm: Arm
    files: FamilyFiles
    lib_dir: Path
    worker_id: str
    run_dir: Path
    draft: str | None = None
    arms_file: str | None = None
    host: str = "127.0.0.1"
    warmup_cap: int | None = None
    env_extra: dict[str, str] = field(default_factory=dict)
    also_arms: tuple[Arm, ...] = ()  # the other arms the process serves (the paired design)

    @property
    def arms(self) -> tuple[Arm, ...]:
        """Every arm the process serves, the first one first."""
        return (self.arm, *self.also_arms)


def worker_command(spec: WorkerSpec, ready_path: Path) -> list[str]:
    """The worker's command line for ``spec`` (``python -m`` :data:`WORKER_MODULE`)."""
    arm = spec.arm
    cmd = [
        sys.executable,
        "-m",
        WORKER_MODULE,
        "--family",
        spec.family,
        "--arm",
        arm.name,
        "--host",
        spec.host,
        "--port",
        "0",
        "--ready-file",
        str(ready_path),
        "--worker-id",
        spec.worker_id,
        "--lib-dir",
        str(spec.lib_dir),
        "--exit-with-parent",
        str(os.getpid()),
        "--target-file",
        str(spec.files.target.path),
        "--target-sha256",
        str(spec.files.target.sha256),
    ]
    for other in spec.also_arms:
        cmd += ["--also-arm", other.name]
    if any(a.speculative for a in spec.arms):
        d = spec.files.draft(spec.draft)
        cmd += ["--draft", d.name, "--draft-file", str(d.path), "--draft-sha256", str(d.sha256)]
    if spec.arms_file:
        cmd += ["--arms-file", str(Path(spec.arms_file).resolve())]
    if arm.gpu_layers is not None:
        cmd += ["--gpu-layers", str(int(arm.gpu_layers))]
    if spec.warmup_cap is not None:
        cmd += ["--warmup-cap", str(int(spec.warmup_cap))]
    return cmd


class WorkerProcess:
    """A started worker process (ready: its warmup is done and it listens)."""

    def __init__(self, spec: WorkerSpec, proc: subprocess.Popen, ready: dict, log_path: Path, started_ns: int):
        self.spec = spec
        self.proc = proc
        self.ready = ready
        self.log_path = log_path
        self.url = ready["url"]
        self.pid = proc.pid
        self.worker_id = spec.worker_id
        self.started_ns = started_ns
        self.ready_path = Path(spec.run_dir).resolve() / "workers" / f"{spec.worker_id}.ready.json"
        self.secret = ready.get("secret")
        self.next_index = 0  # the request_index the worker's next completion must carry

    @property
    def placement(self) -> dict | None:
        return self.ready.get("placement")

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    def start(cls, spec: WorkerSpec, *, ready_timeout: float = 600.0) -> WorkerProcess:
        wdir = Path(spec.run_dir).resolve() / "workers"  # the worker runs there: every path it gets is absolute
        wdir.mkdir(parents=True, exist_ok=True)
        ready_path = wdir / f"{spec.worker_id}.ready.json"
        log_path = wdir / f"{spec.worker_id}.log"
        if ready_path.exists():
            ready_path.unlink()
        arm = spec.arm
        cmd = worker_command(spec, ready_path)
        t0 = time.perf_counter_ns()
        proc = spawn(cmd, spec.lib_dir, arm.threads, log_path=log_path, cwd=wdir, extra=spec.env_extra)
        record_process(wdir, spec.worker_id, proc.pid)
        deadline = time.monotonic() + ready_timeout
        while True:
            if ready_path.exists():
                try:
                    ready = json.loads(ready_path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as e:  # the file is written atomically: this is a real problem
                    kill_process(proc)
                    raise ProcessStartError(f"worker {spec.worker_id}: unreadable ready file {ready_path}: {e}") from e
                break
            code = proc.poll()
            if code is not None:
                raise ProcessStartError(
                    f"worker {spec.worker_id} (arm {arm.name}) {describe_exit(code)} before it was "
                    f"ready; last log lines:\n{log_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                kill_process(proc)
                raise ProcessStartError(
                    f"worker {spec.worker_id} (arm {arm.name}) not ready after {ready_timeout:.0f} s; log {log_path}"
                )
            time.sleep(0.05)
        w = cls(spec, proc, ready, log_path, t0)
        problems = w._check_identity()
        if problems:
            w.kill()
            raise ProcessStartError(
                f"worker {spec.worker_id} is not the one that was asked for: " + "; ".join(problems)
            )
        short = placement_problems(arm, ready.get("placement") or {})
        if short:
            w.kill()
            raise PlacementError(
                f"worker {spec.worker_id} (arm {arm.name}): "
                + "; ".join(short)
                + ": refusing to time it (check the build's backend, CUDA_VISIBLE_DEVICES "
                "and the host's GPUs, or set gpu_layers)"
            )
        return w

    def _check_identity(self) -> list[str]:
        r, spec = self.ready, self.spec
        problems = []
        if r.get("pid") != self.proc.pid:
            problems.append(f"ready file pid {r.get('pid')} != started pid {self.proc.pid}")
        if r.get("arm") != spec.arm.name:
            problems.append(f"arm {r.get('arm')} != {spec.arm.name}")
        got_records = (r.get("arms") or {}) if spec.also_arms else None
        for arm in spec.arms:
            want = {k: v for k, v in arm.record().items() if k != "cap"}
            if "gpu_layers" in want and want["gpu_layers"] is None:
                want["gpu_layers"] = 0  # what the worker loads with when it is given no --gpu-layers
            rec = r.get("arm_record") if got_records is None else got_records.get(arm.name)
            got = {k: v for k, v in (rec or {}).items() if k != "cap"}
            if want != got:
                who = f"arm {arm.name}: recipe" if spec.also_arms else "arm recipe"
                problems.append(f"{who} differs: worker {got}, driver {want}")
        if spec.also_arms and sorted(r.get("arms") or {}) != sorted(a.name for a in spec.arms):
            problems.append(f"arms {sorted(r.get('arms') or {})} != {sorted(a.name for a in spec.arms)}")
        if (r.get("models") or {}).get("target", {}).get("sha256") != spec.files.target.sha256:
            problems.append("target model hash differs")
        if any(a.speculative for a in spec.arms):
            d = spec.files.draft(spec.draft)
            if (r.get("models") or {}).get("draft", {}).get("sha256") != d.sha256:
                problems.append("draft model hash differs")
        if not (r.get("warmup") or {}).get("done"):
            problems.append("warmup not done")
        for arm in spec.also_arms:
            if not ((r.get("warmups") or {}).get(arm.name) or {}).get("done"):
                problems.append(f"arm {arm.name}: warmup not done")
        if r.get("prompt_cache") is not False:
            problems.append("prompt cache not reported off")
        if r.get("requests_served") != 0:
            problems.append(f"the worker has already served {r.get('requests_served')} requests")
        if not isinstance(r.get("secret"), str) or len(r["secret"]) < 32:
            problems.append("no secret in the ready file")
        try:
            mode = os.stat(self.ready_path).st_mode & 0o777
        except OSError as e:
            problems.append(f"ready file: {e}")
        else:
            if mode & 0o077:
                problems.append(f"the ready file (it holds the secret) has mode {mode:04o}, not 0600")
        return problems

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (the worker finishes an in-flight request, then exits 0); SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            if self.wait_exit(timeout) is None:
                kill_process(self.proc)
        code = self.proc.wait()
        self._redact_secret()
        return code

    def kill(self) -> int:
        kill_process(self.proc)
        code = self.proc.wait()
        self._redact_secret()
        return code

    def _redact_secret(self) -> None:
        """The worker has exited: its ready file (kept with the results) no longer needs the secret."""
        try:
            rec = json.loads(self.ready_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(rec, dict) and rec.get("secret") is not None:
            rec["secret"] = None
            atomic_write_text(self.ready_path, json.dumps(rec, indent=1, sort_keys=True) + "\n", mode=0o600)

    def describe_exit(self) -> str:
        return describe_exit(self.proc.poll())

    # ---------------------------------------------------------------- HTTP
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}", "Connection": "close"}

    def _post(self, path: str, data: bytes, timeout: float) -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.url + path, data=data, method="POST", headers={**self._headers(), "Content-Type": "application/json"}
        )
        return open_request(req, timeout)

    def get(self, path: str, timeout: float = 10.0) -> dict:
        return get_json(self.url + path, self._headers(), timeout)

    def health(self) -> dict:
        return self.get("/health")

    def tokenize(self, text: str, chat: bool = True, timeout: float = 60.0) -> list[int]:
        _, raw = self._post("/refspec/tokenize", json.dumps({"text": text, "chat": chat}).encode(), timeout)
        out = json.loads(raw)
        ids = out["tokens"]
        if not isinstance(ids, list) or not all(type(x) is int for x in ids):
            raise InvalidResponse("tokenize: tokens is not a list of token IDs")
        return ids

    def complete(
        self,
        prompt_ids: list[int],
        cap: int,
        *,
        request_id: str | None = None,
        timeout: float = 600.0,
        arm: str | None = None,
    ) -> Completion:
        """One timed request: submit -> parsed, validated response. ``arm``: which of a paired
        worker's arms serves it (default: the first)."""
        arm = arm or self.spec.arm.name
        ext = {"request_id": request_id} if request_id else {}
        if self.spec.also_arms:
            ext["arm"] = arm
        body = {
            "model": arm,
            "prompt": list(prompt_ids),
            "max_tokens": int(cap),
            "temperature": 0,
            "refspec": ext,
        }
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        want_prompt = sha256_json(list(prompt_ids))
        t0 = time.perf_counter_ns()
        status, raw = self._post("/v1/completions", data, timeout)
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise InvalidResponse(f"response is not JSON: {e}") from e
        ep, margins, counters, evidence = validate_completion(
            obj,
            pid=self.pid,
            arm=arm,
            prompt_sha256=want_prompt,
            n_prompt=len(prompt_ids),
            cap=cap,
            request_id=request_id,
        )
        t1 = time.perf_counter_ns()
        if status != 200:
            raise InvalidResponse(f"HTTP status {status}")
        got, want = obj["refspec"].get("request_index"), self.next_index
        if type(got) is not int or got != want:
            raise SequenceGap(
                f"request_index {got!r} where {want} was due: the worker served "
                + (
                    f"{got - want} request(s) the driver did not send"
                    if type(got) is int and got > want
                    else "out of sequence"
                )
            )
        self.next_index += 1
        return Completion(t1 - t0, ep, margins, counters, evidence, obj)


def validate_completion(
    obj: Any, *, pid: int, arm: str, prompt_sha256: str, n_prompt: int, cap: int, request_id: str | None = None
):
    """Check an OpenAI-shaped completion and its ``refspec`` extra; return (endpoint, margins, counters, evidence)."""

    def need(cond, what):
        if not cond:
            raise InvalidResponse(what)

    need(isinstance(obj, dict), "response is not a JSON object")
    need(obj.get("object") == "text_completion", "object is not text_completion")
    ch = obj.get("choices")
    need(isinstance(ch, list) and len(ch) == 1 and isinstance(ch[0], dict), "choices is not one choice")
    ext = obj.get("refspec")
    need(isinstance(ext, dict), "refspec extra field missing")
    need(ext.get("pid") == pid, f"answered by pid {ext.get('pid')}, not the worker's {pid}")
    need(isinstance(ext.get("arm"), dict) and ext["arm"].get("name") == arm, "answered by another arm")
    need(ext.get("request_id") == request_id, "request_id not echoed")
    need(ext.get("prompt_sha256") == prompt_sha256, "the worker decoded another prompt")
    need(ext.get("cap") == cap, "the worker used another cap")
    toks = ext.get("tokens")
    need(isinstance(toks, list) and all(type(t) is int for t in toks), "tokens is not a list of token IDs")
    try:
        ep = Endpoint.from_record(ext.get("endpoint") or {})
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidResponse(f"endpoint record invalid: {e}") from e
    need(list(ep.tokens) == toks, "endpoint tokens differ from tokens")
    need(ext["endpoint"].get("sha256") == ep.sha256, "endpoint digest does not match its record")
    need(ep.n <= cap, f"{ep.n} tokens exceed the cap {cap}")
    need((ep.stop_reason == "cap") == (not ep.eog), "stop reason and EOG flag disagree")
    need(ep.stop_reason != "cap" or ep.n == cap, "stop reason cap but fewer tokens than the cap")
    need(ch[0].get("finish_reason") == ("stop" if ep.eog else "length"), "finish_reason disagrees with the endpoint")
    usage = obj.get("usage") or {}
    need(
        usage.get("completion_tokens") == ep.n and usage.get("prompt_tokens") == n_prompt,
        "usage disagrees with the endpoint or the prompt",
    )
    counters = ext.get("counters")
    need(isinstance(counters, dict) and all(type(counters.get(k)) is int for k in COUNTER_KEYS), "counters missing")
    margins = ext.get("margins")
    need(isinstance(margins, list) and len(margins) == ep.n, "margins are not one per generated token")
    evidence = ext.get("evidence")
    need(evidence is None or isinstance(evidence, dict), "evidence is not an object")
    return ep, margins, counters, evidence


def start_worker(ctx: RunContext, arm: Arm, block: int) -> tuple[WorkerProcess, dict]:
    """Start a fresh worker for ``arm``; ledger its start and record its warmup (an excluded row)."""
    w, recs = _start(ctx, arm, block, ())
    return w, recs[0]


def start_paired_worker(
    ctx: RunContext, arm: Arm, block: int, also_arms: tuple[Arm, ...]
) -> tuple[WorkerProcess, list[dict]]:
    """Start one fresh worker that serves ``arm`` and ``also_arms`` (the paired design); ledger its
    start and record every arm's warmup, each an excluded row at its place in the executed order."""
    return _start(ctx, arm, block, also_arms)


def _start(ctx: RunContext, arm: Arm, block: int, also_arms: tuple[Arm, ...]) -> tuple[WorkerProcess, list[dict]]:
    arms = (arm, *also_arms)
    wid = ctx.next_worker_id("paired" if also_arms else arm.name)
    spec = WorkerSpec(
        family=ctx.family,
        arm=arm,
        files=ctx.files,
        lib_dir=ctx.lib_dir,
        worker_id=wid,
        run_dir=ctx.out_dir,
        draft=ctx.draft if any(a.speculative for a in arms) else None,
        arms_file=ctx.arms_file,
        host=ctx.host,
        warmup_cap=ctx.warmup_cap,
        also_arms=also_arms,
    )
    w = WorkerProcess.start(spec, ready_timeout=ctx.ready_timeout)
    r = w.ready
    pc = placement_columns(r.get("placement"))
    identity_keys = ("arm_record", "models", "lib_dir", "python") + (("arms",) if also_arms else ())
    ledger_line(
        ctx,
        "worker_start",
        "fresh worker for a paired block (every arm of the comparison)" if also_arms else "fresh worker for a block",
        worker=wid,
        arm=arm.name,
        arms=[a.name for a in arms] if also_arms else None,
        block=block,
        pid=w.pid,
        url=w.url,
        load_s=r.get("load_s"),
        device=pc["device"],
        gpu_layers=pc["gpu_layers"],
        identity_sha256=sha256_json({k: r.get(k) for k in identity_keys}),
    )
    warmups = r.get("warmups") if also_arms else {arm.name: r["warmup"]}
    return w, [
        _warmup_record(ctx, a, block, wid, order, warmups[a.name], r.get("placement")) for order, a in enumerate(arms)
    ]


def _warmup_record(ctx: RunContext, arm: Arm, block: int, wid: str, order: int, wu: dict, placement) -> dict:
    """The registered warmup of ``arm`` on worker ``wid``: an excluded row, its ledger line and journal record."""
    ep = Endpoint.from_record(wu["endpoint"])
    row = request_row(
        ctx,
        arm,
        block=block,
        worker=wid,
        task_id=WARMUP_TASK,
        cap=int(wu["cap"]),
        repeat=0,
        order_index=order,
        attempt=1,
        status="excluded_warmup",
        reason=f"registered warmup (prompt sha256 {wu['prompt_sha256'][:16]}, not timed)",
        endpoint=ep,
        counters=wu["counters"],
        placement=placement,
    )
    ledger_line(
        ctx,
        "excluded_warmup",
        row["reason"],
        worker=wid,
        arm=arm.name,
        task_id=WARMUP_TASK,
        outcome="excluded",
        engine_ns=wu.get("engine_ns"),
    )
    return record(ctx, warmup_record(row, wu["counters"], wu["prompt_sha256"]))
