"""Errors and the documented exit codes of the ``refspec`` command.

=====  =====================================================================
code   meaning
=====  =====================================================================
0      success (verified, qualified, built)
1      a check ran and failed (verification failed, archive tampered or
       signed by another key than the pinned one, freeze check found
       differences, ``render`` given data that does not verify)
2      usage error: bad arguments, bad or schema-invalid config
3      input integrity: a pinned hash differs, a GGUF is truncated or corrupt,
       result tables the statistics cannot use (:class:`refspec.core.stats.StatsError`)
4      native build failed (download, patch that does not apply, compiler)
5      runtime failure: admission refused, worker died, decode error,
       pdflatex failed on the report
70     internal error: an exception that is not a :class:`RefspecError` (a bug;
       ``EX_SOFTWARE`` of sysexits.h)
=====  =====================================================================

``report/check.py`` (standard library only, no refspec import) has its own
codes: 0 consistent, 1 mismatches, 2 unreadable input.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTEGRITY = 3
EXIT_BUILD = 4
EXIT_RUNTIME = 5
EXIT_CRASH = 70  # an exception that is not a RefspecError: a bug (EX_SOFTWARE)


class RefspecError(Exception):
    """An error with a clear message and an exit code."""

    exit_code = EXIT_RUNTIME


class CheckFailed(RefspecError):
    """A check ran and its subject failed it (e.g. an archive that does not verify)."""

    exit_code = EXIT_FAILED


class UsageError(RefspecError):
    exit_code = EXIT_USAGE


class ConfigError(RefspecError):
    exit_code = EXIT_USAGE


class IntegrityError(RefspecError):
    exit_code = EXIT_INTEGRITY


class BuildError(RefspecError):
    exit_code = EXIT_BUILD


class AdmissionError(RefspecError):
    """The native layer refused a layout for this model or context."""

    exit_code = EXIT_RUNTIME


class PlacementError(RefspecError):
    """Fewer layers are on the device than the configuration asked for (exit 5): a run that
    asked for an accelerator never times or records the CPU in its place."""


class DecodeError(RefspecError):
    exit_code = EXIT_RUNTIME


class ReplayToolError(RefspecError):
    """A native replay tool failed (crash, usage error, unreadable report)."""


class RenderError(RefspecError):
    """The report could not be rendered (pdflatex failed)."""

    exit_code = EXIT_RUNTIME
