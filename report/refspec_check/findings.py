"""The report's findings (numbers.json ``findings``, the findings table that opens the summary), recomputed.

A finding is one line in plain words, its verdict first, built only from the archive's tables
(refspec_check.render.sections.summary builds them; change one only together with the other):

* per campaign and family with qualification rows (not the phase-mask sweep, not the prediction):
  ``LOSSLESS`` the arms that reproduce the reference on every task of the panel (the reference itself
  left out), with the panel's exposed tasks where an unrepaired arm ran there; ``VACUOUS`` in its place
  where no unrepaired arm diverges (refspec_check.vacuity); ``DIVERGES`` every other arm that ran, each
  with its failed tasks of the panel and the earliest first divergence among them; ``REFUSED`` each arm
  no request of which ran (refspec_check.headline.refused_arms);
* ``SPEED`` for every qualified ratio with a verdict that the headline states (every one of the
  confirmation; X over a QB arm on one path of the others), a count of the campaign's other qualified
  ratios, and every E2 estimate with a value: the ratio read as a speed (:func:`fold`) with its
  verdict in words (:data:`VERDICT_WORDS`);
* ``E1``: PQ = QB bitwise over every replayed context where the device admitted QB.

:func:`expect_findings` recomputes them (and adds the numbers only the findings show to the expected
numbers); :func:`check_findings` refuses a finding whose verdict, arms or words are not the tables', a
finding the tables do not give, one left out, and a findings table of report.html that is not exactly
numbers.json's findings (report.html and report.tex show them as the rendering writes them: rendering.py).
"""

from __future__ import annotations

from collections import defaultdict

from refspec_check.answer import answers, panel_sets, recipes, speed_sentence
from refspec_check.context import Context, Expected
from refspec_check.contract import REFERENCE_ARM
from refspec_check.device import SOFTWARE_TIMING, device_values
from refspec_check.headline import OWN_TABLES, refused_arms
from refspec_check.html_tables import norm
from refspec_check.problems import Checker
from refspec_check.provenance import read_manifest
from refspec_check.qualification import reference_arms
from refspec_check.report import Report
from refspec_check.stats import DECIDED
from refspec_check.vacuity import VACUOUS_TAIL, VACUOUS_TEXT, panel_exposure

TIMES = "\u00d7"


def fold(ratio: float, lo=None, hi=None) -> tuple[bool, float, float | None, float | None]:
    """A timing ratio (numerator time / denominator time) as a speed: (numerator slower, fold, fold_lo,
    fold_hi). At or above one the numerator is ``ratio`` times slower, its interval [lo, hi]; below one
    it is ``1 / ratio`` times faster and the interval turns over: [1 / hi, 1 / lo]."""
    if ratio >= 1.0:
        return True, ratio, lo, hi
    return False, 1.0 / ratio, (None if hi is None else 1.0 / hi), (None if lo is None else 1.0 / lo)


def add_fold(E: Expected, base: tuple, ratio: float, lo, hi, source: str) -> None:
    """The numbers a ratio (or estimate) with its interval is shown with wherever it is read as a speed
    (refspec_check.answer.speed_phrase): with an interval away from one, its fold (``base + (fold,)``)
    and bounds (``fold_lo``, ``fold_hi``), "1.36× slower [1.30, 1.42]"; with an interval holding one,
    the ratio and bounds as they are (``plain``, ``plain_lo``, ``plain_hi``), "no detectable difference
    (1.02 [0.94, 1.10])"; without an interval, the ratio as it is (``plain``)."""
    if lo is None or hi is None:
        E.add(base + ("plain",), ratio, source)
    elif lo <= 1.0 <= hi:
        E.add(base + ("plain",), ratio, source)
        E.add(base + ("plain_lo",), lo, source)
        E.add(base + ("plain_hi",), hi, source)
    else:
        _slower, f, f_lo, f_hi = fold(ratio, lo, hi)
        E.add(base + ("fold",), f, source)
        E.add(base + ("fold_lo",), f_lo, source)
        E.add(base + ("fold_hi",), f_hi, source)


