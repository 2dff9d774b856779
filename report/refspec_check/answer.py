"""The answer findings (ANSWER, DEFAULT, ADVICE) and the words of a timed verdict, recomputed.

refspec_check.render.sections.answer and .verdicts write them; change one only together with the other.

Words of a verdict (:data:`VERDICT_WORDS`): exceeds "slower", faster "faster", equivalent "equivalent
within 2 %", below "not 2 % slower", noise_too_high "undecided: noise too high", inconclusive
"undecided: interval too wide", too_few_processes / too_few_sessions "undecided: too few ...".

A ratio NUM/DEN with interval [lo, hi] (:func:`speed_phrase`): holding one, "no detectable difference
between NUM and DEN (NUM/DEN r [lo, hi])" (ids ``plain``, ``plain_lo``, ``plain_hi``); above or below
one, "NUM is f× slower (faster) than DEN [f_lo, f_hi]" (ids ``fold``, ``fold_lo``, ``fold_hi``);
without an interval "NUM/DEN r (no interval)". :func:`speed_sentence` adds "; " and the verdict's
words unless the verdict is a decided slower or faster.

Roles of a campaign and family's panel (:func:`roles`), from requests.csv's recipes (mode, layout, ub,
mask) and the qualification rows: the *candidate*, of the speculative arms with a mask other than 0
that reproduce the reference on every task, the first with layout qb, else the first in arm order
(twins and the reference aside); its *path without a draft*, the first target-only arm of the same
layout, ub and mask; *llama.cpp's default*, the target-only arm of mask 0 whose ub is larger than
every other arm's. Per campaign, family and cap of ratios.csv (campaigns in report order):

* ANSWER "speculative decoding with the repair (C) against the reference: " + the sentence of the
  qualified ratio {reference, C} + " · without a draft: " + that of {M, C} where it exists; with
  speculative arms but no candidate, "no speculative arm (...) reproduces R on every task: no speed
  is stated"; nothing without the {reference, C} ratio or without M;
* DEFAULT (with an answer and a default, on a panel that is not vacuous): preservation of the default (reproduces R on n/n, or
  changes the output on k/n tasks) and its ratio against M (qualified), else against C (qualified),
  else the diagnostic row against M (fold, "(unqualified timing, no interval)");
* ADVICE (with an answer): turn the draft on (C decided faster than M), leave it off (M decided
  faster), or leave it off with no decided difference; "; llama.cpp's default micro-batch (D) changes
  the output" where the default does not reproduce the reference.
"""

from __future__ import annotations

from collections import defaultdict

from refspec_check.contract import TWIN_SUFFIX
from refspec_check.names import arm_sort_key

TIMES = "\u00d7"
PCT = "2 %"  # the threshold 1.02 as a reader reads it
VERDICT_WORDS = {
    "exceeds": "slower",
    "faster": "faster",
    "equivalent": f"equivalent within {PCT}",
    "below": f"not {PCT} slower",
    "noise_too_high": "undecided: noise too high",
    "inconclusive": "undecided: interval too wide",
    "too_few_processes": "undecided: too few processes",
    "too_few_sessions": "undecided: too few sessions",
}
REPAIR_LAYOUT = "qb"


def word(verdict) -> str:
    return VERDICT_WORDS.get(verdict or "", verdict or "")


def _num(*parts) -> tuple[str, str]:
    return ("num", "|".join(str(p) for p in parts))


def speed_phrase(num: str, den: str, base: tuple, ratio: float, lo, hi) -> list:
    if lo is None or hi is None:
        return [f"{num}/{den} ", _num(*base, "plain"), " (no interval)"]
    if lo <= 1.0 <= hi:
        return [
            f"no detectable difference between {num} and {den} ({num}/{den} ",
            _num(*base, "plain"),
            " [",
            _num(*base, "plain_lo"),
            ", ",
            _num(*base, "plain_hi"),
            "])",
        ]
    side = f"{TIMES} slower than " if ratio >= 1.0 else f"{TIMES} faster than "
    return [
        f"{num} is ",
        _num(*base, "fold"),
        side,
        den,
        " [",
        _num(*base, "fold_lo"),
        ", ",
        _num(*base, "fold_hi"),
        "]",
    ]


