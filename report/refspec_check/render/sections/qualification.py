"""The qualification section (matching endpoints per arm, the failed qualifications and their first
divergences, the arms admission refused) and the phase-mask sweep."""

from __future__ import annotations

import json
from collections import defaultdict

from refspec_check.divergence import DECISIVE, DIVERGENCE_TEXT
from refspec_check.names import arm_sort_key

from ..aggregates import qualification_counts
from ..document import DASH, Archive, Cell, Figure, Numbers, Section, ShownTable, Table, table_section
from ..svg import strip_figure
from .vocabulary import CAMPAIGN_TITLES, campaigns_in, tasks_fail


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


def named_references(a: Archive) -> dict[str, str]:
    """campaign -> the reference arm its frozen plan names, for campaigns that name one (not R)."""
    path = a.root / "plan.json"
    try:
        plan = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except ValueError:
        return {}
    out = {}
    for p in (plan.get("campaigns") or {}).values() if isinstance(plan, dict) else ():
        ref = (p.get("definition") or {}).get("reference") if isinstance(p, dict) else None
        if isinstance(ref, str) and isinstance(p.get("campaign"), str):
            out[p["campaign"]] = ref
    return out


@table_section(
    "qualification",
    "Complete-endpoint qualification",
    "Matching complete endpoints out of required requests per arm and family (paper Table 3 shape). "
    "An arm qualifies on a task when the reference is stable and every required request returned the reference endpoint. "
    "A first divergence is a near tie when the margin between the reference's two largest logits there is below the near-tie bound, "
    "a size rounding of the two computations can cross, and decisive otherwise: "
    "some logit moved by at least half the sum of the two margins, more than rounding does, a likely defect, not numerics.",
    table="qualification",
    absent="qualification not run",
)
def section_qualification(sec: Section, a: Archive, N: Numbers) -> None:
    for camp, ref in named_references(a).items():
        sec.notes.append(
            f"Campaign {camp}: the reference arm is {ref} (plan.json, definition.reference), not refspec's R; "
            "every qualification and first divergence of that campaign is against it."
        )
    src = a.src("qualification")
    counts = qualification_counts(a.rows("qualification"))
    for camp in campaigns_in(counts):
        sec.items.append(_campaign_table(a, N, camp, [r for r in counts if r["campaign"] == camp], src))
    fails = [q for q in a.rows("qualification") if not q["qualified"]]
    rows = _failure_rows(a, N, fails)
    if rows:
        sec.items.append(
            Table(
                "qualification-failures",
                "Failed qualifications (no ratio is reported for these arms)",
                [src],
                [
                    "campaign",
                    "family",
                    "task",
                    "arm",
                    "first diff",
                    "ref token",
                    "arm token",
                    "ref margin",
                    "arm margin",
                    "near-tie bound",
                    "divergence",
                    "reason",
                ],
                rows,
                numeric=[False] * 4 + [True] * 6 + [False] * 2,
            )
        )
        figure = _first_divergence_figure(fails, src)
        if figure is not None:
            sec.items.append(figure)
    else:
        sec.notes.append("no failed qualification")


def _campaign_table(a: Archive, N: Numbers, camp: str, cc: list[dict], src: str) -> Table:
    """One campaign's matching endpoints / required, one row per arm, one column per family."""
    fams = sorted({r["family"] for r in cc})
    facts = {r["arm"]: (r["mode"], r["layout"]) for r in a.rows("requests") if r["campaign"] == camp}
    arms = sorted({r["arm"] for r in cc}, key=lambda x: arm_sort_key(x, *facts.get(x, (None, None))))
    by = {(r["family"], r["arm"]): r for r in cc}
    refused = refused_arms(a, camp)
    tid = f"qualification-{camp}"
    nums = ShownTable(N, a, "qualification", tid)
    rows = []
    for arm in arms:
        cells = [Cell([arm], cls="mono")]
        for fam in fams:
            cells.append(_count_cell(nums, camp, fam, arm, by.get((fam, arm)), refused.get((fam, arm))))
        rows.append(cells)
    return Table(
        tid,
        f"{CAMPAIGN_TITLES.get(camp, camp)}: matching endpoints / required",
        [src],
        ["arm"] + fams,
        rows,
        numeric=[False] + [True] * len(fams),
    )