def _num(*parts) -> tuple[str, str]:
    return ("num", "|".join(str(p) for p in parts))


class Finding:
    """One finding the tables give: its verdict, scope, the arms it names (a set, or None) and its words
    (``words(arms)``: the parts, text and ("num", id), with the arms in the order the report names them)."""

    def __init__(self, verdict: str, scope: str, words, arms: set | None = None):
        self.verdict, self.scope, self.words, self.arms = verdict, scope, words, arms


def _join(groups: list[list], sep: str) -> list:
    out: list = []
    for g in groups:
        if out:
            out.append(sep)
        out += g
    return out


def _panels(ctx: Context, qual: dict, plan, out: dict) -> None:
    """LOSSLESS or VACUOUS, DIVERGES and REFUSED of every panel; their own numbers into ctx.E."""
    E, s_q = ctx.E, ctx.src("qualification") if "qualification" in ctx.tables else ""
    refused = refused_arms(ctx.c)
    refs = reference_arms(plan)
    reqs = ctx.tables["requests"].rows if "requests" in ctx.tables else []
    exposure = panel_exposure(qual, reqs)
    panel: dict[tuple, dict] = defaultdict(lambda: dict(tasks=set(), ok=defaultdict(set), arms=set(), first=[]))
    for (camp, fam, task, cap, arm), q in qual.items():
        if camp in OWN_TABLES:
            continue
        p = panel[(camp, fam)]
        p["tasks"].add((task, cap))
        p["arms"].add(arm)
        if q.get("qualified"):
            p["ok"][arm].add((task, cap))
        elif q.get("first_diff_index") is not None:
            p["first"].append((q["first_diff_index"], arm, ("qfail", camp, fam, task, arm, cap, "first_diff_index")))
    for (camp, fam), p in panel.items():
        ref, n, scope = refs.get(camp, REFERENCE_ARM), len(p["tasks"]), f"{camp} {fam}"
        ran = {a for a in p["arms"] if (camp, fam, a) not in refused}
        lossless = {a for a in ran if len(p["ok"][a]) == n and a != ref}
        diverging = {a for a in ran if len(p["ok"][a]) < n}
        ex = exposure.get((camp, fam))
        tasks = _num("finding", camp, fam, "tasks")
        if ex is not None and ex["vacuous"]:
            words = [VACUOUS_TEXT, _num("vacuity", camp, fam, "screened"), VACUOUS_TAIL]
            words.append(f" (no unrepaired arm diverged from {ref})")
            out[("vacuous", camp, fam)] = Finding("VACUOUS", scope, lambda arms, w=words: w, lossless)
        elif lossless:
            E.add(("finding", camp, fam, "tasks"), n, s_q)
            tail = []
            if ex is not None:
                E.add(("finding", camp, fam, "exposed"), ex["exposed"], s_q)
                tail = [
                    ", ",
                    _num("finding", camp, fam, "exposed"),
                    " of them exposed (an unrepaired arm diverges there)",
                ]
            verb = " reproduces " if len(lossless) == 1 else " reproduce "

            def said(arms, verb=verb, ref=ref, tail=tail, tasks=tasks):
                return [" ".join(arms) + verb + ref + " on ", tasks, "/", tasks, " tasks"] + tail

            out[("lossless", camp, fam)] = Finding("LOSSLESS", scope, said, lossless)
        if diverging:
            E.add(("finding", camp, fam, "tasks"), n, s_q)
            for a in diverging:
                E.add(("finding", camp, fam, a, "tasks_failed"), n - len(p["ok"][a]), s_q)
            firsts = [f for f in p["first"] if f[1] in diverging]
            first = min(firsts)[0] if firsts else None
            verb = " does not reproduce " if len(diverging) == 1 else " do not reproduce "

            def said(arms, camp=camp, fam=fam, verb=verb, ref=ref, tasks=tasks, firsts=firsts, first=first):
                groups = [[_num("finding", camp, fam, a, "tasks_failed"), "/", tasks] for a in arms]
                words = [" ".join(arms) + verb + ref + " on "] + _join(groups, ", ") + [" tasks"]
                if firsts:  # the earliest first divergence: any of the rows that have it
                    at = [_num(*f[2]) for f in sorted(firsts, key=str) if f[0] == first]
                    words += [", first divergence at token ", at]
                return words

            out[("diverges", camp, fam)] = Finding("DIVERGES", scope, said, diverging)
        for a in sorted(p["arms"] - ran):
            words = [f"{a} refused at admission: no request of it ran"]
            out[("refused", camp, fam, a)] = Finding("REFUSED", scope, lambda arms, w=words: w)


