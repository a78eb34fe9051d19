"""Instants: timezone-aware datetimes only, rendered as ISO-8601 UTC with a ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from billing_core.domain.errors import NaiveDatetime


def require_aware(when: datetime, name: str = "datetime") -> None:
    """Raise :class:`NaiveDatetime` unless ``when`` carries a time zone with an offset."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise NaiveDatetime(f"{name} must be timezone-aware")


def to_utc(when: datetime, name: str = "datetime") -> datetime:
    require_aware(when, name)
    return when.astimezone(UTC)


def iso_utc(when: datetime) -> str:
    """``2026-10-01T00:00:00Z`` (microseconds kept when present)."""
    return to_utc(when).isoformat().replace("+00:00", "Z")


def whole_seconds(delta: timedelta) -> int:
    """The whole seconds of a duration, rounded down (microseconds dropped)."""
    return delta.days * 86_400 + delta.seconds
