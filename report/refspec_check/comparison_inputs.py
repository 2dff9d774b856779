"""A comparison's carried inputs checked as their own archives would be: each input's derived rows
recomputed from the raw tables it carries.

A comparison archive carries, for each compared archive (``inputs/a``, ``inputs/b``), the CSV copies
of the tables it compares (:data:`refspec_check.contract.COMPARED_TABLES`), byte for byte as that
archive sealed them. Its findings compare the derived rows (qualification, ratios, E2 estimates, the
A/A controls) of the two; so those rows must be what the carried raw records give, or a signer who
signs an input too could state a qualification its endpoints do not support and have it compared.
Each input's ``qualification`` is recomputed from its ``requests`` and ``endpoints``, its ``ratios``
(values, intervals, verdicts) from its ``requests`` and that qualification, its ``noise`` and
``estimates`` as the archive's own checker does (:mod:`refspec_check.results`,
:mod:`refspec_check.replication`), under the input's carried ``plan.json`` (its references, A/A
rules and bootstrap). A row that disagrees is a mismatch naming the carried file, row and column.
The numbers those checks would register for a report are not compared: the inputs' reports are not
carried, and the comparison's own numbers are checked against the comparison's tables.
"""

from __future__ import annotations

from refspec_check.context import Context
from refspec_check.intervals import AARules
from refspec_check.problems import MALFORMED, Checker
from refspec_check.qualification import arm_facts, reference_arms
from refspec_check.replication import bootstrap_parameters, check_noise, check_replication
from refspec_check.results import check_qualification, check_ratios


def check_carried_derivations(c: Checker, lab: str, tables: dict, plan) -> None:
    """The derived rows input ``lab`` carries, recomputed from the raw tables it carries (``tables``:
    name -> CsvTable as read from ``inputs/<lab>/tables``) under its carried ``plan``."""
    if "requests" not in tables:
        return
    ctx = Context(c, tables, lambda name: tables[name].rel, partial=True)
    try:
        facts = arm_facts(tables["requests"].rows)
        qual = {}
        if "qualification" in tables and "endpoints" in tables:
            qual = check_qualification(ctx, reference_arms(plan))
        rules = AARules(c, plan)
        if qual:
            check_ratios(ctx, qual, facts, rules)
        if "noise" in tables or "estimates" in tables:
            boot = bootstrap_parameters(plan)
            noise = check_noise(ctx, qual, boot, rules) if "noise" in tables else {}
            if "estimates" in tables:
                check_replication(ctx, qual, facts, boot, noise)
    except MALFORMED as e:
        c.bad(f"inputs/{lab}", f"malformed carried input: {type(e).__name__}: {str(e)[:200]}")
