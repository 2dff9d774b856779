"""The answer a llama.cpp user asks for, first: does speculation with the repair keep the reference's
output, is it faster, and what to do on this machine. Three findings per campaign, family and cap,
built only from the tables (``report/check.py``, ``refspec_check/answer.py``, recomputes them):

``ANSWER``
    the *candidate* (the first speculative arm, in arm order, whose phase mask is not 0 and that
    reproduces the reference on every task of its panel) against the reference, and against its
    *own path without a draft* (the target-only arm of the same layout, micro-batch and mask):
    "speculative decoding with the repair (C3) against the reference: no detectable difference
    between R and C3 (R/C3 1.02 [0.94, 1.10]); undecided: interval too wide · without a draft: M3
    is 1.52x faster than C3 [1.41, 1.64]"; none where the campaign has no such path without a draft
    (a sweep of draft settings) or no ratio of the candidate against the reference. Where
    speculative arms ran and none reproduces the reference, it says so and states no speed.
``DEFAULT``
    llama.cpp's default micro-batch: the target-only arm with mask 0 whose micro-batch is larger than
    every other arm's (R_prod): whether it keeps the reference's output (failed tasks of its panel)
    and its ratio against the candidate's path without a draft, from the qualified ratios or, where
    it does not reproduce the reference, the diagnostic (unqualified) timings.
``ADVICE``
    one line, from the verdict of the path without a draft against the candidate: turn the draft on
    (the candidate decided faster), leave it off (decided slower), or no decided difference; and,
    where llama.cpp's default changes the output, that it does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from refspec_check.names import REFERENCE_ARM, arm_sort_key, is_twin

from ..document import Archive, Numbers, ShownTable
from .verdicts import speed_sentence, verdict_word

ANSWER, DEFAULT, ADVICE = "ANSWER", "DEFAULT", "ADVICE"
REPAIR_LAYOUT = "qb"  # the repair a candidate is preferred with (query-to-batch)


@dataclass
class Panel:
    """One campaign and family's qualification: its (task, cap) pairs and the pairs each arm reproduces."""

    tasks: set = field(default_factory=set)
    ok: dict = field(default_factory=lambda: defaultdict(set))
    arms: set = field(default_factory=set)

    def lossless(self, arm: str) -> bool:
        return arm in self.arms and len(self.ok[arm]) == len(self.tasks)


@dataclass
class Roles:
    """The arms of one campaign and family the answer names (None where the campaign has none)."""

    ref: str
    candidate: str | None
    no_draft: str | None
    default: str | None
    spec_arms: list[str]


def recipes(a: Archive) -> dict[tuple, dict[str, Any]]:
    """(campaign, family, arm) -> its recipe as the requests record it (mode, layout, ub, mask)."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in a.rows("requests"):
        out.setdefault(
            (r["campaign"], r["family"], r["arm"]), dict(mode=r["mode"], layout=r["layout"], ub=r["ub"], mask=r["mask"])
        )
    return out


def roles(panel: Panel, rec: dict[str, dict[str, Any]], ref: str) -> Roles:
    """The candidate, its path without a draft and llama.cpp's default of one panel (module docstring)."""

    def order(x: str) -> tuple:
        return arm_sort_key(x, rec.get(x, {}).get("mode"), rec.get(x, {}).get("layout"))

    arms = sorted((x for x in panel.arms if not is_twin(x) and x != ref and x in rec), key=order)
    spec = [x for x in arms if rec[x]["mode"] == "spec"]
    repaired = [x for x in spec if rec[x]["mask"] and panel.lossless(x)]
    # the project's repair, query-to-batch, first; then the arm order
    cand = min(repaired, key=lambda x: (rec[x]["layout"] != REPAIR_LAYOUT, order(x)), default=None)
    same = None
    if cand is not None:
        c = rec[cand]
        same = next(
            (
                x
                for x in arms
                if rec[x]["mode"] == "target"
                and (rec[x]["layout"], rec[x]["ub"], rec[x]["mask"]) == (c["layout"], c["ub"], c["mask"])
            ),
            None,
        )
    target = [x for x in arms if rec[x]["mode"] == "target"]
    default = None
    if target:
        big = max(target, key=lambda x: (rec[x]["ub"], order(x)))
        others = [rec[x]["ub"] for x in panel.arms if x != big and x in rec]
        if not rec[big]["mask"] and all(rec[big]["ub"] > u for u in others):
            default = big
    return Roles(ref, cand, same, default, spec)


def find_row(rows: list[dict], camp: str, fam: str, cap: int, x: str, y: str) -> dict | None:
    """The row of ``rows`` (ratios or diagnostics) of the pair {x, y} in either orientation."""
    for r in rows:
        if (r["campaign"], r["family"], r["cap"]) == (camp, fam, cap) and {r["numerator"], r["denominator"]} == {x, y}:
            return r
    return None


def _key(r: dict) -> dict[str, Any]:
    return dict(
        campaign=r["campaign"], family=r["family"], cap=r["cap"], numerator=r["numerator"], denominator=r["denominator"]
    )


