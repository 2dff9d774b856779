"""The report's headline block (numbers.json ``headline``, the summary table)."""

from __future__ import annotations

from refspec_check.context import Expected
from refspec_check.problems import Checker
from refspec_check.report import Report

DECISION_TEXT = {"too_few_sessions": "too few sessions", "noise_too_high": "machine noise too high"}


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
