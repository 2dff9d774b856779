"""The campaigns refspec knows, and the order the report shows them in."""

from __future__ import annotations

CAMPAIGNS = ("phase_mask", "confirmation", "implementation", "replication", "width", "prediction", "servers")
# the report's section order (the servers campaign has its own section)
REPORT_ORDER = ("confirmation", "implementation", "replication", "width", "phase_mask", "prediction")
