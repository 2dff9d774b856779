"""The arms at a glance (every recipe the archive's requests ran, with its role) and the glossary of
the report's words.

**Arms.** One row per arm code and recipe, from the ``requests`` rows: mode, target micro-batch
capacity (``ub``), layout, phase mask (``mask``), proposals per cycle (``k``, speculative arms
only), the drafts, the campaigns it ran in and its role there. A role is read from what the archive
states, per campaign the arm ran in:

* the campaign's reference (its frozen plan's ``definition.reference``, else R): "the reference";
* an A/A twin (a name ending in ``_aa``: refspec refuses any other arm so named, and the definition's
  ``aa_arm`` runs as that twin): "A/A twin";
* in the phase-mask sweep and the width sweep, their own arms: "phase-mask sweep arm", "width sweep arm";
* in the prediction, the live arm (``prediction.csv``'s ``live_arm``, the plan's ``live_arm``),
  the chosen predictor (``predictor``, the plan's ``prediction_selection``) and the other candidates;
* elsewhere an unrepaired control (phase mask 0 with micro-batch above 1, :mod:`refspec_check.render.vacuity`),
  a repaired arm (a layout other than ``mq`` switched on in a target phase: mask bit 1 or 2) or,
  failing both, a compared arm.

*Engine*: where an arm's plan record (plan.json, the campaign's ``arms``) names a ``kind`` other than
refspec's own worker, the table gains an ``engine`` column after the arm: "llama.cpp" for refspec's
worker, "llama-server" for a server arm, "OpenVINO GenAI" with its pipeline for an OpenVINO arm. There
micro-batch is the engine's tokens a step, layout ``mq`` its native attention and phase mask 0 no repair
(``anc/openvino.md``). An archive of refspec's worker alone has no such column.

Rows are sorted by :func:`refspec.campaigns.derived.arm_sort_key` (digit runs numerically, so C_m2
before C_m10). ``report/check.py`` recomputes every row on its own (``refspec_check/arms.py``):
change one only together with the other.

**Glossary.** Fixed text: the report's words and the grammar of the arm codes, without digits (the
codes with digits are the archive's own names, listed in the arms table).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from refspec_check.names import REFERENCE_ARM, arm_sort_key, is_twin

from ..document import DASH, Archive, Cell, Numbers, Section, ShownTable, Table, read_json, table_section
from ..vacuity import is_unrepaired

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
# the target phases of the phase mask (target prefill, target continuation)
TARGET_PHASES = 0b11
ARMS_HEADER = ["arm", "mode", "micro-batch", "layout", "phase mask", "proposals", "draft", "campaigns", "role"]
# the engine column (shown when some arm is not refspec's worker): an arm record's kind in words (a kind
# without words here is shown as its name with hyphens: llama_cpp_python -> llama-cpp-python), an
# OpenVINO arm with its pipeline
WORKER_ENGINE = "llama.cpp"
ENGINE_TEXT = {"worker": WORKER_ENGINE, "server": "llama-server", "openvino": "OpenVINO GenAI"}
PIPELINE_TEXT = {"stateful": "stateful", "continuous_batching": "continuous batching"}


def engine_text(kind: Any) -> str:
    """An arm record's ``kind`` in words (:data:`ENGINE_TEXT`; any other kind by its name, ``_`` as ``-``)."""
    return ENGINE_TEXT.get(kind, str(kind).replace("_", "-"))


def plan_records(plan: Any) -> list[dict]:
    """The campaign plans of plan.json (a run's ``campaigns`` and the top level itself)."""
    if not isinstance(plan, dict):
        return []
    camps = plan.get("campaigns") if isinstance(plan.get("campaigns"), dict) else {}
    return [p for p in [*camps.values(), plan] if isinstance(p, dict)]


