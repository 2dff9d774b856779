"""The summary section: the headline rows ``./run main`` prints, each number one of the report's own."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from refspec_check.names import REFERENCE_ARM, REPORT_ORDER, arm_sort_key
from refspec_check.stats import DECIDED, DEFAULT_THRESHOLD

from ..aggregates import qualification_counts
from ..document import DASH, Archive, Cell, Link, Num, Numbers, Section, ShownTable, Table
from ..svg import forest_estimate_groups, forest_ratio_groups
from ..vacuity import panel_exposure
from .answer import answer, panels, recipes, reference_of, roles
from .noise import aa_parts, aa_rows
from .numerical import e1_counts
from .prediction import prediction_totals
from .qualification import named_references, refused_arms
from .verdicts import speed_sentence, verdict_word
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
        "What this archive found, verdict first; report/check.py recomputes every number and word.",
    )
    h = Headline()
    facts = {(r["campaign"], r["family"], r["arm"]): (r["mode"], r["layout"]) for r in a.rows("requests")}
    found = findings(a, N, facts, timing)
    if found.rows:
        sources = sorted({p.source for row in found.rows for c in row for p in c.parts if isinstance(p, Num)})
        if found.refused and a.src("qualification") not in sources:
            sources.append(a.src("qualification"))
        sec.items.append(
            Table(
                "findings",
                "Findings",
                sources,
                ["verdict", "scope", "finding", "rests on"],
                found.rows,
                numeric=[False] * 4,
            )
        )
    prov["findings"] = found.doc
    if prov.get("pubkey_fingerprint"):  # right under the findings: how to recompute all of them
        h.add(
            "verify this report",
            "ARCHIVE: this report's folder; KEY.pub: the signer's public key, received apart from the archive; "
            "run beside the repository's report/ folder, which is all it needs (check.py carries the renderer "
            "it renders the report again with)",
            [VERIFY_COMMAND, prov["pubkey_fingerprint"]],
            cls="mono small",
        )
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
    (:mod:`refspec_check.render.vacuity`; N, the panel's tasks, a checked number); [] otherwise."""
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
    """Qualified ratios in words (:func:`.verdicts.speed_sentence`): the confirmation's, and the repair
    costs (X/QB on one path) of the others; the campaign's A/A control once beside them."""
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
        nums = ShownTable(N, a, "ratios", tid=f"ratios-{r['campaign']}")
        base = ("ratio", r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"])
        by[(r["campaign"], r["family"], r["cap"])].append(
            speed_sentence(nums, base, key, "ratio", r, r["numerator"], r["denominator"], r["verdict"])
        )
    for camp, fam, cap in sorted(
        by, key=lambda k: (REPORT_ORDER.index(k[0]) if k[0] in REPORT_ORDER else 99, k[1], k[2])
    ):
        groups = by[(camp, fam, cap)] + [aa_parts(a, N, n) for n in aa_rows(a, camp, fam)]
        parts = vacuity_parts(a, N, camp, fam, f"ratios-{camp}") + _join(groups)
        h.add("qualified ratios" + timing, f"{camp} {fam} cap {cap}", parts)


def _estimates(a: Archive, N: Numbers, h: Headline, timing: str) -> None:
    """E2 estimates in words with their decisions."""
    nums = ShownTable(N, a, "estimates", "estimates")
    for r in a.rows("estimates"):
        key = dict(family=r["family"], path=r["path"], comparison=r["comparison"])
        b = ("est", r["family"], r["path"], r["comparison"])
        ns = nums.add(b + ("n_sessions",), r["n_sessions"], "d", row=key, column="n_sessions")
        if r["estimate"] is None:
            parts = [DASH, " ", verdict_word(r["decision"])]
        else:
            num, _sep, den = r["comparison"].partition("/")
            parts = speed_sentence(nums, b, key, "estimate", r, num, den, r["decision"])
        parts += [" (", ns, " sessions)"]
        for n in aa_rows(a, "replication", r["family"]):
            parts += [" \u00b7 "] + aa_parts(a, N, n)
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


# =========================================================================== findings

# the auditor's command, completed by the signing key's fingerprint (the headline's last row)
VERIFY_COMMAND = "python3 report/check.py ARCHIVE --pubkey KEY.pub --expect-keyid "

LOSSLESS, DIVERGES, VACUOUS, REFUSED, SPEED, E1 = "LOSSLESS", "DIVERGES", "VACUOUS", "REFUSED", "SPEED", "E1"


@dataclass
class Findings:
    """The findings as the report shows them (rows of the findings table) and as numbers.json's
    ``findings`` lists them: verdict, scope, parts, and the kind and key report/check.py recomputes
    each from."""

    rows: list[list[Cell]] = field(default_factory=list)
    doc: list[dict[str, Any]] = field(default_factory=list)
    refused: bool = False
    forest: bool = False  # the report draws the forest plot (a timed ratio or estimate has an interval)

    def add(self, verdict: str, scope: str, parts: list[Any], kind: str, key: dict, cls: str = "", **extra) -> None:
        self.doc.append(dict(verdict=verdict, scope=scope, parts=_parts_json(parts), kind=kind, key=key, **extra))
        where = Cell(rests_on(kind, key, self.forest), cls="small")
        self.rows.append([Cell([verdict], cls=cls), Cell([scope], cls="mono small"), Cell(parts), where])
        self.refused = self.refused or verdict == REFUSED


def rests_on(kind: str, key: dict, forest: bool) -> list[Any]:
    """Links from a finding to what it rests on: its table (or section) and the forest plot's lines."""
    camp = key.get("campaign", "")
    table = {
        "estimate": [Link("estimates", "table-estimates")],
        "e1": [Link("replay", "replay")],
        "default": [Link("ratios", f"table-ratios-{camp}"), " \u00b7 ", Link("diagnostics", "table-diagnostics")],
    }.get(kind)
    if table is None:
        timed = kind in ("answer", "advice", "ratio", "more")
        table = [Link("ratios", f"table-ratios-{camp}")] if timed else [Link("qualification", "qualification")]
    plot = forest and kind in ("answer", "advice", "default", "ratio", "estimate")
    return table + ([" \u00b7 ", Link("forest plot", "fig-forest")] if plot else [])


def findings(a: Archive, N: Numbers, facts: dict[tuple, tuple], timing: str = "") -> Findings:
    """The findings, built only from the archive's tables: first the answer a llama.cpp user asks for
    (ANSWER, DEFAULT, ADVICE of :mod:`.answer`) of every campaign, family and cap where it applies;
    then per campaign and family with a qualification table the arms that reproduce the reference on
    every task (LOSSLESS; VACUOUS instead where no unrepaired arm diverges), those that do not
    (DIVERGES) and the refused ones (REFUSED); a speed for every qualified ratio the headline selects
    (SPEED; none where the answer states the campaign's speed) and every E2 estimate, with a count of
    the ratios left to the timing section; and the E1 count over every replayed context."""
    f = Findings(forest=_has_forest(a))
    stated = _answers(a, N, f, timing) if a.has("qualification") and a.has("ratios") else {}
    if a.has("qualification"):
        refs = named_references(a)
        exposure = panel_exposure(a.rows("qualification"), a.rows("requests"))
        rows = [q for q in a.rows("qualification") if q["campaign"] not in OWN_TABLES]
        for camp in campaigns_in(rows):
            for fam in sorted({q["family"] for q in rows if q["campaign"] == camp}):
                panel = [q for q in rows if q["campaign"] == camp and q["family"] == fam]
                ref = refs.get(camp, REFERENCE_ARM)
                _panel_findings(a, N, f, facts, panel, ref, exposure.get((camp, fam)))
    if a.has("ratios"):
        _speed_findings(a, N, f, facts, timing, stated)
    if a.has("estimates"):
        _e2_findings(a, N, f, timing)
    if a.rows("replay"):
        _e1_finding(a, N, f)
    return f


def _has_forest(a: Archive) -> bool:
    """Whether the report draws the forest plot: the figure's own groups (timing._forest) are not empty."""
    ratios = forest_ratio_groups(a.rows("ratios"), a.rows("noise"), DEFAULT_THRESHOLD)
    return bool(ratios or forest_estimate_groups(a.rows("estimates"), a.rows("noise")))


def _answers(a: Archive, N: Numbers, f: Findings, timing: str) -> dict[tuple, list[dict]]:
    """ANSWER, DEFAULT and ADVICE of every campaign, family and cap with qualified ratios, in report
    order; returns (campaign, family) -> the ratio rows they state."""
    refs = named_references(a)
    rec_all = recipes(a)
    pans = panels(a, OWN_TABLES)
    exposure = panel_exposure(a.rows("qualification"), a.rows("requests"))
    stated: dict[tuple, list[dict]] = {}
    caps = sorted({(r["campaign"], r["family"], r["cap"]) for r in a.rows("ratios")}, key=lambda k: k[1:])
    for camp in campaigns_in([dict(campaign=c) for c, _f, _k in caps]):
        for _c, fam, cap in [k for k in caps if k[0] == camp]:
            if (camp, fam) not in pans:
                continue
            rec = {x: v for (c, fm, x), v in rec_all.items() if (c, fm) == (camp, fam)}
            role = roles(pans[(camp, fam)], rec, reference_of(refs, camp))
            vac = bool((exposure.get((camp, fam)) or {}).get("vacuous"))
            said = answer(a, N, pans[(camp, fam)], role, camp, fam, cap, vac)
            key = dict(campaign=camp, family=fam, cap=cap)
            for verdict, parts, kind in said.findings:
                # neutral: colour means pass or fail only, and the answer is neither
                f.add(verdict, f"{camp} {fam} cap {cap}" + timing, parts, kind, key)
            if said.findings:
                stated.setdefault((camp, fam), []).extend(said.stated)
    return stated


def _panel_findings(
    a: Archive, N: Numbers, f: Findings, facts: dict, panel: list[dict], ref: str, ex: dict | None
) -> None:
    """One panel's arms: LOSSLESS (or VACUOUS), DIVERGES and REFUSED."""
    camp, fam = panel[0]["campaign"], panel[0]["family"]
    key = dict(campaign=camp, family=fam)
    scope = f"{camp} {fam}"
    nums = ShownTable(N, a, "qualification", "findings")
    refused = refused_arms(a, camp)
    tasks = {(q["task_id"], q["cap"]) for q in panel}
    ok: dict[str, set] = defaultdict(set)
    for q in panel:
        if q["qualified"]:
            ok[q["arm"]].add((q["task_id"], q["cap"]))
    arms = sorted({q["arm"] for q in panel}, key=lambda x: arm_sort_key(x, *facts.get((camp, fam, x), (None, None))))
    ran = [x for x in arms if (fam, x) not in refused]
    lossless = [x for x in ran if len(ok[x]) == len(tasks) and x != ref]  # the stable reference goes without saying
    diverging = [x for x in ran if len(ok[x]) < len(tasks)]
    if ex is not None and ex["vacuous"]:
        s = nums.add(("vacuity", camp, fam, "screened"), ex["screened"], "d", row=key, column="task_id")
        parts = [VACUOUS_TEXT, s, VACUOUS_TAIL, f" (no unrepaired arm diverged from {ref})"]
        f.add(VACUOUS, scope, parts, "vacuous", key, arms=lossless)
    elif lossless:
        n = nums.add(("finding", camp, fam, "tasks"), len(tasks), "d", row=key, column="task_id")
        verb = " reproduces " if len(lossless) == 1 else " reproduce "
        parts = [" ".join(lossless) + verb + ref + " on ", n, "/", n, " tasks"]
        if ex is not None:
            x = nums.add(("finding", camp, fam, "exposed"), ex["exposed"], "d", row=key, column="task_id")
            parts += [", ", x, " of them exposed (an unrepaired arm diverges there)"]
        f.add(LOSSLESS, scope, parts, "lossless", key, cls="ok", arms=lossless)
    if diverging:
        n = nums.add(("finding", camp, fam, "tasks"), len(tasks), "d", row=key, column="task_id")
        groups = []
        for x in diverging:
            k = nums.add(
                ("finding", camp, fam, x, "tasks_failed"), len(tasks) - len(ok[x]), "d", row=key, column="qualified"
            )
            groups.append([k, "/", n])
        verb = " does not reproduce " if len(diverging) == 1 else " do not reproduce "
        parts = [" ".join(diverging) + verb + ref + " on "] + _join(groups, ", ") + [" tasks"]
        firsts = [
            q for q in panel if q["arm"] in diverging and not q["qualified"] and q["first_diff_index"] is not None
        ]
        if firsts:
            q = min(firsts, key=lambda q: (q["first_diff_index"], q["task_id"], q["arm"]))
            at = ShownTable(N, a, "qualification", "qualification-failures").add(
                ("qfail", camp, fam, q["task_id"], q["arm"], q["cap"], "first_diff_index"),
                q["first_diff_index"],
                "d",
                row=dict(campaign=camp, family=fam, task_id=q["task_id"], arm=q["arm"], cap=q["cap"]),
                column="first_diff_index",
            )
            parts += [", first divergence at token ", at]
        f.add(DIVERGES, scope, parts, "diverges", key, cls="bad", arms=diverging)
    for x in arms:
        if (fam, x) in refused:
            f.add(REFUSED, scope, [f"{x} refused at admission: no request of it ran"], "refused", dict(key, arm=x))


def _headline_ratio(r: dict, facts: dict) -> bool:
    """Whether the headline (and the findings) state this qualified ratio: every one of the confirmation,
    a repair cost (X over a QB arm on one path) of the other campaigns."""
    if r["campaign"] == "confirmation":
        return True
    lay_d = facts.get((r["campaign"], r["family"], r["denominator"]), (None, None))[1]
    return r["path"] != "mixed" and lay_d == "qb"


def stated_ratio(rows: list[dict], ref: str) -> dict:
    """The one of a campaign and family's headline ``rows`` (table order) that its findings state: the
    first with the reference ``ref`` on one side and a decided verdict (:data:`DECIDED`), else the first
    with ``ref``, else the first."""
    with_ref = [r for r in rows if ref in (r["numerator"], r["denominator"])]
    decided = [r for r in with_ref if r["verdict"] in DECIDED]
    return (decided or with_ref or rows)[0]


def _speed_findings(
    a: Archive, N: Numbers, f: Findings, facts: dict, timing: str, answered: dict[tuple, list[dict]]
) -> None:
    """SPEED for one qualified ratio per campaign and family that the answer (:func:`_answers`) does not
    cover, of the rows with a verdict that the headline selects (:func:`stated_ratio`: the reader's
    question, is it faster or slower than the reference, answered where the run decides it); the
    campaign's other qualified ratios, those the answer states aside, counted (the timing section
    states each as a speed)."""
    refs = named_references(a)
    qualified = [r for r in a.rows("ratios") if r["qualified"] and r["ratio"] is not None]
    candidates: dict[tuple, list[dict]] = defaultdict(list)
    for r in qualified:
        if r.get("verdict") and _headline_ratio(r, facts) and (r["campaign"], r["family"]) not in answered:
            candidates[(r["campaign"], r["family"])].append(r)
    stated = {id(stated_ratio(rows, refs.get(camp, REFERENCE_ARM))) for (camp, _fam), rows in candidates.items()}
    said = {id(r) for rows in answered.values() for r in rows}
    chosen: dict[str, list[dict]] = defaultdict(list)
    more: dict[str, int] = defaultdict(int)
    for r in qualified:
        if id(r) in stated:
            chosen[r["campaign"]].append(r)
        elif id(r) not in said:
            more[r["campaign"]] += 1
    for camp in campaigns_in([dict(campaign=c) for c in set(chosen) | set(more)]):
        nums = ShownTable(N, a, "ratios", f"ratios-{camp}")
        for r in sorted(chosen[camp], key=lambda r: (r["family"], r["cap"])):
            key = dict(
                campaign=camp, family=r["family"], cap=r["cap"], numerator=r["numerator"], denominator=r["denominator"]
            )
            base = ("ratio", camp, r["family"], r["cap"], r["numerator"], r["denominator"])
            parts = speed_sentence(nums, base, key, "ratio", r, r["numerator"], r["denominator"], r["verdict"])
            if r.get("detectable") is not None:
                det = nums.add(base + ("detectable",), r["detectable"], ".3f", row=key, column="detectable")
                parts += ["; detectable ratio ", det]
            f.add(SPEED, f"{camp} {r['family']} cap {r['cap']}" + timing, parts, "ratio", key, decision=r["verdict"])
        if more[camp]:
            m = nums.add(("finding", camp, "more_ratios"), more[camp], "d", row=dict(campaign=camp), column="qualified")
            words = (
                " more qualified ratio in the timing section"
                if more[camp] == 1
                else " more qualified ratios in the timing section"
            )
            f.add(SPEED, camp, [m, words], "more", dict(campaign=camp))


def _e2_findings(a: Archive, N: Numbers, f: Findings, timing: str) -> None:
    """SPEED for every E2 estimate: the comparison's numerator layout against its denominator's."""
    nums = ShownTable(N, a, "estimates", "estimates")
    for r in a.rows("estimates"):
        if r["estimate"] is None:
            continue
        key = dict(family=r["family"], path=r["path"], comparison=r["comparison"])
        base = ("est", r["family"], r["path"], r["comparison"])
        num, _sep, den = r["comparison"].partition("/")
        parts = speed_sentence(nums, base, key, "estimate", r, num, den, r["decision"])
        scope = f"E2 {r['family']} {r['path']} {r['comparison']}" + timing
        f.add(SPEED, scope, parts, "estimate", key, decision=r["decision"])


def _e1_finding(a: Archive, N: Numbers, f: Findings) -> None:
    """E1 over every replayed context: PQ = QB bitwise where the device admitted QB (the refused ones apart)."""
    rows = a.rows("replay")
    counts = e1_counts(rows)
    nums = ShownTable(N, a, "replay", "replay")
    eq = nums.add(("e1", "pq_eq_qb"), counts["pq_eq_qb"], "d", row={}, column="pq_eq_qb")
    n = nums.add(("e1", "qb_admitted"), counts["qb_admitted"], "d", row={}, column="qb_admitted")
    parts = ["PQ = QB bitwise on ", eq, "/", n, " contexts where the device admitted QB"]
    if counts["qb_refused"]:
        k = nums.add(("e1", "qb_refused"), counts["qb_refused"], "d", row={}, column="qb_refused")
        parts += [" (", k, " refused QB)"]
    f.add(E1, " ".join(sorted({r["family"] for r in rows})), parts, "e1", {})
