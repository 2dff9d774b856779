"""The state studies, backend admission and the claims of the controlled stages: partition, KV diff, crosses,
frontier, admission, projection, claims."""

from __future__ import annotations

import os
from collections import defaultdict

from refspec_check import jsonio
from refspec_check.context import Context
from refspec_check.contract import CLAIMS, CsvTable
from refspec_check.digests import endpoint_digest
from refspec_check.problems import Checker
from refspec_check.qualification import first_difference
from refspec_check.render.vacuity import vacuous_text
from refspec_check.vacuity import crosses_vacuous, partition_vacuous


def _classes(values) -> list:
    seen = {}
    return [seen.setdefault(v, len(seen)) for v in values]


def check_state(ctx: Context) -> None:
    """The partition screen, partition classes, KV differences, crosses outcomes, frontier positions,
    admission verdicts and the claims of the controlled stages, recomputed from their CSV tables."""
    check_partition_screen(ctx)
    nat = check_partition(ctx)
    check_kv_diff(ctx, nat)
    traj = check_crosses(ctx, nat)
    check_frontier(ctx, traj)
    check_admission(ctx)
    check_graph_size(ctx)
    check_projection(ctx)
    check_claims(ctx, nat)


PSCREEN_RECORD = "campaigns/partition_screen/partition-screen.json"


def pscreen_pair_order(arms: list) -> list:
    """The pairs ``auto`` tries, in order (refspec.experiments.state.partition_screen.pair_order)."""
    return [("A", "B"), ("A", "C"), ("B", "C")] + [("A", x) for x in arms if x not in ("A", "B", "C")]


def _check_pscreen_rows(ctx: Context, t: CsvTable, by: dict[str, list[int]]) -> None:
    """Each input's rows: A first, its KV and logits classes and ``differs`` recomputed from the digests,
    one prompt length."""
    c, E, s = ctx.c, ctx.E, ctx.src("partition_screen")
    for tid, idx in by.items():
        rs = [t.rows[i] for i in idx]
        if [r["arm"] for r in rs][:1] != ["A"]:
            c.bad(t.where(idx[0], "arm"), f"{tid}: the first arm of an input is not A")
        kvc = _classes([r["kv_sha256"] for r in rs])
        lgc = _classes([r["logits_sha256"] for r in rs])
        E.add(("pscreen", tid, rs[0]["arm"], "prompt_len"), rs[0]["prompt_len"], s)
        for i, r, k, g in zip(idx, rs, kvc, lgc):
            c.recomputed += 4
            c.same(t.where(i, "kv_class"), r["kv_class"], k)
            c.same(t.where(i, "logits_class"), r["logits_class"], g)
            c.same(t.where(i, "differs"), r["differs"], k != 0 or g != 0)
            c.same(t.where(i, "prompt_len"), r["prompt_len"], rs[0]["prompt_len"], "an input has one prompt length")
            E.add(("pscreen", tid, r["arm"], "kv_class"), k, s)
            E.add(("pscreen", tid, r["arm"], "logits_class"), g, s)


