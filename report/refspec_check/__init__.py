"""Independent checker of a refspec archive, Python standard library only (the package behind
``report/check.py``).

    python3 -I -S report/check.py ARCHIVE --pubkey KEY.pub [--expect-keyid SHA256:HEX]
                                  [--expect-previous SHA|none] [--quiet] [--unsealed] [--debug]

``--quiet`` prints only the summary lines. An archive without ``SEAL.dsse.json``
is a mismatch unless ``--unsealed`` is given (a results folder checked before
it is sealed). ``--pubkey`` is the signer's Ed25519 public key (PEM or OpenSSH),
taken from outside the archive; without it a sealed archive's signature cannot be
checked, which is a mismatch. ``--expect-keyid`` pins that key's fingerprint and
``--expect-previous`` the seal this archive must follow, as for ``refspec verify``.

It imports nothing from refspec: the report's renderer is this package's own (``render/``, standard
library only; the pipeline writes every report with it), and the byte-for-byte rendering check
(``rendering.py``) renders the report again with it, so the repository's ``report/`` folder alone, the
archive and the signer's public key check an archive. The definitions the renderer and the pipeline
share have their one owner here too (``names``, ``table_specs`` with ``schemas/``, and the shared names
of ``stats`` and ``divergence``). From the CSV copies of the result tables it recomputes, with its own code:

* every endpoint digest (from the token lists) and every qualification row
  (reference endpoint, stability, required/completed/matching counts,
  first-divergence index and tokens);
* every pairwise qualified ratio with its task regressions;
* every replication session contrast c_s, estimate, session t interval
  (``workflow/refspec/core/stats.py``'s docstring: random.Random(seed), draws x n randrange(n) indices in
  order, linearly interpolated 2.5/97.5 percentiles, exponentiated; seed,
  draws and threshold from plan.json when present, else from estimates.csv),
  threshold decision and task regressions;
* the phase-mask table, session gaps and counts;
* the variance components of log request time per timed campaign, family and cap
  (``variance``: design, processes, requests, between, within, interaction);
* the diagnostic (unqualified) timings of the registered pairs M3/M0, C3/C0,
  R_prod/M3 and the servers campaign's (``SERVER_DIAGNOSTIC_PAIRS``) (medians,
  paired ratios, which side is not qualified), which
  must never appear among the qualified ratios;
* the prospective-prediction table (predicted vs live and reference vs live)
  from endpoints.csv and the predictions frozen in plan.json;
* the headline block (numbers.json ``headline``, the report's summary table):
  every number is one of the checked numbers, E2 decisions (``too few
  sessions`` below 5 sessions) agree, the data seal and key are the archive's;
* every aggregate the report shows (Table 3 counts, replay and audit
  summaries, draft acceptance, request status counts, ledger records);

and compares them with the CSV tables, with numbers.json and with the numbers
displayed in report.html (parsed with html.parser against the report's strict HTML
subset; each number's element has ``data-num`` and ``data-src``) and, when present, in
report.tex (parsed against its LaTeX subset; each number is ``\\rsnum{ID}{TEXT}``). It
also checks cross-table identities (paired ratio transitivity, counts that must add up),
that every link and source names an existing archive file, the manifest/plan digests
shown in the report, and the seal: its envelope in canonical form, its Ed25519 signature
(RFC 8032, checked here with integer arithmetic and hashlib.sha512; see
``ed25519_problem`` for the strict rules), its key id against ``--pubkey``, its chain
against ``--expect-previous``, and every file digest listed in its statement (sha256 and
size); a symbolic link anywhere in the archive is a mismatch. report.pdf is compiled again from
report.tex where pdflatex is present and compared byte for byte (``pdf``), otherwise printed as
``NOT CHECKED`` with the reason; a sealed archive holding any file but its report and data
records (a campaign's summary.txt, a README), or a data record, column, numbers.json key or ledger
record outside the archive's format, is a mismatch (``files``); labels come from the declared
records only (``bound``). Every Parquet table must hold the text of its CSV copy: the checker reads it with
its own reader (``parquet``: the footer in the Thrift compact protocol, GZIP pages of PLAIN values) and
compares the rows cell for cell (``parquet_copies``), so a Parquet table forged beside an honest CSV copy, or
the converse, is a mismatch naming the table, row and column.

Exit status: 0 all consistent, 1 mismatches (each printed with its location),
2 unreadable input (no archive, no report/numbers.json, malformed files, a
public key file that is not an Ed25519 key) or bad usage, 70 an internal error of
the checker itself (one line on stderr; ``--debug`` prints the traceback).

``report/check.py`` is the command; this package beside it is the checker, one module per
concern (see each module's docstring), with the renderer it carries in ``render/``.
"""

# the names the tests and other callers use, from the module of each concern: imported when first used, so
# that importing one module of this package (the pipeline imports the renderer and the definitions it shares
# with it, refspec_check.render) does not import the whole checker
_EXPORTS = {
    "check": "archive",
    "main": "cli",
    "Context": "context",
    "Expected": "context",
    **dict.fromkeys(
        ("COLUMNS", "STATE_COLUMNS", "TABLE_NAMES", "B", "CsvTable", "F", "I", "L", "S", "parse_value", "read_tables"),
        "contract",
    ),
    **dict.fromkeys(("_IDENTITY", "_ed_decode", "_ed_equal", "_ed_mul", "ed25519_problem"), "ed25519"),
    "Checker": "problems",
    "recompute_qualification": "qualification",
    "reference_arms": "qualification",
    "check_qualification": "results",
    **dict.fromkeys(("dsse_pae", "key_fingerprint", "read_public_key"), "seal"),
    **dict.fromkeys(
        (
            "aa_verdict",
            "decide_weighed",
            "mean",
            "median",
            "minimum_detectable",
            "paired",
            "percentile",
            "session_interval",
            "t_quantile",
            "process_interval",
        ),
        "stats",
    ),
    "STYLESHEET_SHA256": "strict_html",
    **dict.fromkeys(("_TEX_NUM_RE", "TEX_PREAMBLE_SHA256", "tex_id_decode"), "strict_tex"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """A name of :data:`_EXPORTS`, from its module, or a module of this package (imported on first use)."""
    import importlib

    module = _EXPORTS.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
