from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_core.domain.errors import ChangeOutsidePeriod
from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.period import Period
from billing_core.domain.proration import prorate, whole_seconds


def test_articles_proration_example() -> None:
    period = Period(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC))
    result = prorate(100_000, 300_000, period, datetime(2026, 10, 16, tzinfo=UTC))
    assert result.due == 100_000
    assert (result.credit, result.charge) == (50_000, 150_000)


def test_at_start_is_the_full_difference_and_at_end_nothing() -> None:
    period = Period(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC))
    assert prorate(1000, 3000, period, period.start).due == 2000
    assert prorate(1000, 3000, period, period.end).due == 0


def test_downgrade_is_negative() -> None:
    period = Period(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC))
    assert prorate(3000, 1000, period, datetime(2026, 10, 16, tzinfo=UTC)).due == -1000


def test_change_outside_the_period_is_an_error() -> None:
    period = Period(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC))
    with pytest.raises(ChangeOutsidePeriod):
        prorate(1, 2, period, datetime(2026, 9, 30, tzinfo=UTC))
    with pytest.raises(ChangeOutsidePeriod):
        prorate(1, 2, period, datetime(2026, 10, 31, 0, 0, 1, tzinfo=UTC))


prices = st.integers(0, 10**12)


@settings(max_examples=500, deadline=None)
@given(
    old=prices,
    new=prices,
    length=st.integers(1, 366 * 86400),
    data=st.data(),
)
def test_never_overflows_bigint_and_nets_to_zero(
    old: int, new: int, length: int, data: st.DataObject
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    period = Period(start, start + timedelta(seconds=length))
    at = start + timedelta(seconds=data.draw(st.integers(0, length)))
    remaining = whole_seconds(period.end - at)
    assert max(old, new) * remaining < BIGINT_MAX
    up = prorate(old, new, period, at)
    down = prorate(new, old, period, at)
    assert abs(up.due + down.due) <= 1
    assert 0 <= up.charge <= new and 0 <= up.credit <= old
