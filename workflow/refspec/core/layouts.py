"""Attention layouts: the names, the subsets the studies use, and the order tables show them in.

``mq`` (the stock layout), ``pq``, ``qb`` and ``gs``; the native ABI's numeric codes for them
live with the native binding (``refspec.native.runtime``).
"""

from __future__ import annotations

LAYOUTS = ("mq", "pq", "qb", "gs")
# the layouts whose operands the capture lifts and the replay reruns (E1, admission, audit)
REPLAYED_LAYOUTS = ("mq", "pq", "qb")
# the order in which arms of each layout appear in tables and reports
LAYOUT_ORDER = ("mq", "gs", "pq", "qb")
