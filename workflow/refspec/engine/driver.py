"""The driver: fresh worker processes, timed requests over loopback, every attempt kept.

A campaign hands the driver *blocks*: one arm and an ordered list of planned
requests (task, prompt token IDs, cap, repeat). :func:`run_block` starts a fresh
worker for the block (``python -m refspec.engine.worker`` with a scrubbed environment,
see :func:`worker_env`), waits for its ready file, records the worker's
registered warmup as an excluded row, then submits the requests one by one and
times each complete request as a client sees it: ``time.perf_counter_ns()``
just before the (already encoded) request is submitted with ``urllib`` and
just after the response has been parsed and validated. Model loading, the
warmup, tokenization, journal and ledger writes are outside that interval.

Nothing completed is lost: each attempt is appended to a JSON-lines journal
(one ``write`` + ``fsync`` per line) and to the hash-chained ledger as soon as
it ends. When a worker dies (for example killed with SIGKILL in the middle of
a request) the attempt is recorded as failed with the reason (exit status,
transport error), the ledger gets an ``interruption`` line, a fresh worker is
started and the rest of the block runs; the failed request is re-run as a new
attempt (``attempt`` + 1, ``retry_of`` in the ledger) up to ``retries`` times.
A request the worker answers with an HTTP error is recorded as failed and not
re-run (the same input would give the same answer).

The worker protocol is documented in ``anc/worker.md``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.arms import Arm
from ..core.endpoint import Endpoint
from ..core.errors import PlacementError, RefspecError
from ..core.fsutil import atomic_write_text
from ..core.hashing import canonical_json, sha256_json
from ..native.models import FamilyFiles
from ..native.runtime import placement_shortfall
from ..provenance.ledger import Ledger
from .spawn import describe_exit, kill_process, log_tail, spawn
from .transaction import COUNTER_KEYS

WORKER_MODULE = "refspec.engine.worker"
WARMUP_TASK = "warmup"


class WorkerError(RefspecError):
    """A worker could not be started or stopped as expected."""


class RequestError(RefspecError):
    """The worker answered a request with an HTTP error."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


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


def placement_columns(placement: dict | None) -> dict:
    """The ``requests`` columns that say where the arm ran (from the worker's ready record)."""
    p = placement or {}
    t, d = p.get("target") or {}, p.get("draft") or {}
    return {
        "device": t.get("device"),
        "device_description": t.get("device_description"),
        "gpu_layers": t.get("offloaded"),
        "draft_gpu_layers": d.get("offloaded") if d else None,
    }


class TransportError(RefspecError):
    """No complete HTTP answer: connection refused or reset, timeout."""


class InvalidResponse(RefspecError):
    """An HTTP 200 answer that does not pass validation."""


class SequenceGap(InvalidResponse):
    """The worker's ``request_index`` did not advance by exactly one since the driver's last completion.

    The worker counts every completion it serves; a gap means it served requests the
    driver did not send (between or during timed ones), so the block's timings are not
    trusted: :func:`run_block` fails the block.
    """