def _read_pscreen_record(c: Checker) -> dict | None:
    """The partition screen's record (None, reported: missing, unreadable or not an object)."""
    path = os.path.join(c.archive, PSCREEN_RECORD)
    try:
        with open(path, encoding="utf-8") as f:
            rec = jsonio.load(f)
        if not isinstance(rec, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as e:
        c.bad(PSCREEN_RECORD, f"the partition screen's record is missing or unreadable ({e.__class__.__name__})")
        return None
    return rec


def _pscreen_pair_differs(rows: list[dict], pair) -> bool:
    """Whether the two arms of ``pair`` have different KV or logits digests among one input's rows."""
    by_arm = {r["arm"]: r for r in rows}
    if pair[0] not in by_arm or pair[1] not in by_arm:
        return False
    x, y = by_arm[pair[0]], by_arm[pair[1]]
    return x["kv_sha256"] != y["kv_sha256"] or x["logits_sha256"] != y["logits_sha256"]


def _check_pscreen_consumers(ctx: Context, study: list, ctrl: list, pair) -> None:
    """The partition study runs on the screen's study inputs and then its controls, the crosses on its pair."""
    c, tables = ctx.c, ctx.tables
    part = tables.get("partition")
    if part is not None:
        ran = list(dict.fromkeys(r["task_id"] for r in part.rows))
        c.recomputed += 1
        c.same(
            ctx.src("partition"),
            ran,
            study + ctrl,
            "the partition study runs on the screen's study inputs and controls",
        )
    cr = tables.get("crosses")
    if cr is not None and pair is not None:
        for i, r in enumerate(cr.rows):
            c.recomputed += 1
            c.same(
                cr.where(i, "donor_arm"),
                sorted({r["donor_arm"], r["recipient_arm"]}),
                sorted(pair),
                "the crosses run on the partition screen's pair",
            )


def check_partition_screen(ctx: Context) -> None:
    """The partition screen (partition_screen.csv, campaigns/partition_screen/partition-screen.json).

    Per input over its arms in arm order: kv_class and logits_class number the distinct KV and logits
    digests in order of first appearance (A is class 0); ``differs`` = kv_class or logits_class not 0. The
    record's lists, recomputed by its rule: exposed = the inputs with an arm that differs, in panel order;
    pair = the configured pair, or (auto) the first of A/B, A/C, B/C, then A with each further arm whose KV
    or logits digests differ on some input; study = the first ``inputs_wanted`` inputs on which the pair
    differs; controls = the first ``controls_wanted`` inputs that are not exposed. The partition study runs
    on exactly the study inputs and then the controls, and the crosses on the pair."""

    c = ctx.c
    t = ctx.tables.get("partition_screen")
    if t is None:
        return
    by: dict = {}
    for i, r in enumerate(t.rows):
        by.setdefault(r["task_id"], []).append(i)
    tasks = list(by)
    arms = list(dict.fromkeys(r["arm"] for r in t.rows))
    _check_pscreen_rows(ctx, t, by)
    rec = _read_pscreen_record(c)
    if rec is None:
        return
    panel = list((rec.get("panel") or {}).get("tasks") or [])
    c.recomputed += 1
    c.same(f"{PSCREEN_RECORD}: panel", tasks, panel, "the table holds every discovery input, in panel order")

    def differs(task: str, pair) -> bool:
        return _pscreen_pair_differs([t.rows[i] for i in by[task]], pair)

    exposed = [x for x in tasks if any(t.rows[i]["differs"] for i in by[x])]
    if rec.get("pair_rule") == "configured":
        pair = tuple(rec.get("pair") or ())
        if len(pair) != 2 or any(a not in arms for a in pair):
            c.bad(f"{PSCREEN_RECORD}: pair", f"a configured pair of arms the screen ran (got {list(pair)})")
            return
    else:
        pair = next((p for p in pscreen_pair_order(arms) if any(differs(x, p) for x in tasks)), None)
    try:
        n_in, n_ctl = int(rec["inputs_wanted"]), int(rec["controls_wanted"])
    except (KeyError, TypeError, ValueError):
        c.bad(PSCREEN_RECORD, "the record does not state inputs_wanted and controls_wanted")
        return
    study = [x for x in tasks if pair is not None and differs(x, pair)][:n_in]
    ctrl = [x for x in tasks if x not in exposed][:n_ctl]
    for key, want in (
        ("exposed", exposed),
        ("pair", list(pair) if pair else None),
        ("study", study),
        ("controls", ctrl),
        ("vacuous", not exposed),
    ):
        c.recomputed += 1
        c.same(f"{PSCREEN_RECORD}: {key}", rec.get(key), want, "the screen's rule, recomputed from its table")
    _check_pscreen_consumers(ctx, study, ctrl, pair)


def check_partition(ctx: Context) -> dict:
    """The partition study (partition.csv); returns (task, arm) -> (row index, repeat-1 row).

    Each row's endpoint digest, n and last_token from its tokens. Per task over the arms' repeat-1
    rows, in arm order: endpoint_class, kv_class and logits_class number the distinct digests in order
    of first appearance (the first arm is class 0); first_diff_vs_A = first token index where the arm's
    endpoint differs from the first arm's (null when equal). Per arm after the first: the number of
    tasks whose class differs from 0."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    part = tables.get("partition")
    nat = {}  # (task, arm) -> repeat-1 partition row
    if part is None:
        return nat
    s_p = src("partition")
    for i, r in enumerate(part.rows):
        c.recomputed += 3
        c.same(
            part.where(i, "endpoint_sha256"),
            r["endpoint_sha256"],
            endpoint_digest(r["tokens"] or [], r["eog"], r["stop_reason"]),
        )
        c.same(part.where(i, "n"), r["n"], len(r["tokens"] or []))
        c.same(part.where(i, "last_token"), r["last_token"], r["tokens"][-1] if r["tokens"] else None)
        if r["repeat"] == 1:
            nat[(r["task_id"], r["arm"])] = (i, r)
    tasks = list(dict.fromkeys(t for t, _a in nat))
    arms = list(dict.fromkeys(a for _t, a in nat))
    for t in tasks:
        present = [a for a in arms if (t, a) in nat]
        rs = [nat[(t, a)][1] for a in present]
        idx = [nat[(t, a)][0] for a in present]
        for col, key in (
            ("endpoint_class", "endpoint_sha256"),
            ("kv_class", "kv_sha256"),
            ("logits_class", "logits_sha256"),
        ):
            for j, cl in zip(idx, _classes([r[key] for r in rs])):
                c.recomputed += 1
                c.same(part.where(j, col), part.rows[j][col], cl)
                E.add(("partition", t, part.rows[j]["arm"], col), cl, s_p)
        a0 = rs[0]
        E.add(("partition", t, "prompt_len"), a0["prompt_len"], s_p)
        for j, r in zip(idx, rs):
            fd = first_difference(
                a0["tokens"] or [], a0["eog"], a0["stop_reason"], r["tokens"] or [], r["eog"], r["stop_reason"]
            )
            c.recomputed += 1
            c.same(part.where(j, "first_diff_vs_A"), r["first_diff_vs_A"], fd)
            if fd is not None:
                E.add(("partition", t, r["arm"], "first_diff_vs_A"), fd, s_p)
    E.add(("partition", "inputs"), len(tasks), s_p)
    for a in arms[1:]:
        for col in ("endpoint_class", "kv_class", "logits_class"):
            E.add(
                ("partition", a, col, "differs"),
                sum(1 for t in tasks if (t, a) in nat and nat[(t, a)][1][col] != 0),
                s_p,
            )
    return nat


def check_kv_diff(ctx: Context, nat: dict) -> None:
    """KV differences (kv_diff.csv; Tables S10 and S12 shapes) per (task, arm): layer-0 and first-changed
    layer max |dK|, max |dV|, the first changed layer, bytes differing (sum), layers changed, max |d|
    and max relative Frobenius norm. Identity with partition.csv: rows exist exactly for the arms whose
    KV digest differs from arm A's."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    kvd = tables.get("kv_diff")
    if kvd is None:
        return
    s_k = src("kv_diff")
    groups = defaultdict(list)
    for r in kvd.rows:
        groups[(r["task_id"], r["arm_b"])].append(r)
    for (t, arm), g in groups.items():
        base = ("kv", t, arm)
        lay = {(r["layer"], r["part"]): r for r in g}
        changed = sorted({r["layer"] for r in g if r["bytes_differing"] > 0})
        for p in ("K", "V"):
            E.add(base + ("L0", p, "max_abs"), lay[(0, p)]["max_abs"] if (0, p) in lay else 0.0, s_k)
        if changed:
            E.add(base + ("first_layer",), changed[0], s_k)
            for p in ("K", "V"):
                E.add(base + ("first", p, "max_abs"), lay[(changed[0], p)]["max_abs"], s_k)
        E.add(base + ("bytes",), sum(r["bytes_differing"] for r in g), s_k)
        E.add(base + ("layers",), len(changed), s_k)
        E.add(base + ("max_abs",), max(r["max_abs"] for r in g), s_k)
        E.add(base + ("max_rel_frobenius",), max(r["rel_frobenius"] for r in g), s_k)
    if "partition" in tables:
        c.identities += 1
        a0 = {t: r for (t, a), (_i, r) in nat.items() if a == "A"}
        expect = {
            (t, a) for (t, a), (_i, r) in nat.items() if a != "A" and t in a0 and r["kv_sha256"] != a0[t]["kv_sha256"]
        }
        if set(groups) != expect:
            c.bad(
                kvd.rel,
                f"rows for {sorted(set(groups) - expect)} but none for {sorted(expect - set(groups))}"
                " (kv_diff must cover exactly the arms whose KV bytes differ from A's)",
            )


def check_crosses(ctx: Context, nat: dict) -> dict:
    """Crosses (crosses.csv): outcome classes and counts; returns (task, direction, selector, repeat) -> row.

    Each row's endpoint digest from its tokens and bytes_changed = changed_bytes > 0; with partition.csv,
    outcome = recipient / donor / third as the endpoint equals the recipient's natural endpoint, else
    the donor's, else neither, and distinguishable = the two natural endpoints differ. Counts over
    subset crosses (requests, outcomes, coordinates) and the sham (EMPTY selector) crosses."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    cr = tables.get("crosses")
    traj = {}
    if cr is None:
        return traj
    s_c = src("crosses")
    for i, r in enumerate(cr.rows):
        traj[(r["task_id"], r["direction"], r["selector"], r["repeat"])] = r
        c.recomputed += 2
        c.same(
            cr.where(i, "endpoint_sha256"),
            r["endpoint_sha256"],
            endpoint_digest(r["tokens"] or [], r["eog"], r["stop_reason"]),
        )
        c.same(cr.where(i, "bytes_changed"), r["bytes_changed"], r["changed_bytes"] > 0)
        if "partition" not in tables:
            continue
        nr, nd = nat.get((r["task_id"], r["recipient_arm"])), nat.get((r["task_id"], r["donor_arm"]))
        if nr is None or nd is None:
            c.bad(cr.where(i), "no natural partition row for the donor or the recipient")
            continue
        er, ed = nr[1]["endpoint_sha256"], nd[1]["endpoint_sha256"]
        oc = "recipient" if r["endpoint_sha256"] == er else "donor" if r["endpoint_sha256"] == ed else "third"
        c.recomputed += 2
        c.same(cr.where(i, "outcome"), r["outcome"], oc)
        c.same(cr.where(i, "distinguishable"), r["distinguishable"], er != ed)
    subs = [r for r in cr.rows if r["kind"] == "subset"]
    shams = [r for r in cr.rows if r["selector"] == "EMPTY"]
    for k, v in (
        ("requests", len(subs)),
        ("processes", len({r["process"] for r in cr.rows})),
        ("donor", sum(r["outcome"] == "donor" for r in subs)),
        ("third", sum(r["outcome"] == "third" for r in subs)),
        ("recipient_changed", sum(r["outcome"] == "recipient" and r["bytes_changed"] for r in subs)),
        ("recipient_unchanged", sum(r["outcome"] == "recipient" and not r["bytes_changed"] for r in subs)),
        ("coordinates", len({(r["task_id"], r["direction"], r["selector"]) for r in subs})),
        ("shams", len(shams)),
        ("shams_ok", sum(r["outcome"] == "recipient" and r["changed_bytes"] == 0 for r in shams)),
    ):
        E.add(("crosses", k), v, s_c)
    n_in, vac = crosses_vacuous(cr.rows)
    if vac:  # the verdict's N (the crosses' verdict table and, where the partition is exposed, the claim)
        E.add(("crosses", "inputs"), n_in, s_c)
    return traj


# the notes of a frontier row (refspec.experiments.state.receiver), derived from the row's own columns
FRONTIER_AGREE = "the four trajectories agree to the end"
FRONTIER_ENDED = "a trajectory ended before the frontier"
FRONTIER_ARGMAX_AGREE = "all four argmax tokens agree at the frontier (a trajectory differs only by ending)"


def frontier_note(r: dict) -> str | None:
    """What a frontier row's note must say: no frontier, a trajectory without logits at it (no argmax
    tokens), the four argmax tokens alike (no second token), else nothing."""
    if r["frontier"] is None:
        return FRONTIER_AGREE
    if r["token_a"] is None:
        return FRONTIER_ENDED
    if r["token_b"] is None:
        return FRONTIER_ARGMAX_AGREE
    return None


def check_frontier(ctx: Context, traj: dict) -> None:
    """Frontier (frontier.csv): t* = the first token position where the panel's four crosses
    trajectories do not all agree (null when they agree throughout); additive = d_first + d_second;
    interaction = actual - additive; the note as :func:`frontier_note` derives it. The repeat-1 rows with a
    frontier are report numbers."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    fr = tables.get("frontier")
    if fr is None:
        return
    s_f = src("frontier")
    have_crosses = "crosses" in tables
    for i, r in enumerate(fr.rows):
        names = (r["arms"] or "").split(",")
        rs = [traj.get((r["task_id"], r["direction"], x, r["repeat"])) for x in names]
        if have_crosses and len(names) == 4 and all(x is not None for x in rs):
            ts = [x["tokens"] or [] for x in rs]
            t_star = None
            for t in range(max(len(x) for x in ts)):
                if len({x[t] if t < len(x) else None for x in ts}) > 1:
                    t_star = t
                    break
            c.recomputed += 1
            c.same(fr.where(i, "frontier"), r["frontier"], t_star)
        elif have_crosses:
            c.bad(fr.where(i), f"the panel's trajectories {names} are not all in crosses.csv")
        c.recomputed += 1
        c.same(fr.where(i, "note"), r["note"] or None, frontier_note(r))
        if r["additive"] is not None:
            c.recomputed += 2
            c.same(fr.where(i, "additive"), r["additive"], r["d_first"] + r["d_second"])
            c.same(fr.where(i, "interaction"), r["interaction"], r["actual"] - r["additive"])
        if r["repeat"] != 1 or r["frontier"] is None:
            continue
        base = ("frontier", r["task_id"], r["direction"], r["panel"])
        E.add(base + ("frontier",), r["frontier"], s_f)
        for col in ("additive", "actual", "interaction", "max_abs_interaction"):
            if r[col] is not None:
                v = r["d_first"] + r["d_second"] if col == "additive" else r[col]
                E.add(base + (col,), v, s_f)


