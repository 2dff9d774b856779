"""Vacuity as a verdict: a qualification or a state study that had nothing to find.

The rule (exposed tasks and inputs, the vacuous verdict and its words) has one owner, the report's
renderer in the checker's package (:mod:`refspec_check.render.vacuity`, standard library only); the
pipeline's claims table and ``refspec qualify`` use it under this name.
"""

from __future__ import annotations

from refspec_check.render.vacuity import (  # noqa: F401
    OWN_TABLES,
    VACUOUS,
    VACUOUS_TAIL,
    VACUOUS_TEXT,
    crosses_exposure,
    exposed_repairs,
    is_unrepaired,
    panel_exposure,
    partition_exposure,
    unrepaired_arms,
    vacuous_text,
)
