"""The ``servers`` campaign: black-box llama.cpp servers qualified against refspec's reference (``anc/servers.md``).

On the campaign's panel: R (refspec's own micro-batch-1 reference on the configured build and
the family's model files), then server arms (``kind: server`` in the arms file) — by default
stock ``llama-server`` without and with the draft (k = 3), and patched ``llama-server`` with
``LLAMA_ATTN_LAYOUT=qb`` without and with the draft — and refspec's own C3 worker beside the
patched server with the draft, on the same requests. Blocks run in rounds (the reference first,
the other arms in a counterbalanced order), each block on a fresh server or worker.

Output, like every campaign: matching complete endpoints per arm (``qualification``, first
divergences with the reference's margin there), the qualified ratios of the registered pairs
(``ratios``: every arm over R, C3 over the patched server with the draft, the draft's and the
layout's effect on the server) and, in their own table, the diagnostic timings of the pairs with
an unqualified side (``diagnostics``). Server arms at an existing URL are marked: refspec could
not make their processes fresh.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.arms import REFERENCE_ARM
from ..core.stats import aa_rule_of
from ..native import build as native
from ..native.cmake import BUILD_RECORD
from .confirmation import counts_text, diagnostics_text, named_arms, ratios_text, round_sessions
from .derived import diagnostics_table, ratios_table


def panels(defn: dict) -> dict:
    return {"confirm": defn["panel"]}


def arms(defn: dict, catalog: dict) -> list:
    return named_arms(defn, catalog)


def schedule(ctx) -> list:
    return round_sessions(ctx, "confirm")


def pairs(ctx) -> list:
    """The qualified-ratio pairs over the campaign's arms, numerator first (diagnostics: the
    registered pairs :data:`refspec.campaigns.derived.DIAGNOSTIC_PAIRS`, which the checker knows)."""
    names = list(ctx.arms)
    servers = [n for n in names if ctx.arms[n].kind == "server"]
    workers = [n for n in names if n != REFERENCE_ARM and ctx.arms[n].kind != "server"]
    out = [(n, REFERENCE_ARM) for n in names if n != REFERENCE_ARM]
    spec_patched = [n for n in servers if ctx.arms[n].speculative and ctx.arms[n].settings.build == "patched"]
    for w in workers:  # refspec's own worker beside the patched server with the draft
        out += [(w, s) for s in spec_patched if ctx.arms[w].speculative]
    for a in servers:  # the draft's effect, and the layout's, on one server build / one mode
        for b in servers:
            A, B = ctx.arms[a], ctx.arms[b]
            if a == b:
                continue
            same_build = A.settings.build == B.settings.build and A.settings.url == B.settings.url
            if same_build and A.speculative and not B.speculative:
                out.append((a, b))
            if A.mode == B.mode and A.settings.build == "patched" and B.settings.build == "stock":
                out.append((a, b))
    seen, uniq = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq


def freshness_text(ctx) -> str:
    lines = []
    for n, a in ctx.arms.items():
        if a.kind != "server":
            continue
        s = a.settings
        where = (
            f"existing server at {s.url}: NOT started by refspec, fresh processes per block cannot be guaranteed"
            if s.url
            else f"{s.build} llama-server started by refspec on a loopback port, fresh per block"
        )
        env = f", LLAMA_ATTN_LAYOUT={s.attn_layout}" if s.attn_layout else ""
        lines.append(f"  {n:14s} {a.mode:6s} {where}{env}; -ub {a.ub}" + (f", draft k={a.k}" if a.speculative else ""))
    return f"server arms (threads {ctx.threads}):\n" + "\n".join(lines)


def execute(ctx) -> None:
    variants = sorted({a.settings.build for a in ctx.arms.values() if a.kind == "server" and a.settings.build})
    if variants:  # build the servers before the first session (outside every timed interval)
        rec = json.loads((Path(ctx.run.s.lib_dir).parent.parent / BUILD_RECORD).read_text())
        for v in variants:
            native.build_server(native.BuildOptions(**rec["options"]), v)
    prev = None
    for sp in ctx.sessions:
        ctx.run.run_session(sp, prev)
        prev = sp.id


def analyze(ctx, base: dict) -> dict:
    ratios = ratios_table(
        base["requests"], base["qualification"], ctx.name, pairs=pairs(ctx), aa_rule=aa_rule_of(ctx.plan)
    )
    diag = diagnostics_table(base["requests"], base["qualification"], ctx.name)
    d = ctx.defn
    text = "\n".join(
        [
            counts_text(
                ctx,
                base,
                f"Servers: {len(ctx.task_ids('confirm'))} task(s), cap {d['cap']}, "
                f"{d['sessions']} session(s) x {d['repeats']} repeat(s); matching complete "
                "endpoints per arm against refspec's reference R",
            ),
            "",
            freshness_text(ctx),
            "",
            "Qualified ratios (numerator time / denominator time; complete HTTP requests):",
            ratios_text(ratios),
            "",
            "Diagnostic timings (not qualified; never mixed with the qualified ratios):",
            diagnostics_text(diag) if diag else "none: every registered pair qualified",
        ]
    )
    return {"tables": {"ratios": ratios, "diagnostics": diag}, "text": text}