def check_admission(ctx: Context) -> None:
    """Backend admission (admission.csv): verdict = "unknown" when the backend supports the op, else
    "false", with a reason exactly when false; per (family, backend, n_kv, layout, q): ops, false
    verdicts and fallbacks."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    ad = tables.get("admission")
    if ad is None:
        return
    s_a = src("admission")
    groups = defaultdict(list)
    for i, r in enumerate(ad.rows):
        c.recomputed += 1
        c.same(ad.where(i, "verdict"), r["verdict"], "unknown" if r["supports_main"] else "false")
        c.identities += 1
        if (r["reason"] is None) != (r["verdict"] == "unknown"):
            c.bad(ad.where(i, "reason"), "a reason must be given exactly when the verdict is false")
        groups[(r["family"], r["backend"], r["n_kv"], r["layout"], r["q"])].append(r)
    for (fam, be, n_kv, lay, q), g in groups.items():
        base = ("admission", fam, be, n_kv, lay, q)
        E.add(base + ("q",), q, s_a)
        E.add(base + ("ops",), len(g), s_a)
        E.add(base + ("false",), sum(r["verdict"] == "false" for r in g), s_a)
        E.add(base + ("fallback",), sum(bool(r["fallback"]) for r in g), s_a)


def check_graph_size(ctx: Context) -> None:
    """Graph size (graph_size.csv). Per row: ok exactly when the counts are given and no reason, refused at
    build exactly when a reason and no counts; an ok caller runs q micrographs with gs and one with any other
    layout, and computes at most the nodes its graphs hold. Per (family, device, layout, q): q, the
    micrographs, nodes, dispatches, splits, and the dispatches added to the ok MQ caller of the same q."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    gs = tables.get("graph_size")
    if gs is None:
        return
    s_g = src("graph_size")
    counts = ("micrographs", "nodes", "dispatches", "splits")
    mq = {(r["family"], r["device"], r["q"]): r for r in gs.rows if r["layout"] == "mq" and r["status"] == "ok"}
    for i, r in enumerate(gs.rows):
        base = ("graph_size", r["family"], r["device"], r["layout"], r["q"])
        E.add(base + ("q",), r["q"], s_g)
        c.identities += 1
        given = [r[k] is not None for k in counts]
        if r["status"] == "ok":
            if not all(given) or r["reason"] is not None:
                c.bad(gs.where(i, "status"), "an ok caller has every count and no reason")
                continue
            c.identities += 1
            c.same(gs.where(i, "micrographs"), r["micrographs"], r["q"] if r["layout"] == "gs" else 1)
            if r["dispatches"] > r["nodes"]:
                c.bad(gs.where(i, "dispatches"), f"{r['dispatches']} dispatches of {r['nodes']} nodes")
            for k in counts:
                E.add(base + (k,), r[k], s_g)
            ref = mq.get((r["family"], r["device"], r["q"]))
            if ref is not None:
                c.recomputed += 1
                E.add(base + ("added",), r["dispatches"] - ref["dispatches"], s_g)
        elif r["status"] == "refused at build":
            if any(given) or not r["reason"]:
                c.bad(gs.where(i, "status"), "a refused caller has a reason and no counts")
        else:
            c.bad(gs.where(i, "status"), f"status {r['status']!r} is neither ok nor refused at build")