def campaign_references(plans: list[dict]) -> dict[str, str]:
    """campaign -> its reference arm as its frozen plan names it (the first plan of a campaign wins)."""
    out: dict[str, str] = {}
    for p in plans:
        if isinstance(p.get("campaign"), str):
            defn = p.get("definition") if isinstance(p.get("definition"), dict) else {}
            ref = defn.get("reference")
            out.setdefault(p["campaign"], ref if isinstance(ref, str) and ref else REFERENCE_ARM)
    return out


def arm_engines(plans: list[dict]) -> dict[str, str]:
    """arm -> its engine as the campaign plans' arm records name it (``kind``, absent for refspec's worker;
    an OpenVINO arm with its pipeline). The first record of an arm wins; an arm without one has none."""
    out: dict[str, str] = {}
    for p in plans:
        arms = p.get("arms") if isinstance(p.get("arms"), dict) else {}
        for name, rec in arms.items():
            if not isinstance(rec, dict):
                continue
            kind = rec.get("kind", "worker")
            text = engine_text(kind)
            ov = rec.get("openvino") if isinstance(rec.get("openvino"), dict) else {}
            if kind == "openvino" and ov.get("pipeline"):
                text += ", " + PIPELINE_TEXT.get(ov["pipeline"], str(ov["pipeline"]))
            out.setdefault(name, text)
    return out


def prediction_arms(plans: list[dict], prediction: list[dict]) -> tuple[set[str], set[str]]:
    """(live arms, chosen predictors) of the prediction: its table's columns and its plan's records."""
    live = {r["live_arm"] for r in prediction if r.get("live_arm")}
    chosen = {r["predictor"] for r in prediction if r.get("predictor")}
    for p in plans:
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


def campaign_role(
    campaign: str, arm: str, recipe: tuple, refs: dict[str, str], live: set[str], chosen: set[str]
) -> str:
    """The role of ``arm`` (its ``recipe`` (mode, layout, ub, mask, k)) in ``campaign``."""
    _mode, layout, ub, mask, _k = recipe
    if arm == refs.get(campaign, REFERENCE_ARM):
        return "the reference"
    if is_twin(arm):
        return "A/A twin"
    if campaign == "phase_mask":
        return "phase-mask sweep arm"
    if campaign == "width":
        return "width sweep arm"
    if campaign == "prediction":
        return "prediction live arm" if arm in live else "chosen predictor" if arm in chosen else "predictor candidate"
    if is_unrepaired(ub, mask):
        return "unrepaired control"
    if layout != "mq" and mask is not None and int(mask) & TARGET_PHASES:
        return "repaired arm"
    return "compared arm"


def recipe_key(r: dict) -> tuple:
    """(arm, mode, layout, ub, mask, k): an arm's recipe as a request row records it (k for a speculative arm only)."""
    return (r["arm"], r["mode"], r["layout"], r["ub"], r["mask"], r["k"] if r["mode"] == "spec" else None)


def _none_last(v: Any) -> tuple:
    return (v is None, v if v is not None else 0)


def arm_rows(requests: list[dict], plan: Any, prediction: list[dict]) -> list[dict[str, Any]]:
    """The arms table's rows in order: recipe, drafts, campaigns and roles of each arm code and recipe."""
    plans = plan_records(plan)
    refs = campaign_references(plans)
    live, chosen = prediction_arms(plans, prediction)
    engines = arm_engines(plans)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in requests:
        groups[recipe_key(r)].append(r)
    out = []
    for key, rows in groups.items():
        arm, mode, layout, ub, mask, k = key
        camps = sorted({r["campaign"] for r in rows})
        roles = {campaign_role(c, arm, key[1:], refs, live, chosen) for c in camps}
        out.append(
            dict(
                arm=arm,
                engine=engines.get(arm, WORKER_ENGINE),
                mode=mode,
                layout=layout,
                ub=ub,
                mask=mask,
                k=k,
                drafts=sorted({r["draft"] for r in rows if r.get("draft")}),
                campaigns=camps,
                roles=[x for x in ROLE_ORDER if x in roles],
            )
        )
    out.sort(
        key=lambda x: (arm_sort_key(x["arm"], x["mode"], x["layout"]), *map(_none_last, (x["ub"], x["mask"], x["k"])))
    )
    return out


