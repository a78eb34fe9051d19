"""Every "now" comes from a Clock, so tests and demos can move time.

Production uses :class:`SystemClock`; ``BILLING_CLOCK_OFFSET_SECONDS`` shifts it by a fixed amount
(the same in every process, so they agree). Tests use :class:`ManualClock`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self._offset = offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> datetime:
        self._now += delta
        return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("ManualClock needs timezone-aware times")
        self._now = when.astimezone(UTC)


def clock_from_offset(offset_seconds: int) -> Clock:
    return SystemClock(timedelta(seconds=offset_seconds))
