"""Comparison archives (refspec compare, anc/compare.md): their tables recomputed from the records they carry."""

from __future__ import annotations

import base64
import math
import os
import random
import re
from collections import defaultdict

from refspec_check import jsonio
from refspec_check.comparison_inputs import check_carried_derivations
from refspec_check.comparison_rows import (
    LABELS,
    band_of,
    expected_preservation,
    expected_timings,
    pinned_inputs,
    plans_same,
)
from refspec_check.context import Context
from refspec_check.contract import (
    COLUMNS,
    COMPARE_COLUMNS,
    COMPARE_EXTRA,
    COMPARE_FINDINGS,
    COMPARED_TABLES,
    COMPARISON_FORMAT,
    posix_rel,
    read_csv_table,
    read_plan,
)
from refspec_check.digests import sha256_file
from refspec_check.numbers import check_markup, check_numbers
from refspec_check.pdf import check_pdf
from refspec_check.problems import Checker
from refspec_check.provenance import check_provenance
from refspec_check.rendering import check_comparison_rendering
from refspec_check.report import Report
from refspec_check.seal import Trust, check_sealed, check_signature, key_fingerprint
from refspec_check.stats import mean, percentile


def _statement_of(c: Checker, path: str, where: str):
    try:
        with open(path, "rb") as f:
            return jsonio.loads(base64.b64decode(jsonio.loads(f.read())["payload"], validate=True))
    except (OSError, ValueError, KeyError, TypeError) as e:
        c.unread(where, f"not a DSSE envelope over a statement ({e})")
        return None


def check_input_signature(c: Checker, lab: str, sp: str, named_keyid, trust: Trust) -> None:
    """The carried seal of input ``lab`` verified as a seal is (:func:`check_signature`), under the key
    the auditor gives for it (``--input-pubkey LAB=KEY.pub``), else under ``--pubkey``'s key when the
    comparison names that key as the input's signer; the key must be the one the comparison names.
    A seal no given key can verify is a mismatch: a carried record is only as good as its signature."""
    where = f"inputs/{lab}/SEAL.dsse.json"
    public = trust.inputs.get(lab)
    if public is None and trust.public is not None and key_fingerprint(trust.public) == named_keyid:
        public = trust.public
    if public is None:
        c.bad(where, f"signed by {named_keyid!r}: give that signer's public key with --input-pubkey {lab}=KEY.pub")
        return
    try:
        with open(sp, "rb") as f:
            data = f.read()
        env = jsonio.loads(data)
    except (OSError, ValueError) as e:
        c.unread(where, f"not a DSSE envelope ({e})")
        return
    pinned = Trust(expect_keyid=named_keyid if isinstance(named_keyid, str) else "(none named)")
    pinned.public = public
    check_signature(c, data, env, pinned, w=where)


