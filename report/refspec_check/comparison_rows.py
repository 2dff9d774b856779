"""The rows a comparison archive must hold, recomputed from the two carried inputs (anc/compare.md).

``refspec compare`` (refspec.compare: preservation.py, timings.py, inputs.py) decides which rows
``tables/comparisons.csv`` has, their labels, their verdicts and the band; this module decides the
same from ``inputs/a`` and ``inputs/b`` with the standard library, so that a row deleted, added or
relabelled, a verdict changed or a band widened is refused. Change both together.
"""

from __future__ import annotations

import math
import re

#: refspec.compare.preservation.FINDINGS: id -> title, in the order of the table
FINDING_TITLES = {
    "qualification": "matching counts",
    "first_divergence": "first divergences",
    "endpoints": "endpoints",
    "replay": "E1 replay",
    "phase_masks": "phase-mask minimal masks",
    "partition": "state classes",
    "crosses": "state crosses",
}
#: refspec.core.stats defaults where a plan has no bootstrap settings
DEFAULT_SEED, DEFAULT_DRAWS, DEFAULT_THRESHOLD = 20261014, 10_000, 1.02
REL_TOL_STATED = 1e-9
PINNED_ROLES = ("sdist", "patch", "model", "panel")
UNPINNED_CONFIG = ("results", "reproduces")
TWIN_SUFFIX = "_aa"
SINGLE_SESSION = " (a single session: the interval holds the tasks' noise only)"
#: the label columns of a comparisons row, each equal to the recomputed one
LABELS = (
    "section",
    "title",
    "table",
    "kind",
    "campaign",
    "family",
    "cap",
    "path",
    "comparison",
    "numerator",
    "denominator",
    "draws",
    "seed",
)


# --------------------------------------------------------------------------- inputs


def bootstrap_of(plan: dict) -> dict:
    b = plan.get("bootstrap") if isinstance(plan, dict) else None
    b = b if isinstance(b, dict) else {}
    return {
        "seed": int(b.get("seed", DEFAULT_SEED)),
        "draws": int(b.get("draws", DEFAULT_DRAWS)),
        "threshold": float(b.get("threshold", DEFAULT_THRESHOLD)),
    }


def _registered(plan: dict) -> tuple[dict, dict]:
    """(plan without campaigns and plan_sha256, campaign -> its plan without manifest_sha256)."""
    top = {k: v for k, v in (plan or {}).items() if k not in ("plan_sha256", "campaigns")}
    camps = {}
    for name, cp in ((plan or {}).get("campaigns") or {}).items():
        camps[name] = {k: v for k, v in cp.items() if k != "manifest_sha256"} if isinstance(cp, dict) else cp
    return top, camps


def plan_differs(plan_a: dict, plan_b: dict, campaign: str) -> bool:
    """Whether the registered plans differ for ``campaign`` (a field outside ``campaigns`` concerns every one)."""
    ta, ca = _registered(plan_a)
    tb, cb = _registered(plan_b)
    if ta != tb:
        return True
    if campaign in ca or campaign in cb:
        return ca.get(campaign) != cb.get(campaign)
    return False


def plans_same(plan_a: dict, plan_b: dict) -> bool:
    """Whether the registered plans (without their derived digests) are the same."""
    return _registered(plan_a) == _registered(plan_b)


def pinned_inputs(manifest: dict) -> dict:
    """The pinned inputs of a manifest (refspec.compare.inputs.pinned): sdist/patch/model/panel sha256, the
    package set (names and versions) and the config without ``results`` and ``reproduces``."""
    bd = (manifest or {}).get("buildDefinition") or {}
    out: dict = {}
    for d in bd.get("resolvedDependencies") or []:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or ":" not in d["name"]:
            continue
        role = d["name"].split(":", 1)[0]
        if role in PINNED_ROLES:
            out[d["name"]] = (d.get("digest") or {}).get("sha256")
        elif role == "pkg":
            out[d["name"]] = (d.get("annotations") or {}).get("version")
    cfg = (bd.get("externalParameters") or {}).get("config") or {}
    if isinstance(cfg, dict):
        out["config"] = {k: v for k, v in cfg.items() if k not in UNPINNED_CONFIG}
    return out


