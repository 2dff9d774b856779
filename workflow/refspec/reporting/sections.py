"""Report sections of the campaigns and their results: summary, provenance, qualification,
ratios, diagnostics, replication, replay, audit, phase masks, prediction, acceptance and
the ledger. One function per section; each registers its numbers in :class:`Numbers`."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core import stats as S
from ..core.hashing import sha256_file
from .document import DASH, Archive, Cell, Figure, Num, Numbers, Section, Table, _n, _read_json, _rel
from .svg import bar_figure, interval_figure, strip_figure

CAMPAIGN_TITLES = {
    "confirmation": "Confirmation",
    "implementation": "Implementation",
    "replication": "Replication (E2)",
    "width": "Width sweep",
    "phase_mask": "Phase-mask sweep",
    "prediction": "Prospective prediction",
}
CAMPAIGN_ORDER = ("confirmation", "implementation", "replication", "width", "phase_mask", "prediction")
STAGE_ORDER = ("kq", "kq_soft_max", "kqv", "address")
LEDGER_KIND_KEYS = ("kind", "event", "type")


def _host_text(h: dict) -> str | None:
    """One line of host facts from the manifest's host record (CPU, cores, memory, OS, GPUs)."""
    cpu, os_, gpu = h.get("cpu") or {}, h.get("os") or {}, h.get("gpu") or {}
    parts = []
    if isinstance(cpu, dict) and cpu.get("model"):
        parts.append(f"{cpu['model']}, {cpu.get('usable_cores') or cpu.get('logical_cores')} cores")
    if h.get("memory_bytes"):
        parts.append(f"{int(h['memory_bytes']) / 2**30:.1f} GiB")
    if isinstance(os_, dict) and (os_.get("distribution") or os_.get("system")):
        parts.append(f"{os_.get('distribution') or os_.get('system')} {os_.get('machine', '')}".strip())
    if isinstance(gpu, dict):
        devs = gpu.get("devices") or []
        cuda = ", ".join(
            f"{what} {gpu[k]}"
            for what, k in (("CUDA driver", "cuda_driver_version"), ("CUDA runtime", "cuda_runtime_version"))
            if gpu.get(k)
        )
        parts.append(
            "GPU: "
            + (
                ", ".join(
                    (
                        f"{d.get('name')} (driver {d.get('driver_version')})"
                        if d.get("driver_version")
                        else str(d.get("name", d))
                    )
                    if isinstance(d, dict)
                    else str(d)
                    for d in devs
                )
                if devs
                else "none"
            )
            + (f"; {cuda}" if cuda else "")
        )
    return "; ".join(parts) or None


def _tasks_fail(n: int) -> str:
    """The words after a count of failed tasks (and the closing parenthesis)."""
    return " task fails)" if n == 1 else " tasks fail)"


def _campaigns_in(rows: Iterable[dict]) -> list[str]:
    present = {r["campaign"] for r in rows}
    return [c for c in CAMPAIGN_ORDER if c in present] + sorted(present - set(CAMPAIGN_ORDER))


def section_provenance(
    a: Archive, pubkey_fingerprint: str | None, data_seal: str | Path | None = None
) -> tuple[Section, dict[str, Any]]:
    sec = Section("provenance", "Provenance")
    prov: dict[str, Any] = {}
    rows = []

    def kv(k, v, note=""):
        rows.append([Cell([k]), Cell([v if v else "not present"], cls="mono" if v else "missing"), Cell([note])])

    man = a.files.get("manifest")
    if man:
        prov["manifest_sha256"] = sha256_file(man)
        m = _read_json(man)
        host = None
        if isinstance(m, dict):
            h = m.get("host") or m.get("buildDefinition", {}).get("internalParameters", {}).get("host")
            if isinstance(h, dict):
                host = _host_text(h)
            elif isinstance(h, str):
                host = h
        prov["host"] = host
    kv(
        "manifest.json sha256",
        prov.get("manifest_sha256"),
        "source manifest (sdist, patches, libraries, models, panels, packages)",
    )
    kv("host", prov.get("host"), "from the manifest")
    plan = a.files.get("plan")
    if plan:
        prov["plan_sha256"] = sha256_file(plan)
    kv("plan.json sha256", prov.get("plan_sha256"), "registered plan (arms, panels, repeats, bootstrap)")
    led = a.files.get("ledger")
    if led:
        prov["ledger_sha256"] = sha256_file(led)
    kv("ledger.jsonl sha256", prov.get("ledger_sha256"), "append-only ledger of every attempt")
    seal = a.files.get("seal")
    keyids: list[str] = []
    if seal:
        prov["seal_sha256"] = sha256_file(seal)
        env = _read_json(seal)
        if isinstance(env, dict):
            for s in env.get("signatures") or []:
                if isinstance(s, dict) and isinstance(s.get("keyid"), str):
                    keyids.append(s["keyid"])
    if seal:
        kv("SEAL.dsse.json sha256", prov["seal_sha256"], "seal present when this report was rendered")
    else:
        # the archive's own seal covers this report, so the report cannot hold that seal's digest
        rows.append(
            [
                Cell(["archive seal (SEAL.dsse.json)"]),
                Cell(["in the sealed archive, beside this report"], cls="descriptive"),
                Cell(
                    [
                        "the seal covers this report, so the report cannot contain the seal's own digest: "
                        "`refspec verify ARCHIVE` and `./run main` print it"
                    ]
                ),
            ]
        )
    if data_seal is not None and Path(data_seal).is_file():
        # the seal of the data this report was rendered from; the archive's own seal (which covers
        # this report) names it as its previous seal
        prov["data_seal_sha256"] = sha256_file(Path(data_seal))
        env = _read_json(Path(data_seal))
        if isinstance(env, dict):
            for s_ in env.get("signatures") or []:
                if isinstance(s_, dict) and isinstance(s_.get("keyid"), str):
                    keyids.append(s_["keyid"])
        kv(
            "data seal sha256",
            prov["data_seal_sha256"],
            "SEAL.dsse.json of the sealed data this report was rendered from",
        )
    fp = pubkey_fingerprint or (keyids[0] if keyids else None)
    prov["pubkey_fingerprint"] = fp
    kv("public-key fingerprint", fp, "signing key (DSSE keyid)" if fp else "no key given and no seal present")
    sec.items.append(Table("provenance", "Provenance", [], ["record", "value", "note"], rows))
    for k in ("manifest", "plan", "ledger"):
        if k not in a.files:
            sec.notes.append(f"{k} not present: not run or not copied into this folder")
    return sec, prov


