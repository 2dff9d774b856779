"""The archive's contract as the checker knows it: the campaigns' names, the tables and their column types
(COLUMNS, STATE_COLUMNS, the comparison archive's COMPARE_COLUMNS), and reading the CSV copies and plan.json."""

from __future__ import annotations

import csv
import math
import os

from refspec_check import jsonio
from refspec_check.names import REFERENCE_ARM, TWIN_SUFFIX  # noqa: F401 (the contract's names, for its callers)
from refspec_check.problems import Checker

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

LEDGER_KIND_KEYS = ("kind", "event", "type")


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
        cpu_ns=I,
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
        device=S,
        device_description=S,
        gpu_layers=I,
        draft_gpu_layers=I,
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
        arm_margin=F,
        divergence=S,
        near_tie_bound=F,
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
        df=F,
        n_tasks=I,
        n_regressions=I,
        regressed_tasks=S,
        threshold=F,
        floor=F,
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
        cpu_value=F,
        lo=F,
        hi=F,
        units=I,
        df=F,
        sessions=I,
        tasks=I,
        threshold=F,
        floor=F,
        mde=F,
        units_needed=I,
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
        steal_percent=F,
        busy_threshold=F,
        busy=B,
    ),
    "variance": dict(
        campaign=S,
        family=S,
        cap=I,
        design=S,
        processes=I,
        requests=I,
        between=F,
        within=F,
        interaction=F,
        share_between=F,
        sd_between=F,
        sd_within=F,
        sd_interaction=F,
        reason=S,
    ),
    "sizing": dict(
        campaign=S,
        family=S,
        target=F,
        budget_s=F,
        processes=I,
        repeats=I,
        expected_detectable=F,
        expected_seconds=F,
        reachable=B,
        reason=S,
        achieved_detectable=F,
        achieved_intervals=I,
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
        cpu_ratio=F,
        n_tasks=I,
        n_regressions=I,
        regressed_tasks=S,
        reason=S,
        design=S,
        units=I,
        lo=F,
        hi=F,
        verdict=S,
        detectable=F,
    ),
    "replay": dict(
        family=S,
        layer=I,
        phase=S,
        q=I,
        stage=S,
        pq_eq_qb=B,
        pq_eq_qh=B,
        mq_eq_pq=B,
        max_abs_mq=F,
        max_ulp_mq=I,
        first_diff=I,
        visible_keys=I,
        device_refused=S,
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
    "partition_screen": dict(
        family=S,
        task_id=S,
        arm=S,
        prompt_len=I,
        degenerate=B,
        kv_sha256=S,
        logits_sha256=S,
        kv_class=I,
        logits_class=I,
        differs=B,
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
        note=S,
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
    "graph_size": dict(
        family=S,
        device=S,
        layout=S,
        q=I,
        status=S,
        micrographs=I,
        nodes=I,
        dispatches=I,
        splits=I,
        reason=S,
    ),
    "claims": dict(stage=S, record=S, claim=S, status=S, exit_code=I, controls=I, controls_failed=I, reason=S),
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

# the divergence screen (check_screen)
SCREEN_COLUMNS = {
    "divergence_screen": dict(
        family=S,
        task_id=S,
        arm=S,
        rank=I,
        prompt_tokens=I,
        risk_margin=F,
        exposed=B,
        control=B,
        status=S,
        n_tokens=I,
        stop_reason=S,
        first_diff_index=I,
        ref_token=I,
        arm_token=I,
        ref_margin=F,
        arm_margin=F,
        divergence=S,
        near_tie_bound=F,
    ),
}

COLUMNS.update(STATE_COLUMNS)
COLUMNS.update(SCREEN_COLUMNS)

# the columns a table carries that the recomputation does not read (the rest of its table spec,
# report/refspec_check/schemas/tables): with COLUMNS, every column a table of the archive may have
CARRIED_COLUMNS = {
    "admission": ("device", "nodes", "supports_cpu", "observed"),
    "crosses": (
        "family",
        "prompt_len",
        "layers",
        "parts",
        "p0",
        "p1",
        "selected_bytes",
        "value_bytes",
        "recipient_kv_sha256",
        "donor_kv_sha256",
        "recipient_logits_sha256",
        "last_token",
        "first_diff_vs_recipient",
        "first_diff_vs_donor",
        "repeats_agree",
        "controls_ok",
    ),
    "frontier": (
        "family",
        "donor_arm",
        "recipient_arm",
        "score_empty",
        "max_abs_delta_first",
        "max_abs_delta_second",
        "max_abs_delta_joint",
        "rows_sha256",
        "repeats_agree",
    ),
    "kv_diff": ("family", "cells_differing", "first_cell", "first_position", "elements_differing"),
    "partition": (
        "family",
        "ub",
        "partition",
        "cap",
        "callers",
        "micrographs",
        "initial_token",
        "initial_margin",
        "kv_bytes",
        "kv_payload",
        "logits_payload",
    ),
    "partition_screen": ("ub", "partition", "callers", "micrographs", "initial_token", "initial_margin", "kv_bytes"),
    "projection": ("src0_type", "src0_ne", "src0_buffer", "src1_name", "src1_type", "src1_ne", "out_type"),
}
TABLE_NAMES = (
    (
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
        "variance",
        "sizing",
    )
    + tuple(STATE_COLUMNS)
    + tuple(SCREEN_COLUMNS)
)


def parse_value(kind: str, text: str):
    if kind == L:
        t = text.strip()
        if t.startswith("["):
            try:
                v = jsonio.loads(t)
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


def posix_rel(path: str, start: str) -> str:
    """``path`` relative to ``start``, with ``/`` separators."""
    return os.path.relpath(path, start).replace(os.sep, "/")


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
    """The archive's plan.json, or None when absent, not JSON or not a JSON object (recorded as unreadable)."""
    plan = None
    plan_path = os.path.join(c.archive, "plan.json")
    if os.path.isfile(plan_path):
        try:
            with open(plan_path, encoding="utf-8") as f:
                plan = jsonio.load(f)
        except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
            c.unread("plan.json", f"not JSON ({e})")
        if plan is not None and not isinstance(plan, dict):
            c.unread("plan.json", f"not a JSON object (a {type(plan).__name__})")
            plan = None
    return plan


COMPARISON_FORMAT = "refspec-comparison/1"

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
    "replay": (
        "replay",
        ("family", "layer", "phase", "q", "stage"),
        ("pq_eq_qb", "pq_eq_qh", "mq_eq_pq", "control_ok"),
    ),
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


# ----------------------------------------------------------------------- the archive's data records
# The closed world of a sealed archive's data (files.check_data_records refuses anything else) and
# the part of it a report may quote as a label (bound.Records reads labels from nothing else).

#: the run's records at the top of the archive (refspec.pipeline.seal_chain.assemble; a comparison's own)
RUN_RECORDS = ("plan.json", "manifest.json", "ledger.jsonl")

#: a campaign's records, in campaigns/NAME/ or campaigns/FAMILY/NAME/ (seal_chain.CAMPAIGN_RECORDS)
CAMPAIGN_RECORDS = (
    "plan.json",
    "screen.json",
    "exposed-panel.jsonl",
    "ledger.jsonl",
    "journal.jsonl",
    "timed_audit.json",
    "phase_mask_summary.json",
    "prediction.json",
    "e1_summary.json",
    "summary.json",
    "claim.json",
    "audit_summary.json",
    "partition-screen.json",
    "partition.json",
    "crosses.json",
    "admission.json",
    "projection.json",
)

#: what a comparison archive carries of each compared archive, in inputs/a and inputs/b
#: (refspec.compare.archive): its seal, plan and manifest, and the CSV copies of the tables compared
COMPARED_INPUTS = ("a", "b")
COMPARED_RECORDS = ("SEAL.dsse.json", "plan.json", "manifest.json")
#: the tables of a compared archive that refspec compare reads and carries (refspec.compare.TABLES_READ)
COMPARED_TABLES = tuple(
    dict.fromkeys(tuple(v[0] for v in COMPARE_FINDINGS.values()) + ("requests", "ratios", "estimates", "noise"))
)

#: numbers.json (refspec_check.render.render, refspec_check.render.comparison): its keys and each number's
NUMBERS_KEYS = ("format", "renderer", "provenance", "findings", "headline", "numbers")
NUMBER_KEYS = ("id", "table", "row", "column", "value", "fmt", "text", "source")
#: the provenance values of numbers.json, each shown in the report (an archive's, then a comparison's)
PROVENANCE_KEYS = (
    "manifest_sha256",
    "host",
    "reproduces",
    "reproduces_accepted",
    "reproduces_host",
    "plan_sha256",
    "ledger_sha256",
    "seal_sha256",
    "data_seal_sha256",
    "pubkey_fingerprint",
    "devices",
    "device",
    "device_driver",
    "device_api",
    "device_device_type",
    "device_headers",
    "device_glslc",
    "device_env",
    "a_seal_sha256",
    "a_keyid",
    "a_archive_id",
    "a_registered_plan_sha256",
    "b_seal_sha256",
    "b_keyid",
    "b_archive_id",
    "b_registered_plan_sha256",
)

#: the kinds of a ledger record (ledger.jsonl and a campaign's ledger.jsonl, anc/ledger.md; the first
#: string among LEDGER_KIND_KEYS): a campaign's and its engine's, the run's, a comparison's events
#: (verified, compared)
LEDGER_KINDS = (
    "analysis",
    "assemble",
    "attempt",
    "block_load",
    "campaign_run",
    "excluded_warmup",
    "failure",
    "freeze_check",
    "gap_wait",
    "interruption",
    "mismatch",
    "plan_amendment",
    "plan_frozen",
    "run_end",
    "run_start",
    "session_end",
    "session_start",
    "stage_claim",
    "submit",
    "worker_exit",
    "worker_start",
    "worker_stopped",
    "verified",
    "compared",
)
#: every key a ledger record may have (refspec.provenance.ledger adds seq, time and prev_sha256)
LEDGER_KEYS = LEDGER_KIND_KEYS + (
    "seq",
    "time",
    "prev_sha256",
    "reason",
    "campaign",
    "family",
    "session",
    "worker",
    "arm",
    "arms",
    "block",
    "pid",
    "outcome",
    "status",
    "task_id",
    "cap",
    "repeat",
    "attempt",
    "retry_of",
    "order_index",
    "submit_seq",
    "last_seq",
    "endpoint_sha256",
    "ref_endpoint_sha256",
    "first_diff_index",
    "t_ns",
    "engine_ns",
    "exit_code",
    "run",
    "planned_remaining",
    "resumed",
    "incomplete",
    "ledger",
    "ledger_head_sha256",
    "ledger_records",
    "plan",
    "plan_sha256",
    "plan_file_sha256",
    "field",
    "value",
    "stage",
    "record",
    "controls",
    "controls_failed",
    "mismatches",
    "requests_compared",
    "tables",
    "before",
    "after",
    "busy",
    "busy_threshold",
    "gap_s",
    "wait_s",
    "not_before",
    "device",
    "gpu_layers",
    "identity_sha256",
    "load_s",
    "url",
    "archive",
    "seal_sha256",
    "keyid",
    "preservation_same",
)
#: the keys of a ledger record a report shows, or finds the record by: its kind (the ledger table) and
#: the reason a refused arm's row quotes, with the campaign, family and arm it belongs to
LEDGER_SHOWN = LEDGER_KIND_KEYS + ("reason", "campaign", "family", "arm")


def table_columns(name: str) -> tuple[str, ...]:
    """Every column table ``name`` of the archive may have (empty for no table of the format)."""
    if name in COMPARE_COLUMNS:
        return tuple(COMPARE_COLUMNS[name])
    return tuple(COLUMNS.get(name, ())) + CARRIED_COLUMNS.get(name, ())


def ledger_kind(rec) -> str | None:
    """A ledger record's kind: the first string among ``LEDGER_KIND_KEYS`` (None for none)."""
    if isinstance(rec, dict):
        for k in LEDGER_KIND_KEYS:
            if isinstance(rec.get(k), str):
                return rec[k]
    return None


#: the claim of each controlled stage, word for word as ``refspec claim`` records it (its one owner:
#: refspec.provenance.claims imports it)
CLAIMS = {
    "replay": "PQ and QB give bitwise equal stage outputs on every captured context; MQ differences as tabled",
    "audit": "every clean fixture agrees with the address oracle and every injected fault is detected",
    "partition": "the partition arms' endpoints, KV bytes and initial logits fall into the tabled classes",
    "crosses": "the subset interventions give the tabled outcome classes and frontier contrasts",
    "admission": "the tabled supports_op verdicts and observed placements of the lifted shapes",
    "projection": "the captured first-layer norm and projection calls replay bitwise on fixed operands; exclusions as tabled",
}