def compare_inputs_read(c: Checker, lab: str, compares: dict, trust: Trust) -> dict:
    """The carried records of archive ``lab`` (inputs/a, inputs/b): its seal must be the one the comparison's
    statement names, signed by the key it names (:func:`check_input_signature`), and every carried file
    must be that seal's subject with the sealed sha256."""
    d = os.path.join(c.archive, "inputs", lab)
    sp = os.path.join(d, "SEAL.dsse.json")
    out: dict = {}
    compares = {k: v for k, v in compares.items() if isinstance(v, dict)} if isinstance(compares, dict) else {}
    if not os.path.isfile(sp):
        c.bad(f"inputs/{lab}", "the compared archive's seal is not carried")
        return out
    c.files.add(sp)
    named = (compares.get(lab) or {}).get("seal_sha256") if isinstance(compares, dict) else None
    c.same(f"inputs/{lab}/SEAL.dsse.json", sha256_file(sp), named, "seal sha256 (the comparison's statement names it)")
    st = _statement_of(c, sp, f"inputs/{lab}/SEAL.dsse.json")
    subjects = {}
    if isinstance(st, dict):
        for s_ in st.get("subject") or []:
            if isinstance(s_, dict) and isinstance(s_.get("name"), str):
                subjects[s_["name"]] = (s_.get("digest") or {}).get("sha256")
        keyid = ((st.get("predicate") or {}).get("signer") or {}).get("keyid")
        c.same(f"inputs/{lab}/SEAL.dsse.json", keyid, (compares.get(lab) or {}).get("keyid"), "signer key id")
    check_input_signature(c, lab, sp, (compares.get(lab) or {}).get("keyid"), trust)
    for root, _dirs, files in os.walk(d):
        for fn in sorted(files):
            full = os.path.join(root, fn)
            rel = posix_rel(full, d)
            if rel == "SEAL.dsse.json":
                continue
            c.files.add(full)
            c.same(
                f"inputs/{lab}/{rel}",
                sha256_file(full),
                subjects.get(rel),
                "sha256 (as sealed in the compared archive)",
            )
    tables, carried = {}, {}
    for name in COMPARED_TABLES:
        p = os.path.join(d, "tables", name + ".csv")
        rel = f"tables/{name}.csv"
        if not os.path.isfile(p) and rel in subjects and f"tables/{name}.parquet" in subjects:
            c.bad(f"inputs/{lab}/{rel}", "the compared archive sealed this table, but the comparison does not carry it")
        if os.path.isfile(p) and name not in tables:
            t = read_csv_table(c, name, p, posix_rel(p, c.archive), dict(COLUMNS[name], **COMPARE_EXTRA.get(name, {})))
            if t is not None:
                tables[name] = t.rows
                carried[name] = t
    out["tables"] = tables
    out["carried"] = carried
    out["plan"] = _json_file(c, os.path.join(d, "plan.json"), f"inputs/{lab}/plan.json")
    out["manifest"] = _json_file(c, os.path.join(d, "manifest.json"), f"inputs/{lab}/manifest.json")
    return out


def _json_file(c: Checker, path: str, where: str):
    if not os.path.isfile(path):
        c.unread(where, "not carried")
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = jsonio.load(f)
    except (OSError, ValueError) as e:
        c.unread(where, f"not JSON ({e})")
        return {}
    return doc if isinstance(doc, dict) else {}


