"""The stores' clock: every time M3 stores is timezone-aware UTC-comparable.

Shared by the execution store and the managed-input store, so that both read
"now" the same way (a supplied clock lets tests move time without sleeping).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def ensure_aware(value: datetime, what: str = "datetime") -> datetime:
    """Reject naive datetimes: every time in M3 is timezone-aware."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {value!r}")
    return value


def checked_clock(clock: Clock | None) -> Clock:
    """The clock a store runs on: `clock` (whose time must be aware, checked once
    here so a misconfigured store fails at construction) or the UTC wall clock."""
    if clock is None:
        return utc_now
    ensure_aware(clock(), "the supplied clock's time")
    return clock


def read_clock(clock: Clock) -> datetime:
    """The clock's current time; a naive time is a configuration error."""
    return ensure_aware(clock(), "the store clock's time")