def _stated_ratios(qualified: list[dict], facts: dict, refs: dict) -> set[int]:
    """The row (by index in ``qualified``) each campaign and family states of its headline ratios
    (those with a verdict: the confirmation's, the X/QB repair costs on one path of the others):
    the first with the campaign's reference on one side and a decided verdict (:data:`DECIDED`), else
    the first with the reference, else the first."""
    candidates: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(qualified):
        camp = r["campaign"]
        lay_d = (facts.get((camp, r["family"], r["denominator"])) or (None, None))[1]
        if r["verdict"] and (camp == "confirmation" or (r["path"] != "mixed" and lay_d == "qb")):
            candidates[(camp, r["family"])].append(i)
    stated = set()
    for (camp, _fam), rows in candidates.items():
        ref = refs.get(camp, REFERENCE_ARM)
        with_ref = [i for i in rows if ref in (qualified[i]["numerator"], qualified[i]["denominator"])]
        decided = [i for i in with_ref if qualified[i]["verdict"] in DECIDED]
        stated.add((decided or with_ref or rows)[0])
    return stated


def _speeds(ctx: Context, facts: dict, timing: str, refs: dict, out: dict, answered: dict) -> None:
    """SPEED of one headline ratio per campaign and family without an answer (:func:`_stated_ratios`)
    and of every E2 estimate; the campaign's other qualified ratios, those the answers state aside, counted."""
    E = ctx.E
    more: dict[str, int] = defaultdict(int)
    rows = ctx.tables["ratios"].rows if "ratios" in ctx.tables else []
    qualified = [r for r in rows if r["qualified"] and r["ratio"] is not None]
    open_ = [r for r in qualified if (r["campaign"], r["family"]) not in answered]
    stated = {id(open_[i]) for i in _stated_ratios(open_, facts, refs)}
    said = {id(r) for rs in answered.values() for r in rs}
    for r in qualified:
        camp = r["campaign"]
        if id(r) not in stated:
            if id(r) not in said:
                more[camp] += 1
            continue
        base = ("ratio", camp, r["family"], r["cap"], r["numerator"], r["denominator"])
        words = speed_sentence(r["numerator"], r["denominator"], base, r["ratio"], r["lo"], r["hi"], r["verdict"])
        if r["detectable"] is not None:
            words += ["; detectable ratio ", _num(*base, "detectable")]
        scope = f"{camp} {r['family']} cap {r['cap']}{timing}"
        out[("ratio",) + base[1:]] = Finding("SPEED", scope, lambda arms, w=words: w)
    for camp, k in more.items():
        E.add(("finding", camp, "more_ratios"), k, ctx.src("ratios"))
        tail = (
            " more qualified ratio in the timing section" if k == 1 else " more qualified ratios in the timing section"
        )
        out[("more", camp)] = Finding("SPEED", camp, lambda arms, w=[_num("finding", camp, "more_ratios"), tail]: w)
    for r in ctx.tables["estimates"].rows if "estimates" in ctx.tables else []:
        if r["estimate"] is None:
            continue
        num, _sep, den = r["comparison"].partition("/")
        base = ("est", r["family"], r["path"], r["comparison"])
        words = speed_sentence(num, den, base, r["estimate"], r["lo"], r["hi"], r["decision"])
        scope = f"E2 {r['family']} {r['path']} {r['comparison']}{timing}"
        out[("estimate",) + base[1:]] = Finding("SPEED", scope, lambda arms, w=words: w)


