from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_core.domain.errors import ChangeOutsidePeriod, InvalidAmount, NaiveDatetime
from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.period import Period
from billing_core.domain.proration import mul_div_floor, prorate, whole_seconds

OCTOBER = Period(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC))
LEAP_YEAR_SECONDS = 366 * 86_400


def test_an_upgrade_half_way_through_charges_half_the_difference() -> None:
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
    up = prorate(old, new, period, at)
    # exact floor of the rational value, whatever the size of the intermediate product
    assert up.charge == Fraction(new * remaining, length).__floor__()
    assert up.credit == Fraction(old * remaining, length).__floor__()
    assert all(abs(v) <= BIGINT_MAX for v in (up.credit, up.charge, up.due))
    down = prorate(new, old, period, at)
    assert abs(up.due + down.due) <= 1
    assert 0 <= up.charge <= new and 0 <= up.credit <= old


def test_a_naive_product_would_not_fit_bigint() -> None:
    # why mul_div_floor exists: price x remaining seconds, for a large yearly price
    assert 10**12 * LEAP_YEAR_SECONDS > BIGINT_MAX


@settings(max_examples=1000, deadline=None)
@given(
    price=prices,
    total=st.integers(1, LEAP_YEAR_SECONDS),
    data=st.data(),
)
def test_mul_div_floor_is_the_exact_floor_with_bigint_intermediates(
    price: int, total: int, data: st.DataObject
) -> None:
    remaining = data.draw(st.integers(0, total))
    whole, rest = divmod(price, total)
    intermediates = (whole, rest, whole * remaining, rest * remaining, total * remaining)
    assert all(0 <= v < 2**63 for v in intermediates)
    assert mul_div_floor(price, remaining, total) == price * remaining // total


@pytest.mark.parametrize("price", [0, 1, 10**12, BIGINT_MAX])
def test_mul_div_floor_edges(price: int) -> None:
    assert mul_div_floor(price, 0, LEAP_YEAR_SECONDS) == 0
    assert mul_div_floor(price, LEAP_YEAR_SECONDS, LEAP_YEAR_SECONDS) == price
    assert mul_div_floor(price, 1, 2) == price // 2


def test_up_then_immediately_down_nets_to_zero() -> None:
    at = datetime(2026, 10, 11, 7, 13, 5, tzinfo=UTC)
    up = prorate(999, 2_999, OCTOBER, at)
    down = prorate(2_999, 999, OCTOBER, at)
    assert up.due + down.due == 0


@settings(max_examples=300, deadline=None)
@given(
    plan_prices=st.lists(prices, min_size=2, max_size=8),
    length=st.integers(1, LEAP_YEAR_SECONDS),
    data=st.data(),
)
def test_a_chain_of_changes_is_within_one_unit_per_step_of_the_exact_amount(
    plan_prices: list[int], length: int, data: st.DataObject
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    period = Period(start, start + timedelta(seconds=length))
    offsets = sorted(
        data.draw(
            st.lists(
                st.integers(0, length), min_size=len(plan_prices) - 1, max_size=len(plan_prices) - 1
            )
        )
    )
    billed, exact = 0, Fraction(0)
    for (old, new), offset in zip(pairwise(plan_prices), offsets, strict=True):
        at = start + timedelta(seconds=offset)
        step = prorate(old, new, period, at)
        exact_step = Fraction((new - old) * (length - offset), length)
        assert abs(step.due - exact_step) < 1
        billed += step.due
        exact += exact_step
    steps = len(plan_prices) - 1
    # the customer is never billed a whole unit per step more than the exact prorated amount
    assert billed - exact < steps
    assert exact - billed < steps


def test_naive_times_bad_prices_and_empty_periods_are_rejected() -> None:
    with pytest.raises(NaiveDatetime):
        prorate(1, 2, OCTOBER, datetime(2026, 10, 16))
    with pytest.raises(NaiveDatetime):
        prorate(1, 2, Period(datetime(2026, 10, 1), datetime(2026, 10, 31)), OCTOBER.start)
    for bad in (-1, True, 1.5):
        with pytest.raises(InvalidAmount):
            prorate(bad, 2, OCTOBER, OCTOBER.start)  # type: ignore[arg-type]
        with pytest.raises(InvalidAmount):
            prorate(1, bad, OCTOBER, OCTOBER.start)  # type: ignore[arg-type]
    instant = OCTOBER.start
    with pytest.raises(ChangeOutsidePeriod):
        prorate(1, 2, Period(instant, instant), instant)


def test_sub_second_parts_are_dropped_from_the_remaining_time() -> None:
    at = datetime(2026, 10, 30, 23, 59, 59, 500_000, tzinfo=UTC)  # half a second left
    assert prorate(100_000, 300_000, OCTOBER, at) == prorate(100_000, 300_000, OCTOBER, OCTOBER.end)