# --------------------------------------------------------------------------- one worker

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def open_request(req: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    """Send one loopback request; an HTTP error is a RequestError, no complete answer a TransportError."""
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            msg = json.loads(body)["error"]["message"]
        except Exception:
            msg = body.decode("utf-8", "replace")[:500]
        raise RequestError(e.code, msg) from None
    except (urllib.error.URLError, OSError, ConnectionError) as e:  # refused, reset, timeout, remote closed
        reason = getattr(e, "reason", e)
        raise TransportError(f"{type(reason).__name__}: {reason}") from None
    except Exception as e:  # http.client.RemoteDisconnected, IncompleteRead, BadStatusLine
        raise TransportError(f"{type(e).__name__}: {e}") from None


@dataclass
class Completion:
    """A validated response and its client-side latency."""

    t_ns: int
    endpoint: Endpoint
    margins: list
    counters: dict
    evidence: dict | None
    response: dict

    @property
    def extra(self) -> dict:
        return self.response["refspec"]


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


class Worker:
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

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    def start(cls, spec: WorkerSpec, *, ready_timeout: float = 600.0) -> Worker:
        wdir = Path(spec.run_dir).resolve() / "workers"  # the worker runs there: every path it gets is absolute
        wdir.mkdir(parents=True, exist_ok=True)
        ready_path = wdir / f"{spec.worker_id}.ready.json"
        log_path = wdir / f"{spec.worker_id}.log"
        if ready_path.exists():
            ready_path.unlink()
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
        if arm.speculative:
            d = spec.files.draft(spec.draft)
            cmd += ["--draft", d.name, "--draft-file", str(d.path), "--draft-sha256", str(d.sha256)]
        if spec.arms_file:
            cmd += ["--arms-file", str(Path(spec.arms_file).resolve())]
        if arm.gpu_layers is not None:
            cmd += ["--gpu-layers", str(int(arm.gpu_layers))]
        if spec.warmup_cap is not None:
            cmd += ["--warmup-cap", str(int(spec.warmup_cap))]
        t0 = time.perf_counter_ns()
        proc = spawn(cmd, spec.lib_dir, arm.threads, log_path=log_path, cwd=wdir, extra=spec.env_extra)
        deadline = time.monotonic() + ready_timeout
        while True:
            if ready_path.exists():
                try:
                    ready = json.loads(ready_path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as e:  # the file is written atomically: this is a real problem
                    kill_process(proc)
                    raise WorkerError(f"worker {spec.worker_id}: unreadable ready file {ready_path}: {e}") from e
                break
            code = proc.poll()
            if code is not None:
                raise WorkerError(
                    f"worker {spec.worker_id} (arm {arm.name}) {describe_exit(code)} before it was "
                    f"ready; last log lines:\n{log_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                kill_process(proc)
                raise WorkerError(
                    f"worker {spec.worker_id} (arm {arm.name}) not ready after {ready_timeout:.0f} s; log {log_path}"
                )
            time.sleep(0.05)
        w = cls(spec, proc, ready, log_path, t0)
        problems = w._check_identity()
        if problems:
            w.kill()
            raise WorkerError(f"worker {spec.worker_id} is not the one that was asked for: " + "; ".join(problems))
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
        want = {k: v for k, v in spec.arm.record().items() if k != "cap"}
        if "gpu_layers" in want and want["gpu_layers"] is None:
            want["gpu_layers"] = 0  # what the worker loads with when it is given no --gpu-layers
        got = {k: v for k, v in (r.get("arm_record") or {}).items() if k != "cap"}
        if want != got:
            problems.append(f"arm recipe differs: worker {got}, driver {want}")
        if (r.get("models") or {}).get("target", {}).get("sha256") != spec.files.target.sha256:
            problems.append("target model hash differs")
        if spec.arm.speculative:
            d = spec.files.draft(spec.draft)
            if (r.get("models") or {}).get("draft", {}).get("sha256") != d.sha256:
                problems.append("draft model hash differs")
        if not (r.get("warmup") or {}).get("done"):
            problems.append("warmup not done")
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
        try:
            with _OPENER.open(
                urllib.request.Request(self.url + path, headers=self._headers()), timeout=timeout
            ) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise RequestError(e.code, e.read().decode("utf-8", "replace")[:500]) from None
        except Exception as e:
            raise TransportError(f"{type(e).__name__}: {e}") from None

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
        self, prompt_ids: list[int], cap: int, *, request_id: str | None = None, timeout: float = 600.0
    ) -> Completion:
        """One timed request: submit -> parsed, validated response."""
        body = {
            "model": self.ready.get("arm"),
            "prompt": list(prompt_ids),
            "max_tokens": int(cap),
            "temperature": 0,
            "refspec": {"request_id": request_id} if request_id else {},
        }
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        want_prompt = sha256_json(list(prompt_ids))
        t0 = time.perf_counter_ns()
        status, raw = self._post("/v1/completions", data, timeout)
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise InvalidResponse(f"response is not JSON: {e}") from None
        ep, margins, counters, evidence = validate_completion(
            obj,
            pid=self.pid,
            arm=self.spec.arm.name,
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
        raise InvalidResponse(f"endpoint record invalid: {e}") from None
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


# --------------------------------------------------------------------------- journal


class Journal:
    """JSON lines, one record per completed attempt; each line is one ``write`` followed by ``fsync``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, record: dict) -> None:
        line = canonical_json(record) + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            n = os.write(fd, line)
            if n != len(line):  # pragma: no cover
                raise RefspecError(f"journal {self.path}: short write")
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[dict]:
        """Every complete line; an incomplete last line (a torn write) is skipped."""
        if not self.path.exists():
            return []
        out = []
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    print(f"refspec: {self.path}: skipping an incomplete last line", file=sys.stderr)
                    break
                out.append(json.loads(raw))
        return out


# --------------------------------------------------------------------------- blocks


@dataclass
class Planned:
    """One required request: ``repeat`` from 1."""

    task_id: str
    cap: int
    repeat: int
    prompt_ids: list[int] | None = None  # None: resolved by ``prompts`` once a worker is up


class PromptBook:
    """Token IDs of the panel's prompts; text prompts are tokenized once, by the first worker (untimed)."""

    def __init__(self, tasks: Iterable, chat: bool = True):
        self.tasks = {t.task_id: t for t in tasks}
        self.chat = chat
        self.ids: dict[str, list[int]] = {
            t.task_id: list(t.prompt_ids) for t in self.tasks.values() if t.prompt_ids is not None
        }

    def ensure(self, worker: Worker) -> None:
        for tid, t in self.tasks.items():
            if tid not in self.ids:
                self.ids[tid] = worker.tokenize(t.text, chat=self.chat)

    def get(self, task_id: str) -> list[int]:
        return self.ids[task_id]

    def digests(self) -> dict[str, str]:
        return {tid: sha256_json(ids) for tid, ids in self.ids.items()}


@dataclass
class RunContext:
    """What every block of a campaign shares."""

    campaign: str
    family: str
    session: str
    files: FamilyFiles
    lib_dir: Path
    out_dir: Path
    journal: Journal
    ledger: Ledger
    prompts: PromptBook | None = None
    draft: str | None = None
    arms_file: str | None = None
    host: str = "127.0.0.1"
    retries: int = 1
    max_worker_starts: int = 3  # per block, counting the first
    request_timeout: float = 600.0
    ready_timeout: float = 600.0
    warmup_cap: int | None = None
    on_submit: Callable[[Worker, Planned, int], None] | None = None  # called just before each timed request
    on_record: Callable[[dict], None] | None = None  # called after each journal record
    n_workers: int = 0

    def next_worker_id(self, arm: str) -> str:
        self.n_workers += 1
        return f"w{self.n_workers:02d}-{arm}"


def request_row(
    ctx: RunContext,
    arm: Arm,
    *,
    block: int,
    worker: str,
    task_id: str,
    cap: int,
    repeat: int,
    order_index: int,
    attempt: int,
    status: str,
    reason: str | None,
    t_ns: int | None = None,
    endpoint: Endpoint | None = None,
    counters: dict | None = None,
    placement: dict | None = None,
) -> dict:
    """One row of the ``requests`` table (anc/tables.md)."""
    c = counters or {}
    spec = arm.speculative
    return {
        "campaign": ctx.campaign,
        "session": ctx.session,
        "block": block,
        "worker": worker,
        "family": ctx.family,
        "task_id": task_id,
        "arm": arm.name,
        "mode": arm.mode,
        "layout": arm.layout,
        "draft": ctx.draft if spec else None,
        "k": arm.k if spec else 0,
        "ub": arm.ub,
        "mask": arm.mask,
        "cap": cap,
        "repeat": repeat,
        "order_index": order_index,
        "attempt": attempt,
        "status": status,
        "reason": reason,
        "t_ns": t_ns,
        "n_generated": endpoint.n if endpoint else None,
        "stop_reason": endpoint.stop_reason if endpoint else None,
        "eog": endpoint.eog if endpoint else None,
        "last_token": endpoint.last_token if endpoint else None,
        "endpoint_sha256": endpoint.sha256 if endpoint else None,
        **{
            k: (c.get(k) if counters is not None else None)
            for k in (
                "proposals",
                "accepted",
                "rollbacks",
                "cycles",
                "callers",
                "micrographs",
                "rows",
                "graph_rebuilds",
                "graph_reuses",
            )
        },
        **placement_columns(placement),
    }


def endpoint_row(row: dict, ep: Endpoint) -> dict:
    """The ``endpoints`` row of an ok ``requests`` row."""
    return {k: row[k] for k in ("campaign", "family", "task_id", "arm", "cap", "session", "repeat")} | {
        "endpoint_sha256": ep.sha256,
        "tokens": list(ep.tokens),
        "n": ep.n,
        "eog": ep.eog,
        "last_token": ep.last_token,
        "stop_reason": ep.stop_reason,
    }


def _ledger(ctx: RunContext, kind: str, reason: str, **kw) -> dict:
    rec = {"kind": kind, "reason": reason, "campaign": ctx.campaign, "family": ctx.family, "session": ctx.session}
    rec.update({k: v for k, v in kw.items() if v is not None})
    return ctx.ledger.append(rec)


def _record(ctx: RunContext, rec: dict) -> dict:
    ctx.journal.append(rec)
    if ctx.on_record is not None:
        ctx.on_record(rec)
    return rec


def start_worker(ctx: RunContext, arm: Arm, block: int) -> tuple[Worker, dict]:
    """Start a fresh worker for ``arm``; ledger its start and record its warmup (an excluded row)."""
    if getattr(arm, "kind", "worker") == "server":  # a black-box llama.cpp server (refspec.engine.server)
        from .server import start_server

        return start_server(ctx, arm, block)
    wid = ctx.next_worker_id(arm.name)
    spec = WorkerSpec(
        family=ctx.family,
        arm=arm,
        files=ctx.files,
        lib_dir=ctx.lib_dir,
        worker_id=wid,
        run_dir=ctx.out_dir,
        draft=ctx.draft if arm.speculative else None,
        arms_file=ctx.arms_file,
        host=ctx.host,
        warmup_cap=ctx.warmup_cap,
    )
    w = Worker.start(spec, ready_timeout=ctx.ready_timeout)
    r = w.ready
    pc = placement_columns(r.get("placement"))
    _ledger(
        ctx,
        "worker_start",
        "fresh worker for a block",
        worker=wid,
        arm=arm.name,
        block=block,
        pid=w.pid,
        url=w.url,
        load_s=r.get("load_s"),
        device=pc["device"],
        gpu_layers=pc["gpu_layers"],
        identity_sha256=sha256_json({k: r.get(k) for k in ("arm_record", "models", "lib_dir", "python")}),
    )
    wu = r["warmup"]
    ep = Endpoint.from_record(wu["endpoint"])
    row = request_row(
        ctx,
        arm,
        block=block,
        worker=wid,
        task_id=WARMUP_TASK,
        cap=int(wu["cap"]),
        repeat=0,
        order_index=0,
        attempt=1,
        status="excluded_warmup",
        reason=f"registered warmup (prompt sha256 {wu['prompt_sha256'][:16]}, not timed)",
        endpoint=ep,
        counters=wu["counters"],
        placement=r.get("placement"),
    )
    _ledger(
        ctx,
        "excluded_warmup",
        row["reason"],
        worker=wid,
        arm=arm.name,
        task_id=WARMUP_TASK,
        outcome="excluded",
        engine_ns=wu.get("engine_ns"),
    )
    rec = _record(
        ctx,
        {
            "type": "request",
            "row": row,
            "endpoint": None,
            "margins": None,
            "evidence": None,
            "counters": wu["counters"],
            "prompt_sha256": wu["prompt_sha256"],
        },
    )
    return w, rec


def run_block(
    ctx: RunContext,
    arm: Arm,
    planned: list[Planned],
    *,
    block: int = 0,
    attempts_before: dict[tuple[str, int], int] | None = None,
) -> list[dict]:
    """Run ``planned`` on fresh workers for ``arm``; return the journal records of every attempt.

    Records are ``{"type": "request", "row": <requests row>, "endpoint": <endpoints row or None>,
    "margins": [...], "evidence": {...}, "counters": {...}, "prompt_sha256": ...}``, the warmup
    rows included. ``attempts_before`` maps (task_id, repeat) to the last attempt number already
    recorded (when a campaign resumes).
    """
    out: list[dict] = []
    attempts_before = attempts_before or {}
    queue = deque((p, attempts_before.get((p.task_id, p.repeat), 0) + 1, None) for p in planned)
    worker: Worker | None = None
    order = 0
    starts = 0
    try:
        while queue:
            if worker is not None and not worker.alive():
                _ledger(
                    ctx,
                    "interruption",
                    f"worker {worker.worker_id} {worker.describe_exit()} between requests",
                    worker=worker.worker_id,
                    arm=arm.name,
                    block=block,
                    pid=worker.pid,
                )
                worker = None
            if worker is None:
                if starts >= ctx.max_worker_starts:
                    reason = f"no worker: {starts} worker starts for block {block} used up"
                    i = 0
                    while queue:
                        p, attempt, retry_of = queue.popleft()
                        out.append(_failed(ctx, arm, block, f"none-b{block}", p, i, attempt, reason, retry_of))
                        i += 1
                    break
                starts += 1
                try:
                    worker, wrec = start_worker(ctx, arm, block)
                except PlacementError as e:  # not a transient failure: record it, then stop the campaign
                    _ledger(ctx, "failure", f"placement refused: {e}", arm=arm.name, block=block, outcome="failed")
                    raise
                except WorkerError as e:
                    _ledger(ctx, "failure", f"worker start failed: {e}", arm=arm.name, block=block, outcome="failed")
                    continue
                out.append(wrec)
                order = 1
                if ctx.prompts is not None:
                    try:
                        ctx.prompts.ensure(worker)
                    except RefspecError as e:
                        worker.kill()
                        _ledger(
                            ctx,
                            "failure",
                            f"tokenizing the panel on worker {worker.worker_id} failed: {e}",
                            worker=worker.worker_id,
                            arm=arm.name,
                            block=block,
                            outcome="failed",
                        )
                        worker = None
                        continue
            p, attempt, retry_of = queue.popleft()
            ids = p.prompt_ids if p.prompt_ids is not None else ctx.prompts.get(p.task_id)
            rid = f"{ctx.session}/{worker.worker_id}/{order}"
            if ctx.on_submit is not None:
                ctx.on_submit(worker, p, order)

            def failed(reason: str) -> dict:
                """The failed record of this request (its prompt hashed only when it fails)."""
                return _failed(
                    ctx,
                    arm,
                    block,
                    worker.worker_id,
                    p,
                    order,
                    attempt,
                    reason,
                    retry_of,
                    prompt_sha256=sha256_json(ids),
                )

            try:
                c = worker.complete(ids, p.cap, request_id=rid, timeout=ctx.request_timeout)
            except RequestError as e:
                out.append(failed(f"worker answered {e}"))
                order += 1
                continue
            except SequenceGap as e:
                # foreign requests were served between timed ones: nothing more is timed in this block
                reason = f"request_index gap on worker {worker.worker_id} (pid {worker.pid}): {e}; the block is failed"
                rec = failed(reason)
                out.append(rec)
                code = worker.kill()
                _ledger(
                    ctx,
                    "worker_exit",
                    f"stopped after a request_index gap: worker {describe_exit(code)}",
                    worker=worker.worker_id,
                    arm=arm.name,
                    block=block,
                    pid=worker.pid,
                    exit_code=code,
                )
                left = f"block {block} failed: request_index gap on worker {worker.worker_id} (ledger line {rec['ledger_seq']})"
                i = order + 1
                while queue:
                    q, q_attempt, q_retry = queue.popleft()
                    out.append(_failed(ctx, arm, block, worker.worker_id, q, i, q_attempt, left, q_retry))
                    i += 1
                worker = None
                break
            except (TransportError, InvalidResponse) as e:
                code = worker.wait_exit(2.0)
                if code is not None:
                    reason = (
                        f"worker {worker.worker_id} (pid {worker.pid}) {describe_exit(code)} during the request ({e})"
                    )
                else:
                    reason = f"{type(e).__name__} from worker {worker.worker_id}: {e}; the worker was stopped"
                rec = failed(reason)
                out.append(rec)
                if code is None:
                    worker.kill()
                _ledger(ctx, "interruption", reason, worker=worker.worker_id, arm=arm.name, block=block, pid=worker.pid)
                worker = None
                if attempt <= ctx.retries:
                    queue.appendleft((p, attempt + 1, rec["ledger_seq"]))
                continue
            row = request_row(
                ctx,
                arm,
                block=block,
                worker=worker.worker_id,
                task_id=p.task_id,
                cap=p.cap,
                repeat=p.repeat,
                order_index=order,
                attempt=attempt,
                status="ok",
                reason=None,
                t_ns=c.t_ns,
                endpoint=c.endpoint,
                counters=c.counters,
                placement=worker.ready.get("placement"),
            )
            led = _ledger(
                ctx,
                "attempt",
                "planned request" if retry_of is None else "re-run of a failed attempt",
                outcome="ok",
                worker=worker.worker_id,
                arm=arm.name,
                task_id=p.task_id,
                repeat=p.repeat,
                attempt=attempt,
                retry_of=retry_of,
                t_ns=c.t_ns,
                endpoint_sha256=c.endpoint.sha256,
            )
            out.append(
                _record(
                    ctx,
                    {
                        "type": "request",
                        "row": row,
                        "endpoint": endpoint_row(row, c.endpoint),
                        "margins": c.margins,
                        "evidence": c.evidence,
                        "counters": c.counters,
                        "prompt_sha256": sha256_json(ids),
                        "engine_ns": c.extra.get("engine_ns"),
                        "acceptance": c.extra.get("acceptance"),
                        "ledger_seq": led["seq"],
                    },
                )
            )
            order += 1
    finally:
        if worker is not None:
            code = worker.stop()
            _ledger(
                ctx,
                "worker_exit",
                f"block done: worker {describe_exit(code)}",
                worker=worker.worker_id,
                arm=arm.name,
                block=block,
                pid=worker.pid,
                exit_code=code,
            )
    return out


def _failed(ctx, arm, block, worker_id, p: Planned, order, attempt, reason, retry_of, prompt_sha256=None) -> dict:
    row = request_row(
        ctx,
        arm,
        block=block,
        worker=worker_id,
        task_id=p.task_id,
        cap=p.cap,
        repeat=p.repeat,
        order_index=order,
        attempt=attempt,
        status="failed",
        reason=reason,
    )
    led = _ledger(
        ctx,
        "failure",
        reason,
        outcome="failed",
        worker=worker_id,
        arm=arm.name,
        task_id=p.task_id,
        repeat=p.repeat,
        attempt=attempt,
        retry_of=retry_of,
    )
    return _record(
        ctx,
        {
            "type": "request",
            "row": row,
            "endpoint": None,
            "margins": None,
            "evidence": None,
            "counters": None,
            "prompt_sha256": prompt_sha256,
            "ledger_seq": led["seq"],
        },
    )
