"""The report of a results folder or archive, as bytes: report.html, report.tex and numbers.json
(:func:`report_files`), a function of its tables and records alone.

The pipeline writes them (``refspec report`` and the report stage: ``refspec.reporting.render.render``,
which also compiles report.pdf) and ``report/check.py`` renders them again from a sealed archive and
compares the bytes (:mod:`refspec_check.rendering`): one renderer, standard library only, carried by the
checker.

Inputs (all optional except that at least one table must be present): the result tables
(:mod:`refspec_check.table_specs`: ``<name>.parquet`` with its ``<name>.csv`` copy, in RESULTS_DIR or
RESULTS_DIR/tables), ``manifest.json``, ``plan.json``, ``ledger.jsonl`` and ``SEAL.dsse.json``. A
missing input gives a visible "not run" note in its section; no number is ever invented.

Outputs:

``report.html``
    one self-contained file: inline CSS and inline SVG figures, no script, no
    network. Every number sits in an element with ``data-num`` (its id in
    numbers.json) and ``data-src`` (the CSV it comes from, relative to the
    report); every table links its CSV.
``report.tex``
    the same tables and figures (TikZ), which the pipeline compiles to report.pdf.
``numbers.json``
    every number shown: id, table, row key, column, value, format, source; and the renderer's version
    (:func:`renderer_version`).

The checker recomputes every number from the CSVs with its own code. The id scheme and every aggregate
are documented in ``anc/report.md``; change them only together with the checker.

Sections come from the modules of :mod:`.sections` over the data model of
:mod:`.document`; figures are drawn by :mod:`.svg` and TeX text is escaped by :mod:`.tex`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .device import device_caption, device_facts, provenance_values, section_device
from .document import Archive, Cell, Figure, Numbers, Section, Table, bootstrap_settings, read_json
from .page import Markup, html_page, tex_colors, tex_page
from .sections.admission import section_admission, section_graph_size
from .sections.arms import section_arms, section_glossary
from .sections.claims import section_claims
from .sections.noise import section_noise
from .sections.numerical import section_audit, section_replay
from .sections.prediction import section_prediction
from .sections.provenance import ShownSeal, section_ledger, section_provenance
from .sections.qualification import section_masks, section_qualification
from .sections.screen import section_screen
from .sections.state_studies import (
    section_crosses,
    section_frontier,
    section_kv,
    section_partition,
    section_partition_screen,
    section_projection,
)
from .sections.summary import section_summary
from .sections.timing import section_acceptance, section_diagnostics, section_ratios, section_replication
from .svg import COLORS
from .tex import TexRaw

NUMBERS_FORMAT = "refspec-numbers/1"
# the provenance section's note on report.pdf (what report/refspec_check/pdf.py does)
PDF_NOTE = (
    "report.pdf is report.tex compiled by pdflatex, reproducibly (a fixed SOURCE_DATE_EPOCH, the same passes): "
    "report/check.py compiles report.tex again where pdflatex is present and refuses a report.pdf whose bytes "
    "differ; where pdflatex is absent it says plainly that report.pdf is not checked."
)
TITLE = "refspec report"  # the report format pins the preamble, title included


def build(
    a: Archive, pubkey_fingerprint: str | None = None, data_seal: ShownSeal | None = None
) -> tuple[list[Section], Numbers, dict[str, Any]]:
    N = Numbers()
    plan = read_json(a.files["plan"]) if "plan" in a.files else None
    boot = bootstrap_settings(plan)
    prov_sec, prov = section_provenance(a, pubkey_fingerprint, data_seal)
    sections = [
        prov_sec,
        section_screen(a, N),
        section_qualification(a, N),
        section_ratios(a, N),
        section_diagnostics(a, N),
        section_replication(a, N, boot),
        section_noise(a, N),
        section_replay(a, N),
        section_audit(a, N),
        section_partition_screen(a, N),
        section_partition(a, N),
        section_kv(a, N),
        section_projection(a, N),
        section_crosses(a, N),
        section_frontier(a, N),
        section_admission(a, N),
        section_graph_size(a, N),
        section_claims(a, N),
        section_masks(a, N),
        section_prediction(a, N),
        section_acceptance(a, N),
        section_ledger(a, N),
    ]
    dev = device_facts(a)
    dev_sec = section_device(dev)
    if dev_sec is not None:
        sections.insert(1, dev_sec)
    prov.update(provenance_values(dev))
    summary, prov["headline"] = section_summary(a, N, prov, software_device=bool(dev and dev.get("software")))
    sections.insert(0, summary)
    sections[1:1] = [section_arms(a, N), section_glossary()]  # the arms at a glance and the glossary
    if a.notes:
        prov_sec.notes.extend(a.notes)
    prov_sec.notes.append(PDF_NOTE)
    ran_on = device_summary(a)
    if ran_on:  # written once, in the provenance table; the timed tables refer to it
        prov["devices"] = ran_on
        prov_sec.items[0].rows.append(
            [
                Cell(["devices"]),
                Cell([ran_on], cls="mono"),
                Cell(["where the timed arms ran (requests: device, gpu_layers)"]),
            ]
        )
        for sec in sections:
            if sec.id in DEVICE_CAPTION_SECTIONS:
                for item in sec.items:
                    if isinstance(item, Table):
                        item.caption = (item.caption + " " if item.caption else "") + DEVICES_SEE
    # a run on another backend than the CPU names its device under every table
    dev_caption = device_caption(dev)
    if dev_caption:
        for sec in sections:
            for item in sec.items:
                if isinstance(item, Table) and dev_caption not in item.caption:
                    item.caption = (item.caption + " " if item.caption else "") + dev_caption
    for sec in sections:
        sec.open = sec.id in OPEN_SECTIONS
    return sections, N, prov


# sections whose tables come from timed requests (their captions refer to the devices that ran the arms)
DEVICE_CAPTION_SECTIONS = ("qualification", "ratios", "replication", "masks", "acceptance")
DEVICES_SEE = "Devices: see the provenance table."
# open without a click in report.html: the findings and headline, the forest plot and the speeds;
# every other section is folded under its title (report.tex shows all)
OPEN_SECTIONS = ("summary", "ratios")


def device_summary(a: Archive) -> str:
    """Which device ran which arms, from the ``requests`` table's placement columns.

    ``report/check.py`` recomputes this text on its own (``refspec_check/device.py``,
    ``devices_text``); change one only together with the other."""
    if not a.has("requests"):
        return ""
    by: dict[tuple, set] = {}
    for r in a.rows("requests"):
        if r.get("status") not in ("ok", "excluded_warmup"):
            continue
        key = (
            r.get("device") or "CPU",
            r.get("device_description") or "",
            r.get("gpu_layers"),
            r.get("draft_gpu_layers"),
        )
        by.setdefault(key, set()).add(r["arm"])
    if not by:
        return ""

    def where(key) -> str:
        dev, desc, g, dg = key
        what = f"{dev} ({desc})" if desc else dev
        if not g:
            return f"{what}, no layer offloaded"
        return f"{what}, {g} target layers offloaded" + (f" ({dg} draft layers)" if dg else "")

    if len(by) == 1:
        return f"Device: every arm ran on {where(next(iter(by)))}."
    return (
        "Devices: "
        + "; ".join(
            f"{', '.join(sorted(arms))} on {where(k)}" for k, arms in sorted(by.items(), key=lambda kv: str(kv[0]))
        )
        + "."
    )


def render_documents(
    sections: list[Section],
    prov: dict[str, Any],
    title: str = "refspec report",
    svg: Callable[[Figure], Any] = lambda fig: "",
    tikz: Callable[[Figure], Any] = lambda fig: "",
) -> tuple[str, str]:
    """The HTML and LaTeX texts of a report's sections, in the report's one format
    (:mod:`.page`): what :func:`render` writes, and any other report of the project
    (e.g. a comparison) that ``report/check.py`` checks. ``svg`` and ``tikz`` draw a figure."""
    return html_page(sections, title, svg), tex_page(sections, title, tex_colors(COLORS), tikz)


#: the checker's modules the renderer imports (beside this package): with this package's sources and the table
#: specs it reads the tables by (``schemas/``), what the renderer's version covers
DEPENDS = ("digests.py", "divergence.py", "names.py", "stats.py", "table_specs.py", "vacuity.py")


def renderer_files() -> list[Path]:
    """The files the renderer's version covers: this package's sources, :data:`DEPENDS` and the table specs."""
    root = Path(__file__).resolve().parent
    pkg = root.parent
    return sorted(
        [*root.rglob("*.py"), *(pkg / name for name in DEPENDS), *(pkg / "schemas").rglob("*.json")],
        key=lambda p: p.relative_to(pkg).as_posix(),
    )


def renderer_version() -> str:
    """The renderer's version: sha256 over :func:`renderer_files` (each file's path relative to the checker's
    package and its bytes, in that order). numbers.json records it; ``report/check.py`` renders an archive
    again only with the renderer of the same version, and names the one it needs."""
    pkg = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for p in renderer_files():
        h.update(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def numbers_bytes(prov: dict[str, Any], N: Numbers, fmt: str = NUMBERS_FORMAT) -> bytes:
    """numbers.json: the format and the renderer's version (:func:`renderer_version`), the provenance values,
    the findings and the headline (taken out of ``prov``) and every number."""
    prov = dict(prov)
    headline = prov.pop("headline", [])
    found = prov.pop("findings", [])
    doc = {
        "format": fmt,
        "renderer": renderer_version(),
        "provenance": prov,
        "findings": found,
        "headline": headline,
        "numbers": N.as_json(),
    }
    return json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=False).encode() + b"\n"


def report_files(
    a: Archive, pubkey_fingerprint: str | None = None, data_seal: ShownSeal | None = None
) -> dict[str, bytes]:
    """The bytes of report.html, report.tex and numbers.json of an archive: a function of its tables
    and records alone (and of the signing key's fingerprint and the data seal it was rendered from),
    which ``report/check.py`` runs again on the sealed archive and compares byte for byte."""
    sections, N, prov = build(a, pubkey_fingerprint, data_seal)
    html, tex = render_documents(
        sections,
        prov,
        TITLE,
        svg=lambda fig: Markup(fig.canvas.to_svg()),
        tikz=lambda fig: TexRaw(fig.canvas.to_tikz()),
    )
    return {"report.html": html.encode(), "report.tex": tex.encode(), "numbers.json": numbers_bytes(prov, N)}