def _cell(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return " ".join(str(int(x)) for x in v)
    return str(v)


def recompute_finding(fid: str, ta, tb):
    """(rows_a, rows_b, rows_differing, verdict, differing cells {(key, column): (a, b)})."""
    table, key, cols = COMPARE_FINDINGS[fid]
    if ta is None and tb is None:
        return 0, 0, 0, "same", {}
    ia = {"|".join(str(r[k]) for k in key): r for r in (ta or [])}
    ib = {"|".join(str(r[k]) for k in key): r for r in (tb or [])}
    cells = {}
    for k in set(ia) | set(ib):
        ra, rb = ia.get(k), ib.get(k)
        for col in cols:
            va = _cell(ra[col]) if ra is not None else None
            vb = _cell(rb[col]) if rb is not None else None
            if ra is None or rb is None or va != vb:
                cells[(k, col)] = (va, vb)
    return len(ia), len(ib), len({k for k, _ in cells}), ("differs" if cells else "same"), cells


def _sums(reqs: list, row: dict, tasks: list):
    """Sessions (sorted) and S/N per (arm, session, task) of the comparison's two arms (refspec.compare.timings)."""
    S_, N_ = defaultdict(float), defaultdict(int)
    sessions = set()
    for r in reqs:
        if (
            r["campaign"] == row["campaign"]
            and r["family"] == row["family"]
            and (row["cap"] is None or r["cap"] == row["cap"])
            and r["status"] == "ok"
            and r["t_ns"] is not None
            and r["arm"] in (row["numerator"], row["denominator"])
        ):
            sessions.add(r["session"])
            S_[(r["arm"], r["session"], r["task_id"])] += math.log(r["t_ns"])
            N_[(r["arm"], r["session"], r["task_id"])] += 1
    return sorted(sessions), S_, N_


def _resampled_D(kind, sessions, S_, N_, num, den, tasks, v, w):
    """D_X of one draw (None when undefined): task weights v[t], session weights w[s]."""
    if kind == "ratio":
        tot = acc = 0.0
        for j, t in enumerate(tasks):
            if not v[j]:
                continue
            sn = sum(w[i] * S_.get((num, s, t), 0.0) for i, s in enumerate(sessions) if w[i])
            nn = sum(w[i] * N_.get((num, s, t), 0) for i, s in enumerate(sessions) if w[i])
            sd = sum(w[i] * S_.get((den, s, t), 0.0) for i, s in enumerate(sessions) if w[i])
            nd = sum(w[i] * N_.get((den, s, t), 0) for i, s in enumerate(sessions) if w[i])
            if nn and nd:
                acc += v[j] * (sn / nn - sd / nd)
                tot += v[j]
        return acc / tot if tot else None
    tot = acc = 0.0
    for i, s in enumerate(sessions):
        if not w[i]:
            continue
        cn = cd = 0.0
        for j, t in enumerate(tasks):
            if v[j] and N_.get((num, s, t)) and N_.get((den, s, t)):
                cn += v[j] * (S_[(num, s, t)] / N_[(num, s, t)] - S_[(den, s, t)] / N_[(den, s, t)])
                cd += v[j]
        if cd:
            acc += w[i] * (cn / cd)
            tot += w[i]
    return acc / tot if tot else None


def _point_D(kind, sessions, S_, N_, num, den, tasks):
    if kind == "ratio":
        vals = []
        for t in tasks:
            nn = sum(N_.get((num, s, t), 0) for s in sessions)
            nd = sum(N_.get((den, s, t), 0) for s in sessions)
            vals.append(
                sum(S_.get((num, s, t), 0.0) for s in sessions) / nn
                - sum(S_.get((den, s, t), 0.0) for s in sessions) / nd
            )
        return mean(vals)
    cs = []
    for s in sessions:
        ds = [
            S_[(num, s, t)] / N_[(num, s, t)] - S_[(den, s, t)] / N_[(den, s, t)]
            for t in tasks
            if N_.get((num, s, t)) and N_.get((den, s, t))
        ]
        if ds:
            cs.append(mean(ds))
    return mean(cs)


def _weights_of(rng: random.Random, n: int) -> list:
    w = [0] * n
    for _ in range(n):
        w[rng.randrange(n)] += 1
    return w


def recompute_timing(row: dict, ins: dict):
    """(ratio, lo, hi, a_lo, a_hi, b_lo, b_hi, n_tasks, n_sessions_a, n_sessions_b) of a timing row from the
    carried requests (refspec.compare.timings: tasks seed, A's sessions seed+1, B's seed+2)."""
    kind, seed, draws = row["kind"], row["seed"], row["draws"]
    qa = ins["a"].get("tables", {}).get("qualification", [])
    tasks = sorted(
        {
            r["task_id"]
            for r in qa
            if r["campaign"] == row["campaign"]
            and r["family"] == row["family"]
            and (row["cap"] is None or r["cap"] == row["cap"])
        }
    )
    sa, Sa, Na = _sums(ins["a"]["tables"].get("requests", []), row, tasks)
    sb, Sb, Nb = _sums(ins["b"]["tables"].get("requests", []), row, tasks)
    num, den = row["numerator"], row["denominator"]
    da = _point_D(kind, sa, Sa, Na, num, den, tasks)
    db = _point_D(kind, sb, Sb, Nb, num, den, tasks)
    rt, ra, rb = random.Random(seed), random.Random(seed + 1), random.Random(seed + 2)
    diffs, xa, xb = [], [], []
    for _ in range(draws):
        v = _weights_of(rt, len(tasks))
        wa = _weights_of(ra, len(sa))
        wb = _weights_of(rb, len(sb))
        a_ = _resampled_D(kind, sa, Sa, Na, num, den, tasks, v, wa)
        b_ = _resampled_D(kind, sb, Sb, Nb, num, den, tasks, v, wb)
        if a_ is not None and b_ is not None:
            diffs.append(b_ - a_)
            xa.append(a_)
            xb.append(b_)
    iv = lambda xs: [math.exp(percentile(sorted(xs), p)) for p in (2.5, 97.5)] if xs else [None, None]  # noqa: E731
    lo, hi = iv(diffs)
    return dict(
        a_point=math.exp(da),
        b_point=math.exp(db),
        ratio=math.exp(db - da),
        lo=lo,
        hi=hi,
        a_iv=iv(xa),
        b_iv=iv(xb),
        n_tasks=len(tasks),
        n_sessions_a=len(sa),
        n_sessions_b=len(sb),
        kept=len(diffs),
    )


def read_comparison_tables(c: Checker) -> dict:
    """The comparison archive's own tables (COMPARE_COLUMNS), each a missing one recorded as unreadable."""
    tables = {}
    for name, cols in COMPARE_COLUMNS.items():
        p = os.path.join(c.archive, "tables", name + ".csv")
        if not os.path.isfile(p):
            c.unread(f"tables/{name}.csv", "missing from the comparison archive")
            continue
        t = read_csv_table(c, name, p, posix_rel(p, c.archive), cols)
        if t is not None:
            tables[name] = t
            c.files.add(p)
    c.tables = tables
    return tables


def compared_archives(c: Checker) -> dict:
    """The compared archives as the comparison's seal names them (predicate.compares), else as its plan.json does."""
    sp = os.path.join(c.archive, "SEAL.dsse.json")
    st = _statement_of(c, sp, "SEAL.dsse.json") if os.path.isfile(sp) else None
    compares = ((st or {}).get("predicate") or {}).get("compares") if isinstance(st, dict) else None
    if compares is None:
        plan = read_plan(c) or {}
        compares = {k: plan.get(k) for k in ("a", "b")}
        if st is not None:
            c.bad("SEAL.dsse.json", "the statement does not name the compared archives (predicate.compares)")
    return compares


def check_preservation_row(ctx: Context, i: int, row: dict, ins: dict, got_diffs: dict) -> None:
    """A preservation finding's row: its row counts and verdict recomputed from the carried tables; the differing
    cells it finds are added to ``got_diffs``."""
    c, E, t, src = ctx.c, ctx.E, ctx.tables["comparisons"], ctx.src("comparisons")
    item = row["item"]
    table = COMPARE_FINDINGS[item][0]
    ta = ins["a"].get("tables", {}).get(table)
    tb = ins["b"].get("tables", {}).get(table)
    ra_, rb_, nd, verdict, cells = recompute_finding(item, ta, tb)
    got_diffs.update({(item, k, col): v for (k, col), v in cells.items()})
    for col, val in (("rows_a", ra_), ("rows_b", rb_), ("rows_differing", nd)):
        c.same(t.where(i, col), row[col], val)
        E.add(("cmp", item, col), val, src)
    c.same(t.where(i, "verdict"), row["verdict"], verdict)


def _matches_compared(row: dict, r: dict) -> bool:
    """Whether ``r`` (a row of a compared archive's ratios or estimates) is the one timing ``row`` compares."""
    if row["kind"] == "ratio":
        key = ("campaign", "family", "cap", "numerator", "denominator")
    else:
        key = ("family", "path", "comparison")
    return tuple(r[k] for k in key) == tuple(row[k] for k in key)


def check_compared_values(ctx: Context, i: int, row: dict, ins: dict) -> None:
    """A timing row's a_value and b_value (and an estimate's a/b intervals): each compared archive's own number."""
    c, E, t, src = ctx.c, ctx.E, ctx.tables["comparisons"], ctx.src("comparisons")
    item = row["item"]
    for col in ("a_value", "b_value"):
        stated = None
        lab = col[0]
        for r in ins[lab].get("tables", {}).get("ratios" if row["kind"] == "ratio" else "estimates", []):
            if row["kind"] not in ("ratio", "estimate") or not _matches_compared(row, r):
                continue
            if row["kind"] == "ratio":
                stated = r["ratio"]
                continue
            stated = r["estimate"]
            if row[lab + "_lo"] is not None:
                for b_ in ("lo", "hi"):
                    c.same(t.where(i, lab + "_" + b_), row[lab + "_" + b_], r[b_])
                    E.add(("cmp", item, lab + "_" + b_), r[b_], src)
        c.same(t.where(i, col), row[col], stated, "the compared archive's value")
        if stated is not None:
            E.add(("cmp", item, col), stated, src)


def check_timing_recomputed(ctx: Context, i: int, row: dict, rc: dict | None) -> None:
    """A timing row's ratio B/A, interval, counts and points recomputed from the carried requests (``rc``)."""
    c, E, t, src = ctx.c, ctx.E, ctx.tables["comparisons"], ctx.src("comparisons")
    item = row["item"]
    if rc is None:
        c.bad(t.where(i, "ratio"), "states a ratio B/A, but the carried requests give none")
        return
    for col in ("ratio", "lo", "hi", "n_tasks", "n_sessions_a", "n_sessions_b"):
        c.same(t.where(i, col), row[col], rc[col])
        if col in ("ratio", "lo", "hi"):
            E.add(("cmp", item, col), rc[col], src)
    for lab, pt in (("a", rc["a_point"]), ("b", rc["b_point"])):
        stated = row[lab + "_value"]
        if stated is not None and abs(pt - stated) > 1e-9 * max(1.0, abs(stated)):
            c.bad(t.where(i, lab + "_value"), f"not the value the carried requests give ({pt!r})")
    if row["kind"] == "ratio":
        for lab in ("a", "b"):
            for k, b_ in enumerate(("lo", "hi")):
                c.same(t.where(i, lab + "_" + b_), row[lab + "_" + b_], rc[lab + "_iv"][k])
                E.add(("cmp", item, lab + "_" + b_), rc[lab + "_iv"][k], src)


def check_timing_row(ctx: Context, i: int, row: dict, ins: dict, want: dict) -> None:
    """A timing row: the compared archives' values, its band (the recomputed one), and (when it has a ratio)
    its recomputation."""
    check_compared_values(ctx, i, row, ins)
    ctx.c.same(ctx.tables["comparisons"].where(i, "band"), row["band"], want["band"], "band tau * max(F_A, F_B)")
    ctx.E.add(("cmp", row["item"], "band"), want["band"], ctx.src("comparisons"))
    if row["ratio"] is not None or want["rc"] is not None:
        check_timing_recomputed(ctx, i, row, want["rc"])


def check_differences(ctx: Context, got_diffs: dict) -> None:
    """differences.csv: exactly the differing cells the preservation findings recompute."""
    td = ctx.tables["differences"]
    stated = {
        (r["finding"], r["key"], r["column"]): (r["a"], r["b"]) for r in td.rows if r["finding"] in COMPARE_FINDINGS
    }
    for k in sorted(set(stated) | set(got_diffs)):
        ctx.c.same(f"{td.rel} [{' '.join(k)}]", stated.get(k), got_diffs.get(k), "differing cell (A, B)")


def expected_rows(c: Checker, ins: dict, cmp_plan: dict) -> list:
    """Every row comparisons.csv must hold, in order, recomputed from the carried inputs."""
    band = band_of(c, ins, cmp_plan, "plan.json")
    pres = expected_preservation(ins, recompute_finding)
    tim = expected_timings(ins, band, lambda row: recompute_timing(row, ins))
    return pres + tim


def check_completeness(ctx: Context, want: list) -> dict:
    """Each recomputed row present exactly once, no row the recomputation does not give, in the recomputed
    order; returns item -> (index of its row, the recomputed row)."""
    c, t = ctx.c, ctx.tables["comparisons"]
    wanted = {w["item"]: w for w in want}
    seen: dict = {}
    for i, row in enumerate(t.rows):
        item = row["item"]
        if item not in wanted:
            c.bad(t.where(i, "item"), f"a row the carried inputs do not give ({item!r}, verdict {row['verdict']!r})")
        elif item in seen:
            c.bad(t.where(i, "item"), f"{item!r} listed again (first at row {seen[item] + 1})")
        else:
            seen[item] = i
    for w in want:
        if w["item"] not in seen:
            c.bad(t.rel, f"row {w['item']!r} missing: the carried inputs give it, with verdict {w['verdict']!r}")
    order = [w["item"] for w in want if w["item"] in seen]
    if order != sorted(order, key=lambda it: seen[it]):
        c.bad(t.rel, "the rows are not in the order the comparison gives them (preservation findings, then timings)")
    return {it: (i, wanted[it]) for it, i in seen.items()}


def check_labels(ctx: Context, i: int, row: dict, want: dict) -> None:
    """The label columns and the verdict of a row equal the recomputed ones; its reason is the recomputed one."""
    c, t = ctx.c, ctx.tables["comparisons"]
    for col in LABELS:
        c.same(t.where(i, col), row[col], want[col], "label")
    c.same(t.where(i, "verdict"), row["verdict"], want["verdict"], "verdict")
    if not re.fullmatch(want["reason_re"], row["reason"] or ""):
        c.bad(t.where(i, "reason"), f"{row['reason']!r} is not the reason the carried inputs give")


def check_comparisons_table(ctx: Context, ins: dict, cmp_plan: dict) -> list:
    """comparisons.csv: complete, then row by row (labels, verdicts, numbers), then differences.csv; returns
    the recomputed rows (for the report's visible words)."""
    want = expected_rows(ctx.c, ins, cmp_plan)
    present = check_completeness(ctx, want)
    got_diffs: dict = {}
    for w in want:
        if w["section"] == "preservation":
            got_diffs.update({(w["item"], k, col): v for (k, col), v in w["cells"].items()})
    for _item, (i, w) in present.items():
        row = ctx.tables["comparisons"].rows[i]
        check_labels(ctx, i, row, w)
        if w["section"] == "preservation":
            check_preservation_row(ctx, i, row, ins, {})
        else:
            check_timing_row(ctx, i, row, ins, w)
    if "differences" in ctx.tables:
        check_differences(ctx, got_diffs)
    return want


def check_rendered_facts(c: Checker, plans_same_: bool, pinned_same: bool) -> None:
    """The records the comparison report's notes are rendered from say what the carried inputs give: its
    manifest.json's registered plans are equal exactly when the carried plans are the same, and
    differences.csv lists "pinned" rows exactly when the carried manifests' pinned inputs differ."""
    try:
        with open(os.path.join(c.archive, "manifest.json"), encoding="utf-8") as f:
            reg = jsonio.load(f).get("registered_plan_sha256") or {}
    except (OSError, ValueError, AttributeError):
        reg = {}  # the file checks name an unreadable manifest
    c.identities += 1
    if isinstance(reg, dict) and (reg.get("a") == reg.get("b")) != plans_same_:
        c.bad(
            "manifest.json: registered_plan_sha256",
            "the registered plans are " + ("the same" if plans_same_ else "different") + " in the carried inputs, "
            "the comparison's manifest says otherwise",
        )
    diffs = c.tables.get("differences")
    listed = any(r.get("finding") == "pinned" for r in diffs.rows) if diffs is not None else False
    c.identities += 1
    if listed == pinned_same:
        c.bad(
            "tables/differences.csv",
            "the carried manifests' pinned inputs are "
            + ("the same" if pinned_same else "different")
            + ", but the differences "
            + ("list" if listed else "do not list")
            + " pinned inputs",
        )


def check_comparison(c: Checker, rep: Report, unsealed: bool, trust: Trust) -> tuple[int, Checker]:
    """A comparison archive (anc/compare.md): every number of its report and its tables recomputed from the
    records it carries (inputs/a, inputs/b), which must be the compared archives' sealed files."""
    tables = read_comparison_tables(c)
    compares = compared_archives(c)
    ins = {lab: compare_inputs_read(c, lab, compares or {}, trust) for lab in ("a", "b")}
    for lab, i in ins.items():  # each input's derived rows are what its carried raw records give
        check_carried_derivations(c, lab, i.get("carried") or {}, i.get("plan"))
    comparisons_src = posix_rel(os.path.join(c.archive, "tables", "comparisons.csv"), rep.dir)
    ctx = Context(c, tables, lambda _name: comparisons_src)
    want = None
    if "comparisons" in tables:
        want = check_comparisons_table(ctx, ins, read_plan(c) or {})
    if want is not None:
        check_rendered_facts(
            c,
            plans_same(ins["a"].get("plan"), ins["b"].get("plan")),
            pinned_inputs(ins["a"].get("manifest")) == pinned_inputs(ins["b"].get("manifest")),
        )
    check_numbers(c, ctx.E, rep)
    check_markup(c, rep)
    check_pdf(c, rep.dir, rep.tex is not None and not rep.tex.problems)
    check_provenance(c, rep)
    if isinstance(compares, dict) and all(isinstance(compares.get(k), dict) for k in ("a", "b")):
        check_comparison_rendering(c, rep.dir, compares, COMPARISON_FORMAT)
    else:
        c.bad(rep.html_rel, "the compared archives are not named: the report cannot be rendered again")
    return check_sealed(c, unsealed, trust)