def noise_floor(rows: list) -> float | None:
    """An archive's A/A noise floor, max(hi, 1/lo) over its noise rows (refspec.compare.noise_floor_of)."""
    fl = [max(r["hi"], 1.0 / r["lo"]) for r in rows if r["lo"] is not None and r["hi"] is not None and r["lo"] > 0]
    return max(fl) if fl else None


# --------------------------------------------------------------------------- timings


def _items(tabs: dict) -> dict:
    out = {}
    for r in tabs.get("ratios", []):
        out[("ratio", r["campaign"], r["family"], r["cap"], f"{r['numerator']}/{r['denominator']}", r["path"])] = r
    for r in tabs.get("estimates", []):
        out[("estimate", "replication", r["family"], None, r["comparison"], r["path"])] = r
    return out


def _arm_of(reqs: list, campaign: str, family: str, path: str, layout: str) -> str | None:
    found = sorted(
        {
            r["arm"]
            for r in reqs
            if r["campaign"] == campaign
            and r["family"] == family
            and r["mode"] == path
            and r["layout"] == layout
            and not (r["arm"].endswith(TWIN_SUFFIX) and len(r["arm"]) > len(TWIN_SUFFIX))
        }
    )
    return found[0] if len(found) == 1 else None


def _panel(rows: list, campaign: str, family: str, cap) -> list:
    return sorted(
        {
            r["task_id"]
            for r in rows
            if r["campaign"] == campaign and r["family"] == family and (cap is None or r["cap"] == cap)
        }
    )


def _rel_differs(x: float, y: float) -> bool:
    return abs(x - y) > REL_TOL_STATED * max(1.0, abs(y))


def _sides(key: tuple, ra: dict | None, rb: dict | None, ta: dict, tb: dict) -> tuple:
    """(numerator, denominator, A's value, B's value, qualified in A, qualified in B, the reasons so far) of
    one timing item. A ratio names its arms; an estimate's arms are the ones A's requests give its layouts,
    and B's must be the same."""
    kind, campaign, family, _cap, comp, path = key
    why: list = []
    if kind == "ratio":
        num, den = comp.split("/", 1)
        a_val, b_val = (ra or {}).get("ratio"), (rb or {}).get("ratio")
        ok_a, ok_b = bool(ra and ra["qualified"]), bool(rb and rb["qualified"])
        return num, den, a_val, b_val, ok_a, ok_b, why
    x_l, y_l = (s_.lower() for s_ in comp.split("/", 1))
    ra_req, rb_req = ta.get("requests", []), tb.get("requests", [])
    num, den = _arm_of(ra_req, campaign, family, path, x_l), _arm_of(ra_req, campaign, family, path, y_l)
    nb, db = _arm_of(rb_req, campaign, family, path, x_l), _arm_of(rb_req, campaign, family, path, y_l)
    if (num, den) != (nb, db):
        why.append(re.escape(f"the arms differ: A {num}/{den}, B {nb}/{db}"))
    a_val, b_val = (ra or {}).get("estimate"), (rb or {}).get("estimate")
    ok_a, ok_b = bool(ra and a_val is not None), bool(rb and b_val is not None)
    return num, den, a_val, b_val, ok_a, ok_b, why


def _availability_reasons(ra: dict | None, rb: dict | None, ok_a: bool, ok_b: bool) -> list:
    """The reasons an item is missing or unqualified on a side, as patterns."""
    why = []
    if ra is None or rb is None:
        why.append(re.escape(f"only in {'B' if ra is None else 'A'}"))
    if ra is not None and not ok_a:
        why.append(re.escape(f"not qualified in A ({ra['reason']})"))
    if rb is not None and not ok_b:
        why.append(re.escape(f"not qualified in B ({rb['reason']})"))
    return why


