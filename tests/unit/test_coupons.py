"""Coupons: their terms, which periods a redemption covers, the discount, and plan changes
while a discount is active (A → B → A at one instant nets to 0)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing_core.domain.coupons import (
    Coupon,
    CouponNotRedeemable,
    Discount,
    Duration,
    InvalidCoupon,
    check_redeemable,
    discount_amount,
    discount_lines,
    discounted,
    discounted_proration,
    redeem,
)
from billing_core.domain.invoice_lines import LineKind
from billing_core.domain.period import Period

NOW = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
OCTOBER = Period(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC))


def percent(bp: int, duration: Duration = Duration.FOREVER, **kw: object) -> Coupon:
    return Coupon("SAVE", duration, percent_off_bp=bp, **kw)  # type: ignore[arg-type]


def test_terms_that_make_no_sense_are_refused() -> None:
    for bad in (
        lambda: Coupon("X", Duration.ONCE),
        lambda: Coupon("X", Duration.ONCE, percent_off_bp=10, amount_off=5, currency="EUR"),
        lambda: Coupon("X", Duration.ONCE, percent_off_bp=0),
        lambda: Coupon("X", Duration.ONCE, percent_off_bp=10_001),
        lambda: Coupon("X", Duration.ONCE, amount_off=500),
        lambda: Coupon("X", Duration.ONCE, amount_off=0, currency="EUR"),
        lambda: Coupon("X", Duration.REPEATING, percent_off_bp=10),
        lambda: Coupon("X", Duration.REPEATING, percent_off_bp=10, duration_periods=0),
        lambda: Coupon("X", Duration.FOREVER, percent_off_bp=10, duration_periods=3),
        lambda: Coupon("X", Duration.ONCE, percent_off_bp=10, max_redemptions=0),
    ):
        with pytest.raises(InvalidCoupon):
            bad()


def test_labels() -> None:
    assert percent(2500).label == "Coupon SAVE (25% off)"
    assert percent(1250).label == "Coupon SAVE (12.5% off)"
    amount = Coupon("TENOFF", Duration.ONCE, amount_off=1000, currency="EUR")
    assert amount.label == "Coupon TENOFF (10.00 EUR off)"


def test_which_periods_a_redemption_covers() -> None:
    once = redeem(percent(1000, Duration.ONCE), starting_period=3)
    assert [once.covers(i) for i in range(2, 6)] == [False, True, False, False]
    repeating = redeem(percent(1000, Duration.REPEATING, duration_periods=2), starting_period=0)
    assert [repeating.covers(i) for i in range(4)] == [True, True, False, False]
    forever = redeem(percent(1000), starting_period=1)
    assert [forever.covers(i) for i in (0, 1, 100)] == [False, True, True]


def test_redeemable_only_before_expiry_within_its_count_and_in_its_currency() -> None:
    check_redeemable(percent(1000, redeem_by=NOW + timedelta(seconds=1)), currency="EUR", now=NOW)
    with pytest.raises(CouponNotRedeemable, match="expired"):
        check_redeemable(percent(1000, redeem_by=NOW), currency="EUR", now=NOW)
    with pytest.raises(CouponNotRedeemable, match="2 times"):
        maxed = percent(1000, max_redemptions=2, times_redeemed=2)
        check_redeemable(maxed, currency="EUR", now=NOW)
    amount = Coupon("TENOFF", Duration.ONCE, amount_off=1000, currency="USD")
    check_redeemable(amount, currency="USD", now=NOW)
    with pytest.raises(CouponNotRedeemable, match="USD"):
        check_redeemable(amount, currency="EUR", now=NOW)


def test_the_discount_rounds_half_away_from_zero_and_never_exceeds_the_price() -> None:
    assert discount_amount(percent(2500), 990) == 248  # 247.5
    assert discount_amount(percent(10_000), 990) == 990
    big = Coupon("BIG", Duration.ONCE, amount_off=5000, currency="EUR")
    assert discount_amount(big, 990) == 990
    assert discount_amount(big, 0) == 0
    [line] = discount_lines(redeem(percent(2500), starting_period=0), 990, 0)
    assert (line.kind, line.amount, line.description) == (
        LineKind.DISCOUNT,
        -248,
        "Coupon SAVE (25% off)",
    )
    assert discount_lines(redeem(percent(2500, Duration.ONCE), starting_period=0), 990, 1) == []


coupons = st.one_of(
    st.builds(
        lambda bp: Coupon("P", Duration.FOREVER, percent_off_bp=bp),
        st.integers(min_value=1, max_value=10_000),
    ),
    st.builds(
        lambda off: Coupon("A", Duration.FOREVER, amount_off=off, currency="EUR"),
        st.integers(min_value=1, max_value=10**9),
    ),
)
prices = st.integers(min_value=0, max_value=10**12)


@given(coupons, prices)
def test_a_discounted_price_is_between_zero_and_the_price(coupon: Coupon, price: int) -> None:
    after = discounted(redeem(coupon, starting_period=0), price, 0)
    assert 0 <= after <= price


@given(
    coupons,
    prices,
    prices,
    st.integers(min_value=0, max_value=30 * 86_400),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=5),
    st.sampled_from([Duration.ONCE, Duration.REPEATING, Duration.FOREVER]),
)
def test_a_to_b_to_a_at_one_instant_nets_to_zero(
    coupon: Coupon,
    price_a: int,
    price_b: int,
    seconds_in: int,
    starting_period: int,
    period_index: int,
    duration: Duration,
) -> None:
    terms = Coupon(
        coupon.code,
        duration,
        percent_off_bp=coupon.percent_off_bp,
        amount_off=coupon.amount_off,
        currency=coupon.currency,
        duration_periods=2 if duration == Duration.REPEATING else None,
    )
    active = redeem(terms, starting_period=starting_period)
    at = OCTOBER.start + timedelta(seconds=seconds_in)
    there = discounted_proration(
        price_a, price_b, OCTOBER, at, discount=active, period_index=period_index
    )
    back = discounted_proration(
        price_b, price_a, OCTOBER, at, discount=active, period_index=period_index
    )
    assert there.due + back.due == 0
    assert (there.charge, there.credit) == (back.credit, back.charge)


@given(coupons, prices, st.integers(min_value=0, max_value=30 * 86_400))
def test_the_credit_for_unused_time_is_never_more_than_what_the_period_cost(
    coupon: Coupon, price: int, seconds_in: int
) -> None:
    """The unused time is credited at the price the period's invoice had, discount included."""
    active: Discount = redeem(coupon, starting_period=0)
    at = OCTOBER.start + timedelta(seconds=seconds_in)
    change = discounted_proration(price, 0, OCTOBER, at, discount=active, period_index=0)
    assert change.credit <= discounted(active, price, 0)