def section_qualification(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "qualification",
        "Complete-endpoint qualification",
        "Matching complete endpoints out of required requests per arm and family (paper Table 3 shape). "
        "An arm qualifies on a task when the reference is stable and every required request returned the reference endpoint.",
    )
    if not a.has("qualification"):
        sec.notes.append("qualification.csv not present: qualification not run")
        return sec
    src = a.src("qualification")
    counts = S.qualification_counts(a.rows("qualification"))
    for camp in _campaigns_in(counts):
        cc = [r for r in counts if r["campaign"] == camp]
        fams = sorted({r["family"] for r in cc})
        facts = {r["arm"]: (r["mode"], r["layout"]) for r in a.rows("requests") if r["campaign"] == camp}
        arms = sorted({r["arm"] for r in cc}, key=lambda x: S.arm_sort_key(x, *facts.get(x, (None, None))))
        by = {(r["family"], r["arm"]): r for r in cc}
        refused = refused_arms(a, camp)
        tid = f"qualification-{camp}"
        rows = []
        for arm in arms:
            cells = [Cell([arm], cls="mono")]
            for fam in fams:
                r = by.get((fam, arm))
                if r is None:
                    cells.append(Cell([DASH], title="arm not run for this family"))
                    continue
                key = dict(campaign=camp, family=fam, arm=arm)
                values = {
                    "matching": r["matching"],
                    "required": r["required"],
                    "tasks_failed": r["tasks"] - r["tasks_qualified"],
                }
                m, q, f = (
                    _n(N, a, "qualification", tid, ("qual", camp, fam, arm, col), v, "d", key, col)
                    for col, v in values.items()
                )
                cls = "ok" if r["tasks"] == r["tasks_qualified"] else "bad"
                why = refused.get((fam, arm))
                if why is not None:  # admission refused the arm: say so, not only "0/2 (2 tasks fail)"
                    cells.append(
                        Cell(
                            ["refused: ", why, " (", m, "/", q, " endpoints; ", f, _tasks_fail(values["tasks_failed"])],
                            cls="bad refused",
                        )
                    )
                else:
                    cells.append(Cell([m, "/", q, " (", f, _tasks_fail(values["tasks_failed"])], cls=cls))
            rows.append(cells)
        sec.items.append(
            Table(
                tid,
                f"{CAMPAIGN_TITLES.get(camp, camp)}: matching endpoints / required",
                [src],
                ["arm"] + fams,
                rows,
                numeric=[False] + [True] * len(fams),
            )
        )
    fails = [q for q in a.rows("qualification") if not q["qualified"]]
    tid = "qualification-failures"
    rows = []
    for q in sorted(
        fails, key=lambda q: (q["campaign"], q["family"], S.arm_sort_key(q["arm"]), q["task_id"], q["cap"])
    ):
        key = dict(campaign=q["campaign"], family=q["family"], task_id=q["task_id"], arm=q["arm"], cap=q["cap"])
        base = ("qfail", q["campaign"], q["family"], q["task_id"], q["arm"], q["cap"])
        cells = [
            Cell([q["campaign"]]),
            Cell([q["family"]]),
            Cell([q["task_id"]], cls="mono"),
            Cell([q["arm"]], cls="mono"),
        ]
        for col, fmt in (("first_diff_index", "d"), ("ref_token", "d"), ("arm_token", "d"), ("ref_margin", ".4g")):
            v = q[col]
            cells.append(
                Cell([DASH] if v is None else [_n(N, a, "qualification", tid, base + (col,), v, fmt, key, col)])
            )
        cells.append(Cell([q["reason"] or ""], cls="reason"))
        rows.append(cells)
    if rows:
        sec.items.append(
            Table(
                tid,
                "Failed qualifications (no ratio is reported for these arms)",
                [src],
                ["campaign", "family", "task", "arm", "first diff", "ref token", "arm token", "ref margin", "reason"],
                rows,
                numeric=[False] * 4 + [True] * 4 + [False],
            )
        )
        groups = defaultdict(list)
        for q in fails:
            if q["first_diff_index"] is not None:
                groups[f"{q['family']} {q['arm']} ({q['campaign']})"].append(int(q["first_diff_index"]))
        if groups:
            g = sorted(groups.items())
            sec.items.append(
                Figure(
                    "fig-first-divergence",
                    "First-divergence index of failing arms",
                    [src],
                    strip_figure(
                        "First-divergence index of failing arms",
                        g,
                        "zero-based index of the first token differing from the reference",
                    ),
                    "One dot per failing task; index of the first differing endpoint token.",
                )
            )
    else:
        sec.notes.append("no failed qualification")
    return sec


def section_ratios(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "ratios",
        "Qualified latency ratios",
        "Numerator time / denominator time: exp of the mean over panel tasks of the paired log-time difference "
        "(paper Tables S2, S3). A regression is a task on which the denominator is slower (task ratio below one). "
        "Comparisons with a failed qualification are shown as a dash with the reason.",
    )
    if not a.has("ratios"):
        sec.notes.append("ratios.csv not present: confirmation / implementation ratios not run")
        return sec
    src = a.src("ratios")
    rows_all = a.rows("ratios")
    for camp in _campaigns_in(rows_all):
        tid = f"ratios-{camp}"
        rows = []
        for r in [r for r in rows_all if r["campaign"] == camp]:
            key = dict(
                campaign=camp, family=r["family"], cap=r["cap"], numerator=r["numerator"], denominator=r["denominator"]
            )
            base = ("ratio", camp, r["family"], r["cap"], r["numerator"], r["denominator"])
            cells = [Cell([r["family"]]), Cell([r["path"]]), Cell([f"{r['numerator']}/{r['denominator']}"], cls="mono")]
            nt = _n(N, a, "ratios", tid, base + ("n_tasks",), r["n_tasks"], "d", key, "n_tasks")
            if r["qualified"] and r["ratio"] is not None:
                cells.append(Cell([_n(N, a, "ratios", tid, base + ("ratio",), r["ratio"], ".6f", key, "ratio")]))
                nr = _n(N, a, "ratios", tid, base + ("n_regressions",), r["n_regressions"], "d", key, "n_regressions")
                cells.append(Cell([nr, "/", nt]))
                cells.append(Cell([r["regressed_tasks"] or ""], cls="mono small"))
            else:
                cells.append(Cell([DASH], cls="bad", title="not qualified"))
                cells.append(Cell([DASH, "/", nt]))
                cells.append(Cell([r["reason"] or "not qualified"], cls="reason"))
            rows.append(cells)
        sec.items.append(
            Table(
                tid,
                f"{CAMPAIGN_TITLES.get(camp, camp)} ratios",
                [src],
                ["family", "path", "comparison", "ratio", "regressions", "regressed tasks / reason"],
                rows,
                numeric=[False, False, False, True, True, False],
            )
        )
    # cost figure: GS/QB and PQ/QB of the implementation campaign
    impl = [r for r in rows_all if r["campaign"] == "implementation" and r["path"] in ("target", "spec")]
    pts = []
    for r in sorted(impl, key=lambda r: (r["family"], r["path"], r["numerator"])):
        lay_n = _layout_of(a, "implementation", r["family"], r["numerator"])
        lay_d = _layout_of(a, "implementation", r["family"], r["denominator"])
        if lay_d != "qb" or lay_n not in ("gs", "pq"):
            continue
        pts.append(
            dict(
                label=f"{r['family']} {r['path']} {lay_n.upper()}/QB",
                value=r["ratio"] if r["qualified"] else None,
                cls=r["path"],
                note=f"{DASH} not qualified",
            )
        )
    if pts:
        sec.items.append(
            Figure(
                "fig-cost",
                "Repair cost per family: GS and PQ relative to QB",
                [src],
                interval_figure("Repair cost per family: GS and PQ relative to QB", pts, [(1.0, "ref", "1")]),
                "Implementation-campaign ratios; above one the alternative is slower than QB. "
                "Blue: target-only arms; orange: speculative arms.",
            )
        )
    return sec