def _e1(ctx: Context, out: dict) -> None:
    """E1 over every replayed context (a context whose QB graph the device refused counted apart)."""
    rows = ctx.tables["replay"].rows if "replay" in ctx.tables else []
    if not rows:
        return
    s_p = ctx.src("replay")
    refused = [r for r in rows if "qb" in (r["device_refused"] or "").split(",")]
    ctx.E.add(("e1", "pq_eq_qb"), sum(1 for r in rows if r["pq_eq_qb"] and r not in refused), s_p)
    ctx.E.add(("e1", "qb_admitted"), len(rows) - len(refused), s_p)
    words = ["PQ = QB bitwise on ", _num("e1", "pq_eq_qb"), "/", _num("e1", "qb_admitted")]
    words.append(" contexts where the device admitted QB")
    if refused:
        ctx.E.add(("e1", "qb_refused"), len(refused), s_p)
        words += [" (", _num("e1", "qb_refused"), " refused QB)"]
    scope = " ".join(sorted({r["family"] for r in rows}))
    out[("e1",)] = Finding("E1", scope, lambda arms, w=words: w)


def _answers(ctx: Context, qual: dict, plan, timing: str, out: dict) -> dict:
    """ANSWER, DEFAULT and ADVICE (refspec_check.answer) into ``out``; returns (campaign, family) -> the
    ratio rows they state, for every campaign and family with an answer finding."""
    t = ctx.tables
    if "ratios" not in t or not qual:
        return {}
    ratios, reqs = t["ratios"].rows, t["requests"].rows if "requests" in t else []
    diags = t["diagnostics"].rows if "diagnostics" in t else []
    camps = sorted({r["campaign"] for r in ratios})  # the order of the findings is not checked: their keys are
    vacuous = {k for k, ex in panel_exposure(qual, reqs).items() if ex["vacuous"]}
    pans = panel_sets(qual, OWN_TABLES)
    found = answers(pans, recipes(reqs), reference_arms(plan), ratios, diags, camps, vacuous)
    answered: dict = {}
    s_q = ctx.src("qualification") if "qualification" in t else ""
    for key, (verdict, words, rows) in found.items():
        kind, camp, fam, cap = key
        for w in words:  # the counts the DEFAULT line shows (a panel's tasks, the default's failed ones)
            if isinstance(w, tuple) and w[1].startswith("finding|"):
                tasks, ok, _arms = pans[(camp, fam)]
                p = w[1].split("|")
                ctx.E.add(tuple(p), len(tasks) if p[-1] == "tasks" else len(tasks) - len(ok.get(p[3], ())), s_q)
        out[key] = Finding(verdict, f"{camp} {fam} cap {cap}{timing}", lambda arms, w=words: w)
        answered.setdefault((camp, fam), []).extend(rows)
    return answered


def expect_findings(ctx: Context, qual: dict, facts: dict, plan) -> dict[tuple, Finding]:
    """The findings the tables give, by kind and key; the numbers only they show go into ``ctx.E``
    (a panel's tasks, exposed tasks and each diverging arm's failed tasks, a campaign's count of other
    qualified ratios, the E1 counts over every context). The folds of the ratios and estimates are
    recomputed beside the ratios themselves (:func:`add_fold`)."""
    out: dict[tuple, Finding] = {}
    software = device_values(read_manifest(ctx.c))[1]
    timing = SOFTWARE_TIMING if software else ""
    answered = _answers(ctx, qual, plan, timing, out)
    _panels(ctx, qual, plan, out)
    _speeds(ctx, facts, timing, reference_arms(plan), out, answered)
    _e1(ctx, out)
    return out


KEYS = {
    "answer": ("campaign", "family", "cap"),
    "default": ("campaign", "family", "cap"),
    "advice": ("campaign", "family", "cap"),
    "lossless": ("campaign", "family"),
    "vacuous": ("campaign", "family"),
    "diverges": ("campaign", "family"),
    "refused": ("campaign", "family", "arm"),
    "ratio": ("campaign", "family", "cap", "numerator", "denominator"),
    "more": ("campaign",),
    "estimate": ("family", "path", "comparison"),
    "e1": (),
}


