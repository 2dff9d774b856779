"""A timed verdict and a timing ratio in the words a reader knows: one vocabulary for the findings,
the headline, the tables, report.tex and the console.

A verdict (``ratios.verdict`` of :func:`refspec.core.stats.decide_ratio`, ``estimates.decision`` of
:func:`refspec.core.stats.decide_weighed`) reads as :data:`VERDICT_WORDS` gives it: "slower",
"faster", "equivalent within 2 %", "not 2 % slower", or "undecided: ..." with the reason.

A ratio ``r = NUM time / DEN time`` with its interval ``[lo, hi]`` reads (:func:`speed_phrase`):

* interval holding one (``lo <= 1 <= hi``): "no detectable difference between NUM and DEN
  (NUM/DEN 1.02 [0.94, 1.10])": never "1.00x slower";
* interval above or below one: "NUM is 1.36x slower than DEN [1.30, 1.42]" (faster below one, the
  interval turned over: :func:`refspec_check.render.document.fold`);
* no interval: "NUM/DEN 1.02 (no interval)".

:func:`speed_sentence` adds the verdict where the phrase does not already say it (a decided
"slower" or "faster"). ``report/check.py`` (``refspec_check/findings.py``) writes the same words
from the tables; change one only together with the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refspec_check.stats import DEFAULT_THRESHOLD

from ..document import ShownTable

TIMES = "\u00d7"


def threshold_percent(threshold: float = DEFAULT_THRESHOLD) -> str:
    """``tau`` as the percent a reader reads: 1.02 -> '2 %'."""
    return f"{round((threshold - 1.0) * 100, 6):g} %"


VERDICT_WORDS = {
    "exceeds": "slower",
    "faster": "faster",
    "equivalent": f"equivalent within {threshold_percent()}",
    "below": f"not {threshold_percent()} slower",
    "noise_too_high": "undecided: noise too high",
    "inconclusive": "undecided: interval too wide",
    "too_few_processes": "undecided: too few processes",
    "too_few_sessions": "undecided: too few sessions",
}
# the verdicts a speed phrase already states ("NUM is 1.36x slower than DEN")
SAID_BY_PHRASE = ("exceeds", "faster")


def verdict_word(verdict: str | None) -> str:
    """A verdict in words (:data:`VERDICT_WORDS`); an unknown code as it is."""
    return VERDICT_WORDS.get(verdict or "", verdict or "")


def holds_one(lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and lo <= 1.0 <= hi


def plain_ratio(nums: ShownTable, base: Sequence[Any], row: dict[str, Any], column: str, r: dict[str, Any]) -> list:
    """The ratio and its bounds to two decimals, as they are (ids ``base + (plain,)``, ``plain_lo``,
    ``plain_hi``): '1.02 [0.94, 1.10]', or the ratio alone without an interval."""
    b = tuple(base)
    out: list[Any] = [nums.add(b + ("plain",), r[column], ".2f", row=row, column=column)]
    if r.get("lo") is not None and r.get("hi") is not None:
        lo = nums.add(b + ("plain_lo",), r["lo"], ".2f", row=row, column="lo")
        hi = nums.add(b + ("plain_hi",), r["hi"], ".2f", row=row, column="hi")
        out += [" [", lo, ", ", hi, "]"]
    return out


def speed_phrase(
    nums: ShownTable, base: Sequence[Any], row: dict[str, Any], column: str, r: dict[str, Any], num: str, den: str
) -> list[Any]:
    """NUM against DEN in words (the module docstring); ``r[column]`` is NUM time / DEN time."""
    lo, hi = r.get("lo"), r.get("hi")
    if lo is None or hi is None:
        return [f"{num}/{den} "] + plain_ratio(nums, base, row, column, r) + [" (no interval)"]
    if holds_one(lo, hi):
        return (
            [f"no detectable difference between {num} and {den} ({num}/{den} "]
            + plain_ratio(nums, base, row, column, r)
            + [")"]
        )
    sp = nums.speed(base, row, column, r)
    return [f"{num} is ", sp.fold, f"{TIMES} slower than " if sp.slower else f"{TIMES} faster than ", den] + [
        " [",
        sp.lo,
        ", ",
        sp.hi,
        "]",
    ]


def speed_sentence(
    nums: ShownTable,
    base: Sequence[Any],
    row: dict[str, Any],
    column: str,
    r: dict[str, Any],
    num: str,
    den: str,
    verdict: str | None,
) -> list[Any]:
    """:func:`speed_phrase` followed by '; ' and the verdict in words, unless the phrase says it."""
    parts = speed_phrase(nums, base, row, column, r, num, den)
    if verdict and verdict not in SAID_BY_PHRASE:
        parts.append("; " + verdict_word(verdict))
    return parts


def speed_cell(nums: ShownTable, base: Sequence[Any], row: dict[str, Any], column: str, r: dict[str, Any]) -> list:
    """A table's 'as a speed' cell (the comparison is in its own column), with the same numbers as
    :func:`speed_phrase`: '1.36x slower [1.30, 1.42]'; 'no detectable difference (1.02 [0.94, 1.10])'
    where the interval holds one; '1.02 (no interval)' where there is none."""
    if r.get("lo") is None or r.get("hi") is None:
        return plain_ratio(nums, base, row, column, r) + [" (no interval)"]
    if holds_one(r["lo"], r["hi"]):
        return ["no detectable difference ("] + plain_ratio(nums, base, row, column, r) + [")"]
    return nums.speed(base, row, column, r).parts()