def _layout_of(a: Archive, campaign: str, family: str, arm: str) -> str | None:
    for r in a.rows("requests"):
        if r["campaign"] == campaign and r["family"] == family and r["arm"] == arm:
            return r["layout"]
    return None


def section_replication(a: Archive, N: Numbers, boot: dict[str, Any]) -> Section:
    sec = Section(
        "replication",
        "Replication estimates (E2)",
        "Session contrast c_s = mean over tasks of (mean log t_NUM - mean log t_DEN) within session s; "
        "estimate = exp(mean_s c_s); percentile bootstrap over sessions (random.Random(seed), draws x n "
        "randrange(n) indices, linear 2.5/97.5 percentiles, exponentiated). Above one favours QB "
        "(paper Table S5). Decision: exceeds when the lower bound is above the threshold, below when the "
        "upper bound is below it, inconclusive otherwise. An interval from fewer than "
        f"{_WORDS.get(S.MIN_SESSIONS, S.MIN_SESSIONS)} sessions is descriptive only and shown as \u201ctoo few sessions\u201d instead of a decision.",
    )
    if not a.has("estimates"):
        sec.notes.append("estimates.csv not present: replication not run")
    else:
        src = a.src("estimates")
        tid = "estimates"
        rows, pts = [], []
        for r in a.rows("estimates"):
            key = dict(family=r["family"], path=r["path"], comparison=r["comparison"])
            base = ("est", r["family"], r["path"], r["comparison"])
            cells = [Cell([r["family"]]), Cell([r["path"]]), Cell([r["comparison"]], cls="mono")]
            nt = _n(N, a, "estimates", tid, base + ("n_tasks",), r["n_tasks"], "d", key, "n_tasks")
            ns = _n(N, a, "estimates", tid, base + ("n_sessions",), r["n_sessions"], "d", key, "n_sessions")
            draws = _n(N, a, "estimates", tid, base + ("draws",), r["draws"], "d", key, "draws")
            seed = _n(N, a, "estimates", tid, base + ("seed",), r["seed"], "d", key, "seed")
            thr = _n(N, a, "estimates", tid, base + ("threshold",), r["threshold"], ".4f", key, "threshold")
            if r["estimate"] is not None:
                e = _n(N, a, "estimates", tid, base + ("estimate",), r["estimate"], ".6f", key, "estimate")
                lo = _n(N, a, "estimates", tid, base + ("lo",), r["lo"], ".6f", key, "lo")
                hi = _n(N, a, "estimates", tid, base + ("hi",), r["hi"], ".6f", key, "hi")
                nr = _n(
                    N, a, "estimates", tid, base + ("n_regressions",), r["n_regressions"], "d", key, "n_regressions"
                )
                few = r["decision"] == S.TOO_FEW_SESSIONS
                cells += [
                    Cell([e]),
                    Cell(
                        ["[", lo, ", ", hi, "]"],
                        cls="descriptive" if few else "",
                        title="descriptive: too few sessions for a decision" if few else "",
                    ),
                    Cell([decision_text(r["decision"])], cls=r["decision"]),
                    Cell([thr]),
                    Cell([ns]),
                    Cell([nr, "/", nt]),
                    Cell([draws, " / ", seed], cls="small"),
                    Cell([r["regressed_tasks"] or ""], cls="mono small"),
                ]
                pts.append(
                    dict(
                        label=f"{r['family']} {r['path']} {r['comparison']}" + (" (too few sessions)" if few else ""),
                        value=r["estimate"],
                        lo=r["lo"],
                        hi=r["hi"],
                        cls=r["path"],
                    )
                )
            else:
                cells += [
                    Cell([DASH], cls="bad"),
                    Cell([DASH]),
                    Cell([decision_text(r["decision"])], cls="bad"),
                    Cell([thr]),
                    Cell([ns]),
                    Cell([DASH, "/", nt]),
                    Cell([draws, " / ", seed], cls="small"),
                    Cell([r["reason"] or "not qualified"], cls="reason"),
                ]
                pts.append(
                    dict(label=f"{r['family']} {r['path']} {r['comparison']}", value=None, note=f"{DASH} not qualified")
                )
            rows.append(cells)
        sec.items.append(
            Table(
                tid,
                "Replication estimates with bootstrap intervals",
                [src],
                [
                    "family",
                    "path",
                    "comparison",
                    "estimate",
                    "95% interval",
                    "decision",
                    "threshold",
                    "sessions",
                    "regressions",
                    "draws / seed",
                    "regressed tasks / reason",
                ],
                rows,
                numeric=[False, False, False, True, True, False, True, True, True, True, False],
            )
        )
        if pts:
            thr_v = next((r["threshold"] for r in a.rows("estimates")), S.DEFAULT_THRESHOLD)
            sec.items.append(
                Figure(
                    "fig-replication",
                    "Replication ratios with 95% bootstrap intervals",
                    [src],
                    interval_figure(
                        "Replication ratios with 95% bootstrap intervals",
                        pts,
                        [(1.0, "ref", "1"), (thr_v, "thr", f"threshold {thr_v:g}")],
                    ),
                    "Point: exp(mean c_s); whiskers: bootstrap interval. Blue: target-only; "
                    "orange: speculative. Dashed: practical threshold.",
                )
            )
    if boot:
        # the values themselves are the table's checked draws, seed and threshold numbers
        sec.notes.append("plan.json freezes the bootstrap settings: " + ", ".join(sorted(boot)) + " (as in the table)")
    if a.has("contrasts"):
        src = a.src("contrasts")
        tid = "contrasts"
        rows = []
        for r in a.rows("contrasts"):
            key = dict(family=r["family"], path=r["path"], comparison=r["comparison"], session=r["session"])
            base = ("contrast", r["family"], r["path"], r["comparison"], r["session"])
            c_s = _n(N, a, "contrasts", tid, base + ("c_s",), r["c_s"], ".6f", key, "c_s")
            nt = _n(N, a, "contrasts", tid, base + ("n_tasks",), r["n_tasks"], "d", key, "n_tasks")
            rows.append(
                [
                    Cell([r["family"]]),
                    Cell([r["path"]]),
                    Cell([r["comparison"]], cls="mono"),
                    Cell([r["session"]], cls="mono"),
                    Cell([c_s]),
                    Cell([nt]),
                ]
            )
        sec.items.append(
            Table(
                tid,
                "Session contrasts c_s (natural log scale)",
                [src],
                ["family", "path", "comparison", "session", "c_s", "tasks"],
                rows,
                numeric=[False] * 4 + [True, True],
            )
        )
    elif a.has("estimates"):
        sec.notes.append("contrasts.csv not present")
    if a.has("sessions"):
        src = a.src("sessions")
        tid = "sessions"
        rows = []
        for r in a.rows("sessions"):
            key = dict(campaign=r["campaign"], family=r["family"], session=r["session"])
            base = ("session", r["campaign"], r["family"], r["session"])
            gap = (
                Cell(
                    [_n(N, a, "sessions", tid, base + ("gap_before_s",), r["gap_before_s"], ".1f", key, "gap_before_s")]
                )
                if r["gap_before_s"] is not None
                else Cell([DASH], title="first session")
            )
            rows.append(
                [
                    Cell([r["campaign"]]),
                    Cell([r["family"]]),
                    Cell([r["session"]], cls="mono"),
                    Cell([r["started_utc"]], cls="mono small"),
                    Cell([r["ended_utc"]], cls="mono small"),
                    gap,
                    Cell([_n(N, a, "sessions", tid, base + ("n_requests",), r["n_requests"], "d", key, "n_requests")]),
                    Cell([_n(N, a, "sessions", tid, base + ("n_workers",), r["n_workers"], "d", key, "n_workers")]),
                ]
            )
        sec.items.append(
            Table(
                tid,
                "Sessions",
                [src],
                [
                    "campaign",
                    "family",
                    "session",
                    "started (UTC)",
                    "ended (UTC)",
                    "gap before (s)",
                    "requests",
                    "workers",
                ],
                rows,
                numeric=[False] * 5 + [True] * 3,
            )
        )
    return sec


