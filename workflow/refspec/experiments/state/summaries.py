"""Text summaries of finished state campaigns: the partition classes and the subset matrix."""

from __future__ import annotations

OUTCOME_CODES = {"recipient": "=", "donor": "D", "third": "3"}


def partition_summary(rows: list[dict], diff_rows: list[dict] | None = None, *, b_arm: str = "B") -> str:
    """Per input: prompt length, the arms' endpoint/KV/logits classes and first differences from A."""
    by_task: dict[str, list[dict]] = {}
    for r in rows:
        if r["repeat"] == 1:
            by_task.setdefault(r["task_id"], []).append(r)
    if not by_task:
        return "no partition rows"
    arms = [r["arm"] for r in next(iter(by_task.values()))]
    lines = [
        "Partition classes per input (endpoint/KV/logits class ids; 0 = A's class; "
        "@i = first generated index differing from A; * = split degenerates to one caller)"
    ]
    w = max(10, *(len(a) + 6 for a in arms))
    lines.append(f"{'task':14s} {'n':>4s} " + " ".join(f"{a:>{w}s}" for a in arms))
    n_ab = n_state = 0
    n_any = 0
    for tid, rs in by_task.items():
        cells = []
        for r in rs:
            c = f"{r['endpoint_class']}/{r['kv_class']}/{r['logits_class']}"
            if r["first_diff_vs_A"] is not None:
                c += f"@{r['first_diff_vs_A']}"
            if r["degenerate"]:
                c += "*"
            cells.append(f"{c:>{w}s}")
        lines.append(f"{tid:14s} {rs[0]['prompt_len']:4d} " + " ".join(cells))
        d = {r["arm"]: r for r in rs}
        if b_arm in d and d[b_arm]["endpoint_sha256"] != d["A"]["endpoint_sha256"]:
            n_ab += 1
        if b_arm in d and (
            d[b_arm]["kv_sha256"] != d["A"]["kv_sha256"] or d[b_arm]["logits_sha256"] != d["A"]["logits_sha256"]
        ):
            n_state += 1
        if any(r["endpoint_class"] for r in rs):
            n_any += 1
    nt = len(by_task)
    lines.append(
        f"inputs with A != {b_arm} endpoints: {n_ab} of {nt}; with A != {b_arm} KV or logits: {n_state} of {nt}; "
        f"with any arm's endpoint != A: {n_any} of {nt}"
    )
    for a in arms[1:]:
        ne = sum(1 for rs in by_task.values() for r in rs if r["arm"] == a and r["endpoint_class"] != 0)
        nk = sum(1 for rs in by_task.values() for r in rs if r["arm"] == a and r["kv_class"] != 0)
        nl = sum(1 for rs in by_task.values() for r in rs if r["arm"] == a and r["logits_class"] != 0)
        lines.append(f"  {a:8s} vs A: endpoint differs on {ne}, KV differs on {nk}, initial logits differ on {nl}")
    if diff_rows:
        lines.append("KV byte differences from A (layers with any difference: K cells/V cells, max |diff|):")
        pairs: dict[tuple[str, str], list[dict]] = {}
        for d in diff_rows:
            pairs.setdefault((d["task_id"], d["arm_b"]), []).append(d)
        for (tid, arm), ds in pairs.items():
            layers: dict[int, dict] = {}
            for d in ds:
                layers.setdefault(d["layer"], {})[d["part"]] = d
            changed = [
                (il, p) for il, p in sorted(layers.items()) if p["K"]["bytes_differing"] or p["V"]["bytes_differing"]
            ]
            total = sum(d["bytes_differing"] for d in ds)
            if not changed:
                lines.append(f"  {tid} A vs {arm}: KV bytes identical (payload metadata only)")
                continue
            il0 = changed[0][0]
            first_pos = min(
                p[x]["first_position"] for _il, p in changed for x in ("K", "V") if p[x]["first_position"] is not None
            )
            desc = ", ".join(
                f"L{il}:{p['K']['cells_differing']}/{p['V']['cells_differing']}"
                f" {max(p['K']['max_abs'], p['V']['max_abs']):.3g}"
                for il, p in changed[:6]
            )
            more = f" ... ({len(changed)} layers)" if len(changed) > 6 else ""
            lines.append(
                f"  {tid} A vs {arm}: {total} bytes differ from layer {il0}, first position {first_pos}; {desc}{more}"
            )
    return "\n".join(lines)


def _first_seen(values) -> list:
    """The distinct values, in order of first appearance."""
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _cell_code(rs: list[dict]) -> str:
    """One cell's code: the outcome's, '.' where no byte changed (but the sham), '!' where the repeats
    disagree, '?' where a sham failed."""
    r = rs[0]
    code = OUTCOME_CODES[r["outcome"]]
    if not r["bytes_changed"] and r["selector"] != "EMPTY":
        code += "."
    if not all(x["repeats_agree"] for x in rs):
        code += "!"
    if not all(x["controls_ok"] for x in rs):
        code += "?"
    return code


