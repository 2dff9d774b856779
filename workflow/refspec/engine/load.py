"""The machine's load around a block of fresh workers: load average, CPU, competing processes,
the CPU frequency policy.

:func:`sample` measures over a short window (``WINDOW_S``): the whole machine's CPU busy
percent, and the CPU of every process that is not this process or one of its descendants
(the campaign's own workers), in cores; the top competing processes by CPU; the 1-minute
load average; and, where ``/sys/devices/system/cpu/cpu*/cpufreq`` is readable, the
governors and the mean current frequency. :func:`busy` flags a block whose competing CPU
before or after it is above ``BUSY_CORES`` (half a core): a busy block is kept and flagged
(``anc/campaigns.md``), never dropped.
"""

from __future__ import annotations

import glob
import os
import time
from collections import Counter

import psutil

WINDOW_S = 0.1  # seconds of each CPU sample (two per block)
BUSY_CORES = 0.5  # competing CPU, in cores, above which the machine is busy
TOP = 3  # competing processes recorded per sample


def _own_pids() -> set[int]:
    me = psutil.Process()
    try:
        kids = {c.pid for c in me.children(recursive=True)}
    except psutil.Error:
        kids = set()
    return {me.pid, 0} | kids


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_ns(pid: int | None) -> int | None:
    """User plus system CPU time of process ``pid`` and its threads, from ``/proc/<pid>/stat``
    (fields 14 and 15, in clock ticks of ``1/CLK_TCK`` s: 10 ms at 100 Hz), in ns; None where unreadable."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def cpu_jiffies(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(steal, total) clock ticks of all CPUs since boot, from the ``cpu`` line of ``/proc/stat``
    (steal: the time a hypervisor ran something else while this guest wanted the CPU); None where unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(vals) < 8:
        return None
    return vals[7], sum(vals[:8])


def steal_percent(before: dict, after: dict) -> float | None:
    """The machine's steal time between two samples, in percent of all CPU time; None where unread."""
    b, a = before.get("steal_jiffies"), after.get("steal_jiffies")
    tb, ta = before.get("total_jiffies"), after.get("total_jiffies")
    if None in (b, a, tb, ta) or ta <= tb:
        return None
    return round(100.0 * (a - b) / (ta - tb), 3)


def cpufreq(root: str = "/sys/devices/system/cpu") -> tuple[str | None, float | None]:
    """(governors with their core counts, e.g. ``performance x2``; mean scaling_cur_freq in MHz), None where unreadable."""
    govs: Counter = Counter()
    freqs = []
    for d in sorted(glob.glob(os.path.join(root, "cpu[0-9]*", "cpufreq"))):
        try:
            with open(os.path.join(d, "scaling_governor"), encoding="utf-8") as f:
                govs[f.read().strip()] += 1
        except OSError:
            pass
        try:
            with open(os.path.join(d, "scaling_cur_freq"), encoding="utf-8") as f:
                freqs.append(int(f.read().strip()) / 1000.0)
        except (OSError, ValueError):
            pass
    gov = " ".join(f"{g} x{n}" for g, n in sorted(govs.items())) or None
    return gov, (round(sum(freqs) / len(freqs), 1) if freqs else None)


def sample(window_s: float = WINDOW_S, top: int = TOP) -> dict:
    """One load sample (JSON-ready): ``load1``, ``cpu_percent``, ``competing_cores``, ``top``,
    ``governor``, ``freq_mhz``."""
    own = _own_pids()
    procs = []
    for p in psutil.process_iter(["name"]):
        if p.pid in own:
            continue
        try:
            p.cpu_percent(None)
            procs.append(p)
        except psutil.Error:
            continue
    psutil.cpu_percent(None)
    time.sleep(window_s)
    total = psutil.cpu_percent(None)
    used = []
    for p in procs:
        try:
            cores = p.cpu_percent(None) / 100.0
        except psutil.Error:
            continue
        if cores > 0:
            used.append({"name": p.info.get("name") or "?", "pid": p.pid, "cores": round(cores, 3)})
    used.sort(key=lambda u: (-u["cores"], u["pid"]))
    try:
        load1 = round(os.getloadavg()[0], 3)
    except OSError:
        load1 = None
    gov, freq = cpufreq()
    jiffies = cpu_jiffies()
    return {
        "load1": load1,
        "cpu_percent": round(float(total), 2),
        "competing_cores": round(sum(u["cores"] for u in used), 3),
        "top": used[:top],
        "governor": gov,
        "freq_mhz": freq,
        "steal_jiffies": jiffies[0] if jiffies else None,
        "total_jiffies": jiffies[1] if jiffies else None,
    }


def busy(before: dict, after: dict, threshold: float = BUSY_CORES) -> bool:
    """Competing CPU above ``threshold`` cores before or after the block."""
    return before["competing_cores"] > threshold or after["competing_cores"] > threshold


def busy_reason(before: dict, after: dict, threshold: float = BUSY_CORES) -> str:
    """The ledger reason of a ``block_load`` line."""
    tops = ", ".join(f"{u['name']} (pid {u['pid']}) {u['cores']:.2f}" for u in (before["top"] + after["top"])[:TOP])
    if busy(before, after, threshold):
        return (
            f"busy machine: competing processes used {before['competing_cores']:.2f} core(s) before and "
            f"{after['competing_cores']:.2f} after the block (above {threshold:g}): {tops}; "
            "the block is kept and flagged"
        )
    return (
        f"machine load sampled before and after the block: competing {before['competing_cores']:.2f} / "
        f"{after['competing_cores']:.2f} core(s), at most {threshold:g}"
    )