def section_replay(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "replay",
        "Numerical replay (E1)",
        "Frozen Q/K/V/mask operands replayed through MQ, PQ and QB graphs (paper Table S7). "
        "Counts of bitwise-equal contexts per stage and the largest MQ-to-repair differences.",
    )
    if not a.has("replay"):
        sec.notes.append("replay.csv not present: numerical replay not run")
        return sec
    src = a.src("replay")
    tid = "replay"
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("replay"):
        groups[(r["family"], r["stage"])].append(r)
    rows = []
    for fam, stage in sorted(groups, key=lambda k: (k[0], STAGE_ORDER.index(k[1]) if k[1] in STAGE_ORDER else 9)):
        g = groups[(fam, stage)]
        key = dict(family=fam, stage=stage)
        base = ("replay", fam, stage)
        vals = dict(
            contexts=(len(g), "d"),
            pq_eq_qb=(sum(1 for r in g if r["pq_eq_qb"]), "d"),
            mq_eq_pq=(sum(1 for r in g if r["mq_eq_pq"]), "d"),
            control_ok=(sum(1 for r in g if r["control_ok"]), "d"),
            max_abs_mq=(max(r["max_abs_mq"] for r in g), ".6g"),
            max_ulp_mq=(max(r["max_ulp_mq"] for r in g), "d"),
            max_visible_keys=(max(r["visible_keys"] for r in g), "d"),
        )
        nums = {k: _n(N, a, "replay", tid, base + (k,), v, f, key, k) for k, (v, f) in vals.items()}
        rows.append(
            [
                Cell([fam]),
                Cell([stage], cls="mono"),
                Cell([nums["contexts"]]),
                Cell([nums["pq_eq_qb"], "/", nums["contexts"]], cls="ok" if vals["pq_eq_qb"][0] == len(g) else "bad"),
                Cell([nums["mq_eq_pq"], "/", nums["contexts"]]),
                Cell([nums["max_abs_mq"]]),
                Cell([nums["max_ulp_mq"]]),
                Cell([nums["control_ok"], "/", nums["contexts"]]),
                Cell([nums["max_visible_keys"]]),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Replay correspondence and maximum MQ differences",
            [src],
            [
                "family",
                "stage",
                "contexts",
                "PQ = QB",
                "MQ = PQ",
                "max |MQ-PQ|",
                "max ULP",
                "controls ok",
                "max visible keys",
            ],
            rows,
            numeric=[False, False] + [True] * 7,
        )
    )
    bad = [r for r in a.rows("replay") if not r["control_ok"]]
    if bad:
        sec.notes.append(
            f"{len(bad)} context(s) failed a control; their numerical claims are withheld: "
            + "; ".join(sorted({r["reason"] or "no reason recorded" for r in bad}))
        )
    return sec


def section_audit(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "audit",
        "Representation audit",
        "Synthetic fixtures with an integer address oracle, an FP64 oracle and injected faults (paper S6.2).",
    )
    if not a.has("audit"):
        sec.notes.append("audit.csv not present: representation audit not run")
        return sec
    src = a.src("audit")
    tid = "audit"
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("audit"):
        groups[(r["layout"], r["stage"])].append(r)
    rows = []
    for lay, stage in sorted(groups, key=lambda k: (k[0], STAGE_ORDER.index(k[1]) if k[1] in STAGE_ORDER else 9)):
        g = groups[(lay, stage)]
        clean = [r for r in g if r["fault"] is None]
        faulty = [r for r in g if r["fault"] is not None]
        key = dict(layout=lay, stage=stage)
        base = ("audit", lay, stage)
        vals = dict(
            fixtures=(len(clean), "d"),
            oracle_ok=(sum(1 for r in clean if r["oracle_ok"]), "d"),
            faults=(len(faulty), "d"),
            detected=(sum(1 for r in faulty if r["detected"]), "d"),
            max_abs_err=(max((r["max_abs_err"] for r in clean), default=0.0), ".6g"),
            max_rel_err=(max((r["max_rel_err"] for r in clean), default=0.0), ".6g"),
        )
        nums = {k: _n(N, a, "audit", tid, base + (k,), v, f, key, k) for k, (v, f) in vals.items()}
        ok = vals["oracle_ok"][0] == len(clean) and vals["detected"][0] == len(faulty)
        rows.append(
            [
                Cell([lay], cls="mono"),
                Cell([stage], cls="mono"),
                Cell([nums["oracle_ok"], "/", nums["fixtures"]], cls="ok" if ok else "bad"),
                Cell([nums["detected"], "/", nums["faults"]], cls="ok" if ok else "bad"),
                Cell([nums["max_abs_err"]]),
                Cell([nums["max_rel_err"]]),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Audit summary",
            [src],
            [
                "layout",
                "stage",
                "clean fixtures agreeing with the oracle",
                "injected faults detected",
                "max abs error",
                "max rel error",
            ],
            rows,
            numeric=[False, False, True, True, True, True],
        )
    )
    missed = [r for r in a.rows("audit") if r["fault"] is not None and not r["detected"]]
    if missed:
        sec.notes.append(
            "injected faults NOT detected: "
            + "; ".join(f"{r['fixture']} {r['layout']} {r['stage']} ({r['fault']})" for r in missed[:10])
        )
    return sec


# small constants of the prose in words (digits in visible text are checked numbers or names)
_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 10: "ten"}