def _matrix_lines(cell: dict[tuple, list[dict]], sels: list[str], cols: list[tuple[str, str]]) -> list[str]:
    """The subset matrix's header (tasks over directions) and one line per selector."""
    w = max(max(len(d) for _t, d in cols), 7) + 1
    tasks = _first_seen(t for t, _d in cols)
    head1 = f"{'':8s} " + " ".join(f"{t:>{w * 2 + 1}s}" for t in tasks)
    head2 = f"{'selector':8s} " + " ".join(f"{d:>{w}s}" for _t, d in cols)
    lines = [head1, head2]
    for s in sels:
        out = []
        for t, d in cols:
            rs = cell.get((s, t, d), [])
            out.append(f"{_cell_code(rs):>{w}s}" if rs else f"{'':>{w}s}")
        lines.append(f"{s:8s} " + " ".join(out))
    return lines


def _outcome_lines(rows: list[dict], cell: dict[tuple, list[dict]]) -> list[str]:
    """The subset requests' outcomes (the recipient's split by whether a byte changed), the controls and
    repeats, and the own-path shams that reproduce the recipient."""
    counts = {"recipient": 0, "donor": 0, "third": 0}
    unchanged_recipient = changed_recipient = 0
    for rs in cell.values():
        if rs[0]["kind"] != "subset":
            continue
        for x in rs:
            counts[x["outcome"]] += 1
            if x["outcome"] == "recipient":
                if x["bytes_changed"]:
                    changed_recipient += 1
                else:
                    unchanged_recipient += 1
    n_sub = sum(counts.values())
    n_proc = len({r["process"] for r in rows})
    shams = [r for r in rows if r["selector"] == "EMPTY"]
    return [
        f"{n_sub} subset requests in {n_proc} processes: donor {counts['donor']}, third {counts['third']}, "
        f"recipient {counts['recipient']} (bytes changed in {changed_recipient}, unchanged in "
        f"{unchanged_recipient}); controls ok: {all(r['controls_ok'] for r in rows)}; "
        f"repeats agree: {all(r['repeats_agree'] for r in rows)}",
        f"own-path shams reproducing the recipient endpoint: "
        f"{sum(r['outcome'] == 'recipient' for r in shams)} of {len(shams)}",
    ]


def _frontier_lines(frows: list[dict]) -> list[str]:
    """The frontier contrasts of the first repeat: per panel, the frontier and its pair score's additive
    prediction against the actual joint change."""
    lines = [
        "Frontier contrasts (logits at the first output where a panel's four trajectories disagree; "
        "pair score = logit[a] - logit[b]):"
    ]
    for f in frows:
        if f["repeat"] != 1:
            continue
        head = f"  {f['task_id']} {f['direction']:>9s} {f['panel']:8s}"
        if f["frontier"] is None or f["max_abs_interaction"] is None:
            lines.append(f"{head} no frontier ({f['note']})")
            continue
        pair = f"{f['token_a']}/{f['token_b']}"
        if f["additive"] is None:
            lines.append(
                f"{head} t*={f['frontier']} argmax {f['argmax']} ({f['note']}); "
                f"max|interaction| {f['max_abs_interaction']:.6g}"
            )
            continue
        lines.append(
            f"{head} t*={f['frontier']} argmax {'/'.join(map(str, f['argmax']))} pair {pair}: "
            f"additive {f['additive']:.6g} actual {f['actual']:.6g} interaction {f['interaction']:.6g}; "
            f"max|joint-(first+second)| {f['max_abs_interaction']:.6g}, max|joint| "
            f"{f['max_abs_delta_joint']:.6g}{'' if f['repeats_agree'] else ' (repeats disagree)'}"
        )
    return lines


def crosses_summary(rows: list[dict], frows: list[dict] | None = None) -> str:
    """The subset matrix (paper Table S11 shape): selectors x (task, direction)."""
    if not rows:
        return "no crosses rows"
    cols: list[tuple[str, str]] = _first_seen((r["task_id"], r["direction"]) for r in rows)
    sels = _first_seen(r["selector"] for r in rows)
    cell: dict[tuple, list[dict]] = {}
    for r in rows:
        cell.setdefault((r["selector"], r["task_id"], r["direction"]), []).append(r)
    lines = [
        "Subset matrix: outcome per selector and (task, donor->recipient); '=' recipient endpoint retained, "
        "'D' donor endpoint (distinguishable), '3' third trajectory; '.' suffix: no byte changed; "
        "'!' repeats disagree; '?' sham failed"
    ]
    lines += _matrix_lines(cell, sels, cols)
    lines += _outcome_lines(rows, cell)
    if frows:
        lines += _frontier_lines(frows)
    return "\n".join(lines)