def _said(parts: list) -> list | None:
    """A finding's parts as (text runs joined, ("num", id)); None where a part is neither."""
    out: list = []
    for p in parts:
        if isinstance(p, dict) and isinstance(p.get("num"), str):
            out.append(("num", p["num"]))
        elif isinstance(p, str):
            if out and isinstance(out[-1], str):
                out[-1] += p
            else:
                out.append(p)
        else:
            return None
    return [norm(p) if isinstance(p, str) else p for p in out if not (isinstance(p, str) and not norm(p))]


def _expected(words: list, stated_ids: list[str]) -> list:
    """The expected parts, text runs joined; a list of ids (any one of the earliest first divergences)
    resolved to the one the finding states, where it is among them."""
    out: list = []
    for w in words:
        if isinstance(w, list):
            w = next((x for x in w if x[1] in stated_ids), w[0])
        if isinstance(w, str) and out and isinstance(out[-1], str):
            out[-1] += w
        else:
            out.append(w)
    return [norm(p) if isinstance(p, str) else p for p in out if not (isinstance(p, str) and not norm(p))]


def _text(parts: list, stated: dict) -> str:
    return " ".join(str(stated.get(p[1], {}).get("text", "?")) if isinstance(p, tuple) else p for p in parts)


def check_findings(c: Checker, rep: Report, stated: dict, expected: dict[tuple, Finding]) -> None:
    """numbers.json's findings against :func:`expect_findings` (report.html and report.tex show them as the
    rendering of the tables writes them: ``rendering.py``)."""
    doc = rep.numbers_doc.get("findings")
    if not isinstance(doc, list):
        c.bad("numbers.json: findings", "missing: the report must open with its findings")
        doc = []
    seen: set[tuple] = set()
    for j, f in enumerate(doc):
        where = f"numbers.json: findings[{j}]"
        said = _said(f.get("parts")) if isinstance(f, dict) and isinstance(f.get("parts"), list) else None
        kind = f.get("kind") if isinstance(f, dict) else None
        if said is None or kind not in KEYS or not isinstance(f.get("key"), dict):
            c.unread(where, "not a finding {verdict, scope, parts, kind, key}")
            continue
        key = (kind,) + tuple(f["key"].get(k) for k in KEYS[kind])
        exp = expected.get(key)
        c.identities += 1
        if exp is None:
            c.bad(where, f"{f.get('verdict')} {f.get('scope')!r}: a finding the tables do not give ({kind} {key[1:]})")
            continue
        if key in seen:
            c.bad(where, f"{kind} {key[1:]} stated twice")
        seen.add(key)
        if f.get("verdict") != exp.verdict:
            c.bad(where, f"verdict {f.get('verdict')!r}; the tables say {exp.verdict!r}")
        if f.get("scope") != exp.scope:
            c.bad(where, f"scope {f.get('scope')!r}; the tables say {exp.scope!r}")
        arms = f.get("arms") if exp.arms is not None else []
        if exp.arms is not None and (not isinstance(arms, list) or set(arms) != exp.arms or len(arms) != len(exp.arms)):
            c.bad(where, f"{exp.verdict} names arms {arms!r}; the tables say {' '.join(sorted(exp.arms))}")
            continue
        ids = [p[1] for p in said if isinstance(p, tuple)]
        want = _expected(exp.words(arms), ids)
        for nid in ids:
            if nid not in stated:
                c.bad(where, f"number {nid} is not one of the report's numbers")
        if said != want:
            c.bad(where, f"says {_text(said, stated)!r}; the tables say {_text(want, stated)!r}")
    for key in sorted(set(expected) - seen, key=str):
        e = expected[key]
        c.bad("numbers.json: findings", f"leaves out the {e.verdict} finding of {e.scope} ({key[0]} {key[1:]})")
