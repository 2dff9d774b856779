"""The report format's fixed text and number precisions, as report/check.py pins them
(``report/refspec_check/format.json``).

:func:`extract` reads them from the renderer itself: every string literal of
``refspec.reporting`` (the comparison report included; each literal piece of an f-string; docstrings excepted;
of :mod:`.page`, the text between the HTML tags, without the stylesheet), white space collapsed; and the precision of each
number column, from every ``ShownTable.add(id, value, fmt, ...)`` call whose format and the last part of
whose id are literals, completed by :data:`COLUMN_FORMATS` for the calls that compute them. ``refspec lint`` and
tests/checker/test_report_bound.py keep the pinned file equal to :func:`extract`: a change of the
renderer's text or precision is a change of the report format, and the checker learns it from this file.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from ..core.paths import REPO_ROOT

PINNED = REPO_ROOT / "report" / "refspec_check" / "format.json"
REPORTING = Path(__file__).resolve().parent

# precisions of the columns whose ``add`` call computes its format or column (a loop over columns)
COLUMN_FORMATS = {
    # the projection replay: calls by outcome, positions compared
    "calls": "d",
    "qualified": "d",
    "mismatch": "d",
    "excluded": "d",
    "error": "d",
    "positions": "d",
    "positions_differing": "d",
    # refspec.reporting.comparison: the two archives' values and intervals, row counts and the band
    "a_value": ".6f",
    "a_lo": ".6f",
    "a_hi": ".6f",
    "b_value": ".6f",
    "b_lo": ".6f",
    "b_hi": ".6f",
    "band": ".6f",
    "rows_a": "d",
    "rows_b": "d",
    "rows_differing": "d",
    "actual": ".6f",
    "additive": ".6f",
    "arm_margin": ".4g",
    "arm_token": "d",
    "bytes": "d",
    "control_ok": "d",
    "coordinates": "d",
    "detected": "d",
    "differs": "d",
    "divergent_predicted": "d",
    "divergent_runs": "d",
    "divergent_tasks": "d",
    "donor": "d",
    "controls": "d",
    "discovery": "d",
    "endpoint_class": "d",
    "false": "d",
    "faults": "d",
    "first_layer": "d",
    "fixtures": "d",
    "inputs": "d",
    "interaction": ".6f",
    "kv_class": "d",
    "layers": "d",
    "logits_class": "d",
    "max_abs_err": ".6g",
    "max_abs_interaction": ".6f",
    "max_abs_mq": ".6g",
    "max_rel_err": ".6g",
    "max_rel_frobenius": ".6g",
    "max_ulp_mq": "d",
    "max_visible_keys": "d",
    "median_denominator_ms": ".2f",
    "median_numerator_ms": ".2f",
    "mq_eq_pq": "d",
    "near_tie_bound": ".4g",
    "ops": "d",
    "oracle_ok": "d",
    "processes": "d",
    "recipient_changed": "d",
    "recipient_unchanged": "d",
    "records": "d",
    "ref_margin": ".4g",
    "ref_token": "d",
    "screened": "d",
    "shams": "d",
    "shams_ok": "d",
    "stable_tasks": "d",
    "tasks": "d",
    "third": "d",
    "tried": "d",
}


def _norm(s: str) -> str:
    return " ".join(s.split())


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _id_column(node: ast.AST) -> str | None:
    """The last part of a number's id as the ``add`` call writes it (``base + ("calls",)``, ``(..., "ratio")``):
    the column the checker keys a precision by."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        node = node.right
    if isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[-1], ast.Constant):
        v = node.elts[-1].value
        return v if isinstance(v, str) else None
    return None


def extract() -> dict:
    """``{"fragments": [...], "formats": {column: fmt}}`` of the renderer as it is."""
    frags: set[str] = set()
    formats: dict[str, str] = dict(COLUMN_FORMATS)
    for p in sorted(q for q in REPORTING.rglob("*.py") if q.name != "format_text.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if p.name == "page.py" and "\\" not in node.value:  # the page's HTML (its TeX has backslashes)
                    if node.value.lstrip().startswith(":root"):
                        continue  # the stylesheet
                    # the text between the tags: no tag, attribute or character reference
                    pieces = [
                        t for t in re.sub(r"<[^>]*>", "\x00", node.value).split("\x00") if not set(t) & set("<>\"'=&")
                    ]
                else:
                    pieces = [node.value]
                for piece in pieces:
                    s = _norm(piece)
                    if s:
                        frags.add(s)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add":
                fmt = node.args[2] if len(node.args) > 2 else None
                col = _id_column(node.args[0]) if node.args else None
                kw = {k.arg: k.value for k in node.keywords}
                named = kw.get("column")
                if isinstance(fmt, ast.Constant):
                    for c in (col, named.value if isinstance(named, ast.Constant) else None):
                        if c is not None:
                            formats.setdefault(c, fmt.value)
    return {"fragments": sorted(frags), "formats": dict(sorted(formats.items()))}


def render_pinned() -> str:
    return json.dumps(extract(), ensure_ascii=False, indent=0) + "\n"


def pinned_problem() -> str | None:
    """Why report/refspec_check/format.json is not the renderer's format (None when it is)."""
    want = render_pinned()
    have = PINNED.read_text(encoding="utf-8") if PINNED.is_file() else ""
    if have != want:
        return f"{PINNED.relative_to(REPO_ROOT)} differs from the renderer's text and precisions: regenerate it with `./run shell -c 'python -m refspec.reporting.format_text'`"
    return None


if __name__ == "__main__":
    PINNED.write_text(render_pinned(), encoding="utf-8")
