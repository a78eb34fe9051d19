"""Redeem a coupon for a subscription (``domain.coupons`` has the rules)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import coupons as coupon_rules
from billing_core.domain.subscription import SubscriptionStatus
from billing_core.repo import audit
from billing_core.repo import coupons as coupons_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases.lifecycle import Decision, Outcome, change_subscription


@dataclass(frozen=True)
class Redeemed:
    coupon: coupon_rules.Coupon
    discount: coupon_rules.Discount


async def apply_coupon(
    conn: Connection,
    *,
    subscription_id: int,
    code: str,
    now: datetime,
    actor: audit.Actor | None = None,
) -> Redeemed:
    """Redeem ``code``: its discount starts at the next period the subscription will be
    invoiced for (a trial's period 0; else the next one: the current one is invoiced already).
    A canceled subscription refuses (``SubscriptionCanceledForCoupon``)."""

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[Redeemed]:
        if sub.status == SubscriptionStatus.CANCELED:
            raise coupons_repo.SubscriptionCanceledForCoupon(
                f"subscription {subscription_id} is canceled"
            )
        coupon = await coupons_repo.redeem(conn, code, currency=sub.plan_currency, now=now)
        first = sub.period_index + (0 if sub.status == SubscriptionStatus.TRIALING else 1)
        discount = coupon_rules.redeem(coupon, starting_period=first)
        detail = {
            "couponCode": coupon.code,
            "fromPeriod": discount.from_period,
            "untilPeriod": discount.until_period,
        }

        async def give(_version: int, decided: Outcome[Redeemed]) -> Outcome[Redeemed]:
            await coupons_repo.set_discount(conn, subscription_id, discount, now=now)
            return decided

        # The first discounted period was read from this version of the row: a renewal that
        # commits first makes this a VersionConflict (the write runs again on the renewed row),
        # and one that comes after finds the discount.
        return Decision(Outcome(Redeemed(coupon, discount), (), detail), {}, give)

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_APPLY_COUPON,
        now=now,
        actor=actor,
    )
