"""Coupons: a discount off a subscription's invoices, for a number of periods.

A coupon takes either a percentage off (``percent_off_bp``, basis points: ``2500`` = 25 %) or
an amount off in one currency (``amount_off``, minor units; only for plans in that currency).
Its ``duration`` says which invoices it discounts once redeemed by a subscription:

* ``ONCE`` — the first invoice from where it starts;
* ``REPEATING`` — the invoices of ``duration_periods`` periods from where it starts;
* ``FOREVER`` — every invoice from where it starts.

It can be redeemed at most ``max_redemptions`` times (none: no limit) and not from
``redeem_by`` on (none: no expiry). A redemption is a :class:`Discount`: the periods it covers,
``[from_period, until_period)`` by period index (``until_period`` None: for ever). Redeemed at
subscribing, it starts with period 0 (the first invoice, or the first paid period after a
trial); redeemed later, with the next period the subscription will be invoiced for — the
current period, already invoiced, is never discounted after the fact.

The discount of an invoice is a ``DISCOUNT`` line (negative) after the plan's line: a
percentage of the price rounded half away from zero to the minor unit, or the amount off, never
more than the price. Taxes are computed after it (it lowers the base), credit after taxes.

Plan changes while a discount covers the current period: the proration is between the two
plans' *discounted* prices (:func:`discounted_proration`). The credit for the unused time is
then what was paid for it (the old price less the discount the period's invoice had), and the
charge for the rest of the period is the new plan less the same coupon. Changing A → B → A at
one instant therefore nets to 0. A proration never uses up a period of the coupon: periods are
counted by index, and a proration invoice belongs to the period it falls in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from billing_core.domain.errors import DomainError
from billing_core.domain.invoice_lines import (
    InvoiceLine,
    LineKind,
    plan_period_description,
    single,
)
from billing_core.domain.money import format_minor
from billing_core.domain.period import Period
from billing_core.domain.proration import Proration, prorate
from billing_core.domain.tax import round_div

BASIS_POINTS = 10_000


class Duration(StrEnum):
    ONCE = "ONCE"
    REPEATING = "REPEATING"
    FOREVER = "FOREVER"


class InvalidCoupon(DomainError):
    """A coupon's terms do not make sense (both or neither kind of discount, a bad duration)."""


class CouponNotRedeemable(DomainError):
    """The coupon has expired, has been redeemed its maximum number of times, or is an amount
    off in another currency than the subscription's."""


@dataclass(frozen=True, slots=True)
class Coupon:
    code: str
    duration: Duration
    percent_off_bp: int | None = None
    amount_off: int | None = None
    currency: str | None = None
    duration_periods: int | None = None
    max_redemptions: int | None = None
    redeem_by: datetime | None = None
    times_redeemed: int = 0

    def __post_init__(self) -> None:
        if (self.percent_off_bp is None) == (self.amount_off is None):
            raise InvalidCoupon("a coupon is either a percentage off or an amount off")
        if self.percent_off_bp is not None and not 0 < self.percent_off_bp <= BASIS_POINTS:
            raise InvalidCoupon("a percentage off is more than 0 and at most 100 %")
        if self.amount_off is not None and self.amount_off <= 0:
            raise InvalidCoupon("an amount off is positive")
        if (self.amount_off is None) != (self.currency is None):
            raise InvalidCoupon("an amount off, and only one, has a currency")
        if (self.duration == Duration.REPEATING) != (self.duration_periods is not None):
            raise InvalidCoupon("a REPEATING coupon, and only one, has a number of periods")
        if self.duration_periods is not None and self.duration_periods < 1:
            raise InvalidCoupon("a REPEATING coupon lasts at least 1 period")
        if self.max_redemptions is not None and self.max_redemptions < 1:
            raise InvalidCoupon("max_redemptions is at least 1")
        if self.redeem_by is not None and self.redeem_by.tzinfo is None:
            raise ValueError("redeem_by must be timezone-aware")

    @property
    def label(self) -> str:
        if self.percent_off_bp is not None:
            whole, part = divmod(self.percent_off_bp, 100)
            percent = f"{whole}" if part == 0 else f"{whole}.{part:02d}".rstrip("0")
            return f"Coupon {self.code} ({percent}% off)"
        assert self.amount_off is not None and self.currency is not None
        return f"Coupon {self.code} ({format_minor(self.amount_off, self.currency)} off)"

    @property
    def periods(self) -> int | None:
        """How many periods a redemption covers (None: for ever)."""
        if self.duration == Duration.ONCE:
            return 1
        if self.duration == Duration.REPEATING:
            return self.duration_periods
        return None


