#!/usr/bin/env python3
"""Independent checker of a refspec archive, Python standard library only.

    python3 -I -S report/check.py ARCHIVE --pubkey KEY.pub [--expect-keyid SHA256:HEX]
                                  [--expect-previous SHA|none] [--quiet] [--unsealed]

``--quiet`` prints only the summary lines. An archive without ``SEAL.dsse.json``
is a mismatch unless ``--unsealed`` is given (a results folder checked before
it is sealed). ``--pubkey`` is the signer's Ed25519 public key (PEM or OpenSSH),
taken from outside the archive; without it a sealed archive's signature cannot be
checked, which is a mismatch. ``--expect-keyid`` pins that key's fingerprint and
``--expect-previous`` the seal this archive must follow, as for ``refspec verify``.

It imports nothing from refspec. From the CSV copies of the result tables it
recomputes, with its own code:

* every endpoint digest (from the token lists) and every qualification row
  (reference endpoint, stability, required/completed/matching counts,
  first-divergence index and tokens);
* every pairwise qualified ratio with its task regressions;
* every replication session contrast c_s, estimate, bootstrap interval
  (DESIGN.md section 5: random.Random(seed), draws x n randrange(n) indices in
  order, linearly interpolated 2.5/97.5 percentiles, exponentiated; seed,
  draws and threshold from plan.json when present, else from estimates.csv),
  threshold decision and task regressions;
* the phase-mask table, session gaps and counts;
* the diagnostic (unqualified) timings of the registered pairs M3/M0, C3/C0,
  R_prod/M3 and the servers campaign's (``SERVER_DIAGNOSTIC_PAIRS``) (medians,
  paired ratios, which side is not qualified), which
  must never appear among the qualified ratios;
* the prospective-prediction table (predicted vs live and reference vs live)
  from endpoints.csv and the predictions frozen in plan.json;
* the headline block (numbers.json ``headline``, the report's summary table):
  every number is one of the checked numbers, E2 decisions (``too few
  sessions`` below 5 sessions) agree, the data seal and key are the archive's;
* every aggregate the report shows (Table 3 counts, replay and audit
  summaries, draft acceptance, request status counts, ledger records);

and compares them with the CSV tables, with numbers.json and with the numbers
displayed in report.html (parsed with html.parser against the report's strict HTML
subset; each number's element has ``data-num`` and ``data-src``) and, when present, in
report.tex (parsed against its LaTeX subset; each number is ``\\rsnum{ID}{TEXT}``). It
also checks cross-table identities (paired ratio transitivity, counts that must add up),
that every link and source names an existing archive file, the manifest/plan digests
shown in the report, and the seal: its envelope in canonical form, its Ed25519 signature
(RFC 8032, checked here with integer arithmetic and hashlib.sha512; see
``ed25519_problem`` for the strict rules), its key id against ``--pubkey``, its chain
against ``--expect-previous``, and every file digest listed in its statement (sha256 and
size); a symbolic link anywhere in the archive is a mismatch.

Exit status: 0 all consistent, 1 mismatches (each printed with its location),
2 unreadable input (no archive, no report/numbers.json, malformed files, a
public key file that is not an Ed25519 key) or bad usage.
"""

from __future__ import annotations

import base64
import csv
import datetime
import hashlib
import json
import math
import os
import random
import re
import stat
import sys
from collections import defaultdict
from html.parser import HTMLParser

EXIT_OK, EXIT_MISMATCH, EXIT_UNREADABLE = 0, 1, 2
DEFAULT_SEED = 20261014
DEFAULT_DRAWS = 10000
DEFAULT_THRESHOLD = 1.02
MIN_SESSIONS = 5  # fewer session contrasts: no threshold decision ("too few sessions")
# the servers campaign (anc/servers.md): each server arm over R, C3 beside the patched server with the
# draft, the draft's effect on each server build, the layout's effect in each mode
SERVER_DIAGNOSTIC_PAIRS = (
    ("S_stock", "R"),
    ("S_stock_spec", "R"),
    ("S_qb", "R"),
    ("S_qb_spec", "R"),
    ("C3", "S_qb_spec"),
    ("S_stock_spec", "S_stock"),
    ("S_qb_spec", "S_qb"),
    ("S_qb", "S_stock"),
    ("S_qb_spec", "S_stock_spec"),
)
DIAGNOSTIC_PAIRS = (("M3", "M0"), ("C3", "C0"), ("R_prod", "M3")) + SERVER_DIAGNOSTIC_PAIRS
DECISION_TEXT = {"too_few_sessions": "too few sessions", "noise_too_high": "machine noise too high"}
TWIN_SUFFIX = "_aa"  # the A/A control's twin of arm X is X_aa (anc/campaigns.md)
REL_TOL = 1e-12
REFERENCE_ARM = "R"
LAYOUT_ORDER = ("mq", "gs", "pq", "qb")
STAGE_ORDER = ("kq", "kq_soft_max", "kqv", "address")
LEDGER_KIND_KEYS = ("kind", "event", "type")
TABLE_NAMES = (
    "requests",
    "endpoints",
    "qualification",
    "sessions",
    "contrasts",
    "estimates",
    "ratios",
    "replay",
    "audit",
    "phase_masks",
    "diagnostics",
    "prediction",
    "noise",
    "loads",
)

# Column types the checker relies on (its own knowledge of the CSV contract).
S, I, F, B, L = "s", "i", "f", "b", "l"
COLUMNS = {
    "requests": dict(
        campaign=S,
        session=S,
        block=I,
        worker=S,
        family=S,
        task_id=S,
        arm=S,
        mode=S,
        layout=S,
        draft=S,
        k=I,
        ub=I,
        mask=I,
        cap=I,
        repeat=I,
        order_index=I,
        attempt=I,
        status=S,
        reason=S,
        t_ns=I,
        n_generated=I,
        stop_reason=S,
        eog=B,
        last_token=I,
        endpoint_sha256=S,
        proposals=I,
        accepted=I,
        rollbacks=I,
        cycles=I,
        callers=I,
        micrographs=I,
        rows=I,
        graph_rebuilds=I,
        graph_reuses=I,
    ),
    "endpoints": dict(
        campaign=S,
        family=S,
        task_id=S,
        arm=S,
        cap=I,
        session=S,
        repeat=I,
        endpoint_sha256=S,
        tokens=L,
        n=I,
        eog=B,
        last_token=I,
        stop_reason=S,
    ),
    "qualification": dict(
        campaign=S,
        family=S,
        task_id=S,
        arm=S,
        cap=I,
        n_required=I,
        n_requests=I,
        n_matching=I,
        qualified=B,
        ref_endpoint_sha256=S,
        first_diff_index=I,
        ref_token=I,
        arm_token=I,
        ref_margin=F,
        ref_stable=B,
        reason=S,
    ),
    "sessions": dict(
        campaign=S, family=S, session=S, started_utc=S, ended_utc=S, gap_before_s=F, n_requests=I, n_workers=I
    ),
    "contrasts": dict(family=S, path=S, comparison=S, session=S, c_s=F, n_tasks=I),
    "estimates": dict(
        family=S,
        path=S,
        comparison=S,
        estimate=F,
        lo=F,
        hi=F,
        n_sessions=I,
        n_tasks=I,
        n_regressions=I,
        regressed_tasks=S,
        draws=I,
        seed=I,
        threshold=F,
        decision=S,
        reason=S,
    ),
    "noise": dict(
        campaign=S,
        family=S,
        arm=S,
        twin=S,
        kind=S,
        cap=I,
        value=F,
        lo=F,
        hi=F,
        units=I,
        sessions=I,
        tasks=I,
        draws=I,
        seed=I,
        threshold=F,
        verdict=S,
        reason=S,
    ),
    "loads": dict(
        campaign=S,
        family=S,
        session=S,
        block=I,
        arm=S,
        load1_before=F,
        load1_after=F,
        cpu_before=F,
        cpu_after=F,
        competing_before=F,
        competing_after=F,
        top_competing=S,
        governor=S,
        freq_mhz=F,
        busy_threshold=F,
        busy=B,
    ),
    "ratios": dict(
        campaign=S,
        family=S,
        cap=I,
        path=S,
        numerator=S,
        denominator=S,
        qualified=B,
        ratio=F,
        n_tasks=I,
        n_regressions=I,
        regressed_tasks=S,
        reason=S,
    ),
    "replay": dict(
        family=S,
        layer=I,
        phase=S,
        q=I,
        stage=S,
        pq_eq_qb=B,
        mq_eq_pq=B,
        max_abs_mq=F,
        max_ulp_mq=I,
        first_diff=I,
        visible_keys=I,
        control_ok=B,
        reason=S,
    ),
    "audit": dict(
        geometry=S, fixture=S, layout=S, stage=S, oracle_ok=B, fault=S, detected=B, max_abs_err=F, max_rel_err=F
    ),
    "phase_masks": dict(family=S, mask=I, matches=I, n_tasks=I, repeats=I, passes=B, minimal=B),
    "diagnostics": dict(
        campaign=S,
        family=S,
        cap=I,
        path=S,
        numerator=S,
        denominator=S,
        numerator_qualified=B,
        denominator_qualified=B,
        label=S,
        n_tasks=I,
        numerator_tasks_failed=I,
        denominator_tasks_failed=I,
        n_tasks_timed=I,
        median_numerator_ns=F,
        median_denominator_ns=F,
        ratio=F,
        n_regressions=I,
        regressed_tasks=S,
        reason=S,
    ),
    "prediction": dict(
        family=S,
        task_id=S,
        live_arm=S,
        predictor=S,
        session=S,
        cap=I,
        predicted_sha256=S,
        reference_sha256=S,
        live_runs=I,
        live_stable=B,
        predicted_matches=I,
        reference_matches=I,
        reference_divergent=B,
    ),
}


# state studies, backend admission and the claims of the controlled stages (check_state)
STATE_COLUMNS = {
    "partition": dict(
        task_id=S,
        arm=S,
        repeat=I,
        prompt_len=I,
        degenerate=B,
        endpoint_sha256=S,
        tokens=L,
        n=I,
        eog=B,
        last_token=I,
        stop_reason=S,
        kv_sha256=S,
        logits_sha256=S,
        first_diff_vs_A=I,
        endpoint_class=I,
        kv_class=I,
        logits_class=I,
    ),
    "kv_diff": dict(task_id=S, arm_a=S, arm_b=S, layer=I, part=S, bytes_differing=I, max_abs=F, rel_frobenius=F),
    "crosses": dict(
        task_id=S,
        direction=S,
        donor_arm=S,
        recipient_arm=S,
        selector=S,
        kind=S,
        repeat=I,
        process=S,
        changed_bytes=I,
        bytes_changed=B,
        spliced_kv_sha256=S,
        endpoint_sha256=S,
        tokens=L,
        n=I,
        eog=B,
        stop_reason=S,
        outcome=S,
        distinguishable=B,
    ),
    "frontier": dict(
        task_id=S,
        direction=S,
        panel=S,
        repeat=I,
        arms=S,
        frontier=I,
        argmax=L,
        token_a=I,
        token_b=I,
        d_first=F,
        d_second=F,
        additive=F,
        actual=F,
        interaction=F,
        max_abs_interaction=F,
    ),
    "admission": dict(
        family=S,
        backend=S,
        n_head=I,
        n_head_kv=I,
        head_dim=I,
        n_kv=I,
        layout=S,
        q=I,
        op=S,
        supports_main=B,
        verdict=S,
        fallback=B,
        reason=S,
    ),
    "claims": dict(stage=S, record=S, status=S, exit_code=I, controls=I, controls_failed=I, reason=S),
    "projection": dict(
        family=S,
        task_id=S,
        arm=S,
        call=I,
        node=S,
        op=S,
        layer=I,
        p0=I,
        p1=I,
        src0_name=S,
        out_ne=L,
        weight_sha256=S,
        captured_sha256=S,
        row_sha256=S,
        replayed_sha256=S,
        elements_differing=I,
        first_differing=I,
        status=S,
        reason=S,
    ),
}
COLUMNS.update(STATE_COLUMNS)
TABLE_NAMES = TABLE_NAMES + tuple(STATE_COLUMNS)


class Unreadable(Exception):
    pass


# =========================================================================== problems


