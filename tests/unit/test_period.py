from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_core.domain.errors import (
    BeforeAnchor,
    InvalidPeriodIndex,
    NaiveDatetime,
    UnknownTimeZone,
)
from billing_core.domain.period import (
    Interval,
    boundary,
    interval_named,
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


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


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
    assert 28 <= days <= 31
    assert this.end.tzinfo == UTC
    # the wall time of day is the anchor's, unless it does not exist that day (a DST gap)
    wall = end_local.replace(
        hour=local_anchor.hour,
        minute=local_anchor.minute,
        second=local_anchor.second,
        microsecond=local_anchor.microsecond,
        fold=0,
    )
    if _exists(wall):
        assert end_local.time() == local_anchor.time()
    else:
        assert end_local > wall.replace(tzinfo=None).replace(tzinfo=zi)


def _exists(wall: datetime) -> bool:
    """Whether an aware local wall time survives a round trip through UTC (not in a gap)."""
    back = wall.astimezone(UTC).astimezone(wall.tzinfo)
    return back.replace(tzinfo=None) == wall.replace(tzinfo=None)


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


@pytest.mark.parametrize(
    ("year", "expected_days"),
    [(2026, [31, 28, 31, 30, 31, 30]), (2028, [31, 29, 31, 30, 31, 30])],
)
def test_month_end_anchor_sequence(year: int, expected_days: list[int]) -> None:
    anchor = utc(year, 1, 31, 23, 15)
    got = [boundary(anchor, Interval.MONTH, k, "UTC") for k in range(6)]
    assert [(b.month, b.day) for b in got] == [(m + 1, d) for m, d in enumerate(expected_days)]
    assert all((b.hour, b.minute) == (23, 15) for b in got)


def test_boundary_zero_is_the_anchor_in_utc() -> None:
    paris = ZoneInfo("Europe/Paris")
    anchor = datetime(2026, 3, 15, 9, 0, tzinfo=paris)
    b0 = boundary(anchor, Interval.MONTH, 0, "Europe/Paris")
    assert b0 == anchor and b0.tzinfo == UTC


def test_the_zone_argument_decides_the_local_calendar() -> None:
    # 23:30 UTC on Jan 31 is already Feb 1 in Paris: the anchor day there is the 1st.
    anchor = utc(2026, 1, 31, 23, 30)
    assert boundary(anchor, Interval.MONTH, 1, "UTC") == utc(2026, 2, 28, 23, 30)
    assert boundary(anchor, Interval.MONTH, 1, "Europe/Paris") == utc(2026, 2, 28, 23, 30)
    assert boundary(anchor, Interval.MONTH, 2, "Europe/Paris") == utc(2026, 3, 31, 22, 30)


def test_paris_spring_forward_gap_then_back_to_the_wall_time() -> None:
    paris = ZoneInfo("Europe/Paris")
    anchor = datetime(2026, 1, 29, 2, 30, tzinfo=paris)  # 2026-03-29 02:30 does not exist
    in_gap = boundary(anchor, Interval.MONTH, 2, "Europe/Paris")
    assert in_gap == utc(2026, 3, 29, 1, 30)  # 03:30 CEST: shifted forward by the 1 h gap
    assert (in_gap.astimezone(paris).hour, in_gap.astimezone(paris).minute) == (3, 30)
    after = boundary(anchor, Interval.MONTH, 3, "Europe/Paris")
    assert after == utc(2026, 4, 29, 0, 30)  # 02:30 CEST again: the gap does not carry over


def test_paris_fall_back_fold_takes_the_first_occurrence() -> None:
    paris = ZoneInfo("Europe/Paris")
    anchor = datetime(2026, 9, 25, 2, 30, tzinfo=paris)  # 2026-10-25 02:30 happens twice
    assert boundary(anchor, Interval.MONTH, 1, "Europe/Paris") == utc(2026, 10, 25, 0, 30)
    # an anchor on the second occurrence keeps 02:30 and, on the next fold (Oct 25, 2037),
    # takes the first occurrence
    second = datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=paris)
    assert second.astimezone(UTC) == utc(2026, 10, 25, 1, 30)
    assert boundary(second, Interval.YEAR, 1, "Europe/Paris") == utc(2027, 10, 25, 0, 30)
    assert boundary(second, Interval.YEAR, 11, "Europe/Paris") == utc(2037, 10, 25, 0, 30)


