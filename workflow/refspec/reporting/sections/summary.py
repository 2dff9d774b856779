"""The summary section: the headline rows ``./run main`` prints, each number one of the report's own."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ...campaigns.derived import arm_sort_key, qualification_counts
from ...core.campaign_names import REPORT_ORDER
from ...core.vacuity import panel_exposure
from ..document import DASH, Archive, Cell, Num, Numbers, Section, ShownTable, Table
from .noise import aa_parts, aa_rows
from .numerical import e1_counts
from .prediction import prediction_totals
from .qualification import refused_arms
from .timing import decision_text
from .vocabulary import STAGE_ORDER, VACUOUS_TAIL, VACUOUS_TEXT, campaigns_in, tasks_fail


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
# the phase-mask sweep and the prediction have their own tables: the sweep's arms are masks, and the
# prediction's discovery tasks have no reference by design
OWN_TABLES = ("phase_mask", "prediction")


@dataclass
class Headline:
    """The summary's rows as the report shows them, and as numbers.json's ``headline`` lists them."""

    rows: list[list[Cell]] = field(default_factory=list)
    head: list[dict[str, Any]] = field(default_factory=list)

    def add(self, finding: str, scope: str, parts: list[Any], cls: str = "", **extra) -> None:
        self.head.append(dict(finding=finding, scope=scope, parts=_parts_json(parts), **extra))
        self.rows.append([Cell([finding]), Cell([scope], cls="mono small"), Cell(parts, cls=cls)])


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
    h = Headline()
    facts = {(r["campaign"], r["family"], r["arm"]): (r["mode"], r["layout"]) for r in a.rows("requests")}
    if a.has("qualification"):
        _preservation(a, N, h, facts)
        _first_divergences(a, N, h)
    if a.has("ratios"):
        _qualified_ratios(a, N, h, facts, timing)
    _estimates(a, N, h, timing)
    _replay_counts(a, N, h)
    if a.has("prediction"):
        _prediction(a, N, h)
    # seal and key
    h.add(
        "data seal (sha256 of SEAL.dsse.json)",
        "the sealed data this report was rendered from",
        [prov.get("data_seal_sha256") or prov.get("seal_sha256") or "not sealed when this report was rendered"],
        cls="mono small",
    )
    h.add(
        "signing key fingerprint",
        "DSSE keyid",
        [prov.get("pubkey_fingerprint") or "no key given and no seal present"],
        cls="mono small",
    )
    srcs = sorted({p.source for row in h.rows for c in row for p in c.parts if isinstance(p, Num)})
    sec.items.append(
        Table("summary", "Headline", srcs, ["finding", "scope", "result"], h.rows, numeric=[False, False, False])
    )
    return sec, h.head


def vacuity_parts(a: Archive, N: Numbers, camp: str, fam: str, tid: str) -> list[Any]:
    """ "vacuous: no exposed input in N screened" where the panel's unrepaired arms never diverge
    (:mod:`refspec.core.vacuity`; N, the panel's tasks, a checked number); [] otherwise."""
    ex = panel_exposure(a.rows("qualification"), a.rows("requests")).get((camp, fam))
    if ex is None or not ex["vacuous"]:
        return []
    n = ShownTable(N, a, "qualification", tid).add(
        ("vacuity", camp, fam, "screened"),
        ex["screened"],
        "d",
        row=dict(campaign=camp, family=fam),
        column="task_id",
    )
    return [VACUOUS_TEXT, n, VACUOUS_TAIL, " (no unrepaired arm diverged) \u00b7 "]


def _preservation(a: Archive, N: Numbers, h: Headline, facts: dict[tuple, tuple]) -> None:
    """Preservation per arm: matching / required endpoints of each campaign and family; a panel whose
    unrepaired arms never diverge opens with its vacuity verdict."""
    counts = [c for c in qualification_counts(a.rows("qualification")) if c["campaign"] not in OWN_TABLES]
    for camp in campaigns_in(counts):
        refused = refused_arms(a, camp)
        tid = f"qualification-{camp}"
        nums = ShownTable(N, a, "qualification", tid)
        for fam in sorted({c["family"] for c in counts if c["campaign"] == camp}):
            cc = sorted(
                (c for c in counts if c["campaign"] == camp and c["family"] == fam),
                key=lambda c: arm_sort_key(c["arm"], *facts.get((camp, fam, c["arm"]), (None, None))),
            )
            groups = []
            for c in cc:
                key = dict(campaign=camp, family=fam, arm=c["arm"])
                b = ("qual", camp, fam, c["arm"])
                m = nums.add(b + ("matching",), c["matching"], "d", row=key, column="matching")
                q = nums.add(b + ("required",), c["required"], "d", row=key, column="required")
                g = [c["arm"], " ", m, "/", q]
                if (fam, c["arm"]) in refused:
                    g += [" refused"]
                elif c["tasks"] != c["tasks_qualified"]:
                    failed = c["tasks"] - c["tasks_qualified"]
                    f = nums.add(b + ("tasks_failed",), failed, "d", row=key, column="tasks_failed")
                    g += [" (", f, tasks_fail(failed)]
                groups.append(g)
            parts = vacuity_parts(a, N, camp, fam, tid) + _join(groups)
            h.add("preservation: matching / required", f"{camp} {fam}", parts)


def _first_divergences(a: Archive, N: Numbers, h: Headline) -> None:
    """First divergences of the failing arms (a refused arm has none: it never ran)."""
    nums = ShownTable(N, a, "qualification", "qualification-failures")
    fails: dict[tuple, list[dict]] = defaultdict(list)
    refused_all = {
        (camp, fam, arm)
        for camp in {q["campaign"] for q in a.rows("qualification")}
        for (fam, arm) in refused_arms(a, camp)
    }
    for q in a.rows("qualification"):
        k = (q["campaign"], q["family"], q["arm"])
        if not q["qualified"] and q["campaign"] not in OWN_TABLES and k not in refused_all:
            fails[k].append(q)
    for camp, fam, arm in sorted(fails, key=lambda k: (k[0], k[1], arm_sort_key(k[2]))):
        qs = sorted(
            (q for q in fails[(camp, fam, arm)] if q["first_diff_index"] is not None),
            key=lambda q: (q["first_diff_index"], q["task_id"]),
        )
        other = len(fails[(camp, fam, arm)]) - len(qs)
        groups = []
        for q in qs[:HEADLINE_DIVERGENCES]:
            key = dict(campaign=camp, family=fam, task_id=q["task_id"], arm=arm, cap=q["cap"])
            i = nums.add(
                ("qfail", camp, fam, q["task_id"], arm, q["cap"], "first_diff_index"),
                q["first_diff_index"],
                "d",
                row=key,
                column="first_diff_index",
            )
            groups.append([q["task_id"], " at token ", i])
        parts = _join(groups)
        if len(qs) > HEADLINE_DIVERGENCES:
            parts.append(f" \u00b7 and {len(qs) - HEADLINE_DIVERGENCES} more (failed qualifications table)")
        if other:
            parts.append(("; " if parts else "") + f"{other} task(s) not completed (failed qualifications table)")
        h.add("first divergence", f"{camp} {fam} {arm}", parts, cls="bad")


def _qualified_ratios(a: Archive, N: Numbers, h: Headline, facts: dict[tuple, tuple], timing: str) -> None:
    """Qualified ratios: the confirmation's, and the repair costs (X/QB on one path) of the others."""
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
        v = ShownTable(N, a, "ratios", tid=f"ratios-{r['campaign']}").add(
            ("ratio", r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"], "ratio"),
            r["ratio"],
            ".6f",
            row=key,
            column="ratio",
        )
        by[(r["campaign"], r["family"], r["cap"])].append([f"{r['numerator']}/{r['denominator']} ", v])
    for camp, fam, cap in sorted(
        by, key=lambda k: (REPORT_ORDER.index(k[0]) if k[0] in REPORT_ORDER else 99, k[1], k[2])
    ):
        groups = by[(camp, fam, cap)] + [["A/A "] + aa_parts(a, N, n) for n in aa_rows(a, camp, fam)]
        parts = vacuity_parts(a, N, camp, fam, f"ratios-{camp}") + _join(groups)
        h.add("qualified ratios" + timing, f"{camp} {fam} cap {cap}", parts)


def _estimates(a: Archive, N: Numbers, h: Headline, timing: str) -> None:
    """E2 estimates with their decisions."""
    nums = ShownTable(N, a, "estimates", "estimates")
    for r in a.rows("estimates"):
        key = dict(family=r["family"], path=r["path"], comparison=r["comparison"])
        b = ("est", r["family"], r["path"], r["comparison"])
        ns = nums.add(b + ("n_sessions",), r["n_sessions"], "d", row=key, column="n_sessions")
        if r["estimate"] is None:
            parts = [DASH, " ", decision_text(r["decision"])]
        else:
            e = nums.add(b + ("estimate",), r["estimate"], ".6f", row=key, column="estimate")
            if r["lo"] is None:
                parts = [e, " ", decision_text(r["decision"])]
            else:
                lo = nums.add(b + ("lo",), r["lo"], ".6f", row=key, column="lo")
                hi = nums.add(b + ("hi",), r["hi"], ".6f", row=key, column="hi")
                parts = [e, " [", lo, ", ", hi, "] ", decision_text(r["decision"])]
        parts += [" (", ns, " sessions)"]
        for n in aa_rows(a, "replication", r["family"]):
            parts += [" \u00b7 A/A "] + aa_parts(a, N, n)
        h.add(
            "E2 estimate" + timing,
            f"{r['family']} {r['path']} {r['comparison']}",
            parts,
            cls=r["decision"],
            decision=r["decision"],
            key=key,
        )


def _replay_counts(a: Archive, N: Numbers, h: Headline) -> None:
    """E1 counts per family and stage: contexts where PQ and QB agree bitwise of those where the device
    admitted QB (the refused ones said apart), and where PQ and QH agree."""
    nums = ShownTable(N, a, "replay", "replay")
    groups_e1: dict[str, list[list[Any]]] = defaultdict(list)
    groups_qh: dict[str, list[list[Any]]] = defaultdict(list)
    rp: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in a.rows("replay"):
        rp[(r["family"], r["stage"])].append(r)
    for fam, stage in sorted(rp, key=lambda k: (k[0], STAGE_ORDER.index(k[1]) if k[1] in STAGE_ORDER else 9)):
        g = rp[(fam, stage)]
        key = dict(family=fam, stage=stage)
        b = ("replay", fam, stage)
        counts = e1_counts(g)
        eq = nums.add(b + ("pq_eq_qb",), counts["pq_eq_qb"], "d", row=key, column="pq_eq_qb")
        n = nums.add(b + ("qb_admitted",), counts["qb_admitted"], "d", row=key, column="qb_admitted")
        part = [f"{stage} ", eq, "/", n]
        if counts["qb_refused"]:
            part += [
                " (",
                nums.add(b + ("qb_refused",), counts["qb_refused"], "d", row=key, column="qb_refused"),
                " refused)",
            ]
        groups_e1[fam].append(part)
        eq_h = nums.add(b + ("pq_eq_qh",), counts["pq_eq_qh"], "d", row=key, column="pq_eq_qh")
        n_all = nums.add(b + ("contexts",), counts["contexts"], "d", row=key, column="contexts")
        groups_qh[fam].append([f"{stage} ", eq_h, "/", n_all])
    for fam in sorted(groups_e1):
        h.add("E1: PQ = QB bitwise (contexts)", fam, _join(groups_e1[fam]))
    for fam in sorted(groups_qh):
        h.add("E1: PQ = QH bitwise (contexts)", fam, _join(groups_qh[fam]))


def _prediction(a: Archive, N: Numbers, h: Headline) -> None:
    """The prediction next to the reference, per family."""
    nums = ShownTable(N, a, "prediction", "prediction-summary")
    by_fam: dict[str, list[dict]] = defaultdict(list)
    for r in a.rows("prediction"):
        by_fam[r["family"]].append(r)
    for fam in sorted(by_fam):
        tot = prediction_totals(by_fam[fam])
        key = dict(family=fam)
        v = {k: nums.add(("predsum", fam, k), val, "d", row=key, column=k) for k, val in tot.items()}
        pred = " ".join(sorted({r["predictor"] for r in by_fam[fam]}))
        live = " ".join(sorted({r["live_arm"] for r in by_fam[fam]}))
        h.add(
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
