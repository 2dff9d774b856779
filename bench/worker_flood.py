"""Benchmark: a worker's authenticated latency, quiet and under a flood of token-less connections.

    PYTHONPATH=workflow:report python bench/worker_flood.py [--flood 64] [--samples 15] [--cap 4] [--lib-dir DIR]

Starts one real worker (arm R, one thread, the embedded SmolLM2 family, on
127.0.0.1) the way the driver does, then measures, as the driver's client sees
them, an authenticated ``GET /health`` and a short completion (``--cap`` new
tokens, a fixed prompt of token IDs):

1. quiet: nothing else talks to the worker;
2. under a flood of ``--flood`` connections without the token, half of them
   sending a request's headers a byte every 0.25 s (slow headers), half
   sending complete headers that declare an 8 MiB body and then a kilobyte of
   it every 0.25 s (large declared body). Every flooding connection keeps its
   socket open until the worker closes it and then connects again at once, so
   the flood stays at ``--flood`` connections for the whole measurement.

Every loop is bounded (a deadline, a stop flag, a timeout on every request) and
everything runs on loopback. Prints per-sample times, the medians and maxima,
and the difference flood - quiet.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from refspec.core.arms import load_arms  # noqa: E402
from refspec.core.paths import config_dir  # noqa: E402
from refspec.engines.worker.process import WorkerProcess as Worker  # noqa: E402
from refspec.engines.worker.process import WorkerSpec
from refspec.native import build as native  # noqa: E402
from refspec.native.models import ensure_family  # noqa: E402

FAMILY = "smollm2-135m"
PROMPT = [1, 9690, 198]
TICK_S = 0.25


def _closed(sock: socket.socket) -> bool:
    """The worker answered or closed: the socket is readable (an answer, EOF or a reset)."""
    import select

    r, _, _ = select.select([sock], [], [], 0)
    return bool(r)


def attacker(kind: str, host: str, port: int, stop: threading.Event, deadline: float, counts: dict) -> None:
    """One flooding connection, reconnecting whenever the worker closes it (bounded by ``deadline``)."""
    auth = f"{host}:{port}"
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            s = socket.create_connection((host, port), timeout=5)
        except OSError:
            time.sleep(TICK_S)
            continue
        counts[kind] = counts.get(kind, 0) + 1
        try:
            if kind == "slow-headers":
                data = f"GET /health HTTP/1.1\r\nHost: {auth}\r\nX-Pad: ".encode() + b"a" * 4096
                for i in range(len(data)):
                    if stop.is_set() or time.monotonic() > deadline or _closed(s):
                        break
                    s.sendall(data[i : i + 1])
                    time.sleep(TICK_S)
            else:
                s.sendall(
                    (
                        f"POST /v1/completions HTTP/1.1\r\nHost: {auth}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {8 << 20}\r\n\r\n"
                    ).encode()
                )
                for _ in range(8 << 10):
                    if stop.is_set() or time.monotonic() > deadline or _closed(s):
                        break
                    s.sendall(b" " * 1024)
                    time.sleep(TICK_S)
        except OSError:
            pass
        finally:
            s.close()


def measure(w: Worker, samples: int, cap: int, timeout: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"health": [], "completion": []}
    for _ in range(samples):
        t0 = time.perf_counter()
        try:
            w.get("/health", timeout=timeout)
            out["health"].append(time.perf_counter() - t0)
        except Exception as e:  # a timeout under the flood is a result, not a crash
            print(f"  /health failed after {time.perf_counter() - t0:.1f} s: {e}")
            out["health"].append(float("inf"))
        t0 = time.perf_counter()
        try:
            c = w.complete(PROMPT, cap, timeout=timeout)
            out["completion"].append(c.t_ns / 1e9)
        except Exception as e:
            print(f"  completion failed after {time.perf_counter() - t0:.1f} s: {e}")
            out["completion"].append(float("inf"))
        time.sleep(0.1)
    return out


def show(label: str, times: dict[str, list[float]]) -> None:
    for k, v in times.items():
        per = " ".join(f"{x * 1000:.1f}" for x in v)
        print(f"{label:<7}{k:<11} median {statistics.median(v) * 1000:9.1f} ms  max {max(v) * 1000:9.1f} ms   [{per}]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flood", type=int, default=64, help="token-less connections held open at once")
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--cap", type=int, default=4, help="new tokens of the short completion")
    ap.add_argument("--timeout", type=float, default=60.0, help="per request (s)")
    ap.add_argument("--lib-dir", type=Path, default=None, help="patched libraries (default: the current build)")
    args = ap.parse_args()

    lib_dir = args.lib_dir or native.current().lib_dir
    files = ensure_family(FAMILY)
    with tempfile.TemporaryDirectory(prefix="refspec-flood-") as d:
        arms = yaml.safe_load((config_dir() / "arms.yaml").read_text())
        arms["defaults"]["threads"] = 1
        arms_file = Path(d) / "arms.yaml"
        arms_file.write_text(yaml.safe_dump(arms))
        spec = WorkerSpec(
            family=FAMILY,
            arm=load_arms(str(arms_file))["R"],
            files=files,
            lib_dir=lib_dir,
            worker_id="bench-flood",
            run_dir=Path(d),
            arms_file=str(arms_file),
            warmup_cap=2,
        )
        w = Worker.start(spec, ready_timeout=600)
        try:
            host, port = w.url.rsplit("/", 1)[-1].rsplit(":", 1)
            measure(w, 2, args.cap, args.timeout)  # untimed warm-up of the client path
            quiet = measure(w, args.samples, args.cap, args.timeout)
            stop = threading.Event()
            counts: dict[str, int] = {}
            budget = time.monotonic() + args.samples * 2 * args.timeout + 30
            threads = [
                threading.Thread(
                    target=attacker,
                    args=("slow-headers" if i % 2 else "large-body", host, int(port), stop, budget, counts),
                    daemon=True,
                )
                for i in range(args.flood)
            ]
            for t in threads:
                t.start()
            time.sleep(2.0)  # every flooding connection is open before the first sample
            flood = measure(w, args.samples, args.cap, args.timeout)
            stop.set()
            for t in threads:
                t.join(10)
            alive = w.alive()
        finally:
            w.stop(timeout=30)
    print(f"worker {FAMILY}/R, one thread, cap {args.cap}; flood of {args.flood} token-less connections")
    print(f"flooding connections opened: {counts}")
    show("quiet", quiet)
    show("flood", flood)
    for k in quiet:
        dq, df = statistics.median(quiet[k]), statistics.median(flood[k])
        print(f"{k}: flood - quiet = {(df - dq) * 1000:+.1f} ms (median), max flood {max(flood[k]) * 1000:.1f} ms")
    print(f"worker alive through the flood: {alive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
