"""Benchmark: the two A/A rules of the decision floor, simulated in the paired design.

    ./run shell -c 'python bench/decision_rules.py [--draws 3000] [--processes 8] [--requests 8] [--seed 1]'

A timed campaign runs one arm twice, ``X`` and its twin ``X_aa`` (the same recipe under another name),
in the same worker processes as the arms it controls (the paired design). The floor ``F`` that weighs
every decision of the campaign (:func:`refspec.core.stats.decision_floor`) follows one of two rules:

* ``floor`` (the rule before): ``F = max(hi, 1/lo)`` of the A/A interval, always;
* ``calibration`` (the default a plan freezes as ``aa_rule``): ``F = 1`` while the A/A interval holds
  1, ``max(hi, 1/lo)`` when it excludes 1 (the control failed).

Each draw simulates one campaign: ``--processes`` processes, each serving ``X``, ``X_aa`` and a
comparison arm ``Y`` with ``--requests`` timed requests per arm, the log time of a request

    y = mu_a + b_p + g_{p,a} + e,   b_p ~ N(0, between), g_{p,a} ~ N(0, interaction), e ~ N(0, within)

(``--between``, ``--interaction``, ``--within``: by default the prior of
``config/campaigns/implementation.yaml``'s ``sizing.prior``, measured with bench/paired_vs_fresh.py;
its ``within`` is per request, so ``--requests`` is the requests of an arm in a process over all
tasks). ``mu_X = mu_X_aa``, and ``mu_Y = mu_X + log r`` for each true ratio ``r`` of Y/X (1.00, 1.02,
1.03, 1.05, 1.08; one draw serves every ``r``: the same processes and noise, ``Y`` shifted). With the
project's own interval code (:func:`refspec.core.stats.process_contrasts`,
:func:`~refspec.core.stats.paired_interval`), each draw gets the A/A interval of ``X_aa/X`` and the
95 % and 90 % intervals of ``Y/X``; the ratio is decided (:func:`~refspec.core.stats.decide_ratio`,
threshold ``--tau``, 1.02) under each rule's ``F``. The table gives, per true ratio and rule, the
fraction of draws decided ``exceeds``, ``faster``, ``equivalent`` and undecided (``noise_too_high``
or ``inconclusive``), and the median detectable ratio ``tau * F * exp(h)``; below it, the A/A
coverage (the fraction of A/A intervals that hold 1, where the calibration rule has ``F = 1``).

Output of ``--draws 3000`` (defaults otherwise: 8 processes, 8 requests per arm, seed 1, the prior;
32 to 40 s on a 2-core VM)::

    paired design: 8 processes x 8 requests per arm (X, X_aa, Y), 3000 draws, seed 1, tau 1.02
    variances of log time: between 0.0002, within 0.0059, interaction 4.1e-05; detectable: the median of tau * F * exp(h)
    true Y/X  rule           exceeds     faster equivalent  undecided  detectable
    -----------------------------------------------------------------------------
        1.00  calibration      0.000      0.000      0.037      0.963      1.0537
        1.00  floor            0.000      0.000      0.000      1.000      1.0986
        1.02  calibration      0.024      0.000      0.016      0.960      1.0537
        1.02  floor            0.000      0.000      0.000      1.000      1.0986
        1.03  calibration      0.085      0.000      0.003      0.911      1.0537
        1.03  floor            0.000      0.000      0.000      1.000      1.0986
        1.05  calibration      0.416      0.000      0.000      0.584      1.0537
        1.05  floor            0.008      0.000      0.000      0.992      1.0986
        1.08  calibration      0.899      0.000      0.000      0.101      1.0537
        1.08  floor            0.198      0.000      0.000      0.802      1.0986
    A/A coverage: 0.952 of 3000 draws hold 1 (the calibration rule's F = 1)

Under the floor rule the twin's noise, already inside each ratio's own interval (the twin shares the
ratio's processes), is counted a second time: the median detectable ratio is 1.099, about ``tau *
exp(2 h)``, a true 5 % effect is decided in 0.8 % of draws and 8 % in 20 %, and ``equivalent`` is out
of reach (``F`` > ``tau`` leaves no band). Under the calibration rule it is 1.054, ``tau * exp(h)``:
5 % is decided in 42 % and 8 % in 90 %, while a true ratio at the threshold (1.02) is decided
``exceeds`` in 2.4 % of draws (at most the 2.5 % of the 95 % interval's upper tail) and no true ratio
of 1 ever is; the A/A interval holds 1 in 95.2 % of draws, as a 95 % interval should. It needs no
engine or model: it only draws numbers.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))  # refspec_check, which refspec imports
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from refspec.core import stats as S  # noqa: E402
from refspec.core.paths import config_dir  # noqa: E402

RATIOS = (1.00, 1.02, 1.03, 1.05, 1.08)
RULES = (S.AA_CALIBRATION, S.AA_FLOOR)
OUTCOMES = ("exceeds", "faster", "equivalent", "undecided")
MU_X = math.log(1.5)  # the arm's mean log time (1.5 s a request); only differences matter


def prior() -> dict:
    """The variance components of ``config/campaigns/implementation.yaml``'s ``sizing.prior``."""
    doc = yaml.safe_load((config_dir() / "campaigns" / "implementation.yaml").read_text(encoding="utf-8"))
    p = doc["sizing"]["prior"]
    return {k: float(p[k]) for k in ("between", "within", "interaction")}


