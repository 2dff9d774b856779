"""The divergence screen, recomputed (refspec.experiments.divergence_screen implements the same rule).

From divergence_screen.csv and campaigns[/FAMILY]/screen/screen.json: per family, the tasks' ranks
are their order by risk margin (smallest first, a task without one last, ties in the discovery
panel's order); a task is exposed when an arm row says ``diverges``, and an arm row diverges exactly
when it has a first divergence; the tasks tried are a prefix of that order, ending at the first task
where ``want`` tasks are exposed or ``budget`` tasks were tried; the controls are the ``controls``
non-exposed tasks of largest risk margin (ties: rank); screen.json's order, tried, exposed and
controls lists, and its exposed panel, say the same. A campaign whose plan takes its panel from the
screen must run exactly the exposed tasks and then the controls.

The repairs on the exposed tasks (qualification.csv): for each panel and each repaired arm X (phase mask
above 0, not an A/A twin), n = the tasks where an unrepaired arm (phase mask 0, micro-batch above 1) has
a first divergence, k = those of them where X qualifies."""

from __future__ import annotations

import os

from refspec_check import jsonio
from refspec_check.context import Context
from refspec_check.contract import TWIN_SUFFIX, CsvTable
from refspec_check.divergence import check_row
from refspec_check.vacuity import OWN_TABLES, is_unrepaired


def _screen_record(ctx: Context, fam: str, multi: bool) -> tuple[str, dict | None]:
    rel = f"campaigns/{fam}/screen/screen.json" if multi else "campaigns/screen/screen.json"
    path = os.path.join(ctx.c.archive, rel)
    try:
        with open(path, encoding="utf-8") as f:
            rec = jsonio.load(f)
    except (OSError, ValueError) as e:
        ctx.c.bad(rel, f"the divergence screen's record is missing or unreadable ({e.__class__.__name__})")
        return rel, None
    if not isinstance(rec, dict):
        ctx.c.bad(rel, "the divergence screen's record is not an object")
        return rel, None
    return rel, rec


def _screen_rows(ctx: Context, t: CsvTable, idx: list[int], rel: str, pos: dict[str, int]) -> dict[str, dict]:
    """task id -> its first row, checking each row of one family: its task is in the discovery panel,
    a task's values agree on all its rows, and an arm diverges exactly when it has a first divergence."""
    c = ctx.c
    tasks: dict[str, dict] = {}
    for i in idx:
        r = t.rows[i]
        if r["task_id"] not in pos:
            c.bad(t.where(i), f"task {r['task_id']} is not in the screen's discovery panel ({rel})")
            continue
        first = tasks.setdefault(r["task_id"], r)
        for col in ("rank", "prompt_tokens", "risk_margin", "exposed", "control"):
            c.recomputed += 1
            c.same(t.where(i, col), r[col], first[col], "a task's value is the same on each of its rows")
        c.recomputed += 1
        c.same(
            t.where(i, "status"),
            r["status"] in ("diverges",),
            r["first_diff_index"] is not None,
            "an arm diverges exactly when it has a first divergence",
        )
        check_row(c, lambda col, i=i: t.where(i, col), r)  # the class of its first divergence
    return tasks


def _screen_order(tasks: dict[str, dict], pos: dict[str, int]) -> list[str]:
    """The tasks by risk margin, smallest first, a task without one last, ties in the discovery panel's order."""
    return sorted(
        tasks,
        key=lambda tid: (
            tasks[tid]["risk_margin"] is None,
            tasks[tid]["risk_margin"] if tasks[tid]["risk_margin"] is not None else 0.0,
            pos[tid],
        ),
    )


def _screen_tried_and_exposed(order: list[str], diverging: set[str], want: int, budget: int) -> tuple[list, list]:
    """The screen's rule: (the tasks tried, the exposed ones), a prefix of the order that ends when ``want``
    tasks are exposed or ``budget`` tasks were tried."""
    tried: list[str] = []
    exposed: list[str] = []
    for tid in order:
        if len(exposed) >= want or len(tried) >= budget:
            break
        tried.append(tid)
        if tid in diverging:
            exposed.append(tid)
    return tried, exposed


def _screen_controls(order: list[str], exposed: list[str], tasks: dict[str, dict], nctrl: int) -> list[str]:
    """The ``nctrl`` non-exposed tasks of largest risk margin (ties: rank); a task without one is never a control."""
    rest = [tid for tid in order if tid not in exposed and tasks[tid]["risk_margin"] is not None]
    rest.sort(key=lambda tid: (-tasks[tid]["risk_margin"], order.index(tid)))
    return rest[:nctrl]


def _expect_screen_values(ctx: Context, t: CsvTable, idx: list[int], s: str, fam: str, counts: dict[str, int]) -> None:
    """The screen's figures the report may cite: its counts, and each tried arm row's values."""
    E = ctx.E
    for name in ("discovery", "tried", "exposed", "controls"):
        E.add(("screen", fam, name), counts[name], s)
    if not counts["exposed"]:  # the verdict a screen that finds nothing gets: "vacuous: no exposed input in N screened"
        E.add(("screen", fam, "vacuous_screened"), counts["tried"], s)
    for i in idx:
        r = t.rows[i]
        if r["status"] not in ("diverges", "matches"):
            continue
        base = ("screen", fam, r["task_id"], r["arm"])
        for col in (
            "rank",
            "prompt_tokens",
            "risk_margin",
            "first_diff_index",
            "ref_token",
            "arm_token",
            "ref_margin",
            "arm_margin",
        ):
            if r[col] is not None:
                E.add(base + (col,), r[col], s)