def _count_cell(nums: ShownTable, camp: str, fam: str, arm: str, r: dict | None, why: str | None) -> Cell:
    """An arm's matching / required endpoints and failed tasks in one family (``why``: admission's refusal)."""
    if r is None:
        return Cell([DASH], title="arm not run for this family")
    key = dict(campaign=camp, family=fam, arm=arm)
    values = {
        "matching": r["matching"],
        "required": r["required"],
        "tasks_failed": r["tasks"] - r["tasks_qualified"],
    }
    m, q, f = (nums.add(("qual", camp, fam, arm, col), v, "d", row=key, column=col) for col, v in values.items())
    cls = "ok" if r["tasks"] == r["tasks_qualified"] else "bad"
    if why is not None:  # admission refused the arm: say so, not only "0/2 (2 tasks fail)"
        return Cell(
            ["refused: ", why, " (", m, "/", q, " endpoints; ", f, tasks_fail(values["tasks_failed"])],
            cls="refused",  # the admission guard did its job: neutral, in words
        )
    return Cell([m, "/", q, " (", f, tasks_fail(values["tasks_failed"])], cls=cls)


def _failure_rows(a: Archive, N: Numbers, fails: list[dict]) -> list[list[Cell]]:
    """The failed qualifications' rows: where and how each first diverged, and why it failed."""
    nums = ShownTable(N, a, "qualification", "qualification-failures")
    rows = []
    for q in sorted(fails, key=lambda q: (q["campaign"], q["family"], arm_sort_key(q["arm"]), q["task_id"], q["cap"])):
        key = dict(campaign=q["campaign"], family=q["family"], task_id=q["task_id"], arm=q["arm"], cap=q["cap"])
        base = ("qfail", q["campaign"], q["family"], q["task_id"], q["arm"], q["cap"])
        cells = [
            Cell([q["campaign"]]),
            Cell([q["family"]]),
            Cell([q["task_id"]], cls="mono wrap"),
            Cell([q["arm"]], cls="mono"),
        ]
        for col, fmt in (
            ("first_diff_index", "d"),
            ("ref_token", "d"),
            ("arm_token", "d"),
            ("ref_margin", ".4g"),
            ("arm_margin", ".4g"),
            ("near_tie_bound", ".4g"),
        ):
            v = q[col]
            cells.append(Cell([DASH] if v is None else [nums.add(base + (col,), v, fmt, row=key, column=col)]))
        cls = q["divergence"]
        cells.append(
            Cell(
                [DASH] if cls is None else [DIVERGENCE_TEXT.get(cls, cls)],
                cls="bad wrap" if cls == DECISIVE else "wrap",
            )
        )
        cells.append(Cell([q["reason"] or ""], cls="reason"))
        rows.append(cells)
    return rows


def _first_divergence_figure(fails: list[dict], src: str) -> Figure | None:
    """The strip of first-divergence indices per failing (family, arm, campaign); None without any."""
    groups = defaultdict(list)
    for q in fails:
        if q["first_diff_index"] is not None:
            groups[f"{q['family']} {q['arm']} ({q['campaign']})"].append(int(q["first_diff_index"]))
    if not groups:
        return None
    g = sorted(groups.items())
    return Figure(
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


def _mask_bits(m: int) -> str:
    return " ".join(n for b, n in ((1, "TP"), (2, "TC"), (4, "DP"), (8, "DC")) if m & b) or "none"


@table_section(
    "phase-masks",
    "Phase-mask sweep",
    "Mask bits: target prefill one, target continuation two, draft prefill four, draft continuation eight "
    "(paper Table S1). "
    "A mask passes when every probe matched the reference in every repeat; minimal = no passing proper sub-mask.",
    table="phase_masks",
    absent="phase-mask sweep not run",
)
def section_masks(sec: Section, a: Archive, N: Numbers) -> None:
    src = a.src("phase_masks")
    tid = "phase-masks"
    nums = ShownTable(N, a, "phase_masks", tid)
    rows = []
    for r in sorted(a.rows("phase_masks"), key=lambda r: (r["family"], r["mask"])):
        key = dict(family=r["family"], mask=r["mask"])
        base = ("mask", r["family"], r["mask"])
        m = nums.add(base + ("matches",), r["matches"], "d", row=key, column="matches")
        q = nums.add(base + ("required",), r["n_tasks"] * r["repeats"], "d", row=key, column="required")
        rows.append(
            [
                Cell([r["family"]]),
                Cell([nums.add(base + ("mask",), r["mask"], "d", row=key, column="mask")]),
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
