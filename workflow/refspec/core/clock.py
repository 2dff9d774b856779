"""The clock: every UTC timestamp refspec writes, in its two formats."""

from __future__ import annotations

import datetime as _dt


def utc_now() -> str:
    """The current UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (records, journals, logs)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_now_seconds() -> str:
    """The current UTC time to the second, ``YYYY-MM-DDTHH:MM:SSZ`` (manifest and seal creation times)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