def _plan_reasons(ins: dict, campaign: str, pinned_why: bool, boots_differ: bool) -> list:
    """The reasons the two runs' pinned inputs, plans or bootstrap settings make a row not comparable."""
    plan_why = []
    if pinned_why:
        plan_why.append(re.escape("pinned inputs differ (") + ".*")
    if plan_differs(ins["a"].get("plan"), ins["b"].get("plan"), campaign):
        plan_why.append(re.escape(f"plan of {campaign} differs (") + ".*")
    if boots_differ:
        plan_why.append(re.escape("bootstrap settings differ (") + ".*")
    return plan_why


def _set_verdict(row: dict, why: list, rc: dict | None, band: float) -> None:
    """The row's verdict and the pattern of its reason: not comparable with a reason, else reproduced when
    the recomputed interval contains 1 or lies within the band, else differs."""
    if why:
        row["verdict"], row["reason_re"] = "not comparable", re.escape("; ").join(why)
    elif rc is not None:
        lo, hi = rc["lo"], rc["hi"]
        inside = 1.0 / band <= lo and hi <= band
        row["verdict"] = "reproduced" if (lo <= 1.0 <= hi or inside) else "differs"
        reason = (
            "the interval contains 1"
            if lo <= 1.0 <= hi
            else "the interval lies within the band"
            if row["verdict"] == "reproduced"
            else "the interval excludes 1 and leaves the band"
        )
        if min(rc["n_sessions_a"], rc["n_sessions_b"]) < 2:
            reason += SINGLE_SESSION
        row["reason_re"] = re.escape(reason)
    else:
        row["verdict"], row["reason_re"] = "not comparable", ""


def expected_timings(ins: dict, band: float, recompute) -> list:
    """Every timing row refspec compare writes, in its order: labels, verdict, a pattern of its reason, and
    the recomputation (``recompute(row)`` -> dict, the bootstrap of comparison.recompute_timing) when it has one."""
    ta, tb = ins["a"].get("tables", {}), ins["b"].get("tables", {})
    boot_a, boot_b = bootstrap_of(ins["a"].get("plan")), bootstrap_of(ins["b"].get("plan"))
    seed, draws = boot_a["seed"], boot_a["draws"]
    pinned_why = pinned_inputs(ins["a"].get("manifest")) != pinned_inputs(ins["b"].get("manifest"))
    ia, ib = _items(ta), _items(tb)
    out = []
    for key in sorted(set(ia) | set(ib), key=lambda k: (k[0] != "ratio", k[1], k[2], k[3] or 0, k[5], k[4])):
        kind, campaign, family, cap, comp, path = key
        ra, rb = ia.get(key), ib.get(key)
        num, den, a_val, b_val, ok_a, ok_b, why = _sides(key, ra, rb, ta, tb)  # why: regular expressions
        why += _availability_reasons(ra, rb, ok_a, ok_b)
        if not ok_a and not ok_b:
            continue
        row = dict(
            section="timing",
            item=(
                f"estimate|{family}|{path}|{comp}" if kind == "estimate" else f"ratio|{campaign}|{family}|{cap}|{comp}"
            ),
            title="qualified ratio" if kind == "ratio" else "E2 estimate",
            table="ratios" if kind == "ratio" else "estimates",
            kind=kind,
            campaign=campaign,
            family=family,
            cap=cap,
            path=path,
            comparison=comp,
            numerator=num,
            denominator=den,
            draws=draws,
            seed=seed,
            band=band,
            a_value=a_val,
            b_value=b_val,
        )
        rc = None
        if ok_a and ok_b and not (num and den):
            why.append(re.escape(f"no single arm per side in A's requests ({comp}, {path}: {num}/{den})"))
        if ok_a and ok_b and num and den:
            if _panel(ta.get("qualification", []), campaign, family, cap) != _panel(
                tb.get("qualification", []), campaign, family, cap
            ):
                why.append(re.escape("the panels differ"))
            else:
                rc, more = _resampled(row, ins, recompute)
                why += more
        why += _plan_reasons(ins, campaign, pinned_why, boot_a != boot_b)
        row["rc"] = rc
        _set_verdict(row, why, rc, band)
        out.append(row)
    return out