def _mask_bits(m: int) -> str:
    return " ".join(n for b, n in ((1, "TP"), (2, "TC"), (4, "DP"), (8, "DC")) if m & b) or "none"


def section_masks(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "phase-masks",
        "Phase-mask sweep",
        "Mask bits: target prefill one, target continuation two, draft prefill four, draft continuation eight "
        "(paper Table S1). "
        "A mask passes when every probe matched the reference in every repeat; minimal = no passing proper sub-mask.",
    )
    if not a.has("phase_masks"):
        sec.notes.append("phase_masks.csv not present: phase-mask sweep not run")
        return sec
    src = a.src("phase_masks")
    tid = "phase-masks"
    rows = []
    for r in sorted(a.rows("phase_masks"), key=lambda r: (r["family"], r["mask"])):
        key = dict(family=r["family"], mask=r["mask"])
        base = ("mask", r["family"], r["mask"])
        m = _n(N, a, "phase_masks", tid, base + ("matches",), r["matches"], "d", key, "matches")
        q = _n(N, a, "phase_masks", tid, base + ("required",), r["n_tasks"] * r["repeats"], "d", key, "required")
        rows.append(
            [
                Cell([r["family"]]),
                Cell([_n(N, a, "phase_masks", tid, base + ("mask",), r["mask"], "d", key, "mask")]),
                Cell([_mask_bits(r["mask"])], cls="mono"),
                Cell([m, "/", q]),
                Cell(["Y" if r["passes"] else "N"], cls="ok" if r["passes"] else "bad"),
                Cell(["minimal" if r["minimal"] else ""], cls="ok" if r["minimal"] else ""),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Phase masks",
            [src],
            ["family", "mask", "bits", "matching / required", "passes", "minimal"],
            rows,
            numeric=[False, True, False, True, False, False],
        )
    )
    return sec


def section_acceptance(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "acceptance",
        "Draft acceptance",
        "Accepted / proposed draft tokens over completed speculative requests, per family and draft.",
    )
    if not a.has("requests"):
        sec.notes.append("requests.csv not present: no request was run")
        return sec
    acc = S.acceptance(a.rows("requests"))
    if not acc:
        sec.notes.append("no completed speculative request")
        return sec
    src = a.src("requests")
    tid = "acceptance"
    rows, bars = [], []
    for r in acc:
        key = dict(family=r["family"], draft=r["draft"])
        base = ("accept", r["family"], r["draft"])
        p = _n(N, a, "requests", tid, base + ("proposals",), r["proposals"], "d", key, "proposals")
        k = _n(N, a, "requests", tid, base + ("accepted",), r["accepted"], "d", key, "accepted")
        n = _n(N, a, "requests", tid, base + ("requests",), r["requests"], "d", key, "requests")
        if r["acceptance"] is None:
            ac = Cell([DASH], title="no proposals")
        else:
            ac = Cell([_n(N, a, "requests", tid, base + ("acceptance",), r["acceptance"], ".4f", key, "acceptance")])
            bars.append((f"{r['family']} {r['draft']}", r["acceptance"], f"{r['acceptance']:.4f}"))
        rows.append([Cell([r["family"]]), Cell([r["draft"]], cls="mono"), Cell([n]), Cell([p]), Cell([k]), ac])
    sec.items.append(
        Table(
            tid,
            "Draft acceptance",
            [src],
            ["family", "draft", "requests", "proposed", "accepted", "acceptance"],
            rows,
            numeric=[False, False, True, True, True, True],
        )
    )
    if bars:
        sec.items.append(
            Figure(
                "fig-acceptance",
                "Acceptance per draft",
                [src],
                bar_figure("Acceptance per draft", bars, "accepted / proposed draft tokens"),
                "Fraction of proposed draft tokens accepted by the target.",
            )
        )
    return sec


# =========================================================================== refusals, diagnostics, prediction, summary


DECISION_TEXT = {S.TOO_FEW_SESSIONS: "too few sessions"}


def decision_text(decision: str) -> str:
    """The decision as the report, the headline and the checker write it."""
    return DECISION_TEXT.get(decision, decision)


def refused_arms(a: Archive, campaign: str) -> dict[tuple[str, str], str]:
    """(family, arm) -> refusal reason for arms of which no request ran: every non-warmup row failed
    because no worker could start (the admission guard refuses an arm at worker start).

    The reason is the campaign ledger's last "worker start failed" record for the arm when the
    archive holds it (campaigns/NAME/ledger.jsonl), else the request rows' reason."""
    rows: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("requests"):
        if r["campaign"] == campaign and r["status"] != "excluded_warmup":
            rows[(r["family"], r["arm"])].append(r)
    out = {}
    for k, rs in rows.items():
        if rs and all(r["status"] == "failed" and str(r["reason"] or "").startswith("no worker:") for r in rs):
            out[k] = sorted({str(r["reason"]) for r in rs})[0]
    if not out:
        return out
    led = a.root / "campaigns" / campaign / "ledger.jsonl"
    if led.is_file():
        for raw in led.read_bytes().splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("reason"), str):
                continue
            why = rec["reason"]
            if why.startswith("worker start failed: "):
                for fam, arm in out:
                    if rec.get("arm") == arm and rec.get("family", fam) == fam:
                        out[(fam, arm)] = why[len("worker start failed: ") :]
    return {k: (v if len(v) <= 400 else v[:400] + " \u2026") for k, v in out.items()}


