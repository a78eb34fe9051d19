"""Billing periods computed from a fixed anchor, so they never drift.

Period ``n`` (0-based) of a subscription is ``[boundary(n), boundary(n + 1))`` where
``boundary(k)`` is the billing anchor moved ``k`` months (or ``12 k`` for yearly plans) in the
subscription's IANA time zone. Every boundary is computed from the anchor itself, never from the
previous end: an anchor on Jan 31 gives Feb 28 (29), Mar 31, Apr 30, May 31 — not Mar 28.

Rules, in the subscription's local time:

* The day is the anchor's day clamped to the month's last day (and restored the month after).
  Yearly: Feb 29 → Feb 28 in common years, Feb 29 again in leap years.
* The local wall time of day is the anchor's (this spreads month-start renewals over 24 h).
* Daylight saving: where that wall time exists once, it is used. In a spring-forward gap (the
  wall time does not exist) the time is shifted forward by the gap (02:30 → 03:30). In a
  fall-back fold (the wall time happens twice) the first occurrence is used.

Results are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import calendar
from datetime import UTC, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from billing_core.domain.errors import BeforeAnchor, InvalidPeriodIndex, UnknownTimeZone
from billing_core.domain.instant import require_aware
from billing_core.domain.values import value_object

__all__ = [
    "Interval",
    "Period",
    "boundary",
    "interval_named",
    "period_bounds",
    "period_end",
    "period_index_at",
    "require_aware",
    "zone",
]


class Interval(StrEnum):
    MONTH = "MONTH"
    YEAR = "YEAR"


@value_object
class Period:
    start: datetime
    end: datetime


# The zones already looked up, by name: ``ZoneInfo`` keeps only a few strongly cached, and a
# renewal batch computes thousands of boundaries over a handful of zones.
_ZONES: dict[str, ZoneInfo] = {}
_MAX_ZONES = 2000

# Days in each month of a common year (February: see _days_in_month).
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def zone(tz: str) -> ZoneInfo:
    """The IANA zone named ``tz``; :class:`UnknownTimeZone` for anything else."""
    found = _ZONES.get(tz) if isinstance(tz, str) else None
    if found is not None:
        return found
    if not isinstance(tz, str) or not tz:
        raise UnknownTimeZone(f"unknown IANA time zone {tz!r}")
    try:
        found = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as exc:
        raise UnknownTimeZone(f"unknown IANA time zone {tz!r}") from exc
    if len(_ZONES) < _MAX_ZONES:
        _ZONES[tz] = found
    return found


_INTERVALS = {interval.value: interval for interval in Interval}


def interval_named(name: str) -> Interval:
    """The interval called ``name`` (``MONTH``, ``YEAR``); ``ValueError`` for anything else."""
    found = _INTERVALS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"{name!r} is not a billing interval")
    return found


def _months(interval: Interval) -> int:
    return 12 if interval == Interval.YEAR else 1


def _days_in_month(year: int, month: int) -> int:
    if month == 2 and calendar.isleap(year):
        return 29
    return _MONTH_DAYS[month - 1]


def boundary(anchor: datetime, interval: Interval, k: int, tz: str) -> datetime:
    """The anchor moved ``k`` intervals forward in ``tz``, as UTC (``k = 0``: the anchor)."""
    if anchor.utcoffset() is None:  # require_aware, inline: thousands of calls per batch
        require_aware(anchor, "anchor")
    if k < 0:
        raise InvalidPeriodIndex(f"boundary index must be >= 0, got {k}")
    zi = zone(tz)
    if k == 0:
        return anchor.astimezone(UTC)
    local = anchor.astimezone(zi)
    year, month0 = divmod(local.year * 12 + local.month - 1 + k * _months(interval), 12)
    month = month0 + 1
    day = local.day
    if day > 28:
        day = min(day, _days_in_month(year, month))
    wall = datetime(
        year,
        month,
        day,
        local.hour,
        local.minute,
        local.second,
        local.microsecond,
        tzinfo=zi,
        fold=0,
    )
    # fold=0 picks the first occurrence in a fold, and in a gap resolves with the offset in
    # force before the transition, which lands the same distance past it (02:30 -> 03:30).
    return wall.astimezone(UTC)


def period_bounds(anchor: datetime, interval: Interval, n: int, tz: str) -> Period:
    return Period(boundary(anchor, interval, n, tz), boundary(anchor, interval, n + 1, tz))


def period_end(anchor: datetime, interval: Interval, n: int, tz: str) -> datetime:
    return boundary(anchor, interval, n + 1, tz)


def period_index_at(anchor: datetime, interval: Interval, tz: str, at: datetime) -> int:
    """The ``n`` with ``boundary(n) <= at < boundary(n + 1)``."""
    require_aware(anchor, "anchor")
    require_aware(at, "at")
    if at < anchor:
        raise BeforeAnchor("the time is before the billing anchor")
    zi = zone(tz)
    a, b = anchor.astimezone(zi), at.astimezone(zi)
    n = max(0, ((b.year - a.year) * 12 + (b.month - a.month)) // _months(interval))
    while n > 0 and boundary(anchor, interval, n, tz) > at:
        n -= 1
    while boundary(anchor, interval, n + 1, tz) <= at:
        n += 1
    return n
