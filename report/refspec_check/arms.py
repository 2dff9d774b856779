"""The arms at a glance, recomputed: every arm code and recipe of requests.csv, with its role.

The report's table ``arms`` (refspec_check.render.sections.arms implements the same rules; change one only
together with the other) has one row per arm code and recipe (mode, layout, ub, mask, and k for a
speculative arm) of requests.csv: the arm, its mode ("target" or "speculative"), micro-batch ``ub``,
layout, phase mask ``mask`` and proposals ``k`` (checked numbers, a dash for a target arm's k), its
drafts and campaigns (sorted, comma-separated) and its roles (semicolon-separated, in ROLE_ORDER),
one per campaign it ran in:

* the campaign's reference (plan.json's ``definition.reference``, else R): "the reference";
* a name ending in ``_aa`` (the A/A twin of the definition's ``aa_arm``): "A/A twin";
* in the phase-mask sweep and the width sweep: "phase-mask sweep arm", "width sweep arm";
* in the prediction: "prediction live arm" (prediction.csv's ``live_arm``, the plan's ``live_arm`` or
  ``prediction_selection.live_arm``), "chosen predictor" (``predictor``, ``prediction_selection.predictor``),
  else "predictor candidate";
* elsewhere "unrepaired control" (mask 0, ub above 1: vacuity.is_unrepaired), "repaired arm" (a layout
  other than mq with mask bit 1 or 2), else "compared arm".

Where some arm's plan record (plan.json, a campaign's ``arms``) has a ``kind`` other than refspec's
worker, an ``engine`` column follows the arm: "llama.cpp" (no kind, or ``worker``), "llama-server"
(``server``), "OpenVINO GenAI" with its pipeline (``openvino``; "stateful", "continuous batching").

Rows are in the renderer's arm order (R, other R_ arms, target before speculative, layouts in
LAYOUT_ORDER, then the code with its digit runs compared as numbers: C_m2 before C_m10). A row edited,
added, removed or moved is refused with its line.
"""

from __future__ import annotations

from collections import defaultdict

from refspec_check.context import Context
from refspec_check.contract import REFERENCE_ARM
from refspec_check.html_tables import NUM, TableText, norm
from refspec_check.names import arm_sort_key, is_twin
from refspec_check.qualification import reference_arms
from refspec_check.render.sections.arms import WORKER_ENGINE, arm_engines, plan_records
from refspec_check.report import Report
from refspec_check.vacuity import is_unrepaired

TABLE_ID = "arms"
MODE_TEXT = {"target": "target", "spec": "speculative"}
ROLE_ORDER = (
    "the reference",
    "A/A twin",
    "unrepaired control",
    "repaired arm",
    "compared arm",
    "phase-mask sweep arm",
    "width sweep arm",
    "prediction live arm",
    "chosen predictor",
    "predictor candidate",
)
HEADER = ("arm", "mode", "micro-batch", "layout", "phase mask", "proposals", "draft", "campaigns", "role")
TARGET_PHASES = 3  # mask bits 1 and 2: target prefill and continuation
DASH = "\u2014"


def engines(plan) -> dict:
    """arm -> its engine text from the plan's arm records (the first record of an arm), as the renderer writes it."""
    return arm_engines(plan_records(plan))


def header(plan, arms: set) -> tuple[str, ...]:
    """The arms table's header: with the engine column where some arm that ran is not refspec's worker."""
    eng = engines(plan)
    return HEADER[:1] + ("engine",) * any(eng.get(a, WORKER_ENGINE) != WORKER_ENGINE for a in arms) + HEADER[1:]


def prediction_roles(plan, prediction: list) -> tuple[set, set]:
    """(live arms, chosen predictors): prediction.csv's columns and the plan's records."""
    live = {r["live_arm"] for r in prediction if r.get("live_arm")}
    chosen = {r["predictor"] for r in prediction if r.get("predictor")}
    for p in plan_records(plan):
        defn = p.get("definition") if isinstance(p.get("definition"), dict) else {}
        if p.get("campaign") == "prediction" and isinstance(defn.get("live_arm"), str):
            live.add(defn["live_arm"])
        sel = p.get("prediction_selection")
        if isinstance(sel, dict):
            if isinstance(sel.get("live_arm"), str):
                live.add(sel["live_arm"])
            if isinstance(sel.get("predictor"), str):
                chosen.add(sel["predictor"])
    return live, chosen


def role(campaign: str, arm: str, layout, ub, mask, refs: dict, live: set, chosen: set) -> str:
    if arm == refs.get(campaign, REFERENCE_ARM):
        return "the reference"
    if is_twin(arm):
        return "A/A twin"
    if campaign in ("phase_mask", "width"):
        return "phase-mask sweep arm" if campaign == "phase_mask" else "width sweep arm"
    if campaign == "prediction":
        return "prediction live arm" if arm in live else "chosen predictor" if arm in chosen else "predictor candidate"
    if is_unrepaired(ub, mask):
        return "unrepaired control"
    if layout != "mq" and mask is not None and int(mask) & TARGET_PHASES:
        return "repaired arm"
    return "compared arm"


