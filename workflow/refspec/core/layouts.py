"""Attention layouts: the names, the subsets the studies use, and the order tables show them in.

``mq`` (the stock layout), ``pq``, ``qb``, ``gs`` and ``qh`` (the query-to-head view, the
queries folded into the head batch axis: what a backend that broadcasts only in dim 2, such as
ggml-vulkan, admits); the native ABI's numeric codes for them live with the native binding
(``refspec.native.runtime``).
"""

from __future__ import annotations

# the order in which arms of each layout appear in tables and reports: one owner, the archive's names
from refspec_check.names import LAYOUT_ORDER  # noqa: F401

LAYOUTS = ("mq", "pq", "qb", "gs", "qh")
# the layouts with their own attention graph (row-invariant: each query its own problem)
ROW_LAYOUTS = ("pq", "qb", "qh")
# the layouts whose operands the live capture lifts (E1: each replayed on its own operands)
CAPTURED_LAYOUTS = ("mq", "pq", "qb")
# the layouts the replay reruns on every capture's operands (E1, admission, audit)
REPLAYED_LAYOUTS = ("mq", "pq", "qb", "qh")
