"""The campaigns refspec knows, and the order the report shows them in: one owner, the archive's names
(``refspec_check.names``, which the report's renderer reads too)."""

from __future__ import annotations

from refspec_check.names import CAMPAIGNS, REPORT_ORDER  # noqa: F401