@table_section(
    "arms",
    "Arms at a glance",
    "Every arm the archive's requests ran, once per recipe, as its requests rows record it: mode, target "
    "micro-batch capacity, layout, phase mask, proposals per cycle (speculative arms), draft, the campaigns it "
    "ran in and its role there. A role follows from the archive: a campaign's reference (plan.json, "
    "definition.reference, else R); an A/A twin (a name ending in _aa, the definition's aa_arm run again); the "
    "arms of the phase-mask sweep, the width sweep and the prediction (its live arm from prediction.csv and the "
    "plan); elsewhere an unrepaired control (phase mask zero, micro-batch above one), a repaired arm (a layout "
    "other than mq switched on in a target phase) or, failing both, a compared arm.",
    table="requests",
    absent="no arm ran",
)
def section_arms(sec: Section, a: Archive, N: Numbers) -> None:
    tid = "arms"
    nums = ShownTable(N, a, "requests", tid)
    plan = read_json(a.files["plan"]) if "plan" in a.files else None
    rows = []
    arms = arm_rows(a.rows("requests"), plan, a.rows("prediction"))
    engine = any(x["engine"] != WORKER_ENGINE for x in arms)  # the column only where it tells something
    for x in arms:
        key = {c: x[c] for c in ("arm", "mode", "layout", "ub", "mask")}
        if x["k"] is not None:
            key["k"] = x["k"]
        base = ("arms", x["arm"], x["mode"], x["layout"], x["ub"], x["mask"]) + (
            (x["k"],) if x["mode"] == "spec" else ()
        )
        ub = [DASH] if x["ub"] is None else [nums.add(base + ("ub",), x["ub"], "d", row=key, column="ub")]
        mask = [DASH] if x["mask"] is None else [nums.add(base + ("mask",), x["mask"], "d", row=key, column="mask")]
        k = [DASH] if x["k"] is None else [nums.add(base + ("k",), x["k"], "d", row=key, column="k")]
        rows.append(
            [
                Cell([x["arm"]], cls="mono"),
                *([Cell([x["engine"]])] if engine else []),
                Cell([MODE_TEXT.get(x["mode"], x["mode"])]),
                Cell(ub),
                Cell([x["layout"]], cls="mono"),
                Cell(mask),
                Cell(k),
                Cell([", ".join(x["drafts"]) or DASH], cls="mono"),
                Cell([", ".join(x["campaigns"])]),
                Cell(["; ".join(x["roles"])], cls="wrap"),
            ]
        )
    sec.items.append(
        Table(
            tid,
            "Arms",
            [a.src("requests")],
            ARMS_HEADER[:1] + ["engine"] * engine + ARMS_HEADER[1:],
            rows,
            numeric=[False] * (1 + engine) + [False, True, False, True, True, False, False, False],
        )
    )