def speed_sentence(num: str, den: str, base: tuple, ratio: float, lo, hi, verdict) -> list:
    words = speed_phrase(num, den, base, ratio, lo, hi)
    if verdict and verdict not in ("exceeds", "faster"):
        words.append("; " + word(verdict))
    return words


def _ratio_words(r: dict) -> list:
    base = ("ratio", r["campaign"], r["family"], r["cap"], r["numerator"], r["denominator"])
    return speed_sentence(r["numerator"], r["denominator"], base, r["ratio"], r["lo"], r["hi"], r["verdict"])


def recipes(requests: list[dict]) -> dict[tuple, tuple]:
    """(campaign, family, arm) -> (mode, layout, ub, mask) of its first request."""
    out: dict[tuple, tuple] = {}
    for r in requests:
        out.setdefault((r["campaign"], r["family"], r["arm"]), (r["mode"], r["layout"], r["ub"], r["mask"]))
    return out


def roles(tasks: set, ok: dict, arms: set, rec: dict, ref: str) -> tuple:
    """(candidate, path without a draft, default, speculative arms) of one panel (module docstring)."""

    def lossless(x) -> bool:
        return x in arms and len(ok.get(x, ())) == len(tasks)

    def order(x) -> tuple:
        return arm_sort_key(x, rec[x][0], rec[x][1])

    ran = sorted((x for x in arms if not x.endswith(TWIN_SUFFIX) and x != ref and x in rec), key=order)
    spec = [x for x in ran if rec[x][0] == "spec"]
    repaired = [x for x in spec if rec[x][3] and lossless(x)]
    cand = min(repaired, key=lambda x: (rec[x][1] != REPAIR_LAYOUT, order(x)), default=None)
    same = None
    if cand is not None:
        same = next((x for x in ran if rec[x][0] == "target" and rec[x][1:] == rec[cand][1:]), None)
    target = [x for x in ran if rec[x][0] == "target"]
    default = None
    if target:
        big = max(target, key=lambda x: (rec[x][2], order(x)))
        if not rec[big][3] and all(rec[big][2] > rec[x][2] for x in arms if x != big and x in rec):
            default = big
    return cand, same, default, spec


def _pair(rows: list[dict], camp, fam, cap, x, y) -> dict | None:
    for r in rows:
        if (r["campaign"], r["family"], r["cap"]) == (camp, fam, cap) and {r["numerator"], r["denominator"]} == {x, y}:
            return r
    return None


def _faster(r: dict):
    return r["denominator"] if r["verdict"] == "exceeds" else r["numerator"] if r["verdict"] == "faster" else None