def _check_screen_family(ctx: Context, plan: dict | None, t: CsvTable, fam: str, multi: bool) -> None:
    """One family's screen: its rows, ranks, tried, exposed and control tasks against its rule and its record."""
    c, s = ctx.c, ctx.src("divergence_screen")
    idx = [i for i, r in enumerate(t.rows) if r["family"] == fam]
    rel, rec = _screen_record(ctx, fam, multi)
    if rec is None:
        return
    panel = list((rec.get("panel") or {}).get("tasks") or [])
    pos = {tid: i for i, tid in enumerate(panel)}
    tasks = _screen_rows(ctx, t, idx, rel, pos)
    missing = [tid for tid in panel if tid not in tasks]
    if missing:
        c.bad(s, f"{fam}: discovery tasks without a row: {', '.join(missing)}")
    order = _screen_order(tasks, pos)
    for n, tid in enumerate(order, 1):
        c.recomputed += 1
        c.same(f"{s} [{fam} {tid}] rank", tasks[tid]["rank"], n, "rank by risk margin")
    arm_rows = [t.rows[i] for i in idx if t.rows[i]["arm"] != "R"]
    diverging = {r["task_id"] for r in arm_rows if r["status"] == "diverges"}
    tried = [tid for tid in order if any(r["task_id"] == tid and r["status"] != "not tried" for r in arm_rows)]
    want, budget, nctrl = rec.get("want"), rec.get("budget"), rec.get("controls_wanted")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (want, budget, nctrl)):
        c.bad(rel, "want, budget and controls_wanted must be integers")
        return
    expect_tried, exposed = _screen_tried_and_exposed(order, diverging, want, budget)
    c.recomputed += 1
    c.same(f"{s} [{fam}] tasks tried", tried, expect_tried, "the screen's rule (screen order, want, budget)")
    controls = _screen_controls(order, exposed, tasks, nctrl)
    for tid in tasks:
        c.recomputed += 2
        c.same(f"{s} [{fam} {tid}] exposed", tasks[tid]["exposed"], tid in exposed)
        c.same(f"{s} [{fam} {tid}] control", tasks[tid]["control"], tid in controls)
    for key, want_v in (("order", order), ("tried", expect_tried), ("exposed", exposed), ("controls", controls)):
        c.recomputed += 1
        c.same(f"{rel} {key}", rec.get(key), want_v)
    c.recomputed += 1
    c.same(f"{rel} exposed_panel.tasks", (rec.get("exposed_panel") or {}).get("tasks"), exposed + controls)
    check_screened_panels(ctx, plan, fam, multi, exposed + controls, rec)
    counts = {"discovery": len(tasks), "tried": len(expect_tried), "exposed": len(exposed), "controls": len(controls)}
    _expect_screen_values(ctx, t, idx, s, fam, counts)


def check_screen(ctx: Context, plan: dict | None) -> None:
    """The divergence screen's table and record, and the panels taken from it."""
    t = ctx.tables.get("divergence_screen")
    if t is None:
        return
    fams = sorted({r["family"] for r in t.rows})
    for fam in fams:
        _check_screen_family(ctx, plan, t, fam, len(fams) > 1)


def check_screened_panels(ctx: Context, plan: dict | None, fam: str, multi: bool, tasks: list, rec: dict) -> None:
    """Every campaign plan whose panel came from the screen runs the screen's exposed panel, at its cap."""
    c = ctx.c
    for key, p in ((plan or {}).get("campaigns") or {}).items():
        if not isinstance(p, dict) or (multi and not str(key).startswith(f"{fam}/")):
            continue
        for role, prec in (p.get("panels") or {}).items():
            if not isinstance(prec, dict) or prec.get("source") != "screen":
                continue
            c.recomputed += 2
            c.same(f"plan.json campaigns.{key}.panels.{role}.tasks", prec.get("tasks"), tasks)
            c.same(
                f"plan.json campaigns.{key}.panels.{role}.screen.cap",
                (prec.get("screen") or {}).get("cap"),
                rec.get("cap"),
            )


def check_exposed_repairs(ctx: Context, qual: dict) -> None:
    """(campaign, family, repaired arm) -> k of n, as refspec_check.render.vacuity.exposed_repairs."""
    tables, E = ctx.tables, ctx.E
    if "requests" not in tables or "qualification" not in tables:
        return
    unrep: dict = {}
    repaired: dict = {}
    for r in tables["requests"].rows:
        if r["campaign"] in OWN_TABLES:
            continue
        k = (r["campaign"], r["family"])
        if is_unrepaired(r.get("ub"), r.get("mask")):
            unrep.setdefault(k, set()).add(r["arm"])
        elif r.get("mask") is not None and int(r["mask"]) != 0 and not str(r["arm"]).endswith(TWIN_SUFFIX):
            repaired.setdefault(k, set()).add(r["arm"])
    exposed: dict = {}
    for (camp, fam, task, cap, arm), q in qual.items():
        if arm in unrep.get((camp, fam), ()) and q.get("first_diff_index") is not None:
            exposed.setdefault((camp, fam), set()).add((task, cap))
    s = ctx.src("qualification")
    for (camp, fam), ts in exposed.items():
        for arm in repaired.get((camp, fam), ()):
            k = sum(1 for task, cap in ts if (qual.get((camp, fam, task, cap, arm)) or {}).get("qualified"))
            E.add(("exprep", camp, fam, arm, "reproduces"), k, s)
            E.add(("exprep", camp, fam, arm, "exposed"), len(ts), s)