# the glossary: (term, meaning), fixed text without digits
GLOSSARY = (
    (
        "arm",
        "A complete execution recipe: mode, layout, micro-batch capacity, phase mask, proposals per cycle and "
        "draft. The arms table above gives every arm the archive ran, with its role.",
    ),
    (
        "arm codes",
        "R is the reference. M begins a target-only arm and C a speculative one. A number right after M or C is "
        "the arm's phase mask (zero: no repair; three: the repair on both target phases); a suffix names the "
        "layout (M_qb, C_pq, M_qh, M_gs); C_m with a number is the phase-mask sweep's arm for that mask; C_k and "
        "u, each with a number, is a geometry of the width sweep (k proposals, micro-batch U); a trailing _aa "
        "marks an A/A twin.",
    ),
    (
        "reference (R)",
        "The arm every other arm is qualified against: the target alone at physical micro-batch one, greedy. A "
        "campaign's plan may name another micro-batch-one recipe as its reference.",
    ),
    (
        "R_prod",
        "The production recipe: the target alone at llama.cpp's default micro-batch, no repair, so an unrepaired "
        "control; R_prod over the repaired target-only arm compares the deployed default with the repair.",
    ),
    (
        "unrepaired control",
        "An arm with phase mask zero and a micro-batch capacity above one, as its requests record them: the "
        "native layout computes several rows at once, so its endpoints may leave the reference. A qualification "
        "shows something only where one of them does.",
    ),
    (
        "repair, repaired arm",
        "A repair is a layout other than MQ that the phase mask switches on in a target phase; a repaired arm "
        "runs one (phase mask three or fifteen).",
    ),
    (
        "MQ, PQ, QB, QH, GS",
        "The attention layouts of a micro-batch of several rows: MQ the native multi-query graph; PQ one "
        "subgraph per query; QB a query-to-batch view over the shared K/V; QH the queries folded into the head "
        "axis; GS global serialization (physical micro-batch one). Tables write them in lower case.",
    ),
    (
        "micro-batch",
        "The rows one graph computes: an arm's capacity U (ub in the tables); the reference runs at physical "
        "micro-batch one.",
    ),
    (
        "phase mask",
        "The phases in which an arm's layout is active, as a sum of bits: one target prefill, two target "
        "continuation, four draft prefill, eight draft continuation. Phase mask three is both target phases, "
        "zero none.",
    ),
    ("proposals", "The draft tokens a speculative arm proposes per cycle (k); the target verifies them together."),
    ("draft", "The small model a speculative arm proposes tokens with; a target-only arm has none."),
    (
        "A/A twin, A/A",
        "An arm's twin runs the same recipe under the arm's name with _aa, scheduled like any arm. Twin over arm "
        "is a ratio whose true value is one, so its interval measures the machine's noise: A/A ok when the "
        "interval holds one, A/A biased when it does not. A twin is never part of a ratio or an estimate.",
    ),
    (
        "floor (F)",
        "The A/A noise floor: the larger of the A/A interval's upper bound and the inverse of its lower bound. "
        "Every decision of a campaign and family is weighed by its largest floor (one without a twin).",
    ),
    (
        "exposed",
        "An exposed task is one on which some unrepaired control's endpoint leaves the reference within the cap; "
        "a panel without one is vacuous: the repair had nothing to preserve there. In the partition study, an "
        "exposed input is one where some arm's state differs from A's.",
    ),
    (
        "units",
        "What an interval is taken over, each unit independent: worker processes (each started fresh) for a "
        "qualified ratio and the A/A control, sessions for an estimate of the replication.",
    ),
    (
        "max ULP",
        "The largest distance between the MQ graph's result and PQ's at an operator stage of the numerical "
        "replay, in units in the last place of the floating-point format: zero is bitwise equal.",
    ),
    (
        "E one, E two (E and a digit)",
        "The labels of the paper's two experiments: E one the numerical replay of attention operands captured "
        "from the live target (are PQ and QB bitwise equal, how far is MQ); E two the timed comparison of PQ and QB "
        "over the sessions of the replication campaign.",
    ),
    (
        "paper",
        "The paper this pipeline reproduces: a paper Table or S label names one of its tables, a \u00a7 label one "
        "of its sections.",
    ),
)


def section_glossary() -> Section:
    """The glossary: every term the report uses, as fixed text."""
    sec = Section(
        "glossary",
        "Glossary",
        "The words and codes this report uses. The arm codes that hold digits are the archive's own names: the "
        "arms table above gives each one's recipe and role.",
    )
    sec.items.append(Table("glossary", "Terms", [], ["term", "meaning"], [[Cell([t]), Cell([m])] for t, m in GLOSSARY]))
    return sec