def _base(prefix: str, r: dict) -> tuple:
    return (prefix, r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"])


def _sentence(a: Archive, N: Numbers, r: dict) -> list[Any]:
    nums = ShownTable(N, a, "ratios", f"ratios-{r['campaign']}")
    return speed_sentence(
        nums, _base("ratio", r), _key(r), "ratio", r, r["numerator"], r["denominator"], r.get("verdict")
    )


def _faster_side(r: dict) -> str | None:
    """The arm a decided ratio row finds faster (None when undecided)."""
    if r.get("verdict") == "exceeds":
        return r["denominator"]
    if r.get("verdict") == "faster":
        return r["numerator"]
    return None


@dataclass
class Said:
    """The answer findings of one campaign, family and cap and the ratio rows they state."""

    findings: list[tuple[str, list[Any], str]] = field(default_factory=list)  # (verdict, parts, kind)
    stated: list[dict] = field(default_factory=list)


def answer(
    a: Archive, N: Numbers, panel: Panel, role: Roles, camp: str, fam: str, cap: int, vacuous: bool = False
) -> Said:
    """ANSWER, DEFAULT and ADVICE of one campaign, family and cap (the module docstring); no DEFAULT on a
    vacuous panel (no unrepaired arm diverged: the default's preservation was not put to the test)."""
    out = Said()
    ratios = [r for r in a.rows("ratios") if r["qualified"] and r["ratio"] is not None]
    ref, cand, same = role.ref, role.candidate, role.no_draft
    if cand is None:
        if role.spec_arms:
            names = " ".join(role.spec_arms)
            out.findings.append(
                (ANSWER, [f"no speculative arm ({names}) reproduces {ref} on every task: no speed is stated"], "answer")
            )
        return out
    vs_ref = find_row(ratios, camp, fam, cap, ref, cand)
    vs_same = find_row(ratios, camp, fam, cap, same, cand) if same else None
    if vs_ref is None or same is None:  # a sweep without the path without a draft asks another question
        return out
    parts = [f"speculative decoding with the repair ({cand}) against the reference: "] + _sentence(a, N, vs_ref)
    out.stated.append(vs_ref)
    if vs_same is not None:
        parts += [" \u00b7 without a draft: "] + _sentence(a, N, vs_same)
        out.stated.append(vs_same)
    out.findings.append((ANSWER, parts, "answer"))
    d_parts = [] if vacuous else _default(a, N, panel, role, camp, fam, cap)
    if d_parts:
        out.findings.append((DEFAULT, d_parts, "default"))
    out.findings.append((ADVICE, _advice(panel, role, vs_same), "advice"))
    return out


def _default(a: Archive, N: Numbers, panel: Panel, role: Roles, camp: str, fam: str, cap: int) -> list[Any]:
    """DEFAULT: llama.cpp's default micro-batch, its preservation and its ratio against the path
    without a draft (qualified, else against the candidate, else the diagnostic one)."""
    d, same = role.default, role.no_draft
    if d is None:
        return []
    key = dict(campaign=camp, family=fam)
    q = ShownTable(N, a, "qualification", "findings")
    n = q.add(("finding", camp, fam, "tasks"), len(panel.tasks), "d", row=key, column="task_id")
    parts: list[Any] = [f"llama.cpp's default micro-batch ({d}) "]
    if panel.lossless(d):
        parts += [f"reproduces {role.ref} on ", n, "/", n, " tasks"]
    else:
        k = q.add(
            ("finding", camp, fam, d, "tasks_failed"),
            len(panel.tasks) - len(panel.ok[d]),
            "d",
            row=key,
            column="qualified",
        )
        parts += ["changes the output on ", k, "/", n, " tasks"]
    if same is None:
        return parts
    qualified = [r for r in a.rows("ratios") if r["qualified"] and r["ratio"] is not None]
    for other, words in ((same, "the repaired path without a draft"), (role.candidate, "the repair with the draft")):
        r = find_row(qualified, camp, fam, cap, d, other)
        if r is not None:
            return parts + [f"; against {words}: "] + _sentence(a, N, r)
    r = find_row([r for r in a.rows("diagnostics") if r["ratio"] is not None], camp, fam, cap, d, same)
    if r is None:
        return parts
    nums = ShownTable(N, a, "diagnostics", "diagnostics")
    sp = nums.speed(_base("diag", r), _key(r), "ratio", dict(ratio=r["ratio"]))
    word = "\u00d7 slower than " if sp.slower else "\u00d7 faster than "
    return parts + [f"; {r['numerator']} is ", sp.fold, word + r["denominator"] + " (unqualified timing, no interval)"]


def _advice(panel: Panel, role: Roles, vs_same: dict | None) -> list[Any]:
    """ADVICE: what to do on this machine, from the verdict of the path without a draft against the candidate."""
    ref, cand, same = role.ref, role.candidate, role.no_draft
    if same is None or vs_same is None or not panel.lossless(same):
        text = f"use the repair with the draft ({cand}): it keeps {ref}'s output; its speed against no draft is not measured"
    else:
        faster = _faster_side(vs_same)
        if faster == cand:
            text = (
                f"turn the draft on with the repair: {cand} keeps {ref}'s output and is faster than {same} without it"
            )
        elif faster == same:
            text = f"leave the draft off: {same} keeps {ref}'s output and is faster than {cand} with the draft"
        else:
            text = (
                f"leave the draft off: it makes no decided difference ({same} vs {cand}: "
                f"{verdict_word(vs_same.get('verdict'))}) and the draft costs work of its own; both keep {ref}'s output"
            )
    d = role.default
    if d is not None and not panel.lossless(d):
        text += f"; llama.cpp's default micro-batch ({d}) changes the output"
    return [text]


def panels(a: Archive, skip: tuple[str, ...]) -> dict[tuple[str, str], Panel]:
    """(campaign, family) -> :class:`Panel` of the qualification table (the campaigns in ``skip`` left out)."""
    out: dict[tuple[str, str], Panel] = defaultdict(Panel)
    for q in a.rows("qualification"):
        if q["campaign"] in skip:
            continue
        p = out[(q["campaign"], q["family"])]
        p.tasks.add((q["task_id"], q["cap"]))
        p.arms.add(q["arm"])
        if q["qualified"]:
            p.ok[q["arm"]].add((q["task_id"], q["cap"]))
    return out


def reference_of(refs: dict[str, str], camp: str) -> str:
    return refs.get(camp, REFERENCE_ARM)
