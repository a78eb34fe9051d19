from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_core.domain.errors import NaiveDatetime, UnknownTimeZone
from billing_core.domain.period import (
    Interval,
    boundary,
    period_bounds,
    period_end,
    period_index_at,
)

ZONES = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "Asia/Kolkata",
    "Pacific/Chatham",
]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_month_end_anchor_never_drifts() -> None:
    anchor = utc(2026, 1, 31, 10, 0)
    ends = [boundary(anchor, Interval.MONTH, k, "UTC") for k in range(1, 6)]
    assert ends == [
        utc(2026, 2, 28, 10),
        utc(2026, 3, 31, 10),
        utc(2026, 4, 30, 10),
        utc(2026, 5, 31, 10),
        utc(2026, 6, 30, 10),
    ]


def test_month_end_anchor_in_a_leap_year() -> None:
    anchor = utc(2028, 1, 31, 0, 0)
    assert boundary(anchor, Interval.MONTH, 1, "UTC") == utc(2028, 2, 29)
    assert boundary(anchor, Interval.MONTH, 2, "UTC") == utc(2028, 3, 31)


def test_yearly_feb_29_anchor() -> None:
    anchor = utc(2028, 2, 29, 12)
    assert [boundary(anchor, Interval.YEAR, k, "UTC") for k in (1, 2, 3, 4)] == [
        utc(2029, 2, 28, 12),
        utc(2030, 2, 28, 12),
        utc(2031, 2, 28, 12),
        utc(2032, 2, 29, 12),
    ]


def test_local_wall_time_is_kept_across_dst() -> None:
    paris = ZoneInfo("Europe/Paris")
    anchor = datetime(2026, 1, 15, 9, 30, tzinfo=paris)  # winter, UTC+1
    summer = boundary(anchor, Interval.MONTH, 6, "Europe/Paris")  # July, UTC+2
    assert summer == utc(2026, 7, 15, 7, 30)
    assert summer.astimezone(paris).hour == 9


def test_spring_forward_gap_shifts_forward_by_the_gap() -> None:
    ny = ZoneInfo("America/New_York")
    anchor = datetime(2026, 2, 8, 2, 30, tzinfo=ny)  # 2026-03-08 02:30 does not exist in NY
    result = boundary(anchor, Interval.MONTH, 1, "America/New_York").astimezone(ny)
    assert (result.month, result.day, result.hour, result.minute) == (3, 8, 3, 30)


def test_fall_back_fold_takes_the_first_occurrence() -> None:
    ny = ZoneInfo("America/New_York")
    anchor = datetime(2026, 10, 1, 1, 30, tzinfo=ny)  # 2026-11-01 01:30 happens twice
    result = boundary(anchor, Interval.MONTH, 1, "America/New_York")
    assert result == utc(2026, 11, 1, 5, 30)  # 01:30 EDT (UTC-4), the first one


def test_period_bounds_and_end() -> None:
    anchor = utc(2026, 1, 31)
    p = period_bounds(anchor, Interval.MONTH, 1, "UTC")
    assert (p.start, p.end) == (utc(2026, 2, 28), utc(2026, 3, 31))
    assert period_end(anchor, Interval.MONTH, 1, "UTC") == p.end
    assert boundary(anchor, Interval.MONTH, 0, "UTC") == anchor


def test_rejects_naive_times_and_unknown_zones() -> None:
    with pytest.raises(NaiveDatetime):
        boundary(datetime(2026, 1, 1), Interval.MONTH, 1, "UTC")
    with pytest.raises(UnknownTimeZone):
        boundary(utc(2026, 1, 1), Interval.MONTH, 1, "Mars/Olympus")


anchors = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(anchor=anchors, tz=st.sampled_from(ZONES), n=st.integers(0, 60))
def test_monthly_periods_are_contiguous_increasing_and_anchored(
    anchor: datetime, tz: str, n: int
) -> None:
    zi = ZoneInfo(tz)
    this = period_bounds(anchor, Interval.MONTH, n, tz)
    following = period_bounds(anchor, Interval.MONTH, n + 1, tz)
    assert this.start < this.end
    assert this.end == following.start
    local_anchor = anchor.astimezone(zi)
    end_local = this.end.astimezone(zi)
    last_day = calendar.monthrange(end_local.year, end_local.month)[1]
    assert end_local.day == min(local_anchor.day, last_day)
    days = (this.end.astimezone(zi).date() - this.start.astimezone(zi).date()).days
    if n > 0:
        assert 28 <= days <= 31
    else:
        assert 27 <= days <= 31  # the anchor itself may sit in a DST gap
    assert this.end.tzinfo == UTC


@settings(max_examples=200, deadline=None)
@given(anchor=anchors, tz=st.sampled_from(ZONES), n=st.integers(0, 10))
def test_yearly_periods_are_contiguous(anchor: datetime, tz: str, n: int) -> None:
    this = period_bounds(anchor, Interval.YEAR, n, tz)
    assert this.end == period_bounds(anchor, Interval.YEAR, n + 1, tz).start
    assert timedelta(days=364) <= this.end - this.start <= timedelta(days=367)


@settings(max_examples=200, deadline=None)
@given(anchor=anchors, tz=st.sampled_from(ZONES), seconds=st.integers(0, 5 * 366 * 86400))
def test_period_index_at_matches_boundaries(anchor: datetime, tz: str, seconds: int) -> None:
    at = anchor + timedelta(seconds=seconds)
    n = period_index_at(anchor, Interval.MONTH, tz, at)
    assert (
        boundary(anchor, Interval.MONTH, n, tz) <= at < boundary(anchor, Interval.MONTH, n + 1, tz)
    )