def draw_rows(rng: random.Random, processes: int, requests: int, comps: dict) -> list[tuple[str, str, str, float]]:
    """Rows ``(process, arm, task, time)`` of one simulated campaign: arms X, X_aa and Y (Y at ratio 1)."""
    sd_b, sd_g, sd_e = (math.sqrt(comps[k]) for k in ("between", "interaction", "within"))
    rows = []
    for p in range(processes):
        b = rng.gauss(0.0, sd_b)
        for arm in ("X", "X_aa", "Y"):
            g = rng.gauss(0.0, sd_g)
            rows += [(f"p{p}", arm, "t0", math.exp(MU_X + b + g + rng.gauss(0.0, sd_e))) for _ in range(requests)]
    return rows


def outcome(verdict: str) -> str:
    return verdict if verdict in OUTCOMES else "undecided"


def simulate(args: argparse.Namespace, comps: dict) -> tuple[dict, dict, int]:
    """(counts[(ratio, rule)][outcome], detectable[(ratio, rule)] -> values, A/A intervals holding 1)."""
    rng = random.Random(args.seed)
    counts = {(r, rule): dict.fromkeys(OUTCOMES, 0) for r in RATIOS for rule in RULES}
    detect: dict = {(r, rule): [] for r in RATIOS for rule in RULES}
    covered = 0
    for _ in range(args.draws):
        rows = draw_rows(rng, args.processes, args.requests, comps)
        aa = S.paired_interval(S.process_contrasts(rows, "X_aa", "X"))
        covered += S.aa_verdict(aa.lo, aa.hi) == S.NOISE_OK
        floors = {rule: S.decision_floor(aa.lo, aa.hi, rule) for rule in RULES}
        base = S.process_contrasts(rows, "Y", "X")
        for r in RATIOS:
            # Y's times x r shift every process contrast by log r (the same processes and noise)
            c = {p: v + math.log(r) for p, v in base.items()}
            iv95, iv90 = S.paired_interval(c, 0.95), S.paired_interval(c, 0.90)
            for rule, F in floors.items():
                counts[(r, rule)][outcome(S.decide_ratio(iv95, iv90, args.tau, F))] += 1
                detect[(r, rule)].append(S.detectable_ratio(iv95.half_width, args.tau, F))
    return counts, detect, covered


def table(args: argparse.Namespace, counts: dict, detect: dict, covered: int) -> str:
    head = f"{'true Y/X':>8}  {'rule':<11}" + "".join(f"{o:>11}" for o in OUTCOMES) + f"{'detectable':>12}"
    lines = [head, "-" * len(head)]
    for r in RATIOS:
        for rule in RULES:
            n = counts[(r, rule)]
            cells = "".join(f"{n[o] / args.draws:>11.3f}" for o in OUTCOMES)
            lines.append(f"{r:>8.2f}  {rule:<11}{cells}{statistics.median(detect[(r, rule)]):>12.4f}")
    lines.append(
        f"A/A coverage: {covered / args.draws:.3f} of {args.draws} draws hold 1 (the calibration rule's F = 1)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    comps = prior()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=2000, help="simulated campaigns (default 2000)")
    ap.add_argument("--processes", type=int, default=8, help="worker processes per campaign (default 8)")
    ap.add_argument("--requests", type=int, default=8, help="timed requests per arm and process (default 8)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tau", type=float, default=S.DEFAULT_THRESHOLD, help="the threshold (default 1.02)")
    for k in ("between", "within", "interaction"):
        ap.add_argument(f"--{k}", type=float, default=comps[k], help=f"variance of log time (default {comps[k]})")
    args = ap.parse_args(argv)
    if args.processes < S.MIN_UNITS or args.requests < 1 or args.draws < 1:
        ap.error(f"--processes must be at least {S.MIN_UNITS}, --requests and --draws at least 1")
    comps = {k: getattr(args, k) for k in ("between", "within", "interaction")}
    t0 = time.monotonic()
    counts, detect, covered = simulate(args, comps)
    print(
        f"paired design: {args.processes} processes x {args.requests} requests per arm (X, X_aa, Y), "
        f"{args.draws} draws, seed {args.seed}, tau {args.tau:g}"
    )
    print(
        f"variances of log time: between {comps['between']:g}, within {comps['within']:g}, "
        f"interaction {comps['interaction']:g}; detectable: the median of tau * F * exp(h)"
    )
    print(table(args, counts, detect, covered))
    print(f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