PROJECTION_STATUSES = ("qualified", "mismatch", "excluded", "error")


def projection_positions(rows: list) -> dict:
    """Prompt position -> digest of the captured output row there, over one arm's calls of a node."""
    return {r["p0"] + j: h for r in rows for j, h in enumerate((r["row_sha256"] or "").split())}


def check_projection(ctx: Context) -> None:
    """Projection replay (projection.csv). Per row: one row digest per position p0..p1-1 (p1 - p0 =
    out_ne[1]); qualified exactly when the replayed digest equals the captured one with no element
    differing; mismatch: replayed, and the digests or elements differ; excluded: not replayed, with a reason;
    error: not replayed, with a reason; a weight digest for MUL_MAT only. Per (task, arm, node): calls
    and calls per status. Totals: calls and calls per status. Per (task, node) of a task with two arms
    whose calls cover the same positions: positions, positions whose row digests differ and the first
    of them."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    pr = tables.get("projection")
    if pr is None:
        return
    s_j = src("projection")
    groups = defaultdict(list)
    for i, r in enumerate(pr.rows):
        groups[(r["task_id"], r["arm"], r["node"])].append(r)
        c.identities += 4
        n_rows = len((r["row_sha256"] or "").split())
        ne = r["out_ne"] or []
        if n_rows != r["p1"] - r["p0"] or len(ne) < 2 or ne[1] != n_rows:
            c.bad(pr.where(i, "row_sha256"), f"{n_rows} row digests for positions {r['p0']}..{r['p1']} (out_ne {ne})")
        st, rep, cap = r["status"], r["replayed_sha256"], r["captured_sha256"]
        if rep is not None:  # replayed: equal digests and no element differing, or a mismatch
            expect = "qualified" if rep == cap and r["elements_differing"] == 0 else "mismatch"
        else:
            expect = st if st in ("excluded", "error") else "excluded or error (not replayed)"
        c.recomputed += 1
        c.same(pr.where(i, "status"), st, expect)
        if st != "qualified" and not r["reason"]:
            c.bad(pr.where(i, "reason"), f"a {st} call needs its reason")
        if st == "qualified" and r["reason"]:
            c.bad(pr.where(i, "reason"), "a qualified call has no reason")
        if (r["weight_sha256"] is not None) != (r["op"] == "MUL_MAT"):
            c.bad(pr.where(i, "weight_sha256"), "a weight digest is given exactly for MUL_MAT calls")
    for (t, arm, node), g in groups.items():
        base = ("projection", t, arm, node)
        E.add(base + ("calls",), len(g), s_j)
        for s in PROJECTION_STATUSES:
            E.add(base + (s,), sum(r["status"] == s for r in g), s_j)
    E.add(("projection", "total", "calls"), len(pr.rows), s_j)
    for s in PROJECTION_STATUSES:
        E.add(("projection", "total", s), sum(r["status"] == s for r in pr.rows), s_j)
    for t in dict.fromkeys(r["task_id"] for r in pr.rows):
        arms = list(dict.fromkeys(r["arm"] for r in pr.rows if r["task_id"] == t))
        if len(arms) != 2:
            continue
        for node in dict.fromkeys(r["node"] for r in pr.rows if r["task_id"] == t):
            x, y = (projection_positions(groups.get((t, arm, node), [])) for arm in arms)
            if not x or set(x) != set(y):
                continue
            differ = sorted(p for p in x if x[p] != y[p])
            base = ("projection", t, node)
            E.add(base + ("positions",), len(x), s_j)
            E.add(base + ("positions_differing",), len(differ), s_j)
            if differ:
                E.add(base + ("first_position",), differ[0], s_j)


def check_projection_claim(ctx: Context, cl: CsvTable, i: int) -> None:
    """The projection stage's claim: controls = the calls replayed (not excluded) in projection.csv;
    controls_failed counts at least its mismatched and failed calls (the captured prefills' KV controls
    are recorded in the stage's projection.json, not in the table)."""
    c, tables = ctx.c, ctx.tables
    r = cl.rows[i]
    pr = tables.get("projection")
    if pr is None:
        c.bad(cl.where(i), "the projection stage's table is not in the archive: its claim cannot be checked")
        return
    c.recomputed += 1
    c.same(cl.where(i, "controls"), r["controls"], sum(x["status"] != "excluded" for x in pr.rows))
    failed = sum(x["status"] in ("mismatch", "error") for x in pr.rows)
    c.identities += 1
    if r["controls_failed"] < failed:
        c.bad(
            cl.where(i, "controls_failed"),
            f"{r['controls_failed']} failed control(s), but {failed} call(s) of projection.csv mismatched or failed",
        )


def claim_controls(tables: dict, nat: dict, stage: str, record: str):
    """(controls, controls failed) of a controlled stage's claim, recomputed from its table, or None.

    replay: contexts (family, layer, phase, q) of the record's family (all when the record names
    none) and those with a failed control; audit: rows, and clean rows failing the oracle plus faults
    not detected; partition: repeats after the first, and those whose endpoint, KV or logits digest
    differs from repeat 1; crosses: shams plus subset coordinates, and shams not equal to the natural
    recipient (or changing bytes) plus coordinates with more than one (endpoint, KV) outcome."""
    if stage == "replay" and "replay" in tables:
        fam = record.split("/")[1] if record.count("/") == 2 else None
        ctx = defaultdict(list)
        for x in tables["replay"].rows:
            if fam is None or x["family"] == fam:
                ctx[(x["family"], x["layer"], x["phase"], x["q"])].append(x)
        return len(ctx), sum(1 for xs in ctx.values() if any(not x["control_ok"] for x in xs))
    if stage == "audit" and "audit" in tables:
        xs = tables["audit"].rows
        return len(xs), sum(
            1
            for x in xs
            if (x["fault"] is None and not x["oracle_ok"]) or (x["fault"] is not None and not x["detected"])
        )
    if stage == "partition" and "partition" in tables:
        later = [x for x in tables["partition"].rows if x["repeat"] > 1]
        return len(later), sum(
            1
            for x in later
            if (x["task_id"], x["arm"]) not in nat
            or any(
                x[k] != nat[(x["task_id"], x["arm"])][1][k] for k in ("endpoint_sha256", "kv_sha256", "logits_sha256")
            )
        )
    if stage == "crosses" and "crosses" in tables and "partition" in tables:
        n, bad = 0, 0
        coords = defaultdict(set)
        for x in tables["crosses"].rows:
            if x["selector"] == "EMPTY":
                n += 1
                nr = nat.get((x["task_id"], x["recipient_arm"]))
                bad += nr is None or x["endpoint_sha256"] != nr[1]["endpoint_sha256"] or x["changed_bytes"] != 0
            elif x["kind"] == "subset":
                coords[(x["task_id"], x["direction"], x["selector"])].add(
                    (x["endpoint_sha256"], x["spliced_kv_sha256"])
                )
        return n + len(coords), bad + sum(1 for v in coords.values() if len(v) != 1)
    return None


def check_claims(ctx: Context, nat: dict) -> None:
    """The claims of the controlled stages (claims.csv).

    controls and controls_failed as recomputed by ``claim_controls``; for admission, controls -
    controls_failed = the (backend, layout, q) evaluations with rows in admission.csv; for projection,
    ``check_projection_claim``. A claim with a failed control is withheld; supported or vacuous exactly when the
    exit code is 0 and no control failed; a partition or crosses claim is vacuous exactly when no partition
    arm differs from A on any input (refspec_check.vacuity); a withheld claim has a reason; the claim's
    words are its stage's registered claim (``CLAIMS``), or for a vacuous claim the vacuity verdict over its
    inputs (``vacuous_text``), never another text."""
    c, E, tables, src = ctx.c, ctx.E, ctx.tables, ctx.src
    cl = tables.get("claims")
    if cl is None:
        return
    s_l = src("claims")
    for i, r in enumerate(cl.rows):
        st, rec = r["stage"], r["record"]
        exp = None
        words = CLAIMS.get(st)  # a vacuous claim says so instead (below)
        if st == "admission" and "admission" in tables:
            c.identities += 1
            evals = len({(x["backend"], x["layout"], x["q"]) for x in tables["admission"].rows})
            if r["controls"] - r["controls_failed"] != evals:
                c.bad(
                    cl.where(i, "controls"),
                    f"{r['controls']} evaluations less {r['controls_failed']} failed "
                    f"!= {evals} evaluations with rows in admission.csv",
                )
        elif st == "projection":
            check_projection_claim(ctx, cl, i)
        else:
            exp = claim_controls(tables, nat, st, rec)
            if exp is None and st in ("replay", "audit", "partition", "crosses"):
                c.bad(cl.where(i), f"the {st} stage's table is not in the archive: its claim cannot be checked")
        if exp is not None:
            c.recomputed += 2
            c.same(cl.where(i, "controls"), r["controls"], exp[0])
            c.same(cl.where(i, "controls_failed"), r["controls_failed"], exp[1])
        c.identities += 1
        if r["controls_failed"] > 0 and r["status"] != "withheld":
            c.bad(cl.where(i, "status"), f"{r['controls_failed']} control(s) failed but the claim is not withheld")
        ok = r["exit_code"] == 0 and r["controls_failed"] == 0
        if (r["status"] in ("supported", "vacuous")) != ok:
            c.bad(
                cl.where(i, "status"),
                f"status {r['status']} with exit code {r['exit_code']} and {r['controls_failed']} failed control(s)",
            )
        if ok and st in ("partition", "crosses") and nat:
            n_in, vac = partition_vacuous(nat)
            why, found = (
                f"no partition arm differs on any of the {n_in} inputs",
                "a partition arm differs on some input",
            )
            if st == "crosses" and not vac and "crosses" in tables:
                n_in, vac = crosses_vacuous(tables["crosses"].rows)
                why = f"the pair's natural endpoints agree on every one of the {n_in} inputs crossed"
                found = "the pair's natural endpoints differ on some input crossed"
            c.identities += 1
            if vac:
                words = vacuous_text(n_in)
            if vac and r["status"] != "vacuous":
                c.bad(cl.where(i, "status"), f"{r['status']}, but {why}: the claim is vacuous")
            elif not vac and r["status"] == "vacuous":
                c.bad(cl.where(i, "status"), f"vacuous, but {found}")
        if r["status"] == "withheld" and not r["reason"]:
            c.bad(cl.where(i, "reason"), "a withheld claim needs its reason")
        c.recomputed += 1
        c.same(cl.where(i, "claim"), r["claim"], words, "the stage's registered claim:")
        E.add(("claim", st, rec, "controls"), r["controls"], s_l)
        E.add(("claim", st, rec, "controls_failed"), r["controls_failed"], s_l)