def test_new_york_periods_around_both_transitions_are_contiguous() -> None:
    ny = "America/New_York"
    anchor = datetime(2026, 1, 8, 2, 30, tzinfo=ZoneInfo(ny))
    periods = [period_bounds(anchor, Interval.MONTH, n, ny) for n in range(12)]
    assert all(a.end == b.start for a, b in pairwise(periods))
    assert periods[1].end == utc(2026, 3, 8, 7, 30)  # 03:30 EDT, in the gap
    assert periods[2].end == utc(2026, 4, 8, 6, 30)  # 02:30 EDT


def test_yearly_boundaries_from_a_leap_day_in_a_zone() -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    anchor = datetime(2024, 2, 29, 8, 0, tzinfo=tokyo)
    local = [boundary(anchor, Interval.YEAR, k, "Asia/Tokyo").astimezone(tokyo) for k in range(6)]
    assert [(d.year, d.month, d.day, d.hour) for d in local] == [
        (2024, 2, 29, 8),
        (2025, 2, 28, 8),
        (2026, 2, 28, 8),
        (2027, 2, 28, 8),
        (2028, 2, 29, 8),
        (2029, 2, 28, 8),
    ]


def test_negative_indexes_are_rejected() -> None:
    with pytest.raises(InvalidPeriodIndex):
        boundary(utc(2026, 1, 1), Interval.MONTH, -1, "UTC")
    with pytest.raises(ValueError):
        period_bounds(utc(2026, 1, 1), Interval.MONTH, -1, "UTC")


@pytest.mark.parametrize("tz", ["", "Mars/Olympus", "Europe/", "../etc/passwd", "zone.tab", "utc"])
def test_unknown_zones(tz: str) -> None:
    with pytest.raises(UnknownTimeZone):
        boundary(utc(2026, 1, 1), Interval.MONTH, 0, tz)


def test_period_index_at_edges() -> None:
    anchor = utc(2026, 1, 31, 12)
    assert period_index_at(anchor, Interval.MONTH, "UTC", anchor) == 0
    assert period_index_at(anchor, Interval.MONTH, "UTC", utc(2026, 2, 28, 11, 59, 59)) == 0
    assert period_index_at(anchor, Interval.MONTH, "UTC", utc(2026, 2, 28, 12)) == 1
    assert period_index_at(anchor, Interval.MONTH, "UTC", utc(2026, 3, 31, 12)) == 2
    assert period_index_at(anchor, Interval.YEAR, "UTC", utc(2027, 1, 31, 11)) == 0
    assert period_index_at(anchor, Interval.YEAR, "UTC", utc(2027, 1, 31, 12)) == 1
    with pytest.raises(BeforeAnchor):
        period_index_at(anchor, Interval.MONTH, "UTC", anchor - timedelta(microseconds=1))
    with pytest.raises(NaiveDatetime):
        period_index_at(anchor, Interval.MONTH, "UTC", datetime(2026, 3, 1))


@settings(max_examples=200, deadline=None)
@given(anchor=anchors, tz=st.sampled_from(ZONES), n=st.integers(0, 40))
def test_yearly_boundaries_keep_month_and_clamped_day(anchor: datetime, tz: str, n: int) -> None:
    zi = ZoneInfo(tz)
    local_anchor = anchor.astimezone(zi)
    end_local = period_end(anchor, Interval.YEAR, n, tz).astimezone(zi)
    assert end_local.year == local_anchor.year + n + 1
    assert end_local.month == local_anchor.month
    last_day = calendar.monthrange(end_local.year, end_local.month)[1]
    assert end_local.day == min(local_anchor.day, last_day)


@settings(max_examples=200, deadline=None)
@given(anchor=anchors, tz=st.sampled_from(ZONES), n=st.integers(0, 200))
def test_period_index_at_inverts_boundary(anchor: datetime, tz: str, n: int) -> None:
    for interval in Interval:
        start = boundary(anchor, interval, n, tz)
        end = boundary(anchor, interval, n + 1, tz)
        assert period_index_at(anchor, interval, tz, start) == n
        assert period_index_at(anchor, interval, tz, end - timedelta(microseconds=1)) == n


def test_an_interval_is_named_by_its_value_and_nothing_else() -> None:
    assert interval_named("MONTH") is Interval.MONTH
    assert interval_named("YEAR") is Interval.YEAR
    for bad in ["month", "WEEK", "", None, 12]:
        with pytest.raises(ValueError, match="is not a billing interval"):
            interval_named(bad)  # type: ignore[arg-type]
