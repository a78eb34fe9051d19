"""SQL of coupons and of the subscriptions' discounts. Nothing here commits.

A redemption is one ``UPDATE ... RETURNING`` that counts it only while the coupon can still be
redeemed (not expired, under its maximum, in the subscription's currency): two concurrent
redemptions of the last one serialize on the coupon's row, and the second finds it used up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement
from billing_core.domain.coupons import Coupon, Discount, Duration, check_redeemable
from billing_core.domain.errors import DomainError

_COLUMNS = (
    "code, duration, percent_off_bp, amount_off, currency, duration_periods, max_redemptions, "
    "redeem_by, times_redeemed"
)


class CouponNotFound(DomainError):
    def __init__(self, code: str) -> None:
        super().__init__(f"coupon {code!r} not found")
        self.code = code


class CouponExists(DomainError):
    def __init__(self, code: str) -> None:
        super().__init__(f"a coupon {code!r} exists already")
        self.code = code


class SubscriptionCanceledForCoupon(DomainError):
    """A canceled subscription redeems no coupon."""


class DiscountExists(DomainError):
    """The subscription has redeemed a coupon already (one per subscription)."""


def _coupon(row: Mapping[Any, Any]) -> Coupon:
    return Coupon(
        code=row["code"],
        duration=Duration(row["duration"]),
        percent_off_bp=row["percent_off_bp"],
        amount_off=row["amount_off"],
        currency=row["currency"],
        duration_periods=row["duration_periods"],
        max_redemptions=row["max_redemptions"],
        redeem_by=row["redeem_by"],
        times_redeemed=int(row["times_redeemed"]),
    )


_INSERT = Statement(
    f"""
    INSERT INTO coupon ({_COLUMNS}, created_at)
    VALUES (:code, :duration, :percent_off_bp, :amount_off, :currency, :duration_periods,
            :max_redemptions, :redeem_by, 0, :now)
    ON CONFLICT (code) DO NOTHING
    RETURNING id, {_COLUMNS}
    """
)
_GET = Statement(f"SELECT {_COLUMNS} FROM coupon WHERE code = :code")


async def create(conn: Connection, coupon: Coupon, *, now: datetime) -> tuple[int, Coupon]:
    """Insert ``coupon``; its id (``CouponExists`` when the code is taken)."""
    row = await pg.fetchrow(
        conn,
        _INSERT,
        {
            "code": coupon.code,
            "duration": str(coupon.duration),
            "percent_off_bp": coupon.percent_off_bp,
            "amount_off": coupon.amount_off,
            "currency": coupon.currency,
            "duration_periods": coupon.duration_periods,
            "max_redemptions": coupon.max_redemptions,
            "redeem_by": coupon.redeem_by,
            "now": now,
        },
    )
    if row is None:
        raise CouponExists(coupon.code)
    return int(row["id"]), _coupon(row)


async def get(conn: Connection, code: str) -> Coupon:
    row = await pg.fetchrow(conn, _GET, {"code": code})
    if row is None:
        raise CouponNotFound(code)
    return _coupon(row)


# Counted only while redeemable; the row lock serializes concurrent redemptions.
_REDEEM = Statement(
    f"""
    UPDATE coupon SET times_redeemed = times_redeemed + 1
    WHERE code = :code AND (max_redemptions IS NULL OR times_redeemed < max_redemptions)
      AND (redeem_by IS NULL OR redeem_by > :now) AND (currency IS NULL OR currency = :currency)
    RETURNING {_COLUMNS}
    """
)


def _refused(found: Mapping[Any, Any] | None, code: str, currency: str, now: datetime) -> None:
    """Why a redemption counted nothing (raises)."""
    if found is None:
        raise CouponNotFound(code)
    check_redeemable(_coupon(found), currency=currency, now=now)
    raise RuntimeError(f"coupon {code!r} is redeemable but was not counted")


async def redeem(conn: Connection, code: str, *, currency: str, now: datetime) -> Coupon:
    """Count one redemption of ``code`` (in the caller's transaction); raises
    ``CouponNotFound`` or ``CouponNotRedeemable`` (nothing counted)."""
    row = await pg.fetchrow(conn, _REDEEM, {"code": code, "now": now, "currency": currency})
    if row is None:
        _refused(await pg.fetchrow(conn, _GET, {"code": code}), code, currency, now)
    assert row is not None
    return _coupon(row)


_INSERT_DISCOUNT = Statement(
    """
    INSERT INTO subscription_discount (subscription_id, coupon_code, from_period, until_period,
                                       applied_at)
    VALUES (:id, :code, :from_period, :until_period, :now)
    ON CONFLICT (subscription_id) DO NOTHING
    RETURNING subscription_id
    """
)


async def set_discount(
    conn: Connection, subscription_id: int, discount: Discount, *, now: datetime
) -> None:
    """Give the subscription ``discount``; ``DiscountExists`` when it has one (the invoices of
    its periods keep the one coupon that priced them)."""
    written = await pg.fetchrow(
        conn,
        _INSERT_DISCOUNT,
        {
            "id": subscription_id,
            "code": discount.coupon.code,
            "from_period": discount.from_period,
            "until_period": discount.until_period,
            "now": now,
        },
    )
    if written is None:
        raise DiscountExists(f"subscription {subscription_id} has redeemed a coupon already")


_DISCOUNTS = Statement(
    f"""
    SELECT d.subscription_id, d.from_period, d.until_period,
           {", ".join(f"c.{c.strip()}" for c in _COLUMNS.split(","))}
    FROM subscription_discount d JOIN coupon c ON c.code = d.coupon_code
    WHERE d.subscription_id = ANY(CAST(:ids AS text)::bigint[])
    """
)


async def discounts_for(conn: Connection, subscription_ids: Sequence[int]) -> dict[int, Discount]:
    """The discount of each subscription that has one (one statement for a batch)."""
    if not subscription_ids:
        return {}
    rows = await pg.fetch(conn, _DISCOUNTS, {"ids": int_array(subscription_ids)})
    return {
        int(r["subscription_id"]): Discount(_coupon(r), int(r["from_period"]), r["until_period"])
        for r in rows
    }