def section_diagnostics(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "diagnostics",
        "Diagnostic timings (not qualified)",
        "The price of preservation, measured on arms that do not all reproduce the reference: M3/M0 and C3/C0 "
        "(repaired over unrepaired path) and R_prod/M3 (deployed default over the repaired target-only path). "
        "Every row has an unqualified side and says which; these ratios compare paths whose outputs differ on "
        "some tasks and are descriptive only. They are never qualified ratios, which are in the section above. "
        "Ratio: exp of the mean over the tasks timed for both arms of the paired log-time difference; medians: "
        "the middle request time of each arm on those tasks.",
    )
    if not a.has("diagnostics"):
        sec.notes.append("diagnostics.csv not present: no diagnostic timing recorded")
        return sec
    rows_all = a.rows("diagnostics")
    if not rows_all:
        sec.notes.append("no diagnostic row: every registered pair (M3/M0, C3/C0, R_prod/M3) qualified or was not run")
        return sec
    src = a.src("diagnostics")
    tid = "diagnostics"
    rows, pts = [], []
    for r in rows_all:
        key = dict(
            campaign=r["campaign"],
            family=r["family"],
            cap=r["cap"],
            numerator=r["numerator"],
            denominator=r["denominator"],
        )
        base = ("diag", r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"])
        cmp_ = f"{r['numerator']}/{r['denominator']}"
        nt = _n(N, a, "diagnostics", tid, base + ("n_tasks",), r["n_tasks"], "d", key, "n_tasks")
        timed = _n(N, a, "diagnostics", tid, base + ("n_tasks_timed",), r["n_tasks_timed"], "d", key, "n_tasks_timed")
        cells = [Cell([r["campaign"]]), Cell([r["family"]]), Cell([cmp_], cls="mono"), Cell([r["label"]], cls="diag")]
        if r["ratio"] is not None:
            mn = _n(
                N,
                a,
                "diagnostics",
                tid,
                base + ("median_numerator_ms",),
                r["median_numerator_ns"] / 1e6,
                ".2f",
                key,
                "median_numerator_ns",
            )
            md = _n(
                N,
                a,
                "diagnostics",
                tid,
                base + ("median_denominator_ms",),
                r["median_denominator_ns"] / 1e6,
                ".2f",
                key,
                "median_denominator_ns",
            )
            ra = _n(N, a, "diagnostics", tid, base + ("ratio",), r["ratio"], ".6f", key, "ratio")
            nr = _n(N, a, "diagnostics", tid, base + ("n_regressions",), r["n_regressions"], "d", key, "n_regressions")
            cells += [Cell([mn]), Cell([md]), Cell([ra], cls="diag"), Cell([nr, "/", timed, "/", nt])]
            pts.append(dict(label=f"{r['family']} {cmp_} ({r['campaign']})", value=r["ratio"], cls="diag"))
        else:
            cells += [
                Cell([DASH]),
                Cell([DASH]),
                Cell([DASH], title="no task timed for both arms"),
                Cell([DASH, "/", timed, "/", nt]),
            ]
        cells.append(Cell([r["reason"]], cls="reason"))
        rows.append(cells)
    sec.items.append(
        Table(
            tid,
            "Diagnostic (unqualified) medians and paired ratios",
            [src],
            [
                "campaign",
                "family",
                "comparison",
                "label",
                "median num (ms)",
                "median den (ms)",
                "diagnostic ratio",
                "regressions / timed / tasks",
                "not qualified",
            ],
            rows,
            caption="Diagnostic: not qualified.",
            numeric=[False, False, False, False, True, True, True, True, False],
        )
    )
    if pts:
        sec.items.append(
            Figure(
                "fig-diagnostics",
                "Diagnostic (unqualified) timing ratios",
                [src],
                interval_figure("Diagnostic (unqualified) timing ratios", pts, [(1.0, "ref", "1")]),
                "Diagnostic, not qualified: at least one arm of each pair differs from the reference "
                "on some task. Above one the numerator is slower.",
            )
        )
    return sec


def prediction_totals(rows: list[dict]) -> dict[str, Any]:
    """Companion-study counts over the reserved tasks of one family."""
    div = [r for r in rows if r["reference_divergent"]]
    return dict(
        tasks=len(rows),
        live_runs=sum(r["live_runs"] for r in rows),
        stable_tasks=sum(1 for r in rows if r["live_stable"]),
        predicted_matches=sum(r["predicted_matches"] for r in rows),
        reference_matches=sum(r["reference_matches"] for r in rows),
        divergent_tasks=len(div),
        divergent_runs=sum(r["live_runs"] for r in div),
        divergent_predicted=sum(r["predicted_matches"] for r in div),
    )


def section_prediction(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "prediction",
        "Prospective prediction",
        "Companion-study design: a draft-free fast predictor (never the reference R) is selected on exposed "
        "discovery tasks; its complete generated IDs for the reserved tasks are frozen in the plan record "
        "before any live speculation touches them; then the live speculative path runs on the reserved tasks "
        "together with the reference. Definitions: a capped sequence is one live run of a reserved task; "
        "predicted vs live counts live runs whose complete endpoint (all token IDs, EOG flag, stop reason) "
        "equals the frozen prediction; reference vs live counts live runs equal to the same-set reference "
        "(the first R endpoint of the live session); a task is repeat-stable when all its live runs share one "
        "endpoint, and reference-divergent when some live run differs from the reference. The companion study "
        "reports every live run predicted against fewer for the reference, including every run of its "
        "reference-divergent prompts. A prediction neither restores qualification nor identifies a numerical cause.",
    )
    if not a.has("prediction"):
        sec.notes.append("prediction.csv not present: prospective prediction not run")
        return sec
    src = a.src("prediction")
    by_fam: dict[str, list[dict]] = defaultdict(list)
    for r in a.rows("prediction"):
        by_fam[r["family"]].append(r)
    tid = "prediction-summary"
    rows = []
    for fam in sorted(by_fam):
        rs = by_fam[fam]
        tot = prediction_totals(rs)
        key = dict(family=fam)
        v = {k: _n(N, a, "prediction", tid, ("predsum", fam, k), val, "d", key, k) for k, val in tot.items()}
        live = sorted({r["live_arm"] for r in rs})
        pred = sorted({r["predictor"] for r in rs})
        rows.append(
            [
                Cell([fam]),
                Cell([" ".join(live)], cls="mono"),
                Cell([" ".join(pred)], cls="mono"),
                Cell([v["live_runs"]]),
                Cell(
                    [v["predicted_matches"], "/", v["live_runs"]],
                    cls="ok" if tot["predicted_matches"] == tot["live_runs"] else "bad",
                ),
                Cell(
                    [v["reference_matches"], "/", v["live_runs"]],
                    cls="ok" if tot["reference_matches"] == tot["live_runs"] else "bad",
                ),
                Cell([v["stable_tasks"], "/", v["tasks"]]),
                Cell(
                    [
                        v["divergent_tasks"],
                        " tasks; predicted ",
                        v["divergent_predicted"],
                        "/",
                        v["divergent_runs"],
                        " of their runs",
                    ]
                ),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Predicted vs live next to reference vs live",
            [src],
            [
                "family",
                "live arm",
                "predictor",
                "capped sequences",
                "predicted vs live",
                "reference vs live",
                "repeat-stable tasks",
                "reference-divergent",
            ],
            rows,
            numeric=[False, False, False, True, True, True, True, False],
        )
    )
    tid = "prediction"
    rows = []
    for r in sorted(a.rows("prediction"), key=lambda r: (r["family"], r["task_id"])):
        key = dict(family=r["family"], task_id=r["task_id"])
        base = ("pred", r["family"], r["task_id"])
        n = _n(N, a, "prediction", tid, base + ("live_runs",), r["live_runs"], "d", key, "live_runs")
        pm = _n(
            N,
            a,
            "prediction",
            tid,
            base + ("predicted_matches",),
            r["predicted_matches"],
            "d",
            key,
            "predicted_matches",
        )
        rm = _n(
            N,
            a,
            "prediction",
            tid,
            base + ("reference_matches",),
            r["reference_matches"],
            "d",
            key,
            "reference_matches",
        )
        stable = DASH if r["live_stable"] is None else ("yes" if r["live_stable"] else "no")
        rows.append(
            [
                Cell([r["family"]]),
                Cell([r["task_id"]], cls="mono"),
                Cell([n]),
                Cell([stable]),
                Cell([pm, "/", n], cls="ok" if r["predicted_matches"] == r["live_runs"] else "bad"),
                Cell([rm, "/", n], cls="ok" if r["reference_matches"] == r["live_runs"] else "bad"),
                Cell(["yes" if r["reference_divergent"] else "no"], cls="bad" if r["reference_divergent"] else ""),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Per reserved task",
            [src],
            [
                "family",
                "task",
                "live runs",
                "repeat-stable",
                "predicted vs live",
                "reference vs live",
                "reference-divergent",
            ],
            rows,
            numeric=[False, False, True, False, True, True, False],
        )
    )
    return sec


def _parts_json(parts: list[Any]) -> list[Any]:
    return [{"num": p.id} if isinstance(p, Num) else str(p) for p in parts]


def _join(groups: list[list[Any]], sep: str = " \u00b7 ") -> list[Any]:
    out: list[Any] = []
    for g in groups:
        if out:
            out.append(sep)
        out += g
    return out


HEADLINE_DIVERGENCES = 6  # first divergences listed per failing arm


def section_summary(
    a: Archive, N: Numbers, prov: dict[str, Any], *, software_device: bool = False
) -> tuple[Section, list[dict[str, Any]]]:
    """The headline block: the same rows ``./run main`` prints; every number is one of the report's own.

    On a software device (lavapipe: Vulkan on the CPU) the timing rows say that they are CPU
    timings of that device, not a speed: no such ratio reads as a GPU speed claim."""
    timing = " (software Vulkan device: CPU timing, not a GPU speed)" if software_device else ""
    sec = Section(
        "summary",
        "Summary",
        "The headline of this archive. Every number here is the same number, with the same id and "
        "source, as in the section it comes from, and is recomputed by report/check.py.",
    )
    head: list[dict[str, Any]] = []

    def add(finding: str, scope: str, parts: list[Any], cls: str = "", **extra) -> None:
        head.append(dict(finding=finding, scope=scope, parts=_parts_json(parts), **extra))
        rows.append([Cell([finding]), Cell([scope], cls="mono small"), Cell(parts, cls=cls)])

    rows: list[list[Cell]] = []
    facts = {(r["campaign"], r["family"], r["arm"]): (r["mode"], r["layout"]) for r in a.rows("requests")}
    # preservation per arm (the phase-mask sweep and the prediction have their own tables: the sweep's arms
    # are masks, and the prediction's discovery tasks have no reference by design)
    own_tables = ("phase_mask", "prediction")
    if a.has("qualification"):
        counts = [c for c in S.qualification_counts(a.rows("qualification")) if c["campaign"] not in own_tables]
        for camp in _campaigns_in(counts):
            refused = refused_arms(a, camp)
            for fam in sorted({c["family"] for c in counts if c["campaign"] == camp}):
                cc = sorted(
                    (c for c in counts if c["campaign"] == camp and c["family"] == fam),
                    key=lambda c: S.arm_sort_key(c["arm"], *facts.get((camp, fam, c["arm"]), (None, None))),
                )
                groups = []
                for c in cc:
                    key = dict(campaign=camp, family=fam, arm=c["arm"])
                    b = ("qual", camp, fam, c["arm"])
                    m = _n(
                        N,
                        a,
                        "qualification",
                        f"qualification-{camp}",
                        b + ("matching",),
                        c["matching"],
                        "d",
                        key,
                        "matching",
                    )
                    q = _n(
                        N,
                        a,
                        "qualification",
                        f"qualification-{camp}",
                        b + ("required",),
                        c["required"],
                        "d",
                        key,
                        "required",
                    )
                    g = [c["arm"], " ", m, "/", q]
                    if (fam, c["arm"]) in refused:
                        g += [" refused"]
                    elif c["tasks"] != c["tasks_qualified"]:
                        f = _n(
                            N,
                            a,
                            "qualification",
                            f"qualification-{camp}",
                            b + ("tasks_failed",),
                            c["tasks"] - c["tasks_qualified"],
                            "d",
                            key,
                            "tasks_failed",
                        )
                        g += [" (", f, _tasks_fail(c["tasks"] - c["tasks_qualified"])]
                    groups.append(g)
                add("preservation: matching / required", f"{camp} {fam}", _join(groups))
        # first divergences of the failing arms (a refused arm has none: it never ran)
        fails: dict[tuple, list[dict]] = defaultdict(list)
        refused_all = {
            (camp, fam, arm)
            for camp in {q["campaign"] for q in a.rows("qualification")}
            for (fam, arm) in refused_arms(a, camp)
        }
        for q in a.rows("qualification"):
            k = (q["campaign"], q["family"], q["arm"])
            if not q["qualified"] and q["campaign"] not in own_tables and k not in refused_all:
                fails[k].append(q)
        for camp, fam, arm in sorted(fails, key=lambda k: (k[0], k[1], S.arm_sort_key(k[2]))):
            qs = sorted(
                (q for q in fails[(camp, fam, arm)] if q["first_diff_index"] is not None),
                key=lambda q: (q["first_diff_index"], q["task_id"]),
            )
            other = len(fails[(camp, fam, arm)]) - len(qs)
            groups = []
            for q in qs[:HEADLINE_DIVERGENCES]:
                key = dict(campaign=camp, family=fam, task_id=q["task_id"], arm=arm, cap=q["cap"])
                i = _n(
                    N,
                    a,
                    "qualification",
                    "qualification-failures",
                    ("qfail", camp, fam, q["task_id"], arm, q["cap"], "first_diff_index"),
                    q["first_diff_index"],
                    "d",
                    key,
                    "first_diff_index",
                )
                groups.append([q["task_id"], " at token ", i])
            parts = _join(groups)
            if len(qs) > HEADLINE_DIVERGENCES:
                parts.append(f" \u00b7 and {len(qs) - HEADLINE_DIVERGENCES} more (failed qualifications table)")
            if other:
                parts.append(("; " if parts else "") + f"{other} task(s) not completed (failed qualifications table)")
            add("first divergence", f"{camp} {fam} {arm}", parts, cls="bad")
    # qualified ratios: the confirmation's, and the repair costs (X/QB on one path) of the others
    if a.has("ratios"):
        by: dict[tuple, list[Any]] = defaultdict(list)
        for r in a.rows("ratios"):
            if not r["qualified"] or r["ratio"] is None:
                continue
            if r["campaign"] != "confirmation":
                lay_d = facts.get((r["campaign"], r["family"], r["denominator"]), (None, None))[1]
                if r["path"] == "mixed" or lay_d != "qb":
                    continue
            key = dict(
                campaign=r["campaign"],
                family=r["family"],
                cap=r["cap"],
                numerator=r["numerator"],
                denominator=r["denominator"],
            )
            v = _n(
                N,
                a,
                "ratios",
                f"ratios-{r['campaign']}",
                ("ratio", r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"], "ratio"),
                r["ratio"],
                ".6f",
                key,
                "ratio",
            )
            by[(r["campaign"], r["family"], r["cap"])].append([f"{r['numerator']}/{r['denominator']} ", v])
        for camp, fam, cap in sorted(
            by, key=lambda k: (CAMPAIGN_ORDER.index(k[0]) if k[0] in CAMPAIGN_ORDER else 99, k[1], k[2])
        ):
            add("qualified ratios" + timing, f"{camp} {fam} cap {cap}", _join(by[(camp, fam, cap)]))
    # E2 estimates with decisions
    for r in a.rows("estimates"):
        key = dict(family=r["family"], path=r["path"], comparison=r["comparison"])
        b = ("est", r["family"], r["path"], r["comparison"])
        ns = _n(N, a, "estimates", "estimates", b + ("n_sessions",), r["n_sessions"], "d", key, "n_sessions")
        if r["estimate"] is None:
            parts = [DASH, " ", decision_text(r["decision"])]
        else:
            e = _n(N, a, "estimates", "estimates", b + ("estimate",), r["estimate"], ".6f", key, "estimate")
            lo = _n(N, a, "estimates", "estimates", b + ("lo",), r["lo"], ".6f", key, "lo")
            hi = _n(N, a, "estimates", "estimates", b + ("hi",), r["hi"], ".6f", key, "hi")
            parts = [e, " [", lo, ", ", hi, "] ", decision_text(r["decision"])]
        parts += [" (", ns, " sessions)"]
        add(
            "E2 estimate" + timing,
            f"{r['family']} {r['path']} {r['comparison']}",
            parts,
            cls=r["decision"],
            decision=r["decision"],
            key=key,
        )
    # E1 counts
    groups_e1: dict[str, list[list[Any]]] = defaultdict(list)
    rp: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("replay"):
        rp[(r["family"], r["stage"])].append(r)
    for fam, stage in sorted(rp, key=lambda k: (k[0], STAGE_ORDER.index(k[1]) if k[1] in STAGE_ORDER else 9)):
        g = rp[(fam, stage)]
        key = dict(family=fam, stage=stage)
        b = ("replay", fam, stage)
        eq = _n(N, a, "replay", "replay", b + ("pq_eq_qb",), sum(1 for r in g if r["pq_eq_qb"]), "d", key, "pq_eq_qb")
        n = _n(N, a, "replay", "replay", b + ("contexts",), len(g), "d", key, "contexts")
        groups_e1[fam].append([f"{stage} ", eq, "/", n])
    for fam in sorted(groups_e1):
        add("E1: PQ = QB bitwise (contexts)", fam, _join(groups_e1[fam]))
    # prediction next to the reference
    if a.has("prediction"):
        by_fam: dict[str, list[dict]] = defaultdict(list)
        for r in a.rows("prediction"):
            by_fam[r["family"]].append(r)
        for fam in sorted(by_fam):
            tot = prediction_totals(by_fam[fam])
            key = dict(family=fam)
            v = {
                k: _n(N, a, "prediction", "prediction-summary", ("predsum", fam, k), val, "d", key, k)
                for k, val in tot.items()
            }
            pred = " ".join(sorted({r["predictor"] for r in by_fam[fam]}))
            live = " ".join(sorted({r["live_arm"] for r in by_fam[fam]}))
            add(
                "prediction vs reference",
                f"{fam} {live} by {pred}",
                [
                    "predicted vs live ",
                    v["predicted_matches"],
                    "/",
                    v["live_runs"],
                    " \u00b7 reference vs live ",
                    v["reference_matches"],
                    "/",
                    v["live_runs"],
                ],
            )
    # seal and key
    add(
        "data seal (sha256 of SEAL.dsse.json)",
        "the sealed data this report was rendered from",
        [prov.get("data_seal_sha256") or prov.get("seal_sha256") or "not sealed when this report was rendered"],
        cls="mono small",
    )
    add(
        "signing key fingerprint",
        "DSSE keyid",
        [prov.get("pubkey_fingerprint") or "no key given and no seal present"],
        cls="mono small",
    )
    srcs = sorted({p.source for row in rows for c in row for p in c.parts if isinstance(p, Num)})
    sec.items.append(
        Table("summary", "Headline", srcs, ["finding", "scope", "result"], rows, numeric=[False, False, False])
    )
    return sec, head


def ledger_kinds(path: Path) -> tuple[int, dict[str, int], list[str]]:
    """(records, kind -> count, problems) of a ledger file; kind = first of kind/event/type."""
    kinds: dict[str, int] = defaultdict(int)
    problems: list[str] = []
    n = 0
    with open(path, "rb") as f:
        for i, raw in enumerate(f, start=1):
            n += 1
            try:
                rec = json.loads(raw)
            except ValueError:
                problems.append(f"line {i} is not JSON")
                continue
            kind = "(none)"
            if isinstance(rec, dict):
                for k in LEDGER_KIND_KEYS:
                    if isinstance(rec.get(k), str):
                        kind = rec[k]
                        break
            kinds[kind] += 1
    return n, dict(sorted(kinds.items())), problems


def section_ledger(a: Archive, N: Numbers) -> Section:
    sec = Section(
        "ledger",
        "Ledger: attempts, failures and exclusions",
        "Every attempt is kept. Counts of request rows per campaign and status with the recorded reasons, "
        "and the ledger's records by kind.",
    )
    if a.has("requests"):
        src = a.src("requests")
        tid = "status"
        rows = []
        for r in S.status_counts(a.rows("requests")):
            key = dict(campaign=r["campaign"], status=r["status"])
            c = _n(
                N, a, "requests", tid, ("status", r["campaign"], r["status"], "count"), r["count"], "d", key, "count"
            )
            parts: list[Any] = []
            for reason, cnt in sorted(r["reasons"].items()):
                if parts:
                    parts.append("; ")
                parts += [
                    reason,
                    " (",
                    _n(
                        N,
                        a,
                        "requests",
                        tid,
                        ("reason", r["campaign"], r["status"], reason, "count"),
                        cnt,
                        "d",
                        dict(key, reason=reason),
                        "count",
                    ),
                    ")",
                ]
            rows.append(
                [
                    Cell([r["campaign"]]),
                    Cell([r["status"]], cls="ok" if r["status"] == "ok" else "bad"),
                    Cell([c]),
                    Cell(parts or [""], cls="reason"),
                ]
            )
        sec.items.append(
            Table(
                tid,
                "Request attempts by status",
                [src],
                ["campaign", "status", "rows", "reasons"],
                rows,
                numeric=[False, False, True, False],
            )
        )
    else:
        sec.notes.append("requests.csv not present")
    led = a.files.get("ledger")
    if led is not None:
        n, kinds, problems = ledger_kinds(led)
        src = _rel(led, a.out)
        tid = "ledger"
        rows = [[Cell(["all records"]), Cell([N.add(("ledger", "records"), n, "d", src, tid, {}, "records")])]]
        for k, v in kinds.items():
            rows.append(
                [
                    Cell([k], cls="mono"),
                    Cell([N.add(("ledger", "kind", k, "count"), v, "d", src, tid, {"kind": k}, "count")]),
                ]
            )
        sec.items.append(Table(tid, "Ledger records by kind", [src], ["kind", "records"], rows, numeric=[False, True]))
        for p in problems:
            sec.notes.append(f"ledger.jsonl: {p}")
    else:
        sec.notes.append("ledger.jsonl not present")
    return sec