def answers(
    panels: dict, rec_all: dict, refs: dict, ratios: list, diags: list, order: list, vacuous: set = frozenset()
) -> dict:
    """(kind, campaign, family, cap) -> (verdict, words, stated ratio rows) of every answer finding;
    ``panels``: (campaign, family) -> (tasks, ok, arms); ``order``: the campaigns in report order;
    ``vacuous``: the (campaign, family) panels no unrepaired arm diverged on (no DEFAULT there)."""
    out: dict = {}
    caps = sorted({(r["campaign"], r["family"], r["cap"]) for r in ratios}, key=lambda k: (k[1], k[2]))
    qualified = [r for r in ratios if r["qualified"] and r["ratio"] is not None]
    for camp in order:
        for _c, fam, cap in [k for k in caps if k[0] == camp]:
            if (camp, fam) not in panels:
                continue
            tasks, ok, arms = panels[(camp, fam)]
            rec = {x: v for (c, f, x), v in rec_all.items() if (c, f) == (camp, fam)}
            ref = refs.get(camp, "R")
            cand, same, default, spec = roles(tasks, ok, arms, rec, ref)
            k = (camp, fam, cap)
            if cand is None:
                if spec:
                    text = f"no speculative arm ({' '.join(spec)}) reproduces {ref} on every task: no speed is stated"
                    out[("answer",) + k] = ("ANSWER", [text], [])
                continue
            vs_ref = _pair(qualified, camp, fam, cap, ref, cand)
            if vs_ref is None or same is None:
                continue
            vs_same = _pair(qualified, camp, fam, cap, same, cand) if same else None
            words = [f"speculative decoding with the repair ({cand}) against the reference: "] + _ratio_words(vs_ref)
            if vs_same is not None:
                words += [" \u00b7 without a draft: "] + _ratio_words(vs_same)
            out[("answer",) + k] = ("ANSWER", words, [r for r in (vs_ref, vs_same) if r is not None])
            lossless = {x: len(ok.get(x, ())) == len(tasks) for x in arms}
            if default is not None and (camp, fam) not in vacuous:
                out[("default",) + k] = (
                    "DEFAULT",
                    _default(k, ref, cand, same, default, lossless, qualified, diags),
                    [],
                )
            out[("advice",) + k] = ("ADVICE", [_advice(ref, cand, same, default, lossless, vs_same)], [])
    return out


def _default(k, ref, cand, same, d, lossless, qualified, diags) -> list:
    camp, fam, cap = k
    n = _num("finding", camp, fam, "tasks")
    words = [f"llama.cpp's default micro-batch ({d}) "]
    if lossless.get(d):
        words += [f"reproduces {ref} on ", n, "/", n, " tasks"]
    else:
        words += ["changes the output on ", _num("finding", camp, fam, d, "tasks_failed"), "/", n, " tasks"]
    if same is None:
        return words
    for other, what in ((same, "the repaired path without a draft"), (cand, "the repair with the draft")):
        r = _pair(qualified, camp, fam, cap, d, other)
        if r is not None:
            return words + [f"; against {what}: "] + _ratio_words(r)
    r = _pair([r for r in diags if r["ratio"] is not None], camp, fam, cap, d, same)
    if r is None:
        return words
    base = ("diag", camp, fam, cap, r["numerator"], r["denominator"])
    side = f"{TIMES} slower than " if r["ratio"] >= 1.0 else f"{TIMES} faster than "
    return words + [
        f"; {r['numerator']} is ",
        _num(*base, "fold"),
        side + r["denominator"] + " (unqualified timing, no interval)",
    ]


def _advice(ref, cand, same, d, lossless, vs_same) -> str:
    if same is None or vs_same is None or not lossless.get(same):
        text = f"use the repair with the draft ({cand}): it keeps {ref}'s output; its speed against no draft is not measured"
    else:
        f = _faster(vs_same)
        if f == cand:
            text = (
                f"turn the draft on with the repair: {cand} keeps {ref}'s output and is faster than {same} without it"
            )
        elif f == same:
            text = f"leave the draft off: {same} keeps {ref}'s output and is faster than {cand} with the draft"
        else:
            text = (
                f"leave the draft off: it makes no decided difference ({same} vs {cand}: {word(vs_same['verdict'])})"
                f" and the draft costs work of its own; both keep {ref}'s output"
            )
    if d is not None and not lossless.get(d):
        text += f"; llama.cpp's default micro-batch ({d}) changes the output"
    return text


def panel_sets(qual: dict, skip: tuple) -> dict:
    """(campaign, family) -> (tasks, ok by arm, arms) of the qualification rows keyed (camp, fam, task, cap, arm)."""
    out: dict = {}
    for (camp, fam, task, cap, arm), q in qual.items():
        if camp in skip:
            continue
        tasks, ok, arms = out.setdefault((camp, fam), (set(), defaultdict(set), set()))
        tasks.add((task, cap))
        arms.add(arm)
        if q.get("qualified"):
            ok[arm].add((task, cap))
    return out
