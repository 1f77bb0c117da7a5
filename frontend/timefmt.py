"""Timestamps in the store's one format: ``YYYY-MM-DDTHH:MM:SS.mmmZ``, always UTC.

The format sorts lexically in time order, which is what every SQL comparison relies on.
Time itself is injected (a ``Clock``), never read from a global, so tests pin it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "format_timestamp", "parse_timestamp", "utc_now"]

Clock = Callable[[], datetime]

_PARSE_FORMAT = "%Y-%m-%dT%H:%M:%S.%f%z"


def utc_now() -> datetime:
    """The real clock: an aware UTC datetime."""
    return datetime.now(UTC)


def format_timestamp(moment: datetime) -> str:
    """``2024-05-01T12:00:00.123Z`` for an aware datetime (milliseconds truncated)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("timestamps need an aware datetime (the clock returned a naive one)")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_timestamp(text: str) -> datetime:
    """The aware UTC datetime of a stored timestamp; ValueError when malformed."""
    if len(text) != 24 or not text.endswith("Z"):
        raise ValueError(f"not a thatch timestamp (YYYY-MM-DDTHH:MM:SS.mmmZ): {text!r}")
    return datetime.strptime(text[:-1] + "+0000", _PARSE_FORMAT).astimezone(UTC)
