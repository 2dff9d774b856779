"""The fixed words and orders the sections share: campaign titles, the order of the
replayed stages, small counts in words and the words after a count of failed tasks."""

from __future__ import annotations

from collections.abc import Iterable

from refspec_check.names import REPORT_ORDER

CAMPAIGN_TITLES = {
    "confirmation": "Confirmation",
    "implementation": "Implementation",
    "replication": "Replication (E2)",
    "width": "Width sweep",
    "phase_mask": "Phase-mask sweep",
    "prediction": "Prospective prediction",
}
# the vacuity verdict (refspec_check.render.vacuity): VACUOUS_TEXT, the number screened, VACUOUS_TAIL
VACUOUS_TEXT = "vacuous: no exposed input in "
VACUOUS_TAIL = " screened"
STAGE_ORDER = ("kq", "kq_soft_max", "kqv", "address")


def tasks_fail(n: int) -> str:
    """The words after a count of failed tasks (and the closing parenthesis)."""
    return " task fails)" if n == 1 else " tasks fail)"


def campaigns_in(rows: Iterable[dict]) -> list[str]:
    present = {r["campaign"] for r in rows}
    return [c for c in REPORT_ORDER if c in present] + sorted(present - set(REPORT_ORDER))


# small constants of the prose in words (digits in visible text are checked numbers or names)
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 10: "ten"}