class Checker:
    def __init__(self, archive: str, quiet: bool = False):
        self.archive = os.path.abspath(archive)
        self.quiet = quiet
        self.problems: list[str] = []
        self.unreadable: list[str] = []
        self.recomputed = 0  # numbers computed by this checker
        self.compared = 0  # comparisons of a stated number with a recomputed one
        self.matched = 0
        self.identities = 0
        self.files: set[str] = set()
        self.tables: dict = {}  # name -> CsvTable, as read
        self.tree: set[str] = set()  # regular files of the archive, relative, '/'-separated
        self.reproduces: str | None = None  # the archive a reproduction's seal names

    def bad(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    def unread(self, where: str, msg: str) -> None:
        self.unreadable.append(f"{where}: {msg}")

    def same(self, where: str, stated, expected, what: str = "") -> bool:
        """Compare a stated value with a recomputed one (floats within 1e-12 relative)."""
        self.compared += 1
        ok = values_equal(stated, expected)
        if ok:
            self.matched += 1
        else:
            self.bad(where, f"{what + ' ' if what else ''}{fmt(stated)} != recomputed {fmt(expected)}")
        return ok


def fmt(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if v is None:
        return "null"
    return repr(v) if isinstance(v, str) else str(v)


def values_equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return abs(float(a) - float(b)) <= REL_TOL * max(1.0, abs(float(b)))
    return a == b


# =========================================================================== reading


def parse_value(kind: str, text: str):
    if kind == L:
        t = text.strip()
        if t.startswith("["):
            try:
                v = json.loads(t)
            except RecursionError:
                raise ValueError("nested too deeply") from None
            if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise ValueError("not a list of integers")
            return v
        return [int(x) for x in t.split(" ")] if t else []
    if text == "":
        return None
    if kind == S:
        return text
    if kind == I:
        return int(text)
    if kind == F:
        v = float(text)
        if not math.isfinite(v):
            raise ValueError("not finite")
        return v
    if kind == B:
        if text not in ("true", "false"):
            raise ValueError("not true/false")
        return text == "true"
    raise ValueError(kind)


class CsvTable:
    def __init__(self, name: str, path: str, rel: str, rows: list[dict], lines: list[int]):
        self.name, self.path, self.rel, self.rows, self.lines = name, path, rel, rows, lines

    def where(self, i: int, col: str | None = None) -> str:
        r = self.rows[i]
        keys = [
            k
            for k in (
                "campaign",
                "family",
                "task_id",
                "arm",
                "numerator",
                "denominator",
                "path",
                "comparison",
                "session",
                "mask",
                "stage",
                "layer",
                "phase",
                "q",
                "layout",
                "fixture",
                "node",
                "call",
            )
            if k in r
        ]
        key = " ".join(f"{k}={r[k]}" for k in keys[:6])
        return f"{self.rel}:{self.lines[i]} [{key}]" + (f" column {col}" if col else "")


def read_csv_table(c: Checker, name: str, path: str, rel: str, cols: dict | None = None) -> CsvTable | None:
    cols = cols or COLUMNS[name]
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rd = csv.reader(f)
            header = next(rd, None)
            if header is None:
                c.unread(rel, "empty file")
                return None
            missing = [k for k in cols if k not in header]
            if missing:
                c.unread(rel, f"missing column(s) {missing}")
                return None
            idx = {k: header.index(k) for k in cols}
            rows, lines = [], []
            for raw in rd:
                line = rd.line_num
                if len(raw) != len(header):
                    c.unread(f"{rel}:{line}", f"{len(raw)} cells, header has {len(header)}")
                    continue
                row = {}
                for k, kind in cols.items():
                    try:
                        row[k] = parse_value(kind, raw[idx[k]])
                    except ValueError as e:
                        c.unread(f"{rel}:{line} column {k}", f"cannot read {raw[idx[k]]!r} ({e})")
                        row[k] = None
                rows.append(row)
                lines.append(line)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        c.unread(rel, f"cannot read ({e})")
        return None
    return CsvTable(name, path, rel, rows, lines)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def endpoint_digest(tokens, eog, stop) -> str:
    toks = [int(t) for t in tokens]
    return hashlib.sha256(
        canonical(
            {
                "eog": bool(eog),
                "last_token": toks[-1] if toks else None,
                "n": len(toks),
                "stop_reason": stop,
                "tokens": toks,
            }
        )
    ).hexdigest()


# =========================================================================== statistics (DESIGN.md section 5)


def mean(xs) -> float:
    xs = list(xs)
    return math.fsum(xs) / len(xs)


def mean_log(ts) -> float:
    return mean(math.log(t) for t in ts)


def paired(num: dict, den: dict, tasks) -> tuple[float, dict, list]:
    """(D = mean_t d(t), {t: d(t)}, regressed tasks) with d(t) = mean log num - mean log den."""
    d = {t: mean_log(num[t]) - mean_log(den[t]) for t in sorted(tasks)}
    return mean(d.values()), d, [t for t in d if d[t] < 0]


def percentile(sorted_vals: list, p: float) -> float:
    n = len(sorted_vals)
    h = (n - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return sorted_vals[lo] + (h - lo) * (sorted_vals[hi] - sorted_vals[lo])


def bootstrap(c: list, draws: int, seed: int, percentiles=(2.5, 97.5)) -> list:
    rng = random.Random(seed)
    n = len(c)
    means = []
    for _ in range(draws):
        s = 0.0
        for _j in range(n):
            s += c[rng.randrange(n)]
        means.append(s / n)
    means.sort()
    return [math.exp(percentile(means, p)) for p in percentiles]


def decide(lo: float, hi: float, thr: float, n_sessions: int | None = None) -> str:
    if n_sessions is not None and n_sessions < MIN_SESSIONS:
        return "too_few_sessions"
    return "exceeds" if lo > thr else "below" if hi < thr else "inconclusive"


def noise_verdict(lo: float, hi: float, thr: float) -> str:
    """The A/A control's verdict: ok when lo <= 1 <= hi and hi / lo <= thr, else noise_too_high."""
    return "ok" if lo <= 1.0 <= hi and hi / lo <= thr else "noise_too_high"


def gate(decision: str, noise) -> str:
    """exceeds/below become noise_too_high under an A/A verdict noise_too_high."""
    return "noise_too_high" if noise == "noise_too_high" and decision in ("exceeds", "below") else decision


def median(xs) -> float:
    v = sorted(xs)
    h = len(v) // 2
    return v[h] if len(v) % 2 else (v[h - 1] + v[h]) / 2.0


def diagnostic_label(num_ok: bool, den_ok: bool) -> str:
    if not num_ok and not den_ok:
        return "diagnostic: numerator and denominator not qualified"
    return "diagnostic: numerator not qualified" if not num_ok else "diagnostic: denominator not qualified"


def first_difference(a, a_eog, a_stop, b, b_eog, b_stop):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    if len(a) != len(b) or bool(a_eog) != bool(b_eog) or a_stop != b_stop:
        return n
    return None


# =========================================================================== recomputation


def reference_arms(plan) -> dict:
    """campaign -> its reference arm, as frozen in plan.json (a campaign plan's ``definition.reference``;
    refspec's R when the campaign names none or the plan is absent)."""
    out = {}
    camps = plan.get("campaigns") if isinstance(plan, dict) and isinstance(plan.get("campaigns"), dict) else {}
    for p in list(camps.values()) + ([plan] if isinstance(plan, dict) else []):
        if isinstance(p, dict) and isinstance(p.get("campaign"), str):
            defn = p.get("definition") if isinstance(p.get("definition"), dict) else {}
            ref = defn.get("reference")
            out.setdefault(p["campaign"], ref if isinstance(ref, str) and ref else REFERENCE_ARM)
    return out


def recompute_qualification(requests: list, endpoints: list, references: dict | None = None) -> dict:
    """(campaign, family, task, cap, arm) -> recomputed qualification facts; ``references`` maps a
    campaign to its reference arm (:func:`reference_arms`; R when absent)."""
    references = references or {}
    required = defaultdict(set)
    for r in requests:
        if r["status"] != "excluded_warmup":
            required[(r["campaign"], r["family"], r["task_id"], r["cap"], r["arm"])].add((r["session"], r["repeat"]))
    by_arm = defaultdict(list)
    for e in endpoints:
        by_arm[(e["campaign"], e["family"], e["task_id"], e["cap"], e["arm"])].append(e)
    for v in by_arm.values():
        v.sort(key=lambda e: (e["session"], e["repeat"]))
    keys = set(required) | set(by_arm)
    out = {}
    for k in keys:
        g = k[:4]
        refs = by_arm.get(g + (references.get(g[0], REFERENCE_ARM),), [])
        ref = refs[0] if refs else None
        ref_sha = ref["endpoint_sha256"] if ref else None
        stable = len({e["endpoint_sha256"] for e in refs}) == 1
        eps = by_arm.get(k, [])
        need = required.get(k, set()) | {(e["session"], e["repeat"]) for e in eps}
        n_match = sum(1 for e in eps if ref_sha is not None and e["endpoint_sha256"] == ref_sha)
        fd = rt = at = None
        if ref is not None:
            best = None
            for e in eps:
                if e["endpoint_sha256"] == ref_sha:
                    continue
                i = first_difference(
                    ref["tokens"], ref["eog"], ref["stop_reason"], e["tokens"], e["eog"], e["stop_reason"]
                )
                if i is None:
                    i = len(ref["tokens"])
                if best is None or i < best[0]:
                    best = (i, e)
            if best is not None:
                fd = best[0]
                rt = ref["tokens"][fd] if fd < len(ref["tokens"]) else None
                at = best[1]["tokens"][fd] if fd < len(best[1]["tokens"]) else None
        out[k] = dict(
            n_required=len(need),
            n_requests=len(eps),
            n_matching=n_match,
            qualified=stable and len(need) > 0 and n_match == len(need),
            ref_endpoint_sha256=ref_sha,
            first_diff_index=fd,
            ref_token=rt,
            arm_token=at,
            ref_stable=stable,
        )
    return out


def panels(qual: dict, campaign: str) -> dict:
    """(family, cap) -> task -> arm -> qualified."""
    out = defaultdict(lambda: defaultdict(dict))
    for (camp, fam, task, cap, arm), q in qual.items():
        if camp == campaign:
            out[(fam, cap)][task][arm] = q["qualified"]
    return out


def all_qualified(panel: dict, arms) -> bool:
    return all(panel[t].get(a, False) for a in arms for t in panel)


# =========================================================================== the check


def find_report(archive: str) -> tuple[str, str]:
    for d in (archive, os.path.join(archive, "report")):
        h, n = os.path.join(d, "report.html"), os.path.join(d, "numbers.json")
        if os.path.isfile(h) and os.path.isfile(n):
            return h, n
    raise Unreadable(f"{archive}: no report.html with numbers.json (looked in the archive and in report/)")


# =========================================================================== the report's strict HTML subset (anc/report.md)

# Elements and their attributes: exactly what the renderer writes. Anything else (another element,
# attribute or value, an inline ``style``, ``hidden``, an event handler, a comment, a second
# stylesheet) is refused with its line.
_NUM_ATTRS = frozenset({"data-num", "data-src"})
HTML_ELEMENTS = {
    "html": {"lang"},
    "head": set(),
    "meta": {"charset", "name", "content"},
    "title": set(),
    "style": set(),
    "body": set(),
    "main": set(),
    "nav": set(),
    "section": {"id"},
    "h1": set(),
    "h2": set(),
    "h3": {"id"},
    "p": {"class"},
    "code": set(),
    "a": {"href", "data-src"},
    "div": {"class"},
    "table": {"data-table", "data-src"},
    "thead": set(),
    "tbody": set(),
    "tr": set(),
    "th": {"scope", "class"},
    "td": {"class", "title"},
    "span": set(_NUM_ATTRS),
    "figure": {"id"},
    "figcaption": set(),
    "footer": set(),
}
SVG_ELEMENTS = {
    "svg": {"xmlns", "viewbox", "role", "aria-label", "class"},
    "title": set(),
    "line": {"x1", "y1", "x2", "y2", "stroke", "stroke-width", "stroke-dasharray"},
    "rect": {"x", "y", "width", "height", "fill"},
    "circle": {"cx", "cy", "r", "fill"},
    "text": {"x", "y", "text-anchor", "font-size", "fill"},
}
VOID_ELEMENTS = {"meta"}
SVG_LEAVES = {"line", "rect", "circle"}
# the colours of the figures (svg.py's palette)
SVG_COLOURS = {
    "#7a4e9c",
    "#2c6db0",
    "#d2691e",
    "#6a8a3a",
    "#7f7f7f",
    "#b22222",
    "#d9d9d9",
    "#333333",
    "#4a7fb5",
    "#222",
}
_DECIMAL = r"-?\d+(?:\.\d+)?"
ATTR_VALUES = {
    "lang": re.compile(r"en"),
    "charset": re.compile(r"utf-8"),
    "scope": re.compile(r"col"),
    "class": re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?: [A-Za-z_][A-Za-z0-9_-]*)*"),
    "id": re.compile(r"[A-Za-z][A-Za-z0-9_-]*"),
    "data-table": re.compile(r"[A-Za-z][A-Za-z0-9_-]*"),
    "xmlns": re.compile(r"http://www\.w3\.org/2000/svg"),
    "viewbox": re.compile(r"0 0 \d+ \d+"),
    "role": re.compile(r"img"),
    "text-anchor": re.compile(r"start|middle|end"),
    "font-size": re.compile(r"\d+"),
    "stroke-dasharray": re.compile(r"4 3"),
    **{k: re.compile(_DECIMAL) for k in ("x", "y", "x1", "y1", "x2", "y2", "width", "height", "cx", "cy", "r")},
    "stroke-width": re.compile(_DECIMAL),
}
# the two meta elements the renderer writes (no refresh, no other http-equiv)
META_ALLOWED = ({"charset": "utf-8"}, {"name": "viewport", "content": "width=device-width, initial-scale=1"})
# sha256 of the one stylesheet (the <style> element of report/templates/report.html.j2); a report
# with any other CSS is refused (tests/test_report_strict.py keeps the two in step)
STYLESHEET_SHA256 = "040b07b2b2be422ab3b84cb66bab81f860cc1594ecc0aeaa3812072b2c304d0a"
# Digits in visible text outside a checked number (data-num) are refused unless the word holding
# them is one of these labels, or a name the archive's own tables hold (see visible_digit_problem).
LABEL_RE = re.compile(
    r"(?:E[12]|S\d+(?:\.\d+)?(?:-S\d+)?|§\d+(?:\.\d+)*"  # experiment, table and section labels
    r"|FP64|F16|F32|sha256|SHA-256|Ed25519|UTF-8"  # formats named in the text
    r"|U1|Sn-1|layer-0"  # the state study's arm names and its first layer
    r"|95%|2\.5/97\.5)"  # the level of the bootstrap interval
)
# integer columns whose values are row keys or identifiers a table shows as text (a cap, a mask, a
# layer, a token id, the attention shape of a family ...)
KEY_COLUMNS = (
    "cap",
    "mask",
    "layer",
    "q",
    "k",
    "ub",
    "n_kv",
    "repeat",
    "argmax",
    "token_a",
    "token_b",
    "n_head",
    "n_head_kv",
    "head_dim",
)
_WORD_STRIP = "()[]{},;:.!?'\"“”‘’"


class StrictHTML(HTMLParser):
    """Parse report.html against the subset, recording problems (line, what), the checked numbers
    (``nums``), the links, ids, the stylesheet and the visible text outside checked numbers."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems: list[tuple[int, str]] = []
        self.nums: list[tuple[str, str, str | None, int]] = []  # id, text, data-src, line
        self.table_of: list[str | None] = []
        self.links: list[tuple[str, str, int]] = []
        self.ids: dict[str, int] = {}
        self.hrefs: list[tuple[str, int]] = []
        self.styles: list[str] = []
        # visible text outside checked numbers, one entry per run of text between tags (a checked
        # number inside the run reads as "#"): (text, line, context)
        self.text: list[tuple[str, int, str]] = []
        self._run: list[str] = []
        self._run_at: tuple[int, str] = (0, "")
        self.stack: list[tuple[str, int]] = []
        self._table: str | None = None
        self._num: tuple | None = None
        self._buf: list[str] = []
        self._seen_doctype = False

    def bad(self, msg: str) -> None:
        self.problems.append((self.getpos()[0], msg))

    def _in(self, tag: str) -> bool:
        return any(t == tag for t, _l in self.stack)

    def handle_decl(self, decl):
        if decl.lower() != "doctype html" or self._seen_doctype or self.stack:
            self.bad(f"declaration <!{decl}> (only <!DOCTYPE html>, first)")
        self._seen_doctype = True

    def unknown_decl(self, data):
        self.bad(f"declaration <![{data[:30]}...]> is not in the report format")

    def handle_pi(self, data):
        self.bad("processing instruction is not in the report format")

    def handle_comment(self, data):
        self.bad("comment is not in the report format")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs, closed=True)

    def _flush(self) -> None:
        if self._run:
            self.text.append(("".join(self._run), *self._run_at))
            self._run = []

    def handle_starttag(self, tag, attrs, closed=False):
        line = self.getpos()[0]
        if not any(k == "data-num" for k, _v in attrs):
            self._flush()
        if not self._seen_doctype:
            self.bad("no <!DOCTYPE html> before the first element")
            self._seen_doctype = True
        if self._num is not None:
            self.bad(f"<{tag}> inside a checked number (data-num {self._num[0]!r}): a number has no nested element")
        in_svg = self._in("svg")
        allowed = SVG_ELEMENTS if (in_svg or tag == "svg") else HTML_ELEMENTS
        if tag == "title" and not in_svg and not (self.stack and self.stack[-1][0] == "head"):
            allowed = {}
        if tag not in allowed:
            self.bad(f"element <{tag}> is not in the report format")
        names = [k for k, _v in attrs]
        if len(set(names)) != len(names):
            self.bad(f"<{tag}> repeats an attribute")
        a = dict(attrs)
        for k, v in attrs:
            if k not in allowed.get(tag, ()):
                self.bad(f"attribute {k}= on <{tag}> is not in the report format")
                continue
            if v is None:
                self.bad(f"attribute {k} on <{tag}> has no value")
                continue
            pat = ATTR_VALUES.get(k)
            if pat is not None and not pat.fullmatch(v):
                self.bad(f"{k}={v[:60]!r} on <{tag}> is not a value of the report format")
            if k in ("fill", "stroke") and v not in SVG_COLOURS:
                self.bad(f"{k}={v[:60]!r} on <{tag}> is not a colour of the figures")
        if tag == "meta" and a not in META_ALLOWED:
            self.bad(f"<meta {' '.join(f'{k}={v!r}' for k, v in attrs)}> is not in the report format")
        if tag == "style" and not (self.stack and self.stack[-1][0] == "head"):
            self.bad("<style> outside <head>")
        if "id" in a and a["id"] is not None:
            if a["id"] in self.ids:
                self.bad(f"duplicate id {a['id']!r} (first on line {self.ids[a['id']]})")
            else:
                self.ids[a["id"]] = line
        for k in ("href", "src", "data-src"):
            if a.get(k) is not None:
                self.links.append((k, a[k], line))
        if tag == "a" and a.get("href") is not None:
            self.hrefs.append((a["href"], line))
        if tag == "table":
            self._table = a.get("data-table")
        if "data-num" in a:
            if tag != "span" or set(a) != _NUM_ATTRS:
                self.bad(f"a checked number is a <span> with data-num and data-src only, not <{tag} {sorted(a)}>")
            if not self._in("td") and not self._in("p"):
                self.bad(f"checked number {a['data-num']!r} outside a table cell or paragraph")
            self._num = (a["data-num"], a.get("data-src"), line)
            self._buf = []
        elif tag == "span":
            self.bad("<span> without data-num")
        if closed or tag in VOID_ELEMENTS:
            if tag not in VOID_ELEMENTS and tag not in SVG_LEAVES:
                self.bad(f"<{tag}/> self-closed")
            if tag == "span" and self._num is not None:
                self.handle_endtag("span")
            return
        if tag in SVG_LEAVES:
            self.bad(f"<{tag}> must be self-closed")
        self.stack.append((tag, line))

    def handle_endtag(self, tag):
        if not (tag == "span" and self._num is not None):
            self._flush()
        if tag in VOID_ELEMENTS or (tag in SVG_LEAVES and not (self.stack and self.stack[-1][0] == tag)):
            self.bad(f"end tag </{tag}> of an element that has none")
            return
        if not self.stack or self.stack[-1][0] != tag:
            open_ = self.stack[-1][0] if self.stack else "nothing"
            self.bad(f"</{tag}> closes <{open_}> (elements nest strictly in the report format)")
            if any(t == tag for t, _l in self.stack):
                while self.stack and self.stack[-1][0] != tag:
                    self.stack.pop()
            else:
                return
        self.stack.pop()
        if tag == "span" and self._num is not None:
            nid, src, line = self._num
            text = "".join(self._buf)
            if text != text.strip() or not text:
                self.problems.append((line, f"checked number {nid!r} has surrounding space or no text"))
            self.nums.append((nid, text.strip(), src, line))
            if not self._run:
                self._run_at = (line, self.stack[-1][0] if self.stack else "")
            self._run.append("#")
            self.table_of.append(self._table)
            self._num = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._num is not None:
            self._buf.append(data)
            return
        if self.stack and self.stack[-1][0] == "style":
            self.styles.append(data)
            return
        if data.strip():
            if not self.stack or self.stack[-1][0] in ("html", "head", "tr", "thead", "tbody", "table", "svg"):
                self.bad(f"text {data.strip()[:40]!r} where the report format has none")
        if not self._run:
            ctx = "svg" if self._in("svg") else self.stack[-1][0] if self.stack else ""
            self._run_at = (self.getpos()[0], ctx)
        self._run.append(data)

    def close(self):
        super().close()
        self._flush()
        for tag, line in self.stack:
            self.problems.append((line, f"<{tag}> is never closed"))
        if self._num is not None:
            self.problems.append((self._num[2], f"checked number {self._num[0]!r} is never closed"))


# =========================================================================== the report's strict LaTeX subset (anc/report.md)

# sha256 of report.tex up to and including its "\begin{document}" line: the renderer's preamble
# (its packages, the figures' colours and the one macro \rsnum). Any other preamble (\rsnum
# redefined, a \catcode, \input, another package) is refused; tests/test_report_strict.py keeps
# this equal to the template's.
TEX_PREAMBLE_SHA256 = "2a9a8944e891c09edb3581f723aa254cf4cb659ca6e6a72dc451025659b48f6a"
TEX_BEGIN, TEX_END = "\\begin{document}", "\\end{document}"
# control words of the body (sectioning, sizes, tables, the note box); every other control word
# (\input, \include, \write, \immediate, \openin, \def, \let, \newcommand, \catcode, \csname,
# \url, \includegraphics, \special, \color, \phantom, ...) is refused with its line
TEX_WORDS = frozenset(
    {
        "maketitle",
        "section",
        "subsection",
        "footnotesize",
        "scriptsize",
        "small",
        "texttt",
        "toprule",
        "midrule",
        "bottomrule",
        "endhead",
        "raggedright",
        "fbox",
    }
)
# the text macros of the escaping (refspec.report.tex.tex_escape), each written with "{}"
TEX_TEXT_MACROS = {
    "textbackslash": "\\",
    "textasciicircum": "^",
    "textasciitilde": "~",
    "textless": "<",
    "textgreater": ">",
    "textbar": "|",
    "textquotedbl": '"',
    "textperiodcentered": "\u00b7",
    "S": "\u00a7",
}
TEX_SYMBOLS = {"{": "{", "}": "}", "$": "$", "&": "&", "#": "#", "%": "%", "_": "_"}
TEX_MATH = {"$\\times$": "\u00d7", "$\\le$": "\u2264", "$\\ge$": "\u2265"}
TEX_ENVS = ("longtable", "center", "tikzpicture")
_TEX_WORD_RE = re.compile(r"\\([A-Za-z]+)")
_TEX_ENV_RE = re.compile(r"\\(begin|end)\{([A-Za-z*]*)\}")
# \rsnum{ID}{TEXT}: ID in the characters refspec.report.tex.tex_id writes (others as !HEX;)
_TEX_NUM_RE = re.compile(r"\\rsnum\{([A-Za-z0-9 ._:/+=,|@!;-]*)\}\{([^{}\\]*)\}")
_TEX_ID_ESC_RE = re.compile(r"!([0-9a-f]{1,6});")
# the renderer's box widths: table cells (4.2cm, 11cm) and the note box
_TEX_PARBOX_RE = re.compile(r"\\parbox(?:\[t\]\{(?:4\.2|11)cm\}|\{0\.95\\linewidth\})")
_TEX_COLSPEC_RE = re.compile(r"\\begin\{longtable\}\{[lr]+\}")
# the figures (refspec.report.svg.Canvas.to_tikz): one drawing command per line, numeric coordinates
# inside the picture's bounding box, colours of the palette, nothing else
_TN = r"(-?\d+\.\d{3})"
_TCOL = r"rs(?:diag|target|spec|mixed|ref|thr|grid|axis|fail|bar)"
TIKZ_BEGIN = "\\begin{tikzpicture}[font=\\sffamily]"
TIKZ_RES = (
    re.compile(rf"\\useasboundingbox \(0,0\) rectangle \({_TN},{_TN}\);"),
    re.compile(rf"\\draw\[draw={_TCOL},line width=\d+\.\d\dpt(?:,dashed)?\] \({_TN},{_TN}\) -- \({_TN},{_TN}\);"),
    re.compile(rf"\\fill\[{_TCOL}\] \({_TN},{_TN}\) rectangle \({_TN},{_TN}\);"),
    re.compile(rf"\\fill\[{_TCOL}\] \({_TN},{_TN}\) circle \((\d+\.\d{{3}})\);"),
    re.compile(
        r"\\node\[anchor=(?:base west|base|base east),inner sep=0pt,scale=(?:0\.\d{3}|1\.000)\] "
        rf"at \({_TN},{_TN}\) \{{\\(?:scriptsize|footnotesize) (.*)\}};"
    ),
)


def tex_id_decode(s: str) -> str:
    """The number id written by refspec.report.tex.tex_id (``!HEX;`` for other characters)."""
    return _TEX_ID_ESC_RE.sub(lambda m: chr(int(m.group(1), 16)), s)


class StrictTeX:
    """Parse report.tex against the report's LaTeX subset, recording problems (line, what), the
    checked numbers ``\\rsnum{ID}{TEXT}`` (``nums``), the visible text of each line outside checked
    numbers (a checked number stands there as ``#``) and the text of the figures' labels."""

    def __init__(self, text: str):
        self.problems: list[tuple[int, str]] = []
        self.nums: list[tuple[str, str, int]] = []  # id, text, line
        self.text: list[tuple[str, int]] = []  # visible text outside the figures, per line
        self.figure_text: list[tuple[str, int]] = []
        self.envs: list[tuple[str, int]] = []
        self.depth = 0
        self.parse(text)

    def bad(self, line: int, msg: str) -> None:
        self.problems.append((line, msg))

    def parse(self, text: str) -> None:
        lines = text.split("\n")
        try:
            start = lines.index(TEX_BEGIN)
        except ValueError:
            self.bad(1, f"no {TEX_BEGIN} line")
            return
        pre = "\n".join(lines[: start + 1]) + "\n"
        if hashlib.sha256(pre.encode("utf-8")).hexdigest() != TEX_PREAMBLE_SHA256:
            self.bad(1, "the preamble is not the report format's (sha256 differs from TEX_PREAMBLE_SHA256)")
        body = lines[start + 1 :]
        while body and body[-1] == "":
            body.pop()
        if not body or body[-1] != TEX_END:
            self.bad(start + 1 + len(body), f"the document does not end with {TEX_END} on the last line")
        else:
            body.pop()
        box = None  # the figure being read: its bounding box (width, height), or () before it is known
        for i, line in enumerate(body):
            no = start + 2 + i
            if box is not None:
                if line == "\\end{tikzpicture}":
                    box = None
                    continue
                box = self.tikz_line(line, no, box)
                continue
            if line == TIKZ_BEGIN:
                box = ()
                continue
            vis = self.scan(line, no)
            self.text.append(("".join(vis), no))
        if box is not None:
            self.bad(start + 1 + len(body), "a figure is never closed")
        for env, no in self.envs:
            self.bad(no, f"\\begin{{{env}}} is never closed")
        if self.depth:
            self.bad(start + 1 + len(body), f"{self.depth} unclosed brace(s)")

    def tikz_line(self, line: str, no: int, box: tuple) -> tuple:
        for k, pat in enumerate(TIKZ_RES):
            m = pat.fullmatch(line)
            if m is None:
                continue
            vals = [float(v) for v in m.groups()[: (4 if k in (1, 2) else 3 if k == 3 else 2)]]
            if k == 0:
                if box != ():
                    self.bad(no, "a second bounding box in one figure")
                return (vals[0], vals[1])
            if box == ():
                self.bad(no, "a figure draws before its bounding box")
                return box
            w, h = box
            xs, ys = vals[0::2], vals[1::2]
            if k == 3:
                xs, ys = [vals[0]], [vals[1]]
            if any(not (-0.001 <= x <= w + 0.001) for x in xs) or any(not (-0.001 <= y <= h + 0.001) for y in ys):
                self.bad(no, "a figure draws outside its bounding box")
            if k == 4:
                vis = self.scan(m.group(3), no, label=True)
                self.figure_text.append(("".join(vis), no))
            return box
        self.bad(no, f"figure line {line[:60]!r} is not in the report format")
        return box

    def scan(self, line: str, no: int, label: bool = False) -> list[str]:
        """The visible text of one line (a checked number as ``#``), recording what is outside the
        subset; ``label``: a figure's label (text and the escaping's macros only)."""
        vis: list[str] = []
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            if ch == "\\":
                m = _TEX_WORD_RE.match(line, i)
                if m is None:
                    sym = line[i + 1 : i + 2]
                    if sym == "\\" and not label:
                        rest = line[i + 2 :].lstrip(" ")
                        if rest[:1] in ("[", "*"):
                            self.bad(no, "\\\\ with an argument is not in the report format")
                        vis.append(" ")
                    elif sym in TEX_SYMBOLS:
                        vis.append(TEX_SYMBOLS[sym])
                    else:
                        self.bad(no, f"control symbol \\{sym} is not in the report format")
                    i += 2
                    continue
                word = m.group(1)
                if word in TEX_TEXT_MACROS:
                    if line[m.end() : m.end() + 2] != "{}":
                        self.bad(no, f"\\{word} without its {{}}")
                        i = m.end()
                    else:
                        i = m.end() + 2
                    vis.append(TEX_TEXT_MACROS[word])
                    continue
                if label:
                    self.bad(no, f"control sequence \\{word} in a figure label")
                    i = m.end()
                    continue
                if word == "rsnum":
                    mm = _TEX_NUM_RE.match(line, i)
                    if mm is None:
                        self.bad(no, "\\rsnum not of the form \\rsnum{ID}{NUMBER}")
                        i = m.end()
                        continue
                    self.nums.append((tex_id_decode(mm.group(1)), mm.group(2), no))
                    vis.append("#")
                    i = mm.end()
                    continue
                if word == "parbox":
                    mm = _TEX_PARBOX_RE.match(line, i)
                    if mm is None:
                        self.bad(no, "\\parbox of a width the report format does not use")
                        i = m.end()
                    else:
                        i = mm.end()
                    vis.append(" ")
                    continue
                if word in ("begin", "end"):
                    i = self.env(line, i, no)
                    vis.append(" ")
                    continue
                if word in TEX_WORDS:
                    i = m.end()
                    if word in ("section", "subsection") and line[i : i + 1] == "*":
                        i += 1
                    vis.append(" ")
                    continue
                self.bad(no, f"control sequence \\{word} is not in the report format")
                i = m.end()
                continue
            if ch == "$":
                for k, v in TEX_MATH.items():
                    if line.startswith(k, i):
                        vis.append(v)
                        i += len(k)
                        break
                else:
                    self.bad(no, "math mode other than $\\times$, $\\le$, $\\ge$")
                    i += 1
                continue
            if ch in "{}":
                if label:
                    self.bad(no, "a brace in a figure label")
                elif ch == "{":
                    self.depth += 1
                elif self.depth == 0:
                    self.bad(no, "a closing brace without its opening one")
                else:
                    self.depth -= 1
                i += 1
                continue
            if ch in "%#^_~" or (ch == "&" and label):
                what = {"%": "a comment", "#": "a macro parameter", "~": "an active character"}.get(ch, "math")
                self.bad(no, f"character {ch!r} ({what}) is not in the report format")
            elif ch == "&":
                vis.append(" ")
            elif ord(ch) < 32 or ord(ch) > 126:
                self.bad(no, f"character {ch!r} (the report's LaTeX is printable ASCII)")
            else:
                vis.append(ch)
            i += 1
        return vis

    def env(self, line: str, i: int, no: int) -> int:
        m = _TEX_ENV_RE.match(line, i)
        if m is None or m.group(2) not in TEX_ENVS:
            self.bad(no, f"environment {line[i : i + 30]!r}... is not in the report format")
            return i + 6
        kind, env = m.groups()
        if kind == "begin":
            if env == "tikzpicture":
                self.bad(no, f"a figure starts on its own line: {TIKZ_BEGIN}")
            if env == "longtable":
                mm = _TEX_COLSPEC_RE.match(line, i)
                if mm is None:
                    self.bad(no, "longtable columns other than l and r")
                    return m.end()
                self.envs.append((env, no))
                return mm.end()
            self.envs.append((env, no))
            return m.end()
        if not self.envs or self.envs[-1][0] != env:
            self.bad(no, f"\\end{{{env}}} closes {self.envs[-1][0] if self.envs else 'nothing'}")
        else:
            self.envs.pop()
        return m.end()


_NUM_RE = re.compile(r"^(-?)(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$")


def displayed_matches(text: str, value) -> bool:
    """Whether ``text`` is ``value`` rounded to the digits shown."""
    m = _NUM_RE.match(text)
    if not m:
        return False
    shown = float(text)
    decimals = len(m.group(3) or "")
    exp = int(m.group(4) or 0)
    if isinstance(value, int) and not isinstance(value, bool) and not m.group(3) and not m.group(4):
        return int(text) == value
    half = 0.5 * 10.0 ** (exp - decimals)
    return abs(shown - float(value)) <= half * (1 + 1e-9) + REL_TOL * max(1.0, abs(float(value)))


class Expected:
    """The numbers the report must show, as recomputed here."""

    def __init__(self, c: Checker):
        self.c = c
        self.items: dict[str, tuple] = {}  # id -> (value, source)

    def add(self, parts, value, source: str):
        nid = "|".join(str(p) for p in parts)
        if isinstance(value, bool):
            value = int(value)
        self.c.recomputed += 1
        old = self.items.get(nid)
        if old is not None and not values_equal(old[0], value):
            self.c.bad("check", f"number {nid} recomputed with two values {fmt(old[0])} and {fmt(value)}")
        self.items[nid] = (value, source)


def posix_rel(path: str, start: str) -> str:
    """``path`` relative to ``start``, with ``/`` separators."""
    return os.path.relpath(path, start).replace(os.sep, "/")


class Report:
    """The rendered report of an archive: numbers.json, report.html (parsed) and the folder holding them."""

    def __init__(
        self, archive: str, html_path: str, numbers_path: str, numbers_doc: dict, html_text: str, hp: StrictHTML
    ):
        self.html_path, self.numbers_path = html_path, numbers_path
        self.numbers_doc, self.html_text, self.hp = numbers_doc, html_text, hp
        self.dir = os.path.dirname(html_path)
        self.html_rel = posix_rel(html_path, archive)
        self.tex: StrictTeX | None = None  # report.tex beside report.html, parsed, when present
        self.tex_rel = posix_rel(os.path.join(self.dir, "report.tex"), archive)


def read_report(c: Checker) -> Report | None:
    """numbers.json and report.html of the archive, or None (recorded as unreadable) when either cannot be read."""
    try:
        html_path, numbers_path = find_report(c.archive)
    except Unreadable as e:
        c.unread("archive", str(e))
        return None
    try:
        with open(numbers_path, encoding="utf-8") as f:
            numbers_doc = json.load(f)
        if not isinstance(numbers_doc, dict) or not isinstance(numbers_doc.get("numbers"), list):
            raise ValueError("no 'numbers' list")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
        c.unread(posix_rel(numbers_path, c.archive), f"not a numbers document ({e})")
        return None
    try:
        with open(html_path, encoding="utf-8") as f:
            html_text = f.read()
        hp = StrictHTML()
        hp.feed(html_text)
        hp.close()
    except (OSError, UnicodeDecodeError) as e:
        c.unread(posix_rel(html_path, c.archive), f"cannot read ({e})")
        return None
    rep = Report(c.archive, html_path, numbers_path, numbers_doc, html_text, hp)
    tex_path = os.path.join(rep.dir, "report.tex")
    if os.path.isfile(tex_path):
        try:
            with open(tex_path, encoding="utf-8") as f:
                rep.tex = StrictTeX(f.read())
        except (OSError, UnicodeDecodeError) as e:
            c.unread(rep.tex_rel, f"cannot read ({e})")
            return None
    return rep


def read_tables(c: Checker) -> dict[str, CsvTable]:
    """Every table of ``TABLE_NAMES`` found in the archive or its ``tables/`` folder, by name."""
    tables: dict[str, CsvTable] = {}
    for name in TABLE_NAMES:
        for d in (c.archive, os.path.join(c.archive, "tables")):
            p = os.path.join(d, name + ".csv")
            if os.path.isfile(p):
                t = read_csv_table(c, name, p, posix_rel(p, c.archive))
                if t is not None:
                    tables[name] = t
                break
    c.files.update(t.path for t in tables.values())
    c.tables = tables
    return tables


def read_plan(c: Checker):
    """The archive's plan.json, or None when absent or not JSON (recorded as unreadable)."""
    plan = None
    plan_path = os.path.join(c.archive, "plan.json")
    if os.path.isfile(plan_path):
        try:
            with open(plan_path, encoding="utf-8") as f:
                plan = json.load(f)
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
            c.unread("plan.json", f"not JSON ({e})")
    return plan


def arm_facts(reqs: list) -> dict:
    """(campaign, family, arm) -> (mode, layout) of the arm's first row in requests.csv."""
    facts = {}
    for r in reqs:
        facts.setdefault((r["campaign"], r["family"], r["arm"]), (r["mode"], r["layout"]))
    return facts


def check(archive: str, quiet: bool = False, unsealed: bool = False, trust: Trust | None = None) -> tuple[int, Checker]:
    """Recompute every section of the archive's report from its tables; (exit status, Checker)."""
    c = Checker(archive, quiet)
    trust = trust or Trust()
    if not os.path.isdir(archive):
        c.unread(archive, "not a directory")
        return EXIT_UNREADABLE, c
    check_tree(c)
    rep = read_report(c)
    if rep is None:
        return EXIT_UNREADABLE, c
    if rep.numbers_doc.get("format") == COMPARISON_FORMAT:
        return check_comparison(c, rep, unsealed, trust)  # a comparison archive (refspec compare)
    tables = read_tables(c)
    plan = read_plan(c)

    def src(name: str) -> str:
        return posix_rel(tables[name].path, rep.dir)

    E = Expected(c)
    reqs = tables["requests"].rows if "requests" in tables else []
    facts = arm_facts(reqs)
    check_endpoints(c, tables)
    qual = check_qualification(c, E, tables, src, reference_arms(plan))
    check_ratios(c, E, tables, src, qual, facts)
    check_diagnostics(c, E, tables, src, qual, facts)
    check_qualified_ratios(c, tables)
    noise = check_noise(c, E, tables, src, qual, bootstrap_parameters(plan))
    est_dec = check_replication(c, E, tables, src, qual, facts, bootstrap_parameters(plan), noise)
    check_loads(c, E, tables, src)
    check_sessions(c, E, tables, src)
    check_phase_masks(c, E, tables, src, qual)
    check_prediction(c, E, tables, src, plan)
    check_replay(c, E, tables, src)
    check_audit(c, E, tables, src)
    check_requests(c, E, tables, src)
    check_ledger(c, E, rep)
    check_state(c, E, tables, src)  # partition, KV, crosses, frontier, admission, claims
    stated = check_numbers(c, E, rep)
    check_html(c, E, rep, stated)
    check_tex(c, E, rep, stated)
    prov = check_provenance(c, rep)
    head = check_headline(c, E, rep, stated, est_dec)
    check_data_seal(c, rep, prov, head)
    sp = os.path.join(c.archive, "SEAL.dsse.json")
    if os.path.isfile(sp):
        check_seal(c, sp, trust)
    elif not unsealed:
        c.bad(
            "SEAL.dsse.json",
            "missing: the archive is not sealed (pass --unsealed to check a results folder before sealing)",
        )
    return (EXIT_UNREADABLE if c.unreadable else EXIT_MISMATCH if c.problems else EXIT_OK), c


# =========================================================================== result sections


def check_endpoints(c: Checker, tables: dict) -> None:
    """Endpoint digests and the one-to-one match of endpoints with ok requests.

    endpoint_sha256 = sha256 of the canonical JSON {eog, last_token, n, stop_reason, tokens};
    n = len(tokens), last_token = tokens[-1] (null when empty); each ok request has exactly one
    endpoints.csv row with the same digest, and each endpoint row has an ok request."""
    if "endpoints" not in tables:
        return
    t = tables["endpoints"]
    for i, e in enumerate(t.rows):
        if e["tokens"] is None:
            continue
        c.recomputed += 3
        c.same(
            t.where(i, "endpoint_sha256"),
            e["endpoint_sha256"],
            endpoint_digest(e["tokens"], e["eog"], e["stop_reason"]),
        )
        c.same(t.where(i, "n"), e["n"], len(e["tokens"]))
        c.same(t.where(i, "last_token"), e["last_token"], e["tokens"][-1] if e["tokens"] else None)
    if "requests" not in tables:
        return
    ep_by = {
        (e["campaign"], e["family"], e["task_id"], e["arm"], e["cap"], e["session"], e["repeat"]): e for e in t.rows
    }
    tr = tables["requests"]
    seen = set()
    for i, r in enumerate(tr.rows):
        if r["status"] != "ok":
            continue
        k = (r["campaign"], r["family"], r["task_id"], r["arm"], r["cap"], r["session"], r["repeat"])
        seen.add(k)
        e = ep_by.get(k)
        c.identities += 1
        if e is None:
            c.bad(tr.where(i), "ok request has no row in endpoints.csv")
        else:
            c.same(
                tr.where(i, "endpoint_sha256"),
                r["endpoint_sha256"],
                e["endpoint_sha256"],
                "request digest vs endpoints.csv:",
            )
    for i, e in enumerate(t.rows):
        k = (e["campaign"], e["family"], e["task_id"], e["arm"], e["cap"], e["session"], e["repeat"])
        if k not in seen:
            c.bad(t.where(i), "endpoint without an ok row in requests.csv")


def check_qualification(c: Checker, E: Expected, tables: dict, src, references: dict | None = None) -> dict:
    """Every qualification row and the Table 3 counts; returns (campaign, family, task, cap, arm) -> facts.

    The reference arm of a campaign is the one its frozen plan names (``definition.reference``), else R.
    An arm qualifies on a task when the reference arm's endpoints are all one digest (stable), at least
    one (session, repeat) is required, and all required runs match that digest. For a failed arm the
    first divergence is the smallest first-difference index over its non-matching endpoints. Per
    (campaign, family, arm): matching = sum n_matching <= required = sum n_required, and
    tasks_failed = tasks - qualified tasks. Without requests.csv and endpoints.csv the stated rows
    stand in for the counts."""
    qual: dict = {}
    if "qualification" not in tables:
        return qual
    tq = tables["qualification"]
    if "endpoints" not in tables or "requests" not in tables:
        c.bad(tq.rel, "cannot be recomputed: requests.csv and endpoints.csv are needed")
        for q in tq.rows:  # fall back to the stated values for the aggregates
            qual[(q["campaign"], q["family"], q["task_id"], q["cap"], q["arm"])] = dict(q)
    else:
        qual = recompute_qualification(tables["requests"].rows, tables["endpoints"].rows, references)
        stated_keys = set()
        for i, q in enumerate(tq.rows):
            k = (q["campaign"], q["family"], q["task_id"], q["cap"], q["arm"])
            stated_keys.add(k)
            rq = qual.get(k)
            if rq is None:
                c.bad(tq.where(i), "no requests or endpoints for this row")
                continue
            for col in (
                "n_required",
                "n_requests",
                "n_matching",
                "qualified",
                "ref_endpoint_sha256",
                "first_diff_index",
                "ref_token",
                "arm_token",
                "ref_stable",
            ):
                c.recomputed += 1
                c.same(tq.where(i, col), q[col], rq[col])
            rq["ref_margin"] = q["ref_margin"]
            rq["reason"] = q["reason"]
            c.identities += 1
            if (q["reason"] is None) != bool(q["qualified"]):
                c.bad(tq.where(i, "reason"), "a reason must be given exactly when not qualified")
        for k in sorted(set(qual) - stated_keys):
            c.bad(tq.rel, f"no row for campaign={k[0]} family={k[1]} task={k[2]} cap={k[3]} arm={k[4]}")
            qual.pop(k)
    # Table 3 counts and failed qualifications
    s_q = src("qualification")
    acc = {}
    for (camp, fam, task, cap, arm), q in qual.items():
        a = acc.setdefault((camp, fam, arm), [0, 0, 0, 0])
        a[0] += q["n_matching"]
        a[1] += q["n_required"]
        a[2] += 1
        a[3] += 1 if q["qualified"] else 0
        if not q["qualified"]:
            base = ("qfail", camp, fam, task, arm, cap)
            for col in ("first_diff_index", "ref_token", "arm_token", "ref_margin"):
                if q.get(col) is not None:
                    E.add(base + (col,), q[col], s_q)
    for (camp, fam, arm), (m, r, n, ok) in acc.items():
        E.add(("qual", camp, fam, arm, "matching"), m, s_q)
        E.add(("qual", camp, fam, arm, "required"), r, s_q)
        E.add(("qual", camp, fam, arm, "tasks_failed"), n - ok, s_q)
        c.identities += 1
        if m > r:
            c.bad(s_q, f"{camp} {fam} {arm}: more matching endpoints ({m}) than required ({r})")
    return qual


def check_ratios(c: Checker, E: Expected, tables: dict, src, qual: dict, facts: dict) -> None:
    """Every pairwise qualified ratio, its task regressions, and ratio transitivity.

    On the panel of tasks of (campaign, family, cap), with both arms qualified on every task:
    d(t) = mean_r log t_A(t, r) - mean_r log t_B(t, r), ratio = exp(mean_t d(t)), regressed tasks
    are those with d(t) < 0. path = the arms' common mode, else "mixed". An unqualified comparison
    has no ratio. Identity on the stated values: ratio(A/C) = ratio(A/B) * ratio(B/C) (within 1e-9)."""
    if "ratios" not in tables:
        return
    tr = tables["ratios"]
    s_r = src("ratios")
    times = defaultdict(list)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["status"] == "ok" and r["t_ns"] is not None:
            times[(r["campaign"], r["family"], r["cap"], r["arm"], r["task_id"])].append(float(r["t_ns"]))
    pcache = {}
    for i, row in enumerate(tr.rows):
        camp, fam, cap, a, b = row["campaign"], row["family"], row["cap"], row["numerator"], row["denominator"]
        if camp not in pcache:
            pcache[camp] = panels(qual, camp)
        panel = pcache[camp].get((fam, cap))
        if panel is None:
            c.bad(tr.where(i), "no qualification rows for this campaign, family and cap")
            continue
        tasks = sorted(panel)
        ma, mb = facts.get((camp, fam, a)), facts.get((camp, fam, b))
        if ma is None or mb is None:
            c.bad(tr.where(i), "arm without requests rows")
            continue
        path = ma[0] if ma[0] == mb[0] else "mixed"
        c.same(tr.where(i, "path"), row["path"], path)
        c.same(tr.where(i, "n_tasks"), row["n_tasks"], len(tasks))
        base = ("ratio", camp, fam, cap, a, b)
        E.add(base + ("n_tasks",), len(tasks), s_r)
        q_ok = all_qualified(panel, (a, b))
        c.same(tr.where(i, "qualified"), row["qualified"], q_ok)
        if not q_ok:
            for col in ("ratio", "n_regressions", "regressed_tasks"):
                c.same(tr.where(i, col), row[col], None, "unqualified comparison must have no value:")
            continue
        num = {t: times.get((camp, fam, cap, a, t), []) for t in tasks}
        den = {t: times.get((camp, fam, cap, b, t), []) for t in tasks}
        missing = [t for t in tasks if not num[t] or not den[t]]
        if missing:
            c.bad(tr.where(i), f"qualified but no times for task(s) {missing}")
            continue
        D, _d, reg = paired(num, den, tasks)
        ratio = math.exp(D)
        c.recomputed += 3
        c.same(tr.where(i, "ratio"), row["ratio"], ratio)
        c.same(tr.where(i, "n_regressions"), row["n_regressions"], len(reg))
        c.same(tr.where(i, "regressed_tasks"), row["regressed_tasks"] or "", " ".join(reg))
        E.add(base + ("ratio",), ratio, s_r)
        E.add(base + ("n_regressions",), len(reg), s_r)
    check_ratio_transitivity(c, tr)


def check_ratio_transitivity(c: Checker, tr: CsvTable) -> None:
    """ratio(A/C) = ratio(A/B) * ratio(B/C) (within 1e-9 relative) for every triple of stated qualified
    ratios of one campaign, family and cap, using ratio(B/A) = 1 / ratio(A/B)."""
    stated = {
        (r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"]): r
        for r in tr.rows
        if r["qualified"] and r["ratio"] is not None
    }
    by_group = defaultdict(dict)
    for (camp, fam, cap, a, b), r in stated.items():
        by_group[(camp, fam, cap)][(a, b)] = r["ratio"]
        by_group[(camp, fam, cap)][(b, a)] = 1.0 / r["ratio"]
    for g, pairs in sorted(by_group.items()):
        arms = sorted({a for a, _b in pairs})
        for a in arms:
            for b in arms:
                for cc in arms:
                    if len({a, b, cc}) < 3 or not ((a, b) in pairs and (b, cc) in pairs and (a, cc) in pairs):
                        continue
                    if not (a < cc):
                        continue
                    c.identities += 1
                    lhs, rhs = pairs[(a, cc)], pairs[(a, b)] * pairs[(b, cc)]
                    if abs(lhs - rhs) > 1e-9 * max(1.0, abs(lhs)):
                        c.bad(tr.rel, f"{g[0]} {g[1]}: ratio {a}/{cc} = {lhs!r} but {a}/{b} x {b}/{cc} = {rhs!r}")


def check_diagnostics(c: Checker, E: Expected, tables: dict, src, qual: dict, facts: dict) -> None:
    """The diagnostic (unqualified) timings of the registered pairs ``DIAGNOSTIC_PAIRS``.

    Per row: tasks failed by each side (tasks where the arm is not qualified), the label naming the
    unqualified side(s) (a row whose both sides qualify is refused), and over the tasks timed for both
    arms: ratio = exp(mean_t d(t)) with d(t) as for qualified ratios, the medians of all pooled
    times of each arm (reported in ms), regressed tasks (d(t) < 0). Every registered pair with an
    unqualified side that ran in a campaign with diagnostic rows must have its row."""
    if "diagnostics" not in tables:
        return
    td = tables["diagnostics"]
    s_d = src("diagnostics")
    dtimes = defaultdict(list)
    dfacts = defaultdict(set)
    for r in tables["requests"].rows if "requests" in tables else []:
        dfacts[(r["campaign"], r["family"], r["cap"])].add(r["arm"])
        if r["status"] == "ok" and r["t_ns"] is not None:
            dtimes[(r["campaign"], r["family"], r["cap"], r["arm"], r["task_id"])].append(float(r["t_ns"]))
    stated_d = {}
    for i, row in enumerate(td.rows):
        camp, fam, cap, a, b = row["campaign"], row["family"], row["cap"], row["numerator"], row["denominator"]
        stated_d[(camp, fam, cap, a, b)] = i
        base = ("diag", camp, fam, cap, a, b)
        if (a, b) not in DIAGNOSTIC_PAIRS:
            c.bad(td.where(i), f"{a}/{b} is not a registered diagnostic pair {DIAGNOSTIC_PAIRS}")
        panel = panels(qual, camp).get((fam, cap))
        ma, mb = facts.get((camp, fam, a)), facts.get((camp, fam, b))
        if panel is None or ma is None or mb is None:
            c.bad(td.where(i), "no qualification or requests rows for this campaign, family, cap and arms")
            continue
        tasks = sorted(panel)
        fa = sum(1 for t in tasks if not panel[t].get(a, False))
        fb = sum(1 for t in tasks if not panel[t].get(b, False))
        c.recomputed += 8
        c.same(td.where(i, "path"), row["path"], ma[0] if ma[0] == mb[0] else "mixed")
        c.same(td.where(i, "n_tasks"), row["n_tasks"], len(tasks))
        c.same(td.where(i, "numerator_qualified"), row["numerator_qualified"], fa == 0)
        c.same(td.where(i, "denominator_qualified"), row["denominator_qualified"], fb == 0)
        c.same(td.where(i, "numerator_tasks_failed"), row["numerator_tasks_failed"], fa)
        c.same(td.where(i, "denominator_tasks_failed"), row["denominator_tasks_failed"], fb)
        c.identities += 1
        if fa == 0 and fb == 0:
            c.bad(td.where(i), "both arms qualify: a qualified ratio is not a diagnostic timing")
        else:
            c.same(td.where(i, "label"), row["label"], diagnostic_label(fa == 0, fb == 0))
        common = [t for t in tasks if dtimes.get((camp, fam, cap, a, t)) and dtimes.get((camp, fam, cap, b, t))]
        c.same(td.where(i, "n_tasks_timed"), row["n_tasks_timed"], len(common))
        E.add(base + ("n_tasks",), len(tasks), s_d)
        E.add(base + ("n_tasks_timed",), len(common), s_d)
        if not common:
            for col in ("ratio", "median_numerator_ns", "median_denominator_ns"):
                c.same(td.where(i, col), row[col], None, "no task timed for both arms:")
            continue
        num = {t: dtimes[(camp, fam, cap, a, t)] for t in common}
        den = {t: dtimes[(camp, fam, cap, b, t)] for t in common}
        D, _d, reg = paired(num, den, common)
        mn = median([x for t in common for x in num[t]])
        md = median([x for t in common for x in den[t]])
        c.recomputed += 5
        c.same(td.where(i, "ratio"), row["ratio"], math.exp(D))
        c.same(td.where(i, "median_numerator_ns"), row["median_numerator_ns"], mn)
        c.same(td.where(i, "median_denominator_ns"), row["median_denominator_ns"], md)
        c.same(td.where(i, "n_regressions"), row["n_regressions"], len(reg))
        c.same(td.where(i, "regressed_tasks"), row["regressed_tasks"] or "", " ".join(reg))
        E.add(base + ("ratio",), math.exp(D), s_d)
        E.add(base + ("median_numerator_ms",), mn / 1e6, s_d)
        E.add(base + ("median_denominator_ms",), md / 1e6, s_d)
        E.add(base + ("n_regressions",), len(reg), s_d)
    # completeness: every registered pair with an unqualified side has its row
    for (camp, fam, cap), arms_run in sorted(dfacts.items()):
        panel = panels(qual, camp).get((fam, cap))
        if panel is None:
            continue
        for a, b in DIAGNOSTIC_PAIRS:
            if (
                a in arms_run
                and b in arms_run
                and not all_qualified(panel, (a, b))
                and camp in {k[0] for k in stated_d}
                and (camp, fam, cap, a, b) not in stated_d
            ):
                c.bad(td.rel, f"no diagnostic row for {camp} {fam} cap {cap} {a}/{b} (an arm is not qualified)")


def check_qualified_ratios(c: Checker, tables: dict) -> None:
    """A diagnostic (unqualified) value never appears as a qualified ratio: a row of ratios.csv with a
    ratio must be qualified."""
    if "ratios" not in tables:
        return
    for i, row in enumerate(tables["ratios"].rows):
        if row["ratio"] is not None and not row["qualified"]:
            c.bad(tables["ratios"].where(i, "ratio"), "a ratio of an unqualified comparison is in the qualified table")


def bootstrap_parameters(plan) -> dict:
    """seed, draws and threshold frozen in plan.json (``bootstrap: {...}`` or ``bootstrap_<key>``), as present."""
    boot = {}
    if isinstance(plan, dict):
        b = plan.get("bootstrap")
        for k in ("seed", "draws", "threshold"):
            if isinstance(b, dict) and k in b:
                boot[k] = b[k]
            elif f"bootstrap_{k}" in plan:
                boot[k] = plan[f"bootstrap_{k}"]
    return boot


def check_replication(
    c: Checker, E: Expected, tables: dict, src, qual: dict, facts: dict, boot: dict, noise: dict | None = None
) -> dict:
    """Every replication estimate (estimates.csv) with its session contrasts (contrasts.csv).

    The comparison "X/Y" names two layouts; its arms are the replication arms of the row's family and
    path with those layouts. With both arms qualified on the panel: c_s = mean_t d_s(t) per session s
    over the tasks timed in s for both arms; estimate = exp(mean_s c_s); [lo, hi] = exp of the 2.5 and
    97.5 percentiles of ``draws`` bootstrap means of the c_s (random.Random(seed)); decision = exceeds
    if lo > threshold, below if hi < threshold, else inconclusive, and too_few_sessions under
    ``MIN_SESSIONS`` contrasts; regressed tasks have mean_s d_s(t) < 0. Seed, draws and threshold come
    from plan.json when frozen there, else from the row. An A/A twin (arm name ending in _aa) is never a
    replication arm; under an A/A verdict noise_too_high (``noise``: (campaign, family) -> verdict, as
    recomputed by check_noise) exceeds and below read noise_too_high. Returns (family, path, comparison)
    -> decision (for the headline)."""
    noise = noise or {}
    est_dec = {}
    if "estimates" not in tables:
        return est_dec
    te = tables["estimates"]
    s_e = src("estimates")
    stated_c = {}
    if "contrasts" in tables:
        for i, r in enumerate(tables["contrasts"].rows):
            stated_c[(r["family"], r["path"], r["comparison"], r["session"])] = i
    seen_c = set()
    times_s = defaultdict(list)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["campaign"] == "replication" and r["status"] == "ok" and r["t_ns"] is not None:
            times_s[(r["family"], r["arm"], r["task_id"], r["session"])].append(float(r["t_ns"]))
    rpanels = panels(qual, "replication")
    for i, row in enumerate(te.rows):
        fam, path, comp = row["family"], row["path"], row["comparison"]
        seed = boot.get("seed", row["seed"])
        draws = boot.get("draws", row["draws"])
        thr = boot.get("threshold", row["threshold"])
        if "seed" in boot:
            c.same(te.where(i, "seed"), row["seed"], int(seed), "seed vs plan.json:")
        if "draws" in boot:
            c.same(te.where(i, "draws"), row["draws"], int(draws), "draws vs plan.json:")
        if "threshold" in boot:
            c.same(te.where(i, "threshold"), row["threshold"], float(thr), "threshold vs plan.json:")
        base = ("est", fam, path, comp)
        E.add(base + ("draws",), int(draws), s_e)
        E.add(base + ("seed",), int(seed), s_e)
        E.add(base + ("threshold",), float(thr), s_e)
        try:
            x, y = (p.lower() for p in comp.split("/"))
        except ValueError:
            c.bad(te.where(i, "comparison"), f"cannot read comparison {comp!r}")
            continue
        arms = {}
        for lay in (x, y):
            found = sorted(
                a
                for (cp, f, a), (m, l) in facts.items()
                if cp == "replication" and f == fam and m == path and l == lay and not a.endswith(TWIN_SUFFIX)
            )
            arms[lay] = found[0] if len(found) == 1 else None
        a, b = arms[x], arms[y]
        panel = next((p for (f, _cap), p in rpanels.items() if f == fam), None)
        if a is None or b is None or panel is None:
            c.bad(te.where(i), "arms or qualification rows of this comparison not found")
            continue
        tasks = sorted(panel)
        E.add(base + ("n_tasks",), len(tasks), s_e)
        c.same(te.where(i, "n_tasks"), row["n_tasks"], len(tasks))
        if not all_qualified(panel, (a, b)):
            est_dec[(fam, path, comp)] = "unqualified"
            c.same(te.where(i, "decision"), row["decision"], "unqualified")
            c.same(te.where(i, "estimate"), row["estimate"], None, "unqualified comparison must have no value:")
            E.add(base + ("n_sessions",), 0, s_e)
            continue
        cs, per_task = check_contrasts(c, E, tables, src, (fam, path, comp), a, b, tasks, times_s, stated_c, seen_c)
        E.add(base + ("n_sessions",), len(cs), s_e)
        c.same(te.where(i, "n_sessions"), row["n_sessions"], len(cs))
        if not cs:
            est_dec[(fam, path, comp)] = "unqualified"
            c.same(te.where(i, "decision"), row["decision"], "unqualified")
            continue
        est = math.exp(mean(cs))
        lo, hi = bootstrap(cs, int(draws), int(seed))
        dec = gate(decide(lo, hi, float(thr), len(cs)), noise.get(("replication", fam)))
        est_dec[(fam, path, comp)] = dec
        if dec == "noise_too_high" and not row["reason"]:
            c.bad(te.where(i, "reason"), "machine noise too high, but no reason is given")
        if dec == "too_few_sessions" and not row["reason"]:
            c.bad(te.where(i, "reason"), "too few sessions for a decision, but no reason is given")
        reg = [t for t in sorted(per_task) if mean(per_task[t]) < 0]
        c.recomputed += 5
        c.same(te.where(i, "estimate"), row["estimate"], est)
        c.same(te.where(i, "lo"), row["lo"], lo)
        c.same(te.where(i, "hi"), row["hi"], hi)
        c.same(te.where(i, "decision"), row["decision"], dec)
        c.same(te.where(i, "n_regressions"), row["n_regressions"], len(reg))
        c.same(te.where(i, "regressed_tasks"), row["regressed_tasks"] or "", " ".join(reg))
        for k, v in (("estimate", est), ("lo", lo), ("hi", hi), ("n_regressions", len(reg))):
            E.add(base + (k,), v, s_e)
    if "contrasts" in tables:
        for key, j in stated_c.items():
            if key not in seen_c:
                c.bad(tables["contrasts"].where(j), "contrast row that no qualified comparison produces")
    return est_dec


def noise_units(times: dict, key: tuple, twin: str, arm: str, tasks: list, kind: str) -> tuple[list, int]:
    """(log contrasts of twin over arm, sessions timing both). kind ratio: d(t) per panel task, times
    pooled over sessions and repeats; kind estimate: c_s per session over the tasks timed for both."""
    camp, fam, cap = key
    sessions = sorted({k[5] for k in times if k[:3] == key and k[3] in (twin, arm)})
    both = [s for s in sessions if any(times.get(key + (twin, t, s)) and times.get(key + (arm, t, s)) for t in tasks)]

    def pooled(a, ss):
        return {t: [x for s in ss for x in times.get(key + (a, t, s), [])] for t in tasks}

    if kind == "ratio":
        num, den = pooled(twin, sessions), pooled(arm, sessions)
        if any(not num[t] or not den[t] for t in tasks):
            return [], len(both)
        _D, d, _reg = paired(num, den, tasks)
        return [d[t] for t in sorted(d)], len(both)
    cs = []
    for s in both:
        num, den = pooled(twin, [s]), pooled(arm, [s])
        common = [t for t in tasks if num[t] and den[t]]
        cs.append(paired(num, den, common)[0])
    return cs, len(both)


def check_noise(c: Checker, E: Expected, tables: dict, src, qual: dict, boot: dict) -> dict:
    """The A/A control (noise.csv): an arm X and its twin X_aa, both qualified on the panel. Log
    contrasts u of twin over arm (kind ratio: d(t) per task, pooled; kind estimate: c_s per session;
    kind estimate for the replication campaign, ratio otherwise); value = exp(mean u); [lo, hi] = the
    bootstrap of u; verdict ok when lo <= 1 <= hi and hi/lo <= threshold, else noise_too_high;
    unqualified (no value) when either arm fails a panel task. Every twin in requests.csv has its row.
    Returns (campaign, family) -> noise_too_high when any of its controls is, else ok."""
    out: dict = {}
    if "noise" not in tables:
        twins = sorted(
            {
                (r["campaign"], r["family"], r["arm"])
                for r in tables["requests"].rows
                if r["status"] != "excluded_warmup"
            }
            if "requests" in tables
            else set()
        )
        for k in twins:
            if k[2].endswith(TWIN_SUFFIX):
                c.bad("noise.csv", f"missing: requests.csv has the A/A twin {k[2]} ({k[0]}, {k[1]}) but no A/A row")
        return out
    tn = tables["noise"]
    s_n = src("noise")
    times = defaultdict(list)
    twins = set()
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["arm"].endswith(TWIN_SUFFIX) and r["status"] != "excluded_warmup":  # the warmup is no control
            twins.add((r["campaign"], r["family"], r["cap"], r["arm"]))
        if r["status"] == "ok" and r["t_ns"] is not None:
            times[(r["campaign"], r["family"], r["cap"], r["arm"], r["task_id"], r["session"])].append(float(r["t_ns"]))
    seen = set()
    for i, row in enumerate(tn.rows):
        camp, fam, cap, arm, twin = row["campaign"], row["family"], row["cap"], row["arm"], row["twin"]
        seen.add((camp, fam, cap, twin))
        c.same(tn.where(i, "twin"), twin, arm + TWIN_SUFFIX)
        kind = "estimate" if camp == "replication" else "ratio"
        c.same(tn.where(i, "kind"), row["kind"], kind)
        draws, seed, thr = (boot.get(k, row[k]) for k in ("draws", "seed", "threshold"))
        for k, v in (("draws", int(draws)), ("seed", int(seed)), ("threshold", float(thr))):
            c.same(tn.where(i, k), row[k], v, f"{k} vs plan.json:" if k in boot else "")
        base = ("noise", camp, fam, twin, row["kind"], cap)
        E.add(base + ("threshold",), float(thr), s_n)
        panel = panels(qual, camp).get((fam, cap))
        if panel is None:
            c.bad(tn.where(i), "no qualification rows for this campaign, family and cap")
            continue
        tasks = sorted(panel)
        c.same(tn.where(i, "tasks"), row["tasks"], len(tasks))
        u, n_both = (
            ([], 0)
            if not all_qualified(panel, (arm, twin))
            else noise_units(times, (camp, fam, cap), twin, arm, tasks, kind)
        )
        if u:
            c.same(tn.where(i, "sessions"), row["sessions"], n_both)
        E.add(base + ("sessions",), n_both if u else row["sessions"], s_n)
        if not u:
            out.setdefault((camp, fam), "ok")
            c.same(tn.where(i, "verdict"), row["verdict"], "unqualified")
            for col in ("value", "lo", "hi"):
                c.same(tn.where(i, col), row[col], None, "unqualified A/A control must have no value:")
            E.add(base + ("units",), 0, s_n)
            continue
        value = math.exp(mean(u))
        lo, hi = bootstrap(u, int(draws), int(seed))
        verdict = noise_verdict(lo, hi, float(thr))
        if out.get((camp, fam)) != "noise_too_high":
            out[(camp, fam)] = verdict
        c.recomputed += 4
        c.same(tn.where(i, "value"), row["value"], value)
        c.same(tn.where(i, "lo"), row["lo"], lo)
        c.same(tn.where(i, "hi"), row["hi"], hi)
        c.same(tn.where(i, "units"), row["units"], len(u))
        c.same(tn.where(i, "verdict"), row["verdict"], verdict)
        if verdict == "noise_too_high" and not row["reason"]:
            c.bad(tn.where(i, "reason"), "machine noise too high, but no reason is given")
        for k, v in (("value", value), ("lo", lo), ("hi", hi), ("units", len(u))):
            E.add(base + (k,), v, s_n)
    for k in sorted(twins - seen):
        c.bad(tn.rel, f"no A/A row for the twin {k[3]} ({k[0]}, {k[1]}, cap {k[2]}) of requests.csv")
    return out


def check_loads(c: Checker, E: Expected, tables: dict, src) -> None:
    """The machine load of every block (loads.csv): busy = competing_before or competing_after above
    busy_threshold; per campaign and family the blocks sampled and the busy ones. The sampled values
    are measurements: shown as stated."""
    if "loads" not in tables:
        return
    tl = tables["loads"]
    s_l = src("loads")
    counts = defaultdict(lambda: [0, 0])
    for i, r in enumerate(tl.rows):
        busy = r["competing_before"] > r["busy_threshold"] or r["competing_after"] > r["busy_threshold"]
        c.recomputed += 1
        c.same(tl.where(i, "busy"), r["busy"], busy)
        k = (r["campaign"], r["family"])
        counts[k][0] += 1
        counts[k][1] += 1 if busy else 0
        base = ("load", r["campaign"], r["family"], r["session"], r["block"])
        for col in ("block", "competing_before", "competing_after") if busy else ():  # busy blocks are listed
            E.add(base + (col,), r[col], s_l)
    for (camp, fam), (n, nb) in counts.items():
        E.add(("loadsum", camp, fam, "blocks"), n, s_l)
        E.add(("loadsum", camp, fam, "busy"), nb, s_l)


def check_contrasts(
    c: Checker,
    E: Expected,
    tables: dict,
    src,
    comparison: tuple,
    a: str,
    b: str,
    tasks: list,
    times_s: dict,
    stated_c: dict,
    seen_c: set,
) -> tuple[list, dict]:
    """The session contrasts of one qualified replication comparison of arm ``a`` over arm ``b``.

    For each session s (in order) with tasks timed for both arms: d_s(t) = mean_r log t_a(t, r, s) -
    mean_r log t_b(t, r, s) and c_s = mean_t d_s(t), compared with the contrasts.csv row (recorded in
    ``seen_c``). Returns ([c_s], {task: [d_s(t)]})."""
    fam, path, comp = comparison
    s_c = src("contrasts") if "contrasts" in tables else None
    sessions = sorted({s for (f, arm, _t, s) in times_s if f == fam and arm in (a, b)})
    cs, per_task = [], defaultdict(list)
    for s in sessions:
        common = [t for t in tasks if times_s.get((fam, a, t, s)) and times_s.get((fam, b, t, s))]
        if not common:
            continue
        D, d, _reg = paired(
            {t: times_s[(fam, a, t, s)] for t in common}, {t: times_s[(fam, b, t, s)] for t in common}, common
        )
        cs.append(D)
        for t, v in d.items():
            per_task[t].append(v)
        key = (fam, path, comp, s)
        seen_c.add(key)
        cbase = ("contrast", fam, path, comp, s)
        if s_c is not None:
            E.add(cbase + ("c_s",), D, s_c)
            E.add(cbase + ("n_tasks",), len(common), s_c)
        if key not in stated_c:
            c.bad(
                tables["contrasts"].rel if "contrasts" in tables else "contrasts.csv",
                f"missing contrast for {fam} {path} {comp} session {s}",
            )
        else:
            tc = tables["contrasts"]
            j = stated_c[key]
            c.same(tc.where(j, "c_s"), tc.rows[j]["c_s"], D)
            c.same(tc.where(j, "n_tasks"), tc.rows[j]["n_tasks"], len(common))
    return cs, per_task


def check_sessions(c: Checker, E: Expected, tables: dict, src) -> None:
    """Session gaps and counts (sessions.csv).

    Within (campaign, family), sessions in order of start: gap_before_s = started(s) - ended(previous),
    null for the first; n_requests and n_workers = rows and distinct workers of the session in
    requests.csv (the stated values stand when requests.csv is absent)."""
    if "sessions" not in tables:
        return
    ts = tables["sessions"]
    s_s = src("sessions")
    reqs = tables["requests"].rows if "requests" in tables else []

    def tparse(s):
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))

    groups = defaultdict(list)
    for i, r in enumerate(ts.rows):
        groups[(r["campaign"], r["family"])].append(i)
    cnt = defaultdict(int)
    wrk = defaultdict(set)
    for r in reqs:
        cnt[(r["campaign"], r["family"], r["session"])] += 1
        wrk[(r["campaign"], r["family"], r["session"])].add(r["worker"])
    for g, idx in groups.items():
        try:
            idx.sort(key=lambda i: (tparse(ts.rows[i]["started_utc"]), ts.rows[i]["session"]))
        except (ValueError, AttributeError) as e:
            c.unread(ts.rel, f"bad timestamp ({e})")
            continue
        prev = None
        for i in idx:
            r = ts.rows[i]
            gap = (
                None
                if prev is None
                else (tparse(r["started_utc"]) - tparse(ts.rows[prev]["ended_utc"])).total_seconds()
            )
            base = ("session", r["campaign"], r["family"], r["session"])
            c.same(ts.where(i, "gap_before_s"), r["gap_before_s"], gap)
            if gap is not None:
                E.add(base + ("gap_before_s",), gap, s_s)
            k = (r["campaign"], r["family"], r["session"])
            if reqs:
                c.same(ts.where(i, "n_requests"), r["n_requests"], cnt.get(k, 0))
                c.same(ts.where(i, "n_workers"), r["n_workers"], len(wrk.get(k, ())))
            E.add(base + ("n_requests",), cnt.get(k, 0) if reqs else r["n_requests"], s_s)
            E.add(base + ("n_workers",), len(wrk.get(k, ())) if reqs else r["n_workers"], s_s)
            prev = i


def check_phase_masks(c: Checker, E: Expected, tables: dict, src, qual: dict) -> None:
    """The phase-mask table (phase_masks.csv) from the phase_mask campaign's requests.

    Per (family, mask): matches = ok non-reference requests whose endpoint is the task's stable
    reference endpoint; repeats = the most (session, repeat) runs of one task; passes = n_tasks *
    repeats > 0 and matches = n_tasks * repeats; minimal = passes and no other passing mask s is a
    submask of m (s & m = s). Warm-up requests are left out."""
    if "phase_masks" not in tables:
        return
    tm = tables["phase_masks"]
    s_m = src("phase_masks")
    ref, ptasks = {}, defaultdict(set)
    for (camp, fam, task, cap, arm), q in qual.items():
        if camp == "phase_mask":
            ptasks[fam].add(task)
            ref[(fam, task)] = q["ref_endpoint_sha256"] if q["ref_stable"] else None
    matches, reps, masks = defaultdict(int), defaultdict(set), defaultdict(set)
    for r in tables["requests"].rows if "requests" in tables else []:
        if r["campaign"] != "phase_mask" or r["arm"] == REFERENCE_ARM or r["status"] == "excluded_warmup":
            continue
        fam, m = r["family"], r["mask"]
        masks[fam].add(m)
        reps[(fam, m, r["task_id"])].add((r["session"], r["repeat"]))
        if (
            r["status"] == "ok"
            and ref.get((fam, r["task_id"])) is not None
            and r["endpoint_sha256"] == ref[(fam, r["task_id"])]
        ):
            matches[(fam, m)] += 1
    exp_rows = {}
    for fam in masks:
        nt = len(ptasks.get(fam, ()))
        passes = {}
        for m in masks[fam]:
            rp = max((len(v) for (f, mm, _t), v in reps.items() if f == fam and mm == m), default=0)
            passes[m] = nt * rp > 0 and matches[(fam, m)] == nt * rp
            exp_rows[(fam, m)] = dict(matches=matches[(fam, m)], n_tasks=nt, repeats=rp, passes=passes[m])
        for m in masks[fam]:
            exp_rows[(fam, m)]["minimal"] = passes[m] and not any(passes[s] for s in passes if s != m and (s & m) == s)
    seen = set()
    for i, r in enumerate(tm.rows):
        k = (r["family"], r["mask"])
        seen.add(k)
        e = exp_rows.get(k)
        if e is None:
            c.bad(tm.where(i), "no phase-mask requests for this family and mask")
            continue
        for col in ("matches", "n_tasks", "repeats", "passes", "minimal"):
            c.recomputed += 1
            c.same(tm.where(i, col), r[col], e[col])
        base = ("mask", r["family"], r["mask"])
        E.add(base + ("mask",), r["mask"], s_m)
        E.add(base + ("matches",), e["matches"], s_m)
        E.add(base + ("required",), e["n_tasks"] * e["repeats"], s_m)
    for k in sorted(set(exp_rows) - seen):
        c.bad(tm.rel, f"no row for family={k[0]} mask={k[1]}")


def frozen_predictions(c: Checker, tp: CsvTable, plan) -> tuple:
    """(the ``predictions`` amendment of plan.json, its task -> endpoint map); the map is empty (and a
    mismatch recorded) when no predictions were frozen."""
    frozen_doc = None
    if isinstance(plan, dict):
        camps = plan.get("campaigns") if isinstance(plan.get("campaigns"), dict) else {}
        pplan = camps.get("prediction") if isinstance(camps.get("prediction"), dict) else plan
        frozen_doc = pplan.get("predictions") if isinstance(pplan, dict) else None
    frozen = frozen_doc.get("endpoints") if isinstance(frozen_doc, dict) else None
    if not isinstance(frozen, dict):
        c.bad(
            tp.rel,
            "no frozen predictions (amendment 'predictions') in plan.json: predicted vs live cannot be recomputed",
        )
        frozen = {}
    return frozen_doc, frozen


def check_prediction(c: Checker, E: Expected, tables: dict, src, plan) -> None:
    """The prospective-prediction table (prediction.csv): predicted vs live and reference vs live.

    predicted_sha256 = the digest of the endpoint frozen in plan.json for the task, which must be the
    predictor's own first endpoint; reference_sha256 = the reference arm's first endpoint in the row's
    session; over the live arm's endpoints of that session: live_runs, live_stable (one digest),
    predicted_matches and reference_matches (runs equal to each digest), reference_divergent = some
    live run differs from the reference. Per family the totals over tasks, and over divergent tasks."""
    if "prediction" not in tables:
        return
    tp = tables["prediction"]
    s_pr = src("prediction")
    frozen_doc, frozen = frozen_predictions(c, tp, plan)
    peps = defaultdict(list)
    for e in tables["endpoints"].rows if "endpoints" in tables else []:
        if e["campaign"] == "prediction":
            peps[(e["arm"], e["task_id"])].append(e)
    for v in peps.values():
        v.sort(key=lambda e: (e["session"], e["repeat"]))
    tot = defaultdict(lambda: defaultdict(int))
    for i, r in enumerate(tp.rows):
        fam, task = r["family"], r["task_id"]
        c.identities += 1
        if r["predictor"] == REFERENCE_ARM or r["predictor"] == r["live_arm"]:
            c.bad(
                tp.where(i, "predictor"),
                f"predictor {r['predictor']!r} is the reference or the live arm: "
                "predicted vs live would equal reference vs live by construction",
            )
        if isinstance(frozen_doc, dict) and frozen_doc.get("predictor") not in (None, r["predictor"]):
            c.bad(tp.where(i, "predictor"), f"plan.json froze predictions of {frozen_doc.get('predictor')!r}")
        f = frozen.get(task)
        pred_sha = None
        if isinstance(f, dict) and isinstance(f.get("tokens"), list):
            pred_sha = endpoint_digest(f["tokens"], f.get("eog"), f.get("stop_reason"))
            c.same(
                f"plan.json: predictions.endpoints[{task!r}].endpoint_sha256",
                f.get("endpoint_sha256"),
                pred_sha,
                "frozen digest vs its tokens:",
            )
            own = peps.get((r["predictor"], task), [])
            c.identities += 1
            if not own or own[0]["endpoint_sha256"] != pred_sha:
                c.bad(
                    tp.where(i, "predicted_sha256"),
                    "the frozen prediction is not the predictor's own completed endpoint in endpoints.csv",
                )
        elif frozen:
            c.bad(tp.where(i), "no frozen prediction for this task in plan.json")
        live = [e["endpoint_sha256"] for e in peps.get((r["live_arm"], task), []) if e["session"] == r["session"]]
        refs = [e for e in peps.get((REFERENCE_ARM, task), []) if e["session"] == r["session"]]
        ref_sha = refs[0]["endpoint_sha256"] if refs else None
        exp = dict(
            predicted_sha256=pred_sha,
            reference_sha256=ref_sha,
            live_runs=len(live),
            live_stable=(len(set(live)) == 1) if live else None,
            predicted_matches=sum(1 for h in live if pred_sha is not None and h == pred_sha),
            reference_matches=sum(1 for h in live if ref_sha is not None and h == ref_sha),
        )
        exp["reference_divergent"] = bool(live) and exp["reference_matches"] < len(live)
        for col, v in exp.items():
            c.recomputed += 1
            c.same(tp.where(i, col), r[col], v)
        base = ("pred", fam, task)
        for col in ("live_runs", "predicted_matches", "reference_matches"):
            E.add(base + (col,), exp[col], s_pr)
        t = tot[fam]
        t["tasks"] += 1
        t["live_runs"] += exp["live_runs"]
        t["stable_tasks"] += 1 if exp["live_stable"] else 0
        t["predicted_matches"] += exp["predicted_matches"]
        t["reference_matches"] += exp["reference_matches"]
        if exp["reference_divergent"]:
            t["divergent_tasks"] += 1
            t["divergent_runs"] += exp["live_runs"]
            t["divergent_predicted"] += exp["predicted_matches"]
    for fam, t in tot.items():
        for k in (
            "tasks",
            "live_runs",
            "stable_tasks",
            "predicted_matches",
            "reference_matches",
            "divergent_tasks",
            "divergent_runs",
            "divergent_predicted",
        ):
            E.add(("predsum", fam, k), t.get(k, 0), s_pr)


def check_replay(c: Checker, E: Expected, tables: dict, src) -> None:
    """The replay summary per (family, stage): contexts, counts of PQ = QB, MQ = PQ and passing
    controls, maxima of |MQ - PQ|, its ULPs and the visible keys. Identity: a context with MQ = PQ
    records no difference (max_abs_mq = max_ulp_mq = 0, no first_diff)."""
    if "replay" not in tables:
        return
    s_p = src("replay")
    g = defaultdict(list)
    for r in tables["replay"].rows:
        g[(r["family"], r["stage"])].append(r)
    for (fam, stage), rs in g.items():
        base = ("replay", fam, stage)
        E.add(base + ("contexts",), len(rs), s_p)
        E.add(base + ("pq_eq_qb",), sum(1 for r in rs if r["pq_eq_qb"]), s_p)
        E.add(base + ("mq_eq_pq",), sum(1 for r in rs if r["mq_eq_pq"]), s_p)
        E.add(base + ("control_ok",), sum(1 for r in rs if r["control_ok"]), s_p)
        E.add(base + ("max_abs_mq",), max(r["max_abs_mq"] for r in rs), s_p)
        E.add(base + ("max_ulp_mq",), max(r["max_ulp_mq"] for r in rs), s_p)
        E.add(base + ("max_visible_keys",), max(r["visible_keys"] for r in rs), s_p)
        for r in rs:
            c.identities += 1
            if r["mq_eq_pq"] and (r["max_abs_mq"] != 0 or r["max_ulp_mq"] != 0 or r["first_diff"] is not None):
                c.bad(
                    tables["replay"].rel,
                    f"{fam} {stage} layer {r['layer']} {r['phase']} q={r['q']}: MQ = PQ but a difference is recorded",
                )


def check_audit(c: Checker, E: Expected, tables: dict, src) -> None:
    """The audit summary per (layout, stage): clean fixtures and those passing the oracle, injected
    faults and those detected, and the largest absolute and relative errors of the clean fixtures
    (0 when none)."""
    if "audit" not in tables:
        return
    s_a = src("audit")
    g = defaultdict(list)
    for r in tables["audit"].rows:
        g[(r["layout"], r["stage"])].append(r)
    for (lay, stage), rs in g.items():
        clean = [r for r in rs if r["fault"] is None]
        faulty = [r for r in rs if r["fault"] is not None]
        base = ("audit", lay, stage)
        E.add(base + ("fixtures",), len(clean), s_a)
        E.add(base + ("oracle_ok",), sum(1 for r in clean if r["oracle_ok"]), s_a)
        E.add(base + ("faults",), len(faulty), s_a)
        E.add(base + ("detected",), sum(1 for r in faulty if r["detected"]), s_a)
        E.add(base + ("max_abs_err",), max((r["max_abs_err"] for r in clean), default=0.0), s_a)
        E.add(base + ("max_rel_err",), max((r["max_rel_err"] for r in clean), default=0.0), s_a)


def check_requests(c: Checker, E: Expected, tables: dict, src) -> None:
    """Draft acceptance and request status counts (requests.csv).

    Per (family, draft) over ok speculative requests: proposals, accepted, requests and acceptance =
    accepted / proposals; per campaign the count of each status and of each (status, reason).
    Identities: the status counts add up to the rows, an ok request has a time, any other status a
    reason."""
    if "requests" not in tables:
        return
    reqs = tables["requests"].rows
    s_q = src("requests")
    acc = {}
    for r in reqs:
        if r["status"] != "ok" or r["mode"] != "spec" or r["draft"] is None or r["proposals"] is None:
            continue
        a = acc.setdefault((r["family"], r["draft"]), [0, 0, 0])
        a[0] += r["proposals"]
        a[1] += r["accepted"] or 0
        a[2] += 1
    for (fam, draft), (p, k, n) in acc.items():
        base = ("accept", fam, draft)
        E.add(base + ("proposals",), p, s_q)
        E.add(base + ("accepted",), k, s_q)
        E.add(base + ("requests",), n, s_q)
        if p:
            E.add(base + ("acceptance",), k / p, s_q)
    st, rs_ = defaultdict(int), defaultdict(int)
    for r in reqs:
        st[(r["campaign"], r["status"])] += 1
        if r["reason"]:
            rs_[(r["campaign"], r["status"], r["reason"])] += 1
    for (camp, status), n in st.items():
        E.add(("status", camp, status, "count"), n, s_q)
    for (camp, status, reason), n in rs_.items():
        E.add(("reason", camp, status, reason, "count"), n, s_q)
    c.identities += 1
    if sum(st.values()) != len(reqs):
        c.bad(tables["requests"].rel, "status counts do not add up to the rows")
    for i, r in enumerate(reqs):
        if r["status"] == "ok" and r["t_ns"] is None:
            c.bad(tables["requests"].where(i, "t_ns"), "ok request without a time")
        if r["status"] != "ok" and not r["reason"]:
            c.bad(tables["requests"].where(i, "reason"), f"{r['status']} row without a reason")


def check_ledger(c: Checker, E: Expected, rep: Report) -> None:
    """Ledger records: the number of lines of ledger.jsonl and the count of each record kind (the first
    string among ``LEDGER_KIND_KEYS``, "(none)" when absent or not a JSON object)."""
    lp = os.path.join(c.archive, "ledger.jsonl")
    if not os.path.isfile(lp):
        return
    s_l = posix_rel(lp, rep.dir)
    n, kinds = 0, defaultdict(int)
    with open(lp, "rb") as f:
        for raw in f:
            n += 1
            try:
                rec = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            kind = "(none)"
            if isinstance(rec, dict):
                for k in LEDGER_KIND_KEYS:
                    if isinstance(rec.get(k), str):
                        kind = rec[k]
                        break
            kinds[kind] += 1
    E.add(("ledger", "records"), n, s_l)
    for k, v in kinds.items():
        E.add(("ledger", "kind", k, "count"), v, s_l)


# =========================================================================== the report versus the recomputation


def check_numbers(c: Checker, E: Expected, rep: Report) -> dict:
    """numbers.json against the recomputed numbers: each id once, recomputable, its value equal (floats
    within 1e-12 relative), its source the recomputed one, its text the value rounded to the digits
    shown, its source a file of the archive; every recomputed number is listed. Returns id -> entry."""
    stated = {}
    for j, n in enumerate(rep.numbers_doc["numbers"]):
        where = f"numbers.json: numbers[{j}]"
        if not isinstance(n, dict) or not isinstance(n.get("id"), str):
            c.unread(where, "entry without an id")
            continue
        nid = n["id"]
        where = f"numbers.json: {nid}"
        if nid in stated:
            c.bad(where, "id listed twice")
        stated[nid] = n
        exp = E.items.get(nid)
        if exp is None:
            c.bad(where, "number not recomputable from the archive (no such row or qualification failed)")
            continue
        val = n.get("value")
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            c.bad(where, f"value {val!r} is not a number")
            continue
        c.same(where, val, exp[0], "value")
        if n.get("source") != exp[1]:
            c.bad(where, f"source {n.get('source')!r}, expected {exp[1]!r}")
        if isinstance(n.get("text"), str) and not displayed_matches(n["text"], exp[0]):
            c.bad(where, f"text {n['text']!r} does not show {fmt(exp[0])}")
    for nid in sorted(set(E.items) - set(stated)):
        c.bad(f"numbers.json: {nid}", f"recomputed number {fmt(E.items[nid][0])} is missing from numbers.json")
    for n in stated.values():
        s = n.get("source")
        if isinstance(s, str):
            p = os.path.normpath(os.path.join(os.path.dirname(rep.numbers_path), s))
            if not _inside(p, c.archive) or not os.path.isfile(p):
                c.bad(f"numbers.json: {n['id']}", f"source {s!r} is not a file of the archive")
    return stated


def compare_shown(c: Checker, E: Expected, where: str, nid: str, text: str):
    """One number as a report shows it (HTML or TeX) against its recomputed value; returns the
    recomputed (value, source) or None when the id is not recomputable (a problem)."""
    exp = E.items.get(nid)
    if exp is None:
        c.bad(where, f"shows {text!r} but the number is not recomputable from the archive")
        return None
    c.compared += 1
    if displayed_matches(text, exp[0]):
        c.matched += 1
    else:
        c.bad(where, f"shows {text!r}, recomputed {fmt(exp[0])}")
    return exp


def check_html(c: Checker, E: Expected, rep: Report, stated: dict) -> None:
    """report.html against the recomputed numbers: each displayed number (``data-num``) is the
    recomputed value rounded to the digits shown, with the recomputed ``data-src``; every number of
    numbers.json is shown; no active content; every link stays inside the archive and names a file."""
    shown = set()
    for nid, text, dsrc, line in rep.hp.nums:
        where = f"{rep.html_rel}:{line} data-num={nid!r}"
        shown.add(nid)
        exp = compare_shown(c, E, where, nid, text)
        if exp is None:
            continue
        if dsrc != exp[1]:
            c.bad(where, f"data-src {dsrc!r}, expected {exp[1]!r}")
    for nid in sorted(set(stated) - shown):
        c.bad(f"{rep.html_rel}", f"number {nid} of numbers.json is not shown")
    for line, msg in rep.hp.problems:
        c.bad(f"{rep.html_rel}:{line}", msg)
    css = "".join(rep.hp.styles)
    if len([1 for _t in rep.hp.styles]) and hashlib.sha256(css.encode("utf-8")).hexdigest() != STYLESHEET_SHA256:
        c.bad(rep.html_rel, "the stylesheet is not the report format's (sha256 differs from STYLESHEET_SHA256)")
    for href, line in rep.hp.hrefs:
        if href.startswith("#") and href[1:] not in rep.hp.ids:
            c.bad(f"{rep.html_rel}:{line} href={href!r}", "link to an id the report does not have")
    check_visible_digits(c, rep)
    for attr, val, line in rep.hp.links:
        where = f"{rep.html_rel}:{line} {attr}={val!r}"
        if val.startswith("#"):
            continue
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", val) or val.startswith("//"):
            c.bad(where, "external link in a self-contained report")
            continue
        p = os.path.normpath(os.path.join(rep.dir, val.split("#", 1)[0]))
        c.files.add(p)
        if not _inside(p, c.archive):
            c.bad(where, "link leaves the archive")
        elif not os.path.isfile(p):
            c.bad(where, "linked file is missing")


def archive_names(c: Checker) -> set[str]:
    """Every string cell of the tables read (and its '/'- and space-separated parts): the names
    (tasks, arms, families, sessions, drafts, digests, times, reasons) a report may show as text."""
    names: set[str] = set()
    for t in c.tables.values():
        cols = [
            k for k, kind in (COLUMNS.get(t.name) or COMPARE_COLUMNS[t.name]).items() if kind == S or k in KEY_COLUMNS
        ]
        for r in t.rows:
            for k in cols:
                v = r.get(k)
                if isinstance(v, str):
                    names.add(v)
                    names.update(v.split())
                    names.update(x.strip(_WORD_STRIP) for x in v.split())
                elif isinstance(v, int) and not isinstance(v, bool):
                    names.add(str(v))
                elif isinstance(v, list):
                    names.update(str(x) for x in v)
    names.update(arm for pair in DIAGNOSTIC_PAIRS for arm in pair)  # the registered pairs the text names
    names.update(ledger_reason_words(c.archive))
    return names


def ledger_reason_words(archive: str) -> set[str]:
    """The words of every ``reason`` the archive's ledgers hold (ledger.jsonl, campaigns/*/ledger.jsonl):
    a refused arm's row quotes its ledger's reason (worker ids, model files, shapes)."""
    words: set[str] = set()
    for root, _dirs, files in os.walk(archive):
        if "ledger.jsonl" not in files:
            continue
        with open(os.path.join(root, "ledger.jsonl"), "rb") as f:
            for raw in f:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                why = rec.get("reason") if isinstance(rec, dict) else None
                if isinstance(why, str):
                    words.add(why)
                    words.update(why.split())
                    words.update(x.strip(_WORD_STRIP) for x in why.split())
    return words


# the paper's table numbers ("Table 3"): the one place a label's digits stand as a word of their own
TABLE_REF_RE = re.compile(r"\bTables? \d+\b")


def visible_words(text: str) -> list[str]:
    """The words of visible text (split on white space), a table reference ``Table N`` taken out."""
    return TABLE_REF_RE.sub(" ", text).split()


def visible_digits_problem(word: str, names: set[str]) -> bool:
    """Whether a word of visible text holding a digit is outside the report format's allowlist."""
    w = word.strip(_WORD_STRIP)
    if not any(ch.isdigit() for ch in w):
        return False
    if w in names or LABEL_RE.fullmatch(w):
        return False
    parts = re.split(r"[/,=]", w)
    return not all(p in names or LABEL_RE.fullmatch(p) or not any(ch.isdigit() for ch in p) for p in parts)


def visible_names(c: Checker, rep: Report) -> set[str]:
    """The names a report may show with digits in them: ``archive_names`` and the provenance
    values of numbers.json (digests, key id, host) with their words."""
    names = archive_names(c)
    prov = rep.numbers_doc.get("provenance") if isinstance(rep.numbers_doc.get("provenance"), dict) else {}
    for v in prov.values():
        if isinstance(v, str):
            names.add(v)
            names.update(x.strip(_WORD_STRIP) for x in v.split())
    return names


def check_visible_digits(c: Checker, rep: Report) -> None:
    """Every digit a reader sees outside a checked number (data-num) must be part of a word the
    archive names (a string cell or a key column of its tables, a provenance digest, key id or
    host that ``check_provenance`` and ``check_data_seal`` check) or a label of ``LABEL_RE``;
    numbers themselves are only ever shown as checked numbers (a checked number reads as ``#``
    in the text around it, so a digit written against it is refused). The text of the figures
    (axis ticks, counts and labels drawn in SVG) is the exception: see anc/report.md."""
    names = visible_names(c, rep)
    for text, line, ctx in rep.hp.text:
        if ctx == "svg":
            continue
        for word in visible_words(text):
            if visible_digits_problem(word, names):
                c.bad(f"{rep.html_rel}:{line}", f"digits {word!r} in visible text ({ctx}) outside a checked number")


def tex_visible(name: str) -> str:
    """A name as report.tex shows it (refspec.report.tex.tex_escape: other characters than
    printable ASCII become '?' or a space, dashes '---' and '--')."""
    out = []
    for ch in name:
        if ch in "\u2014\u2013":
            out.append("---" if ch == "\u2014" else "--")
        elif ch in "\u00a7\u00b7\u00d7\u2264\u2265" or 32 <= ord(ch) <= 126:
            out.append(ch)
        else:
            out.append(" " if ord(ch) < 32 else "?")
    return "".join(out)


def check_tex(c: Checker, E: Expected, rep: Report, stated: dict) -> None:
    """report.tex, when the archive holds it, against the report's LaTeX subset (``StrictTeX``)
    and the recomputed numbers: every checked number ``\\rsnum{ID}{TEXT}`` shows its recomputed
    value rounded to the digits shown, every number of numbers.json is shown, and digits in
    visible text outside checked numbers follow the HTML rule (``check_visible_digits``). A
    report.pdf without its report.tex is a mismatch (the PDF is read through its source)."""
    tp = rep.tex
    if tp is None:
        if os.path.isfile(os.path.join(rep.dir, "report.pdf")):
            c.bad(posix_rel(os.path.join(rep.dir, "report.pdf"), c.archive), "report.pdf without its report.tex")
        return
    c.files.add(os.path.join(rep.dir, "report.tex"))
    shown = set()
    for nid, text, line in tp.nums:
        where = f"{rep.tex_rel}:{line} rsnum={nid!r}"
        shown.add(nid)
        compare_shown(c, E, where, nid, text)
    for nid in sorted(set(stated) - shown):
        c.bad(rep.tex_rel, f"number {nid} of numbers.json is not shown")
    for line, msg in tp.problems:
        c.bad(f"{rep.tex_rel}:{line}", msg)
    names = visible_names(c, rep)
    names |= {tex_visible(n) for n in names}
    for text, line in tp.text:
        for word in visible_words(text):
            if visible_digits_problem(word, names):
                c.bad(f"{rep.tex_rel}:{line}", f"digits {word!r} in visible text outside a checked number")


def check_provenance(c: Checker, rep: Report) -> dict:
    """The provenance digests of numbers.json: manifest_sha256, plan_sha256 and ledger_sha256 are the
    sha256 of the archive's files and are shown in report.html; a present file must have its digest.
    Returns the provenance block ({} when absent)."""
    numbers_doc = rep.numbers_doc
    prov = numbers_doc.get("provenance") if isinstance(numbers_doc.get("provenance"), dict) else {}
    for key, fname in (
        ("manifest_sha256", "manifest.json"),
        ("plan_sha256", "plan.json"),
        ("ledger_sha256", "ledger.jsonl"),
    ):
        p = os.path.join(c.archive, fname)
        if prov.get(key) is not None:
            if not os.path.isfile(p):
                c.bad(f"numbers.json: provenance.{key}", f"{fname} is missing from the archive")
            else:
                c.same(f"numbers.json: provenance.{key}", prov[key], sha256_file(p), f"{fname} digest")
                if prov[key] not in rep.html_text:
                    c.bad(rep.html_rel, f"provenance digest of {fname} is not shown")
        elif os.path.isfile(p):
            c.bad(f"numbers.json: provenance.{key}", f"{fname} is present but the report shows no digest for it")
    check_reproduction_provenance(c, rep, prov)
    return prov


def check_reproduction_provenance(c: Checker, rep: Report, prov: dict) -> None:
    """A reproduction (refspec reproduce) records what it reproduces in the config its manifest
    holds (``reproduces``); the report's provenance texts of it are recomputed from there
    (refspec.reporting.sections.provenance.reproduction_text) and must be shown."""
    p = os.path.join(c.archive, "manifest.json")
    try:
        with open(p, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return
    ext = (m.get("buildDefinition") or {}).get("externalParameters") if isinstance(m, dict) else None
    cfg = ext.get("config") if isinstance(ext, dict) else None
    r = cfg.get("reproduces") if isinstance(cfg, dict) else None
    keys = ("reproduces", "reproduces_accepted", "reproduces_host")
    if not isinstance(r, dict):
        for k in keys:
            if k in prov:
                c.bad(f"numbers.json: provenance.{k}", "the manifest's config records no reproduction")
        return
    accepted = [
        f"{d.get('name')}: {d.get('archived') or '(absent)'} -> {d.get('here') or '(absent)'}"
        for d in (r.get("accepted") or [])
        if isinstance(d, dict)
    ]
    want = {
        "reproduces": f"seal {r.get('seal_sha256')} key {r.get('keyid')} archive {r.get('archive_id')}",
        "reproduces_accepted": "; ".join(accepted) or "none",
        "reproduces_host": ", ".join(str(d.get("name")) for d in (r.get("host") or []) if isinstance(d, dict))
        or "none",
    }
    for k in keys:
        if c.same(f"numbers.json: provenance.{k}", prov.get(k), want[k], "reproduction record"):
            if not any(want[k] in text for text, _line, _ctx in rep.hp.text):
                c.bad(rep.html_rel, f"the reproduction record ({k}) is not shown")


def check_headline(c: Checker, E: Expected, rep: Report, stated: dict, est_dec: dict) -> list:
    """The headline block (numbers.json ``headline``, the report's summary table).

    Each number of a row is one of the report's recomputable numbers; each E2 row's decision is the
    recomputed one and its text says it (``DECISION_TEXT``); every estimate has its E2 row; the summary
    table of report.html shows exactly the headline's numbers, in order. Returns the headline rows."""
    head = rep.numbers_doc.get("headline")
    if not isinstance(head, list):
        c.bad("numbers.json: headline", "missing: the report must open with the headline block")
        head = []
    head_ids = []
    head_est = {}
    for j, h in enumerate(head):
        where = f"numbers.json: headline[{j}]"
        if not isinstance(h, dict) or not isinstance(h.get("parts"), list):
            c.unread(where, "not a headline row {finding, scope, parts}")
            continue
        texts = []
        for part in h["parts"]:
            if isinstance(part, dict) and isinstance(part.get("num"), str):
                nid = part["num"]
                head_ids.append(nid)
                if nid not in stated:
                    c.bad(where, f"number {nid} is not one of the report's numbers")
                elif nid not in E.items:
                    c.bad(where, f"number {nid} is not recomputable from the archive")
                else:
                    texts.append(str(stated[nid].get("text")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                c.unread(where, f"part {part!r} is neither text nor {{num: id}}")
        if "decision" in h:  # E2 rows
            key = h.get("key") if isinstance(h.get("key"), dict) else {}
            k = (key.get("family"), key.get("path"), key.get("comparison"))
            head_est[k] = j
            exp = est_dec.get(k)
            if exp is None:
                c.bad(where, f"E2 row {k} has no estimate in estimates.csv")
            else:
                c.same(where + " decision", h["decision"], exp)
                want = DECISION_TEXT.get(exp, exp)
                c.identities += 1
                if want not in "".join(texts):
                    c.bad(where, f"shows {''.join(texts)!r}, which does not say {want!r}")
    for k in sorted(set(est_dec) - set(head_est), key=str):
        c.bad("numbers.json: headline", f"no E2 row for {' '.join(map(str, k))}")
    shown_head = [nid for (nid, _t, _s, _l), tab in zip(rep.hp.nums, rep.hp.table_of) if tab == "summary"]
    c.identities += 1
    if shown_head != head_ids:
        c.bad(
            f"{rep.html_rel} summary table",
            f"shows {len(shown_head)} numbers that differ from the {len(head_ids)} numbers of numbers.json's headline",
        )
    return head


def check_data_seal(c: Checker, rep: Report, prov: dict, head: list) -> None:
    """The data seal and key of the headline: provenance.data_seal_sha256 is shown in report.html and
    in the headline and is the previous seal named by the archive's SEAL.dsse.json statement;
    provenance.pubkey_fingerprint is among the keys that signed the archive."""
    sp = os.path.join(c.archive, "SEAL.dsse.json")
    ds = prov.get("data_seal_sha256")
    if ds is not None:
        if ds not in rep.html_text:
            c.bad(rep.html_rel, "the data seal digest is not shown")
        if not any(isinstance(h, dict) and ds in h.get("parts", []) for h in head):
            c.bad("numbers.json: headline", "the data seal digest is not in the headline")
    fp = prov.get("pubkey_fingerprint")
    if os.path.isfile(sp):
        try:
            with open(sp, encoding="utf-8") as f:
                env = json.load(f)
            stmt = json.loads(base64.b64decode(env["payload"], validate=True))
            prev = (stmt.get("predicate") or {}).get("previous_seal_sha256")
            keyids = [s.get("keyid") for s in env.get("signatures") or [] if isinstance(s, dict)]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            prev, keyids = None, None  # check_seal reports an unreadable seal
        if keyids is not None:
            if ds is not None:
                c.same(
                    "numbers.json: provenance.data_seal_sha256",
                    ds,
                    prev,
                    "data seal vs the archive seal's previous seal:",
                )
            if fp is not None and fp not in keyids:
                c.bad(
                    "numbers.json: provenance.pubkey_fingerprint",
                    f"{fp} did not sign this archive (signed by {', '.join(map(str, keyids))})",
                )


# =========================================================================== state studies, admission, claims


def _classes(values) -> list:
    seen = {}
    return [seen.setdefault(v, len(seen)) for v in values]


def _ep_key(r) -> tuple:
    return (tuple(r["tokens"] or ()), bool(r["eog"]), r["stop_reason"])


def check_state(c: Checker, E: Expected, tables: dict, src) -> None:
    """Partition classes, KV differences, crosses outcomes, frontier positions, admission verdicts
    and the claims of the controlled stages, recomputed from their CSV tables."""
    nat = check_partition(c, E, tables, src)
    check_kv_diff(c, E, tables, src, nat)
    traj = check_crosses(c, E, tables, src, nat)
    check_frontier(c, E, tables, src, traj)
    check_admission(c, E, tables, src)
    check_projection(c, E, tables, src)
    check_claims(c, E, tables, src, nat)


def check_partition(c: Checker, E: Expected, tables: dict, src) -> dict:
    """The partition study (partition.csv); returns (task, arm) -> (row index, repeat-1 row).

    Each row's endpoint digest, n and last_token from its tokens. Per task over the arms' repeat-1
    rows, in arm order: endpoint_class, kv_class and logits_class number the distinct digests in order
    of first appearance (the first arm is class 0); first_diff_vs_A = first token index where the arm's
    endpoint differs from the first arm's (null when equal). Per arm after the first: the number of
    tasks whose class differs from 0."""
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


def check_kv_diff(c: Checker, E: Expected, tables: dict, src, nat: dict) -> None:
    """KV differences (kv_diff.csv; Tables S10 and S12 shapes) per (task, arm): layer-0 and first-changed
    layer max |dK|, max |dV|, the first changed layer, bytes differing (sum), layers changed, max |d|
    and max relative Frobenius norm. Identity with partition.csv: rows exist exactly for the arms whose
    KV digest differs from arm A's."""
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


def check_crosses(c: Checker, E: Expected, tables: dict, src, nat: dict) -> dict:
    """Crosses (crosses.csv): outcome classes and counts; returns (task, direction, selector, repeat) -> row.

    Each row's endpoint digest from its tokens and bytes_changed = changed_bytes > 0; with partition.csv,
    outcome = recipient / donor / third as the endpoint equals the recipient's natural endpoint, else
    the donor's, else neither, and distinguishable = the two natural endpoints differ. Counts over
    subset crosses (requests, outcomes, coordinates) and the sham (EMPTY selector) crosses."""
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
    return traj


def check_frontier(c: Checker, E: Expected, tables: dict, src, traj: dict) -> None:
    """Frontier (frontier.csv): t* = the first token position where the panel's four crosses
    trajectories do not all agree (null when they agree throughout); additive = d_first + d_second;
    interaction = actual - additive. The repeat-1 rows with a frontier are report numbers."""
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


def check_admission(c: Checker, E: Expected, tables: dict, src) -> None:
    """Backend admission (admission.csv): verdict = "unknown" when the backend supports the op, else
    "false", with a reason exactly when false; per (family, backend, n_kv, layout, q): ops, false
    verdicts and fallbacks."""
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


PROJECTION_STATUSES = ("qualified", "mismatch", "excluded", "error")


def projection_positions(rows: list) -> dict:
    """Prompt position -> digest of the captured output row there, over one arm's calls of a node."""
    return {r["p0"] + j: h for r in rows for j, h in enumerate((r["row_sha256"] or "").split())}


def check_projection(c: Checker, E: Expected, tables: dict, src) -> None:
    """Projection replay (projection.csv). Per row: one row digest per position p0..p1-1 (p1 - p0 =
    out_ne[1]); qualified exactly when the replayed digest equals the captured one with no element
    differing; mismatch: replayed, and the digests or elements differ; excluded: not replayed, with a reason;
    error: not replayed, with a reason; a weight digest for MUL_MAT only. Per (task, arm, node): calls
    and calls per status. Totals: calls and calls per status. Per (task, node) of a task with two arms
    whose calls cover the same positions: positions, positions whose row digests differ and the first
    of them."""
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


def check_projection_claim(c: Checker, cl: CsvTable, i: int, tables: dict) -> None:
    """The projection stage's claim: controls = the calls replayed (not excluded) in projection.csv;
    controls_failed counts at least its mismatched and failed calls (the captured prefills' KV controls
    are recorded in the stage's projection.json, not in the table)."""
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


def check_claims(c: Checker, E: Expected, tables: dict, src, nat: dict) -> None:
    """The claims of the controlled stages (claims.csv).

    controls and controls_failed as recomputed by ``claim_controls``; for admission, controls -
    controls_failed = the (backend, layout, q) evaluations with rows in admission.csv; for projection,
    ``check_projection_claim``. A claim with a failed control is withheld; supported exactly when the exit code is 0 and no control failed; a
    withheld claim has a reason."""
    cl = tables.get("claims")
    if cl is None:
        return
    s_l = src("claims")
    for i, r in enumerate(cl.rows):
        st, rec = r["stage"], r["record"]
        exp = None
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
            check_projection_claim(c, cl, i, tables)
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
        if (r["status"] == "supported") != (r["exit_code"] == 0 and r["controls_failed"] == 0):
            c.bad(
                cl.where(i, "status"),
                f"status {r['status']} with exit code {r['exit_code']} and {r['controls_failed']} failed control(s)",
            )
        if r["status"] == "withheld" and not r["reason"]:
            c.bad(cl.where(i, "reason"), "a withheld claim needs its reason")
        E.add(("claim", st, rec, "controls"), r["controls"], s_l)
        E.add(("claim", st, rec, "controls_failed"), r["controls_failed"], s_l)


def _inside(path: str, root: str) -> bool:
    rp, rr = os.path.realpath(path), os.path.realpath(root)
    return rp == rr or rp.startswith(rr + os.sep)


# =========================================================================== Ed25519 (RFC 8032), standard library only

# Verification as RFC 8032 section 5.1.7 specifies it, with the strict rules of this checker:
# the public key and R must be 32 bytes that decode to a curve point (y < p; x = 0 with the sign
# bit set is refused) and must not have small order ([8]P is not the identity); S must be
# canonical (S < L); the signature must be 64 bytes; the group equation is the cofactorless
# [S]B = R + [k]A (k = SHA-512(R || A || M) mod L), as OpenSSL and the ``cryptography`` package
# check it. The strictness only refuses more: a signature that passes here passes there.
_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
_IDENTITY = (0, 1, 1, 0)


def _ed_add(p1: tuple, p2: tuple) -> tuple:
    """Sum of two points in extended coordinates (X, Y, Z, T) of the twisted Edwards curve."""
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = 2 * t1 * t2 * _D % _P
    d = 2 * z1 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _ed_mul(s: int, p: tuple) -> tuple:
    q = _IDENTITY
    while s > 0:
        if s & 1:
            q = _ed_add(q, p)
        p = _ed_add(p, p)
        s >>= 1
    return q


def _ed_equal(p1: tuple, p2: tuple) -> bool:
    return (p1[0] * p2[2] - p2[0] * p1[2]) % _P == 0 and (p1[1] * p2[2] - p2[1] * p1[2]) % _P == 0


def _ed_decode(b: bytes) -> tuple | None:
    """The point a 32-byte encoding names, or None (RFC 8032 5.1.3, non-canonical y refused)."""
    if len(b) != 32:
        return None
    n = int.from_bytes(b, "little")
    sign, y = n >> 255, n & ((1 << 255) - 1)
    if y >= _P:
        return None
    u, v = (y * y - 1) % _P, (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    if (v * x * x - u) % _P != 0:
        x = x * _SQRT_M1 % _P
        if (v * x * x - u) % _P != 0:
            return None
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


_BASE = _ed_decode((4 * pow(5, _P - 2, _P) % _P).to_bytes(32, "little"))


def ed25519_problem(public: bytes, message: bytes, signature: bytes) -> str | None:
    """Why ``signature`` is not a valid Ed25519 signature of ``message`` by ``public``, or None."""
    if len(public) != 32:
        return f"public key is {len(public)} bytes, not 32"
    if len(signature) != 64:
        return f"signature is {len(signature)} bytes, not 64"
    a = _ed_decode(public)
    if a is None:
        return "public key is not the encoding of a curve point"
    if _ed_equal(_ed_mul(8, a), _IDENTITY):
        return "public key is a point of small order"
    r = _ed_decode(signature[:32])
    if r is None:
        return "signature's R is not the encoding of a curve point"
    if _ed_equal(_ed_mul(8, r), _IDENTITY):
        return "signature's R is a point of small order"
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return "signature's S is not reduced modulo the group order (S >= L)"
    k = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % _L
    if not _ed_equal(_ed_mul(s, _BASE), _ed_add(r, _ed_mul(k, a))):
        return "signature does not verify"
    return None


# SubjectPublicKeyInfo of an Ed25519 key (RFC 8410): this DER prefix, then the 32 key bytes.
_SPKI_ED25519 = bytes.fromhex("302a300506032b6570032100")


def read_public_key(path: str) -> bytes:
    """The 32 raw bytes of an Ed25519 public key file: PEM SubjectPublicKeyInfo or OpenSSH one-line
    ``ssh-ed25519 BASE64 [comment]`` (the formats ``refspec keygen`` and ssh-keygen write)."""
    with open(path, "rb") as f:
        data = f.read(64 * 1024)
    text = data.decode("ascii", "strict").strip()
    if text.startswith("ssh-ed25519 "):
        blob = base64.b64decode(text.split()[1], validate=True)
        parts, pos = [], 0
        while pos < len(blob):
            n = int.from_bytes(blob[pos : pos + 4], "big")
            parts.append(blob[pos + 4 : pos + 4 + n])
            pos += 4 + n
        if pos != len(blob) or len(parts) != 2 or parts[0] != b"ssh-ed25519" or len(parts[1]) != 32:
            raise ValueError("not an OpenSSH Ed25519 public key")
        return parts[1]
    lines = text.splitlines()
    if not lines or lines[0].strip() != "-----BEGIN PUBLIC KEY-----" or lines[-1].strip() != "-----END PUBLIC KEY-----":
        raise ValueError("not a PEM public key (BEGIN/END PUBLIC KEY) or an OpenSSH ssh-ed25519 line")
    der = base64.b64decode("".join(l.strip() for l in lines[1:-1]), validate=True)
    if len(der) != 44 or not der.startswith(_SPKI_ED25519):
        raise ValueError("not an Ed25519 SubjectPublicKeyInfo")
    return der[12:]


def key_fingerprint(public: bytes) -> str:
    """``SHA256:`` + hex sha256 of the raw 32-byte public key (the seal's keyid)."""
    return "SHA256:" + hashlib.sha256(public).hexdigest()


def dsse_pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding, the bytes the seal's signature covers."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


PAYLOAD_TYPE = "application/vnd.in-toto+json"
_KEYID_RE = re.compile(r"SHA256:[0-9a-f]{64}")
_HEX64_RE = re.compile(r"[0-9a-f]{64}")


class Trust:
    """What the auditor brings from outside the archive: the signer's public key (``--pubkey``), its key
    id (``--expect-keyid``) and the seal this archive must follow (``--expect-previous``)."""

    def __init__(self, pubkey: str | None = None, expect_keyid: str | None = None, expect_previous: str | None = None):
        self.pubkey, self.expect_keyid, self.expect_previous = pubkey, expect_keyid, expect_previous
        self.public: bytes | None = None


def b64_strict(text) -> bytes:
    """Standard padded base64 in canonical form only (it re-encodes to the same text)."""
    if not isinstance(text, str):
        raise ValueError("not a string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as e:
        raise ValueError(f"invalid base64 ({e})") from None
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("non-canonical base64")
    return raw


def check_signature(c: Checker, data: bytes, env, trust: Trust) -> None:
    """The envelope as ``refspec verify`` checks it: canonical JSON of exactly ``payload``,
    ``payloadType`` and one signature ``{keyid, sig}``, canonical base64, the in-toto payload type,
    the keyid equal to the fingerprint of ``--pubkey`` (itself equal to ``--expect-keyid`` when
    given), and the Ed25519 signature over the DSSE pre-authentication encoding (``ed25519_problem``).
    Without ``--pubkey`` the signature cannot be checked, which is a mismatch."""
    w = "SEAL.dsse.json"
    if not isinstance(env, dict):
        c.bad(w, "not a DSSE envelope (not a JSON object)")
        return
    if set(env) != {"payload", "payloadType", "signatures"}:
        c.bad(w, f"envelope fields {sorted(env)} are not payload, payloadType, signatures")
    elif canonical(env) + b"\n" != data:
        c.bad(w, "envelope is not in canonical form (modified)")
    ptype = env.get("payloadType")
    if ptype != PAYLOAD_TYPE:
        c.bad(w, f"payload type {ptype!r} is not {PAYLOAD_TYPE!r}")
    try:
        payload = b64_strict(env.get("payload"))
    except ValueError as e:
        c.bad(w, f"payload: {e}")
        return
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        c.bad(w, "expected exactly one signature")
        return
    s = sigs[0]
    if set(s) != {"keyid", "sig"}:
        c.bad(w, f"signature fields {sorted(s)} are not keyid, sig")
    if trust.public is None:
        c.bad(w, "signature not checked: give the signer's public key with --pubkey KEY.pub (from outside the archive)")
        return
    fp = key_fingerprint(trust.public)
    if trust.expect_keyid is not None and fp != trust.expect_keyid:
        c.bad(
            w,
            f"public key {fp} is not the pinned signer {trust.expect_keyid} (take the key id from outside the archive)",
        )
    if s.get("keyid") != fp:
        c.bad(w, f"signed by {s.get('keyid')!r}, expected {fp}")
    try:
        sig = b64_strict(s.get("sig"))
    except ValueError as e:
        c.bad(w, f"signature: {e}")
        return
    c.compared += 1
    why = ed25519_problem(trust.public, dsse_pae(ptype if isinstance(ptype, str) else "", payload), sig)
    if why is None:
        c.matched += 1
    else:
        c.bad(w, f"Ed25519 signature refused with key {fp}: {why}")


def check_seal(c: Checker, sp: str, trust: Trust) -> None:
    """The seal: its signature (``check_signature``), the chain (``--expect-previous``), every
    statement subject's sha256 and size, and the closed world (every archive file is a subject)."""
    try:
        with open(sp, "rb") as f:
            data = f.read()
        env = json.loads(data)
        check_signature(c, data, env, trust)
        statement = json.loads(base64.b64decode(env["payload"], validate=True))
        subjects = statement["subject"]
        if not isinstance(subjects, list):
            raise ValueError("subject is not a list")
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        c.unread("SEAL.dsse.json", f"not a DSSE envelope over a statement ({e})")
        return
    except RecursionError:
        c.unread("SEAL.dsse.json", "not a DSSE envelope over a statement (JSON nested too deeply)")
        return
    if trust.expect_previous is not None:
        pred = statement.get("predicate") if isinstance(statement, dict) else None
        prev = pred.get("previous_seal_sha256") if isinstance(pred, dict) else None
        want = None if trust.expect_previous == "none" else trust.expect_previous
        if prev != want:
            c.bad(
                "SEAL.dsse.json",
                f"previous seal is {prev or 'none'}, expected {want or 'none'} (an older or unrelated seal?)",
            )
    check_reproduces(c, statement)
    listed = set()
    for j, s in enumerate(subjects):
        try:
            name = s["name"]
            digest = s["digest"]["sha256"]
        except (KeyError, TypeError):
            c.unread(f"SEAL.dsse.json: subject[{j}]", "no name or sha256")
            continue
        size = s.get(
            "size", (s.get("annotations") or {}).get("size") if isinstance(s.get("annotations"), dict) else None
        )
        listed.add(name)
        where = f"SEAL.dsse.json: subject {name!r}"
        p = os.path.normpath(os.path.join(c.archive, name))
        if not _inside(p, c.archive):
            c.bad(where, "names a path outside the archive")
            continue
        if not os.path.isfile(p):
            c.bad(where, "file is missing")
            continue
        c.files.add(p)
        c.compared += 1
        got = sha256_file(p)
        if got != digest:
            c.bad(where, f"sha256 {got[:16]}... != sealed {str(digest)[:16]}... (file changed after sealing)")
        else:
            c.matched += 1
        if size is not None and os.path.getsize(p) != size:
            c.bad(where, f"size {os.path.getsize(p)} != sealed {size}")
    for rel in sorted(c.tree):
        if rel != "SEAL.dsse.json" and rel not in listed:
            c.bad("SEAL.dsse.json", f"{rel} is in the archive but not covered by the seal")


def check_reproduces(c: Checker, statement) -> None:
    """A reproduction's seal names the archive it reproduces (``predicate.reproduces``:
    seal_sha256, keyid, archive_id; refspec reproduce). Its format is checked and it is shown;
    the reproduced archive itself is not needed here (refspec compare compares the two)."""
    pred = statement.get("predicate") if isinstance(statement, dict) else None
    if not isinstance(pred, dict) or "reproduces" not in pred:
        return
    r = pred["reproduces"]
    where = "SEAL.dsse.json: predicate.reproduces"
    if not isinstance(r, dict):
        c.bad(where, "is not an object")
        return
    seal, keyid, aid = r.get("seal_sha256"), r.get("keyid"), r.get("archive_id")
    if not (isinstance(seal, str) and _HEX64_RE.fullmatch(seal)):
        c.bad(where, "seal_sha256 is not a sha256")
    if not (isinstance(keyid, str) and _KEYID_RE.fullmatch(keyid)):
        c.bad(where, "keyid is not of the form SHA256:<64 hex digits>")
    if not isinstance(aid, str):
        c.bad(where, "archive_id is not a string")
    c.reproduces = f"seal {seal} key {keyid} archive {aid}"


def check_tree(c: Checker) -> None:
    """Walk the whole archive (never following a link): a symbolic link anywhere (to a file or a
    folder, inside or outside the archive) and anything but regular files and folders are
    mismatches; the regular files are recorded in ``c.tree`` for the seal's closed world."""
    for dirpath, dirs, files in os.walk(c.archive, followlinks=False):
        for name in sorted(dirs + files):
            full = os.path.join(dirpath, name)
            rel = posix_rel(full, c.archive)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                c.bad(rel, f"symbolic link (to {os.readlink(full)!r}) in the archive")
            elif stat.S_ISREG(st.st_mode):
                c.tree.add(rel)
            elif not stat.S_ISDIR(st.st_mode):
                c.bad(rel, "not a regular file or folder")


def parse_args(argv: list[str]):
    import argparse

    ap = argparse.ArgumentParser(
        prog="check.py", description="Recompute and check every number of a refspec archive (standard library only)."
    )
    ap.add_argument("archive", metavar="ARCHIVE")
    ap.add_argument("--quiet", action="store_true", help="print only the summary lines")
    ap.add_argument("--unsealed", action="store_true", help="check a results folder before it is sealed")
    ap.add_argument("--pubkey", metavar="KEY.pub", help="the signer's Ed25519 public key (PEM or OpenSSH)")
    ap.add_argument("--expect-keyid", metavar="SHA256:HEX", help="the signer's key id; the public key must have it")
    ap.add_argument("--expect-previous", metavar="SHA", help="sha256 of the seal this archive follows ('none': first)")
    a = ap.parse_args(argv)
    if a.expect_keyid is not None:
        k = a.expect_keyid
        k = "SHA256:" + k[7:].lower() if k[:7].upper() == "SHA256:" else k
        if not _KEYID_RE.fullmatch(k):
            ap.error(f"--expect-keyid {a.expect_keyid!r} is not of the form SHA256:<64 hex digits>")
        a.expect_keyid = k
    if a.expect_previous is not None:
        a.expect_previous = a.expect_previous.lower()
        if a.expect_previous != "none" and not _HEX64_RE.fullmatch(a.expect_previous):
            ap.error(f"--expect-previous {a.expect_previous!r} is not a sha256 or 'none'")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(list(sys.argv[1:] if argv is None else argv))
    trust = Trust(a.pubkey, a.expect_keyid, a.expect_previous)
    if a.pubkey is not None:
        try:
            trust.public = read_public_key(a.pubkey)
        except (OSError, ValueError) as e:
            print(f"UNREADABLE {a.pubkey}: not an Ed25519 public key ({e})")
            print("FAIL: " + a.archive)
            return EXIT_UNREADABLE
    code, c = check(a.archive, a.quiet, a.unsealed, trust)
    if not a.quiet:
        for p in c.unreadable:
            print(f"UNREADABLE {p}")
        for p in c.problems:
            print(f"MISMATCH {p}")
    print(
        f"check: {c.recomputed} numbers recomputed; {c.matched} of {c.compared} comparisons matched; "
        f"{c.identities} identities; {len(c.files)} files checked; {len(c.problems)} mismatches; "
        f"{len(c.unreadable)} unreadable"
    )
    if c.reproduces is not None:
        print("reproduces: " + c.reproduces)
    print(("OK: " if code == EXIT_OK else "FAIL: ") + a.archive)
    return code


# =========================================================================== comparison archives (refspec compare)

COMPARISON_FORMAT = "refspec-comparison/1"
_CS, _CI, _CF = S, I, F
COMPARE_COLUMNS = {
    "comparisons": dict(
        section=S,
        item=S,
        title=S,
        table=S,
        kind=S,
        campaign=S,
        family=S,
        cap=I,
        path=S,
        comparison=S,
        numerator=S,
        denominator=S,
        rows_a=I,
        rows_b=I,
        rows_differing=I,
        a_value=F,
        a_lo=F,
        a_hi=F,
        b_value=F,
        b_lo=F,
        b_hi=F,
        ratio=F,
        lo=F,
        hi=F,
        n_tasks=I,
        n_sessions_a=I,
        n_sessions_b=I,
        draws=I,
        seed=I,
        band=F,
        verdict=S,
        reason=S,
    ),
    "differences": dict(finding=S, key=S, column=S, a=S, b=S, detail=S),
}
# the preservation findings (refspec.compare.preservation.FINDINGS): id -> (table, key, columns)
COMPARE_FINDINGS = {
    "qualification": (
        "qualification",
        ("campaign", "family", "task_id", "arm", "cap"),
        ("n_required", "n_matching", "qualified"),
    ),
    "first_divergence": (
        "qualification",
        ("campaign", "family", "task_id", "arm", "cap"),
        ("first_diff_index", "ref_token", "arm_token"),
    ),
    "endpoints": (
        "endpoints",
        ("campaign", "family", "task_id", "arm", "cap", "session", "repeat"),
        ("endpoint_sha256",),
    ),
    "replay": ("replay", ("family", "layer", "phase", "q", "stage"), ("pq_eq_qb", "mq_eq_pq", "control_ok")),
    "phase_masks": ("phase_masks", ("family", "mask"), ("passes", "minimal")),
    "partition": (
        "partition",
        ("family", "task_id", "arm", "repeat"),
        ("endpoint_class", "kv_class", "logits_class", "first_diff_vs_A"),
    ),
    "crosses": (
        "crosses",
        ("family", "task_id", "direction", "selector", "repeat"),
        ("outcome", "distinguishable", "first_diff_vs_recipient"),
    ),
}


# columns a finding compares that the report's own checks do not read
COMPARE_EXTRA = {"partition": dict(family=S), "crosses": dict(family=S, first_diff_vs_recipient=I)}


def _statement_of(c: Checker, path: str, where: str):
    try:
        with open(path, "rb") as f:
            return json.loads(base64.b64decode(json.loads(f.read())["payload"], validate=True))
    except (OSError, ValueError, KeyError, TypeError) as e:
        c.unread(where, f"not a DSSE envelope over a statement ({e})")
        return None


def compare_inputs_read(c: Checker, lab: str, compares: dict) -> dict:
    """The carried records of archive ``lab`` (inputs/a, inputs/b): its seal must be the one the comparison's
    statement names, and every carried file must be that seal's subject with the sealed sha256."""
    d = os.path.join(c.archive, "inputs", lab)
    sp = os.path.join(d, "SEAL.dsse.json")
    out: dict = {}
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
    tables = {}
    for name in ("requests", "qualification", "ratios", "estimates") + tuple(
        dict.fromkeys(v[0] for v in COMPARE_FINDINGS.values())
    ):
        p = os.path.join(d, "tables", name + ".csv")
        if os.path.isfile(p) and name not in tables:
            t = read_csv_table(c, name, p, posix_rel(p, c.archive), dict(COLUMNS[name], **COMPARE_EXTRA.get(name, {})))
            if t is not None:
                tables[name] = t.rows
    out["tables"] = tables
    return out


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
    iv = lambda xs: [math.exp(percentile(sorted(xs), p)) for p in (2.5, 97.5)]  # noqa: E731
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
    )


def check_comparison(c: Checker, rep: Report, unsealed: bool, trust: Trust) -> tuple[int, Checker]:
    """A comparison archive (anc/compare.md): every number of its report and its tables recomputed from the
    records it carries (inputs/a, inputs/b), which must be the compared archives' sealed files."""
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
    sp = os.path.join(c.archive, "SEAL.dsse.json")
    st = _statement_of(c, sp, "SEAL.dsse.json") if os.path.isfile(sp) else None
    compares = ((st or {}).get("predicate") or {}).get("compares") if isinstance(st, dict) else None
    if compares is None:
        plan = read_plan(c) or {}
        compares = {k: plan.get(k) for k in ("a", "b")}
        if st is not None:
            c.bad("SEAL.dsse.json", "the statement does not name the compared archives (predicate.compares)")
    ins = {lab: compare_inputs_read(c, lab, compares or {}) for lab in ("a", "b")}
    E = Expected(c)
    src = posix_rel(os.path.join(c.archive, "tables", "comparisons.csv"), rep.dir)
    if "comparisons" in tables:
        t = tables["comparisons"]
        got_diffs = {}
        for i, row in enumerate(t.rows):
            item = row["item"]
            if row["section"] == "preservation" and item in COMPARE_FINDINGS:
                table = COMPARE_FINDINGS[item][0]
                ta = ins["a"].get("tables", {}).get(table)
                tb = ins["b"].get("tables", {}).get(table)
                ra_, rb_, nd, verdict, cells = recompute_finding(item, ta, tb)
                got_diffs.update({(item, k, col): v for (k, col), v in cells.items()})
                for col, val in (("rows_a", ra_), ("rows_b", rb_), ("rows_differing", nd)):
                    c.same(t.where(i, col), row[col], val)
                    E.add(("cmp", item, col), val, src)
                c.same(t.where(i, "verdict"), row["verdict"], verdict)
            elif row["section"] == "timing":
                for col in ("a_value", "b_value"):
                    stated = None
                    lab = col[0]
                    for r in ins[lab].get("tables", {}).get("ratios" if row["kind"] == "ratio" else "estimates", []):
                        if row["kind"] == "ratio" and (
                            r["campaign"],
                            r["family"],
                            r["cap"],
                            r["numerator"],
                            r["denominator"],
                        ) == (row["campaign"], row["family"], row["cap"], row["numerator"], row["denominator"]):
                            stated = r["ratio"]
                        if row["kind"] == "estimate" and (r["family"], r["path"], r["comparison"]) == (
                            row["family"],
                            row["path"],
                            row["comparison"],
                        ):
                            stated = r["estimate"]
                            if row[lab + "_lo"] is not None:
                                for b_ in ("lo", "hi"):
                                    c.same(t.where(i, lab + "_" + b_), row[lab + "_" + b_], r[b_])
                                    E.add(("cmp", item, lab + "_" + b_), r[b_], src)
                    c.same(t.where(i, col), row[col], stated, "the compared archive's value")
                    if stated is not None:
                        E.add(("cmp", item, col), stated, src)
                E.add(("cmp", item, "band"), row["band"], src)
                if row["ratio"] is None:
                    continue
                try:
                    rc = recompute_timing(row, ins)
                except (KeyError, ZeroDivisionError, ValueError, IndexError) as e:
                    c.bad(t.where(i), f"cannot recompute the timing from the carried requests ({e})")
                    continue
                for col, val in (
                    ("ratio", rc["ratio"]),
                    ("lo", rc["lo"]),
                    ("hi", rc["hi"]),
                    ("n_tasks", rc["n_tasks"]),
                    ("n_sessions_a", rc["n_sessions_a"]),
                    ("n_sessions_b", rc["n_sessions_b"]),
                ):
                    c.same(t.where(i, col), row[col], val)
                    if col in ("ratio", "lo", "hi"):
                        E.add(("cmp", item, col), val, src)
                for lab, pt in (("a", rc["a_point"]), ("b", rc["b_point"])):
                    stated = row[lab + "_value"]
                    if stated is not None and abs(pt - stated) > 1e-9 * max(1.0, abs(stated)):
                        c.bad(t.where(i, lab + "_value"), f"not the value the carried requests give ({pt!r})")
                if row["kind"] == "ratio":
                    for lab in ("a", "b"):
                        for k, b_ in enumerate(("lo", "hi")):
                            c.same(t.where(i, lab + "_" + b_), row[lab + "_" + b_], rc[lab + "_iv"][k])
                            E.add(("cmp", item, lab + "_" + b_), rc[lab + "_iv"][k], src)
                band = row["band"]
                if row["verdict"] != "not comparable":
                    want = (
                        "reproduced"
                        if (rc["lo"] <= 1.0 <= rc["hi"] or (1.0 / band <= rc["lo"] and rc["hi"] <= band))
                        else "differs"
                    )
                    c.same(t.where(i, "verdict"), row["verdict"], want)
        if "differences" in tables:
            td = tables["differences"]
            stated = {
                (r["finding"], r["key"], r["column"]): (r["a"], r["b"])
                for r in td.rows
                if r["finding"] in COMPARE_FINDINGS
            }
            for k in sorted(set(stated) | set(got_diffs)):
                c.same(f"{td.rel} [{' '.join(k)}]", stated.get(k), got_diffs.get(k), "differing cell (A, B)")
    stated_nums = check_numbers(c, E, rep)
    check_html(c, E, rep, stated_nums)
    check_tex(c, E, rep, stated_nums)
    check_provenance(c, rep)
    if os.path.isfile(sp):
        check_seal(c, sp, trust)
    elif not unsealed:
        c.bad(
            "SEAL.dsse.json",
            "missing: the archive is not sealed (pass --unsealed to check a results folder before sealing)",
        )
    return (EXIT_UNREADABLE if c.unreadable else EXIT_MISMATCH if c.problems else EXIT_OK), c


if __name__ == "__main__":
    sys.exit(main())
