"""A synthetic but realistic results folder for the report and checker tests.

``make_results(dir)`` writes every table through :func:`refspec.core.tables.write_table`
(derived tables through :mod:`refspec.campaigns.derived`, as the campaigns do), plus
manifest.json, plan.json and a hash-chained ledger.jsonl. Times are drawn from
a seeded log-normal model with per-task, per-arm and per-session factors;
endpoints are token lists, some arms diverge from the reference.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from refspec.campaigns import derived as D
from refspec.campaigns import noise as NZ
from refspec.campaigns import variance as VC
from refspec.core import stats as S
from refspec.core import tables as T
from refspec.core.endpoint import Endpoint
from refspec.provenance.ledger import Ledger

from .paths import REPO_ROOT

FAMILIES = ("smollm2-135m", "llama31-8b")
DRAFTS = {"smollm2-135m": "smollm2-135m-q4_1", "llama31-8b": "llama32-1b-q8_0"}
EVIL = "<script>alert('x')</script> {{ 7*7 }} {% if %} & \\textbf{x} $_^#%~"


def _screen(fam: str, conf: list[str], unexposed: str | None, cap: int) -> tuple[list[dict], dict]:
    """The divergence screen that froze ``conf`` as the confirmation's panel (refspec.experiments.divergence_screen):
    two discovery tasks beside it; M0 and C0 diverge on the first two confirmation tasks (none for the
    ``unexposed`` family), which have the smallest margins; the rest are the stable controls."""
    extra = ["HumanEval/90", "HumanEval/91"]
    exposed = [] if fam == unexposed else conf[:2]
    risk = {t: 0.01 * (i + 1) for i, t in enumerate(exposed)}
    risk |= {t: 1.0 + 0.1 * i for i, t in enumerate(extra)}
    risk |= {t: 10.0 - i for i, t in enumerate(conf) if t not in exposed}
    panel = conf + extra
    order = sorted(panel, key=lambda t: (risk[t], panel.index(t)))
    want, budget = (len(exposed), len(exposed)) if exposed else (2, 2)
    tried = order[:budget]
    controls = [t for t in sorted(panel, key=lambda t: -risk[t]) if t not in exposed][: len(conf) - len(exposed)]
    rows = []
    for t in panel:
        base = dict(
            family=fam,
            task_id=t,
            rank=order.index(t) + 1,
            prompt_tokens=100 + panel.index(t),
            risk_margin=risk[t],
            exposed=t in exposed,
            control=t in controls,
        )
        none = dict(
            first_diff_index=None,
            ref_token=None,
            arm_token=None,
            ref_margin=None,
            arm_margin=None,
            divergence=None,
            near_tie_bound=None,
        )
        rows.append(base | none | dict(arm="R", status="reference", n_tokens=cap, stop_reason="cap"))
        for arm in ("M0", "C0", "R_prod"):
            if t not in tried:
                rows.append(base | none | dict(arm=arm, status="not tried", n_tokens=None, stop_reason=None))
            elif t in exposed and arm != "R_prod":
                rows.append(
                    base
                    | dict(arm=arm, status="diverges", n_tokens=cap, stop_reason="cap", first_diff_index=4)
                    | dict(ref_token=17, arm_token=29, ref_margin=risk[t], arm_margin=0.03)
                    | dict(divergence="near tie", near_tie_bound=0.5)
                )
            else:
                rows.append(base | none | dict(arm=arm, status="matches", n_tokens=cap, stop_reason="cap"))
    rec = {
        "format": 1,
        "family": fam,
        "panel": {"source": "file", "tasks": panel, "sha256": "0" * 64},
        "cap": cap,
        "want": want,
        "budget": budget,
        "controls_wanted": len(conf) - len(exposed),
        "order": order,
        "tried": tried,
        "exposed": exposed,
        "controls": controls,
        "stopped": "want" if exposed else "budget",
        "exposed_panel": {"file": "exposed-panel.jsonl", "sha256": "0" * 64, "tasks": exposed + controls},
    }
    return rows, rec


def _tasks(n: int, rng: random.Random) -> list[str]:
    pool = [f"MBPP/{i}" for i in (123, 140, 255, 401, 413, 418, 476, 79)] + [
        f"GSM8K/{i}" for i in (111, 120, 1308, 141, 322, 443, 562, 660)
    ]
    return sorted(rng.sample(pool, n))


class _Gen:
    def __init__(self, seed: int, evil: bool):
        self.rng = random.Random(seed)
        self.evil = evil
        self.requests: list[dict[str, Any]] = []
        self.endpoints: list[dict[str, Any]] = []
        self.ref: dict[tuple, list[int]] = {}
        self.task_base: dict[tuple, float] = {}
        self.order: dict[str, int] = {}

    def ref_tokens(self, fam: str, task: str, cap: int) -> list[int]:
        k = (fam, task, cap)
        if k not in self.ref:
            n = self.rng.randint(12, min(cap, 60))
            self.ref[k] = [self.rng.randrange(2, 49152) for _ in range(n)]
        return self.ref[k]

    def add(
        self,
        campaign,
        session,
        block,
        worker,
        fam,
        task,
        arm,
        mode,
        layout,
        k,
        ub,
        mask,
        cap,
        repeat,
        factor,
        diverge_at=None,
        status="ok",
        reason=None,
        attempt=1,
        tokens=None,
    ):
        oi = self.order.get(worker, 0)
        self.order[worker] = oi + 1
        base = self.task_base.setdefault((fam, task), self.rng.uniform(0.6e9, 2.5e9))
        row = dict(
            campaign=campaign,
            session=session,
            block=block,
            worker=worker,
            family=fam,
            task_id=task,
            arm=arm,
            mode=mode,
            layout=layout,
            draft=DRAFTS[fam] if mode == "spec" else None,
            k=k,
            ub=ub,
            mask=mask,
            cap=cap,
            repeat=repeat,
            order_index=oi,
            attempt=attempt,
            status=status,
            reason=reason,
            t_ns=None,
            cpu_ns=None,
            n_generated=None,
            stop_reason=None,
            eog=None,
            last_token=None,
            endpoint_sha256=None,
            proposals=None,
            accepted=None,
            rollbacks=None,
            cycles=None,
            callers=None,
            micrographs=None,
            rows=None,
            graph_rebuilds=None,
            graph_reuses=None,
            device="CPU",
            device_description="synthetic host CPU",
            gpu_layers=0,
            draft_gpu_layers=0 if mode == "spec" else None,
        )
        if status == "failed":
            self.requests.append(row)
            return row
        toks = list(self.ref_tokens(fam, task, cap)) if tokens is None else list(tokens)
        eog = len(toks) < cap
        if diverge_at is not None and tokens is None:
            i = min(diverge_at, len(toks) - 1)
            toks = toks[:i] + [toks[i] + 1] + [self.rng.randrange(2, 49152) for _ in range(self.rng.randint(0, 8))]
            toks = toks[:cap]
            eog = len(toks) < cap
        stop = "eog" if eog else "cap"
        sha = Endpoint(tuple(toks), eog, stop).sha256
        t = base * factor * self.rng.lognormvariate(0.0, 0.03)
        n = len(toks)
        if mode == "spec":
            cyc = max(1, n // 3)
            prop = cyc * k
            acc = int(prop * (0.9 if "smollm2" in fam else 0.7) * self.rng.uniform(0.95, 1.0))
            rb = cyc - max(0, acc // k)
        else:
            cyc, prop, acc, rb = 0, 0, 0, 0
        callers = (cyc or n) + 1
        row.update(
            t_ns=int(t),
            cpu_ns=int(t * 1.9),  # two threads busy for most of the request
            n_generated=n,
            stop_reason=stop,
            eog=eog,
            last_token=toks[-1] if toks else None,
            endpoint_sha256=sha,
            proposals=prop,
            accepted=acc,
            rollbacks=max(rb, 0),
            cycles=cyc,
            callers=callers,
            micrographs=callers * (1 if layout != "gs" else 4),
            rows=n + 40 + prop,
            graph_rebuilds=3,
            graph_reuses=max(callers - 3, 0),
        )
        self.requests.append(row)
        if status == "ok":
            self.endpoints.append(
                dict(
                    campaign=campaign,
                    family=fam,
                    task_id=task,
                    arm=arm,
                    cap=cap,
                    session=session,
                    repeat=repeat,
                    endpoint_sha256=sha,
                    tokens=toks,
                    n=n,
                    eog=eog,
                    last_token=toks[-1] if toks else None,
                    stop_reason=stop,
                )
            )
        return row

    def warmup(self, campaign, session, worker, fam, arm, mode, layout, k, ub, mask, cap):
        self.add(
            campaign,
            session,
            0,
            worker,
            fam,
            "warmup/0",
            arm,
            mode,
            layout,
            k,
            ub,
            mask,
            cap,
            0,
            1.0,
            status="excluded_warmup",
            reason="registered warmup",
        )


ARMS_CONF = [  # arm, mode, layout, k, ub, mask, time factor
    ("R", "target", "mq", 0, 1, 0, 1.00),
    ("R_prod", "target", "mq", 0, 512, 0, 0.80),
    ("M0", "target", "mq", 0, 4, 0, 0.97),
    ("C0", "spec", "mq", 3, 4, 0, 0.60),
    ("M3", "target", "qb", 0, 4, 3, 1.01),
    ("C3", "spec", "qb", 3, 4, 3, 0.62),
]
# an arm the admission guard refuses at worker start (more occupied queries than the layout admits)
REFUSED_ARM = ("C_qb8", "spec", "qb", 7, 8, 3)
REFUSAL = "worker w-refused (arm C_qb8) exited with status 3 before it was ready: admission: occupied queries 8 > 4"
ARMS_IMPL = [
    ("R", "target", "mq", 0, 1, 0, 1.00),
    ("M_gs", "target", "gs", 0, 1, 3, 1.08),
    ("M_pq", "target", "pq", 0, 4, 3, 1.03),
    ("M_qb", "target", "qb", 0, 4, 3, 1.00),
    ("C_gs", "spec", "gs", 3, 1, 3, 0.75),
    ("C_pq", "spec", "pq", 3, 4, 3, 0.66),
    ("C_qb", "spec", "qb", 3, 4, 3, 0.63),
]
ARMS_REPL = [
    ("R", "target", "mq", 0, 1, 0, 1.00),
    ("M_pq", "target", "pq", 0, 4, 3, 1.012),
    ("M_qb", "target", "qb", 0, 4, 3, 1.00),
    ("C_pq", "spec", "pq", 3, 4, 3, 0.655),
    ("C_qb", "spec", "qb", 3, 4, 3, 0.63),
]


# what a lavapipe run's manifest records of its backend (refspec.provenance.manifest)
VULKAN_RECORD = {
    "buildDefinition": {
        "externalParameters": {"config": {"native": {"backend": "vulkan", "vulkan_device": 0}}},
        "internalParameters": {
            "vulkan": {
                "selected": {
                    "name": "llvmpipe (LLVM 15.0.6, 256 bits)",
                    "type": "PHYSICAL_DEVICE_TYPE_CPU",
                    "api_version": "1.3.230",
                    "driver_name": "llvmpipe",
                    "driver_info": "Mesa 22.3.6 (LLVM 15.0.6)",
                },
                "software_device": True,
                "headers": [{"package": "libvulkan-dev", "version": "1.4.309.0-1", "sha256": "1" * 64}],
                "glslc": "shaderc v2023.2",
                "env": {"GGML_VK_VISIBLE_DEVICES": "0"},
            }
        },
    }
}


def make_results(
    out: str | Path,
    seed: int = 7,
    evil: bool = False,
    n_sessions: int = 6,
    boot_seed: int = S.DEFAULT_SEED,
    draws: int = 2000,
    aa: bool = False,
    aa_spread: float = 0.0,
    aa_shift: float = 0.0,
    unexposed: str | None = None,
    screen: bool = True,
    vulkan: bool = False,
    aa_rule: str | None = S.DEFAULT_AA_RULE,
) -> Path:
    """Write a complete synthetic results folder into ``out`` (tables under ``out/tables``).

    ``aa``: the implementation and replication campaigns also run the A/A twins ``M_qb_aa`` and
    ``C_qb_aa`` (``noise`` table, estimates gated by it) and every replication block has a load
    sample (``loads`` table, one busy block); ``aa_spread`` is the twins' extra log-time noise and
    ``aa_shift`` a constant log shift of the twins' times (a biased control); ``unexposed``: a family
    whose unrepaired confirmation arms (M0, C0, R_prod) never diverge (a vacuous panel); ``screen``:
    False leaves the divergence screen out (no table, no screen.json, the confirmation's panel not
    taken from a screen), as a run with ``stages.screen: false`` does; ``vulkan``: the run of
    ``config/vulkan.yaml`` on lavapipe: the manifest records the Vulkan backend and its software
    device (``VULKAN_RECORD``), and every placed request ran on Vulkan0 with all layers offloaded;
    ``aa_rule``: the A/A rule the tables are decided under and plan.json records (None: an archive from
    before the field, decided under the floor rule, whose plan records none)."""
    out = Path(out)
    tdir = out / "tables"
    g = _Gen(seed, evil)
    rng = g.rng
    cap = 64

    # --- phase-mask sweep (one family), 3 probes x 2 repeats x 16 masks
    fam = FAMILIES[0]
    probes = ["HumanEval/0", "HumanEval/12", "HumanEval/18"]
    w = "pm-w0"
    for t in probes:
        for rep in (1, 2):
            g.add("phase_mask", "pm1", 0, w, fam, t, "R", "target", "mq", 0, 1, 0, cap, rep, 1.0)
    for m in range(16):
        for t in probes:
            for rep in (1, 2):
                ok = (m & 3) == 3 or (m & 1 and t == "HumanEval/0")
                g.add(
                    "phase_mask",
                    "pm1",
                    1,
                    w,
                    fam,
                    t,
                    f"C_m{m}",
                    "spec",
                    "qb",
                    3,
                    4,
                    m,
                    cap,
                    rep,
                    0.6,
                    diverge_at=None if ok else rng.randint(3, 30),
                )

    # --- confirmation: 2 families x 5 arms x 6 tasks x 2 sessions x 2 repeats
    conf_tasks = {f: _tasks(6, rng) for f in FAMILIES}
    for fam in FAMILIES:
        m0_fail = set(conf_tasks[fam][:2]) if fam != unexposed else set()
        prod_fail = set(conf_tasks[fam][1:4]) if fam == "llama31-8b" and fam != unexposed else set()
        for si, sess in enumerate(("c1", "c2")):
            for ai, (arm, mode, lay, k, ub, mask, f) in enumerate(ARMS_CONF):
                worker = f"{sess}-{fam}-{arm}"
                g.warmup("confirmation", sess, worker, fam, arm, mode, lay, k, ub, mask, cap)
                for t in conf_tasks[fam]:
                    for rep in (1, 2):
                        div = None
                        if arm == "M0" and t in m0_fail:
                            div = 5 + rep
                        if arm == "C0" and t in m0_fail:
                            div = 4
                        if arm == "R_prod" and t in prod_fail:
                            div = 9
                        add = partial(
                            g.add, "confirmation", sess, ai, worker, fam, t, arm, mode, lay, k, ub, mask, cap, rep, f
                        )
                        if arm == "M3" and t == conf_tasks[fam][0] and sess == "c1" and rep == 1:
                            # a failed attempt, kept, then re-run (attempt 2)
                            add(status="failed", reason=EVIL if evil else "worker exited with status 137")
                            add(attempt=2)
                            continue
                        add(diverge_at=div)

    screens = {fam: _screen(fam, conf_tasks[fam], unexposed, cap) for fam in FAMILIES}

    # --- implementation: 2 families x 7 arms x 5 tasks x 2 sessions x 2 repeats
    impl_tasks = {f: _tasks(5, rng) for f in FAMILIES}
    if evil:
        impl_tasks[FAMILIES[0]][0] = "EVIL/" + EVIL
    arms_impl = ARMS_IMPL + ([("M_qb_aa", "target", "qb", 0, 4, 3, 1.00)] if aa else [])
    for fam in FAMILIES:
        for sess in ("i1", "i2"):
            for ai, (arm, mode, lay, k, ub, mask, f) in enumerate(arms_impl):
                worker = f"{sess}-{fam}-{arm}"
                g.warmup("implementation", sess, worker, fam, arm, mode, lay, k, ub, mask, cap)
                for t in impl_tasks[fam]:
                    for rep in (1, 2):
                        fa = f * rng.lognormvariate(0, aa_spread) if arm.endswith("_aa") and aa_spread else f
                        fa *= math.exp(aa_shift) if arm.endswith("_aa") else 1.0
                        g.add("implementation", sess, ai, worker, fam, t, arm, mode, lay, k, ub, mask, cap, rep, fa)
            if fam == FAMILIES[0]:  # refused by admission: every request failed, no worker ever started
                arm, mode, lay, k, ub, mask = REFUSED_ARM
                # each session's driver refuses its own block: one cell of the status table holds two reasons
                blk = 9 if sess == "i1" else 10
                for t in impl_tasks[fam]:
                    for rep in (1, 2):
                        g.add(
                            "implementation",
                            sess,
                            9,
                            f"none-b{blk}-{sess}",
                            fam,
                            t,
                            arm,
                            mode,
                            lay,
                            k,
                            ub,
                            mask,
                            cap,
                            rep,
                            1.0,
                            status="failed",
                            reason=f"no worker: 2 worker starts for block {blk} used up",
                        )

    # --- replication: n_sessions sessions, counterbalanced pq/qb blocks, two serial references
    repl_tasks = {f: _tasks(6, rng) for f in FAMILIES}
    sessions = []
    loads: list[dict[str, Any]] = []
    start = dt.datetime(2026, 10, 14, 8, 0, 0, tzinfo=dt.UTC)
    for si in range(n_sessions):
        sess = f"r{si + 1}"
        sfac = rng.lognormvariate(0, 0.02)
        for fam in FAMILIES:
            s0 = start + dt.timedelta(hours=5 * si, minutes=rng.randint(0, 30))
            arms_repl = ARMS_REPL + ([("C_qb_aa", "spec", "qb", 3, 4, 3, 0.63)] if aa else [])
            arms = arms_repl if si % 2 == 0 else [arms_repl[0]] + arms_repl[:0:-1]
            n_req = 0
            workers = set()
            for bi, (arm, mode, lay, k, ub, mask, f) in enumerate(arms):
                worker = f"{sess}-{fam}-w{bi}"
                workers.add(worker)
                g.warmup("replication", sess, worker, fam, arm, mode, lay, k, ub, mask, cap)
                n_req += 1
                for t in repl_tasks[fam]:
                    for rep in (1, 2):
                        eff = f * sfac * (1 + 0.01 * rng.uniform(-1, 1) if lay == "pq" else 1)
                        if arm.endswith("_aa") and aa_spread:
                            eff *= rng.lognormvariate(0, aa_spread)
                        if arm.endswith("_aa"):
                            eff *= math.exp(aa_shift)
                        g.add("replication", sess, bi, worker, fam, t, arm, mode, lay, k, ub, mask, cap, rep, eff)
                        n_req += 1
                if aa:
                    comp = 0.9 if (si, bi, fam) == (1, 2, FAMILIES[0]) else 0.05
                    loads.append(
                        dict(
                            campaign="replication",
                            family=fam,
                            session=sess,
                            block=bi,
                            arm=arm,
                            load1_before=1.5,
                            load1_after=1.75,
                            cpu_before=50.0,
                            cpu_after=55.0,
                            competing_before=comp,
                            competing_after=0.05,
                            top_competing=f"stress:4242:{comp:.2f}" if comp > 0.5 else None,
                            governor="performance x2",
                            freq_mhz=2400.0,
                            steal_percent=3.5,
                            busy_threshold=0.5,
                            busy=comp > 0.5,
                        )
                    )
            dur = dt.timedelta(minutes=40 + rng.randint(0, 20))
            sessions.append(
                dict(
                    campaign="replication",
                    family=fam,
                    session=sess,
                    started_utc=s0.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    ended_utc=(s0 + dur).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    gap_before_s=None,
                    n_requests=n_req,
                    n_workers=len(workers),
                )
            )

    # --- prospective prediction (one family): discovery, frozen predictions, live C0 with R
    fam = FAMILIES[0]
    pcap = 32
    disc, reserved = ["HumanEval/0", "HumanEval/1"], ["HumanEval/3", "HumanEval/4", "HumanEval/5", "HumanEval/6"]
    divergent = {"HumanEval/4": 5, "HumanEval/6": 11}  # C0 (and its predictor M0) leave the reference here

    def c0_tokens(task):
        ref = g.ref_tokens(fam, task, pcap)
        i = divergent.get(task)
        if i is None:
            return None
        i = min(i, len(ref) - 1)
        return ref[:i] + [ref[i] + 1] + [(ref[i] * 7 + j) % 49000 + 2 for j in range(3)]

    pa = {
        "R": ("target", "mq", 0, 1, 0, 1.0),
        "C0": ("spec", "mq", 3, 4, 0, 0.6),
        "M0": ("target", "mq", 0, 4, 0, 0.97),
        "R_prod": ("target", "mq", 0, 512, 0, 0.8),
    }
    plan_sessions = (
        ("s01-discovery", disc, ["C0", "M0", "R_prod"], 1),
        ("s02-prediction", reserved, ["M0"], 1),
        ("s03-live", reserved, ["R", "C0"], 3),
    )
    for sess, tasks, arms_, reps in plan_sessions:
        for bi, arm in enumerate(arms_):
            mode, lay, k, ub, mask, f = pa[arm]
            worker = f"{sess}-{arm}"
            for t in tasks:
                for rep in range(1, reps + 1):
                    toks = c0_tokens(t) if arm in ("C0", "M0") else None
                    if arm == "R_prod" and t == disc[0]:
                        toks = c0_tokens("HumanEval/6")  # a candidate that misses the live path
                    g.add(
                        "prediction", sess, bi, worker, fam, t, arm, mode, lay, k, ub, mask, pcap, rep, f, tokens=toks
                    )
    frozen = {}
    for e in g.endpoints:
        if e["campaign"] == "prediction" and e["session"] == "s02-prediction":
            frozen[e["task_id"]] = {
                k: e[k] for k in ("tokens", "eog", "stop_reason", "n", "last_token", "endpoint_sha256")
            }
    pred_rows = []
    for t in reserved:
        live = [
            e["endpoint_sha256"]
            for e in g.endpoints
            if e["campaign"] == "prediction" and e["session"] == "s03-live" and e["arm"] == "C0" and e["task_id"] == t
        ]
        ref = next(
            e["endpoint_sha256"]
            for e in g.endpoints
            if e["campaign"] == "prediction" and e["session"] == "s03-live" and e["arm"] == "R" and e["task_id"] == t
        )
        pm = sum(1 for h in live if h == frozen[t]["endpoint_sha256"])
        rm = sum(1 for h in live if h == ref)
        pred_rows.append(
            dict(
                family=fam,
                task_id=t,
                live_arm="C0",
                predictor="M0",
                session="s03-live",
                cap=pcap,
                predicted_sha256=frozen[t]["endpoint_sha256"],
                reference_sha256=ref,
                live_runs=len(live),
                live_stable=len(set(live)) == 1,
                predicted_matches=pm,
                reference_matches=rm,
                reference_divergent=rm < len(live),
            )
        )

    reqs, eps = g.requests, g.endpoints
    if not screen:
        screens = {}
    else:
        T.write_table([r for rows, _rec in screens.values() for r in rows], "divergence_screen", tdir)
    for fam, (_rows, rec) in screens.items():
        sdir = out / "campaigns" / fam / "screen"
        sdir.mkdir(parents=True, exist_ok=True)
        (sdir / "screen.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
    if vulkan:
        for r in reqs:
            r.update(
                device="Vulkan0",
                device_description="llvmpipe (LLVM 15.0.6, 256 bits)",
                gpu_layers=31,
                draft_gpu_layers=31 if r["mode"] == "spec" else None,
            )
    T.write_table(reqs, "requests", tdir)
    T.write_table(eps, "endpoints", tdir)
    margins = {
        (e["campaign"], e["family"], e["task_id"], e["cap"]): [round(rng.uniform(0.01, 3.0), 6) for _ in range(cap)]
        for e in eps
    }
    # each request's own margins along its own path (a generator of their own: the other draws stay as they were)
    arng = random.Random(seed + 1)
    arm_margins = {
        (e["campaign"], e["family"], e["task_id"], e["cap"], e["arm"], e["session"], e["repeat"]): [
            round(arng.uniform(0.01, 3.0), 6) for _ in range(e["n"])
        ]
        for e in eps
    }
    qual = D.qualification_table(reqs, eps, margins=margins, arm_margins=arm_margins)
    T.write_table(qual, "qualification", tdir)
    rule = aa_rule or S.LEGACY_AA_RULE
    pairs = [("M0", "M3"), ("M3", "C3"), ("R_prod", "C3"), ("R", "C3"), ("R", "M3")]
    ratios = D.ratios_table(reqs, qual, "confirmation", pairs=pairs, aa_rule=rule)
    ratios += D.ratios_table(reqs, qual, "implementation", aa_rule=rule)
    T.write_table(ratios, "ratios", tdir)
    T.write_table(D.diagnostics_table(reqs, qual, "confirmation"), "diagnostics", tdir)
    T.write_table(pred_rows, "prediction", tdir)
    contrasts, estimates = D.replication_tables(reqs, qual)
    if aa:
        noise = NZ.noise_table(reqs, qual, "implementation", aa_rule=rule)
        noise += NZ.noise_table(reqs, qual, "replication", aa_rule=rule)
        estimates = NZ.weigh_estimates(estimates, [n for n in noise if n["campaign"] == "replication"])
        T.write_table(noise, "noise", tdir)
        T.write_table(loads, "loads", tdir)
    T.write_table(
        [v for camp in sorted({r["campaign"] for r in reqs}) for v in VC.variance_table(reqs, camp)], "variance", tdir
    )
    T.write_table(contrasts, "contrasts", tdir)
    T.write_table(estimates, "estimates", tdir)
    T.write_table(D.session_gaps(sessions + other_sessions(reqs, sessions)), "sessions", tdir)
    T.write_table(D.phase_mask_table(reqs, qual), "phase_masks", tdir)

    # --- replay: 2 families x 3 layers x 2 phases x q 1..4 x 3 stages
    rp = []
    for fam, layers in (("smollm2-135m", (0, 15, 29)), ("llama31-8b", (0, 16, 31))):
        for layer in layers:
            for phase in ("prefill", "continuation"):
                for q in (1, 2, 3, 4):
                    for stage in ("kq", "kq_soft_max", "kqv"):
                        eq = q == 1
                        scale = {"kq": 0.08, "kq_soft_max": 0.001, "kqv": 0.01}[stage]
                        rp.append(
                            dict(
                                family=fam,
                                layer=layer,
                                phase=phase,
                                q=q,
                                stage=stage,
                                pq_eq_qb=True,
                                pq_eq_qh=True,
                                mq_eq_pq=eq,
                                max_abs_mq=0.0 if eq else rng.uniform(0.1, 1) * scale,
                                max_ulp_mq=0 if eq else rng.randint(1, 4000),
                                first_diff=None if eq else rng.randint(0, 500),
                                visible_keys=q if phase == "prefill" else 100 + q,
                                device_refused=None,
                                control_ok=True,
                                reason=None,
                            )
                        )
    T.write_table(rp, "replay", tdir)

    # --- audit fixtures
    au = []
    for geom in ("d64-h4/4-q3-kv37", "d128-h8/2-q4-kv61"):
        for lay in ("pq", "qb"):
            for stage in ("address", "kq", "kq_soft_max", "kqv"):
                au.append(
                    dict(
                        geometry=geom,
                        fixture="clean",
                        layout=lay,
                        stage=stage,
                        oracle_ok=True,
                        fault=None,
                        detected=None,
                        max_abs_err=0.0 if stage == "address" else rng.uniform(1e-7, 1e-5),
                        max_rel_err=0.0 if stage == "address" else rng.uniform(1e-7, 1e-4),
                    )
                )
                for fault in ("swap_query_columns", "wrong_gqa_map", "mask_column_shift"):
                    au.append(
                        dict(
                            geometry=geom,
                            fixture=f"fault-{fault}",
                            layout=lay,
                            stage=stage,
                            oracle_ok=False,
                            fault=fault,
                            detected=True,
                            max_abs_err=rng.uniform(0.1, 2),
                            max_rel_err=rng.uniform(0.1, 1),
                        )
                    )
    T.write_table(au, "audit", tdir)

    # --- records
    (out / "manifest.json").write_text(
        json.dumps(
            {
                "format": 1,
                "host": {"hostname": "bench-01", "machine": "x86_64", "system": "Linux"},
                "files": [{"path": "native/patches/0001-qb.patch", "sha256": "0" * 64, "size": 1}],
                **(VULKAN_RECORD if vulkan else {}),
            },
            indent=1,
        )
        + "\n"
    )
    (out / "plan.json").write_text(
        json.dumps(
            {
                "campaign": "synthetic",
                # the A/A rule of every campaign that has no plan of its own here (none: an older archive)
                **({"aa_rule": aa_rule} if aa_rule else {}),
                "bootstrap": {"seed": boot_seed, "draws": draws, "threshold": S.DEFAULT_THRESHOLD},
                "campaigns": {
                    **{
                        f"{fam}/confirmation": {
                            **({"aa_rule": aa_rule} if aa_rule else {}),
                            "panels": {
                                "confirm": {
                                    "source": "screen",
                                    "tasks": rec["exposed_panel"]["tasks"],
                                    "screen": {"cap": rec["cap"]},
                                }
                            },
                        }
                        for fam, (_rows, rec) in screens.items()
                    },
                    "prediction": {
                        "prediction_selection": {"predictor": "M0", "live_arm": "C0"},
                        "predictions": {"predictor": "M0", "cap": pcap, "endpoints": frozen},
                    },
                },
            },
            indent=1,
        )
        + "\n"
    )
    cled = out / "campaigns" / "implementation" / "ledger.jsonl"
    cled.parent.mkdir(parents=True, exist_ok=True)
    Ledger(cled).append(
        {
            "kind": "failure",
            "reason": "worker start failed: " + REFUSAL,
            "arm": REFUSED_ARM[0],
            "block": 9,
            "outcome": "failed",
        }
    )
    led = Ledger(out / "ledger.jsonl")
    led.append({"kind": "plan_frozen", "reason": "registered"})
    for r in reqs:
        if r["status"] != "ok":
            led.append({"kind": "attempt", "status": r["status"], "reason": r["reason"], "worker": r["worker"]})
    led.append({"kind": "plan_amendment", "reason": "re-run of a failed attempt as attempt 2"})
    for camp, fam in sorted({(r["campaign"], r["family"]) for r in reqs}):  # each campaign pins its ledger
        led.append(
            {"kind": "campaign_run", "reason": f"campaign {camp} run 1: complete", "campaign": camp, "family": fam}
            | {"outcome": "complete", "run": 1}
        )
    return out


def other_sessions(reqs: list[dict], have: list[dict]) -> list[dict]:
    """A sessions row for every session of requests that ``have`` lacks (the campaigns other than the
    replication, whose rows carry their loads), an hour apart, as every campaign writes its own."""
    done = {(r["campaign"], r["family"], r["session"]) for r in have}
    by: dict[tuple, list[dict]] = {}
    for r in reqs:
        key = (r["campaign"], r["family"], r["session"])
        if key not in done:
            by.setdefault(key, []).append(r)
    t0 = dt.datetime(2026, 10, 1, 6, 0, 0)
    out = []
    for i, (key, rows) in enumerate(sorted(by.items())):
        s0 = t0 + dt.timedelta(hours=i)
        out.append(
            dict(zip(("campaign", "family", "session"), key))
            | dict(
                started_utc=s0.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                ended_utc=(s0 + dt.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                gap_before_s=None,
                n_requests=len(rows),
                n_workers=len({r["worker"] for r in rows}),
            )
        )
    return out


SIGNER_SEED = b"refspec synthetic archive signer"


def signer():
    """The fixed Ed25519 key that signs the synthetic archives (a test key, derived from ``SIGNER_SEED``)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(SIGNER_SEED).digest())