def _last(v) -> tuple:
    return (v is None, v if v is not None else 0)


def expected_rows(ctx: Context, plan) -> list[tuple[str, ...]]:
    """The arms table's rows as the report must show them (cells as text, a checked number as NUM id NUM),
    its numbers added to the expected ones."""
    reqs = ctx.tables["requests"].rows if "requests" in ctx.tables else []
    pred = ctx.tables["prediction"].rows if "prediction" in ctx.tables else []
    refs = reference_arms(plan)
    live, chosen = prediction_roles(plan, pred)
    groups: dict[tuple, list] = defaultdict(list)
    for r in reqs:
        groups[(r["arm"], r["mode"], r["layout"], r["ub"], r["mask"], r["k"] if r["mode"] == "spec" else None)].append(
            r
        )
    src = ctx.src("requests") if reqs else ""
    eng = engines(plan)
    shown = len(header(plan, {g[0] for g in groups})) > len(HEADER)
    out = []
    for key in sorted(groups, key=lambda g: (arm_sort_key(g[0], g[1], g[2]), *map(_last, g[3:]))):
        arm, mode, layout, ub, mask, k = key
        rows = groups[key]
        base = ["arms", arm, mode, layout, ub, mask] + ([k] if mode == "spec" else [])

        def num(col: str, v) -> str:
            if v is None:
                return DASH
            ctx.E.add(base + [col], v, src)
            return NUM + "|".join(str(p) for p in base + [col]) + NUM

        camps = sorted({r["campaign"] for r in rows})
        roles = {role(c, arm, layout, ub, mask, refs, live, chosen) for c in camps}
        out.append(
            (
                arm,
                *((eng.get(arm, WORKER_ENGINE),) if shown else ()),
                MODE_TEXT.get(mode, mode),
                num("ub", ub),
                layout,
                num("mask", mask),
                num("k", k),
                ", ".join(sorted({r["draft"] for r in rows if r.get("draft")})) or DASH,
                ", ".join(camps),
                "; ".join(x for x in ROLE_ORDER if x in roles),
            )
        )
    return out


def _cells(cells: list) -> tuple[str, ...]:
    return tuple(norm("".join(v if kind == "text" else NUM + v + NUM for kind, v in parts)) for _tag, parts in cells)


def check_arms(ctx: Context, rep: Report, plan) -> None:
    """The report's arms table against the arms of requests.csv (see the module's docstring): its
    header, and each row's arm, mode, numbers, layout, drafts, campaigns and roles, in order; no
    arm left out or added. An archive without requests shows no such table."""
    c = ctx.c
    want = expected_rows(ctx, plan)
    tp = TableText()
    tp.feed(rep.html_text)
    tp.close()
    tables = [t for t in tp.tables if t["id"] == TABLE_ID]
    if not tables:
        if want:
            c.bad(rep.html_rel, f"no arms table (table {TABLE_ID!r}): requests.csv ran {len(want)} arm recipes")
        return
    if len(tables) > 1 or not want:
        c.bad(
            f"{rep.html_rel}:{tables[-1]['line']}",
            "an arms table the archive does not call for (one at most, with requests.csv)",
        )
        return
    t = tables[0]
    head = [_cells(cells) for _line, cells in t["rows"] if cells and all(tag == "th" for tag, _p in cells)]
    reqs = ctx.tables["requests"].rows if "requests" in ctx.tables else []
    want_head = header(plan, {r["arm"] for r in reqs})
    if head != [want_head]:
        c.bad(f"{rep.html_rel}:{t['line']}", f"arms table header {head[:1]!r}, expected {want_head!r}")
    body = [(line, _cells(cells)) for line, cells in t["rows"] if any(tag == "td" for tag, _p in cells)]
    got = [row for _line, row in body]
    c.compared += 1
    if got == want:
        c.matched += 1
        return
    shown = lambda row: " | ".join(x.replace(NUM, "#") for x in row)  # noqa: E731
    for row in want:
        if row not in got:
            c.bad(f"{rep.html_rel}:{t['line']}", f"arms table lacks the row {shown(row)!r} (requests.csv, plan.json)")
    for line, row in body:
        if row not in want:
            same_arm = [w for w in want if w[0] == row[0]]
            why = f"; recomputed {shown(same_arm[0])!r}" if same_arm else ": no such arm in requests.csv"
            c.bad(f"{rep.html_rel}:{line}", f"arms table row {shown(row)!r} is not the archive's{why}")
    if sorted(got) == sorted(want):
        c.bad(
            f"{rep.html_rel}:{t['line']}", "arms table rows are not in the arm order (R first, digit runs as numbers)"
        )