def _resampled(row: dict, ins: dict, recompute) -> tuple:
    """(the recomputation or None, the reasons it gives for 'not comparable', as patterns)."""
    for lab in ("a", "b"):
        reqs = ins[lab].get("tables", {}).get("requests", [])
        timed = any(
            r["campaign"] == row["campaign"]
            and r["family"] == row["family"]
            and (row["cap"] is None or r["cap"] == row["cap"])
            and r["status"] == "ok"
            and r["t_ns"] is not None
            and r["arm"] in (row["numerator"], row["denominator"])
            for r in reqs
        )
        if not timed:
            return None, [re.escape(f"no timed session in {lab.upper()}")]
    try:
        rc = recompute(row)
    except (KeyError, ZeroDivisionError, ValueError, IndexError, OverflowError):
        return None, [re.escape("the requests do not give the value (") + ".*"]
    why = []
    for lab, pt in (("A", rc["a_point"]), ("B", rc["b_point"])):
        stated = row[lab.lower() + "_value"]
        if stated is None or _rel_differs(pt, float(stated)):
            why.append(re.escape(f"{lab}'s stated value {stated} is not the value its requests give (") + ".*")
    if not rc.get("kept", 1):
        why.append(re.escape("no bootstrap draw defines both values"))
        rc = None
    return rc, why


# --------------------------------------------------------------------------- preservation


def expected_preservation(ins: dict, recompute_finding) -> list:
    """The seven preservation rows (refspec.compare.preservation), labels, counts, verdict and note."""
    out = []
    from refspec_check.contract import COMPARE_FINDINGS

    for fid, title in FINDING_TITLES.items():
        table = COMPARE_FINDINGS[fid][0]
        ta = ins["a"].get("tables", {}).get(table)
        tb = ins["b"].get("tables", {}).get(table)
        ra_, rb_, nd, verdict, cells = recompute_finding(fid, ta, tb)
        if ta is None and tb is None:
            note = "absent from both archives"
        elif (ta is None) != (tb is None):
            note = f"{table} absent from {'A' if ta is None else 'B'}"
        else:
            note = None
        out.append(
            dict(
                section="preservation",
                item=fid,
                title=title,
                table=table,
                rows_a=ra_,
                rows_b=rb_,
                rows_differing=nd,
                verdict=verdict,
                reason_re=re.escape(note or ""),
                cells=cells,
                **dict.fromkeys(
                    ("kind", "campaign", "family", "cap", "path", "comparison", "numerator", "denominator")
                ),
                draws=None,
                seed=None,
                band=None,
            )
        )
    return out


def band_of(c, ins: dict, cmp_plan: dict, where: str) -> float:
    """The band, tau * max(F_A, F_B) from the carried noise tables (tau alone without a floor), or the
    threshold widened by a floor the comparison's plan.json records as given by hand (``noise_floor.given``)."""
    tau = bootstrap_of(ins["a"].get("plan"))["threshold"]
    fa = noise_floor(ins["a"].get("tables", {}).get("noise", []))
    fb = noise_floor(ins["b"].get("tables", {}).get("noise", []))
    nf = (cmp_plan or {}).get("noise_floor") or {}
    given = nf.get("given") if isinstance(nf, dict) else None
    if given is not None:
        if not isinstance(given, (int, float)) or isinstance(given, bool) or not given >= 1.0 or math.isinf(given):
            c.bad(where, f"noise_floor.given is not a ratio >= 1 ({given!r})")
            given = None
        else:
            c.same(where + " noise_floor.a", nf.get("a"), float(given), "the floor given by hand")
            c.same(where + " noise_floor.b", nf.get("b"), float(given), "the floor given by hand")
            return tau * max(1.0, float(given))
    c.same(where + " noise_floor.a", nf.get("a"), fa, "A's A/A noise floor (inputs/a/tables/noise.csv)")
    c.same(where + " noise_floor.b", nf.get("b"), fb, "B's A/A noise floor (inputs/b/tables/noise.csv)")
    return tau * max([1.0] + [f for f in (fa, fb) if f is not None])