@functools.cache
def signer_pubkey() -> Path:
    """The signer's public key as a PEM file outside every archive (what an auditor passes as --pubkey)."""
    from cryptography.hazmat.primitives import serialization

    path = Path(tempfile.mkdtemp(prefix="refspec-signer-")) / "signer.pub"
    path.write_bytes(
        signer().public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return path


def seal_archive(results: Path, archive: Path) -> Path:
    """Seal ``results`` into ``archive`` with the test signer (the CSV copies are carried and checked)."""
    from refspec.provenance.seal import seal

    seal(results, archive, key=signer(), archive_id="synthetic", created="2026-10-20T00:00:00Z")
    return archive


def reseal_edited(stage: Path, dst: Path, edit) -> Path:
    """A copy of the rendered results ``stage`` after ``edit(folder)`` changed its files, sealed into
    ``dst`` with the signer's valid key: what a dishonest signer who re-seals can produce."""

    work = dst.with_name(dst.name + "-stage")
    shutil.copytree(stage, work)
    for p in work.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    edit(work)
    return seal_archive(work, dst)


CHECK_PATH = REPO_ROOT / "report" / "check.py"


@functools.cache
def check_module():
    """The checker's package (report/refspec_check, on pytest's pythonpath; it imports nothing of refspec), for its functions."""
    import refspec_check

    return refspec_check


def run_check(
    archive: Path, *extra: str, pubkey: Path | bool | None = None, check: Path = CHECK_PATH, cwd: Path | None = None
) -> tuple[int, str]:
    """Run the checker as an auditor would: isolated, without site-packages, with the signer's public
    key from outside the archive (the synthetic archives' test signer unless ``pubkey`` is given;
    ``pubkey=False`` passes none); ``check`` is the command (the repository's report/check.py unless
    given, e.g. a copy of report/ alone) and ``cwd`` the folder it runs in."""
    args = [sys.executable, "-I", "-S", str(check), str(archive), *extra]
    if pubkey is not False:
        args += ["--pubkey", str(pubkey or signer_pubkey())]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, cwd=cwd)
    return r.returncode, r.stdout
