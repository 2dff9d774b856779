"""The report's headline block (numbers.json ``headline``, the summary table)."""

from __future__ import annotations

from refspec_check.answer import VERDICT_WORDS
from refspec_check.context import Expected
from refspec_check.problems import Checker
from refspec_check.report import Report
from refspec_check.vacuity import NOT_WITH_VACUITY, VACUOUS_TAIL, VACUOUS_TEXT

DECISION_TEXT = VERDICT_WORDS  # the decision in words (refspec_check.answer)


def check_headline(c: Checker, E: Expected, rep: Report, stated: dict, est_dec: dict) -> list:
    """The headline block (numbers.json ``headline``, the report's summary table).

    Each number of a row is one of the report's recomputable numbers; each E2 row's decision is the
    recomputed one and its text says it (``DECISION_TEXT``); every estimate has its E2 row; every number
    the headline must show is in it. Returns the headline rows."""
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
        check_vacuity_words(c, E, where, h["parts"], "".join(texts))
        if "decision" in h:  # E2 rows
            key = h.get("key") if isinstance(h.get("key"), dict) else {}
            k = (key.get("family"), key.get("path"), key.get("comparison"))
            head_est[k] = j
            exp = est_dec.get(k)
            row_ids = {p["num"] for p in h["parts"] if isinstance(p, dict) and isinstance(p.get("num"), str)}
            for nid in E.items:
                q = nid.split("|")
                if q[:3] == ["noise", "replication", str(k[0])] and q[-1] == "value" and nid not in row_ids:
                    c.bad(where, f"E2 row {' '.join(map(str, k))} leaves out its A/A control ({nid})")
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
    check_headline_complete(c, E, set(head_ids))
    return head


def check_vacuity_words(c: Checker, E: Expected, where: str, parts: list, text: str) -> None:
    """A headline row of a vacuous panel (its numbers' campaign and family; refspec_check.vacuity) says
    "vacuous: no exposed input in N screened" and never "preserved" or "one state"; a row of an exposed
    panel never says "vacuous"."""
    panels = set()
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("num"), str):
            p = part["num"].split("|")
            if p[0] in ("qual", "ratio", "vacuity") and len(p) >= 3:
                panels.add((p[1], p[2]))
    for camp, fam in sorted(panels):
        c.identities += 1
        vac = E.items.get(f"vacuity|{camp}|{fam}|screened")
        if vac is None:
            if "vacuous" in text.lower():
                c.bad(where, f"says vacuous, but an unrepaired arm of {camp} {fam} diverges (or none ran)")
            continue
        want = f"{VACUOUS_TEXT}{vac[0]}{VACUOUS_TAIL}"
        if want not in text:
            c.bad(where, f"{camp} {fam}: no unrepaired arm diverges on any task, but the row does not say {want!r}")
        for w in NOT_WITH_VACUITY:
            if w in text.lower():
                c.bad(where, f"{camp} {fam} is vacuous, but the row says {w!r}")


# campaigns with their own tables instead of headline rows (the phase-mask sweep, the prediction)
OWN_TABLES = ("phase_mask", "prediction")


def refused_arms(c: Checker) -> set[tuple]:
    """(campaign, family, arm) of arms no request of which ran: every non-warmup row of requests.csv failed
    because no worker started (the admission guard refuses an arm at worker start)."""
    t = c.tables.get("requests")
    rows: dict[tuple, list] = {}
    for r in t.rows if t is not None else []:
        if r.get("status") != "excluded_warmup":
            rows.setdefault((r.get("campaign"), r.get("family"), r.get("arm")), []).append(r)
    return {
        k
        for k, rs in rows.items()
        if all(r.get("status") == "failed" and str(r.get("reason") or "").startswith("no worker:") for r in rs)
    }


def required_in_headline(c: Checker, E: Expected) -> dict[str, str]:
    """The numbers the headline must show (id -> what it stands for), recomputed from the tables:

    * preservation: matching / required of every arm of every campaign (but the sweep and the prediction),
      and its count of failed tasks where tasks fail (a refused arm says "refused" instead);
    * the first divergence of every failing arm that ran (its earliest, by index then task);
    * every qualified ratio of the confirmation (in words: its fold or, where its interval holds one or
      there is none, the ratio itself) and the A/A control of each campaign and family it shows;
    * every E2 estimate's session count (and the replication's A/A control);
    * the E1 counts of every family and stage (PQ = QB of the contexts that admit QB, the refused ones
      where there are any, PQ = QH of all), and the prediction's totals;
    * the number screened of every vacuous panel (its verdict "vacuous: no exposed input in N screened")."""
    refused = refused_arms(c)
    need: dict[str, str] = {}
    first: dict[tuple, tuple] = {}
    shown_ratio: set[tuple] = set()
    for nid in E.items:
        p = nid.split("|")
        if p[0] == "qual" and len(p) == 5 and p[1] not in OWN_TABLES:
            k = (p[1], p[2], p[3])
            if p[4] in ("matching", "required") or (p[4] == "tasks_failed" and E.items[nid][0] and k not in refused):
                need[nid] = f"{p[4]} of {' '.join(k)}"
        elif p[0] == "qfail" and len(p) == 7 and p[6] == "first_diff_index" and p[1] not in OWN_TABLES:
            k = (p[1], p[2], p[4])
            if k not in refused:
                cand = (E.items[nid][0], p[3], nid)
                if k not in first or cand < first[k]:
                    first[k] = cand
        elif p[0] == "ratio" and len(p) == 7 and p[1] == "confirmation" and p[6] in ("fold", "plain"):
            # the ratio in words: its fold where the interval is away from one, else as it is (add_fold)
            need[nid] = f"qualified ratio {p[4]}/{p[5]} of {p[1]} {p[2]}"
            shown_ratio.add((p[1], p[2], p[3]))
        elif p[0] == "est" and p[-1] == "n_sessions":
            need[nid] = f"E2 estimate {' '.join(p[1:-1])}"
            shown_ratio.add(("replication", p[1], None))
        elif (
            p[0] == "replay"
            and len(p) == 4
            and (
                p[3] in ("pq_eq_qb", "qb_admitted", "pq_eq_qh", "contexts")
                or (p[3] == "qb_refused" and E.items[nid][0])
            )
        ):
            need[nid] = f"E1 {p[3]} of {p[1]} {p[2]}"
        elif p[0] == "vacuity" and len(p) == 4:
            need[nid] = f"vacuity verdict of {p[1]} {p[2]}"
        elif p[0] == "predsum" and p[-1] in ("predicted_matches", "live_runs", "reference_matches"):
            need[nid] = f"prediction {p[2]} of {p[1]}"
    for k, (_i, _task, nid) in first.items():
        need[nid] = f"first divergence of {' '.join(k)}"
    for nid in E.items:
        p = nid.split("|")
        if p[0] == "noise" and len(p) == 7 and p[6] == "value":
            camp, fam, cap = p[1], p[2], p[5]
            if (camp, fam, cap) in shown_ratio or (camp == "replication" and (camp, fam, None) in shown_ratio):
                need[nid] = f"A/A control {p[3]} of {camp} {fam}"
    return need


def check_headline_complete(c: Checker, E: Expected, shown: set[str]) -> None:
    """Every number :func:`required_in_headline` names is in the headline (which the report's summary table
    shows as the rendering writes it)."""
    c.identities += 1
    for nid, what in sorted(required_in_headline(c, E).items()):
        if nid not in shown:
            c.bad("numbers.json: headline", f"the headline leaves out the {what} ({nid})")