@dataclass(frozen=True, slots=True)
class Discount:
    """A subscription's redemption of ``coupon``: it discounts the invoices of the periods
    ``from_period`` ≤ index < ``until_period`` (None: no end)."""

    coupon: Coupon
    from_period: int
    until_period: int | None

    def covers(self, period_index: int) -> bool:
        if period_index < self.from_period:
            return False
        return self.until_period is None or period_index < self.until_period


def check_redeemable(coupon: Coupon, *, currency: str, now: datetime) -> None:
    """Raise :class:`CouponNotRedeemable` unless ``coupon`` can be redeemed at ``now`` by a
    subscription billed in ``currency``."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if coupon.redeem_by is not None and now >= coupon.redeem_by:
        raise CouponNotRedeemable(f"coupon {coupon.code} expired at {coupon.redeem_by}")
    if coupon.max_redemptions is not None and coupon.times_redeemed >= coupon.max_redemptions:
        raise CouponNotRedeemable(
            f"coupon {coupon.code} was redeemed its {coupon.max_redemptions} times"
        )
    if coupon.currency is not None and coupon.currency != currency:
        raise CouponNotRedeemable(
            f"coupon {coupon.code} takes {coupon.currency} off, the plan is billed in {currency}"
        )


def redeem(coupon: Coupon, *, starting_period: int) -> Discount:
    """The discount of a redemption whose first discounted period is ``starting_period``."""
    if starting_period < 0:
        raise ValueError("a period index is never negative")
    periods = coupon.periods
    until = None if periods is None else starting_period + periods
    return Discount(coupon, starting_period, until)


def discount_amount(coupon: Coupon, price: int) -> int:
    """What ``coupon`` takes off ``price`` (minor units): 0 ≤ result ≤ price."""
    if price <= 0:
        return 0
    if coupon.percent_off_bp is not None:
        return min(price, round_div(price * coupon.percent_off_bp, BASIS_POINTS))
    assert coupon.amount_off is not None
    return min(price, coupon.amount_off)


def discounted(discount: Discount | None, price: int, period_index: int) -> int:
    """``price`` less the discount when ``discount`` covers ``period_index``."""
    if discount is None or not discount.covers(period_index):
        return price
    return price - discount_amount(discount.coupon, price)


def discount_lines(
    discount: Discount | None,
    price: int,
    period_index: int,
    period_start: datetime | None = None,
    period_end: datetime | None = None,
) -> list[InvoiceLine]:
    """The ``DISCOUNT`` line of a period's invoice priced ``price`` (none when ``discount``
    does not cover the period, or takes nothing off)."""
    if discount is None or not discount.covers(period_index):
        return []
    off = discount_amount(discount.coupon, price)
    if off == 0:
        return []
    return [single(LineKind.DISCOUNT, discount.coupon.label, -off, period_start, period_end)]


def plan_period_lines(
    plan_code: str,
    price: int,
    discount: Discount | None,
    period_index: int,
    period: Period,
) -> list[InvoiceLine]:
    """A period of a plan before tax and credit: its ``PLAN_PERIOD`` line at ``price`` and,
    when ``discount`` covers period ``period_index``, its ``DISCOUNT`` line."""
    return [
        single(
            LineKind.PLAN_PERIOD,
            plan_period_description(plan_code),
            price,
            period.start,
            period.end,
        ),
        *discount_lines(discount, price, period_index, period.start, period.end),
    ]


def discounted_proration(
    old_price: int,
    new_price: int,
    period: Period,
    now: datetime,
    *,
    discount: Discount | None,
    period_index: int,
) -> Proration:
    """:func:`billing_core.domain.proration.prorate` between the two plans' prices as the
    current period (``period_index``) is discounted (see the module's rules)."""
    return prorate(
        discounted(discount, old_price, period_index),
        discounted(discount, new_price, period_index),
        period,
        now,
    )
