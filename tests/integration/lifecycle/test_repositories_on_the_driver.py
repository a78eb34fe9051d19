"""The lifecycle repositories on a plain driver connection (``pg.transaction(pool)``): the one
read of a subscription, the versioned write, coupons and discounts, taxes, automatic resumes
and the history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.domain.coupons import Coupon, Duration, redeem
from billing_core.domain.subscription import Pause, PauseBehavior
from billing_core.domain.tax import TaxLocation
from billing_core.repo import coupons, history, subscriptions, tax
from billing_core.usecases.pause import resume_due_pauses
from tests.support.factories import create_subscription

START = datetime(2026, 12, 1, tzinfo=UTC)
NOW = START + timedelta(days=3)


async def _subscription(engine: AsyncEngine) -> int:
    async with engine.begin() as conn:
        return await create_subscription(conn, customer_id=7, start=START)


async def test_get_reads_the_subscription_with_its_plan(engine: AsyncEngine, pool: pg.Pool) -> None:
    sub_id = await _subscription(engine)
    async with pool.acquire() as conn:
        sub = await subscriptions.get(conn, sub_id)
        assert await subscriptions.exists(conn, sub_id)
        assert not await subscriptions.exists(conn, sub_id + 1)
        with pytest.raises(subscriptions.SubscriptionNotFound):
            await subscriptions.get(conn, sub_id + 1)
    assert (sub.id, sub.plan_code, sub.version, sub.scheduled_plan_code) == (
        sub_id,
        "BASIC_MONTHLY",
        0,
        None,
    )


async def test_update_versioned_writes_once_per_version(engine: AsyncEngine, pool: pg.Pool) -> None:
    sub_id = await _subscription(engine)
    async with pg.transaction(pool) as conn:
        version = await subscriptions.update_versioned(
            conn, sub_id, expected_version=0, now=NOW, values={"cancel_at_period_end": True}
        )
        with pytest.raises(subscriptions.VersionConflict) as conflict:
            await subscriptions.update_versioned(
                conn, sub_id, expected_version=0, now=NOW, values={"status": "CANCELED"}
            )
        with pytest.raises(subscriptions.SubscriptionNotFound):
            await subscriptions.update_versioned(
                conn, sub_id + 1, expected_version=0, now=NOW, values={}
            )
        sub = await subscriptions.get(conn, sub_id)
    assert version == 1
    assert conflict.value.current_version == 1
    assert (sub.version, sub.cancel_at_period_end, sub.status, sub.updated_at) == (
        1,
        True,
        "ACTIVE",
        NOW,
    )


async def test_update_versioned_refuses_a_column_a_change_does_not_set(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub_id = await _subscription(engine)
    async with pg.transaction(pool) as conn:
        with pytest.raises(ValueError, match="event_seq"):
            await subscriptions.update_versioned(
                conn, sub_id, expected_version=0, now=NOW, values={"event_seq": 99}
            )


async def test_a_coupon_is_redeemed_and_discounts_once(engine: AsyncEngine, pool: pg.Pool) -> None:
    sub_id = await _subscription(engine)
    terms = Coupon(
        code="HALF",
        duration=Duration.ONCE,
        percent_off_bp=5000,
        amount_off=None,
        currency=None,
        duration_periods=None,
        max_redemptions=1,
        redeem_by=None,
        times_redeemed=0,
    )
    async with pg.transaction(pool) as conn:
        await coupons.create(conn, terms, now=NOW)
        with pytest.raises(coupons.CouponExists):
            await coupons.create(conn, terms, now=NOW)
        coupon = await coupons.redeem(conn, "HALF", currency="USD", now=NOW)
        with pytest.raises(coupons.CouponNotFound):
            await coupons.redeem(conn, "NONE", currency="USD", now=NOW)
        discount = redeem(coupon, starting_period=1)
        await coupons.set_discount(conn, sub_id, discount, now=NOW)
        with pytest.raises(coupons.DiscountExists):
            await coupons.set_discount(conn, sub_id, discount, now=NOW)
        found = await coupons.discounts_for(conn, [sub_id, sub_id + 1])
        stored = await coupons.get(conn, "HALF")
    assert coupon.times_redeemed == stored.times_redeemed == 1
    assert found == {sub_id: discount}


async def test_a_subscription_is_taxed_at_its_regions_rate(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub_id = await _subscription(engine)
    async with pg.transaction(pool) as conn:
        await conn.execute(
            "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) VALUES "
            "('DE', '', 190000, false, 'MwSt'), ('US', 'CA', 72500, false, 'CA sales tax')"
        )
        await tax.set_location(conn, sub_id, TaxLocation("DE", None), now=NOW)
        await tax.set_location(conn, sub_id, TaxLocation("US", "CA"), now=NOW)
        rates = await tax.rates_for(conn, [sub_id, sub_id + 1])
    assert list(rates) == [sub_id]
    assert (rates[sub_id].country, rates[sub_id].region, rates[sub_id].rate_ppm) == (
        "US",
        "CA",
        72500,
    )


async def test_a_due_pause_resumes_once_with_its_event(engine: AsyncEngine, pool: pg.Pool) -> None:
    sub_id = await _subscription(engine)
    pause = Pause(PauseBehavior.VOID, START, START + timedelta(days=1))
    async with pg.transaction(pool) as conn:
        await subscriptions.update_versioned(
            conn, sub_id, expected_version=0, now=START, values=subscriptions.pause_values(pause)
        )
    async with pg.transaction(pool) as conn:
        assert await resume_due_pauses(conn, now=NOW) == 1
    async with pg.transaction(pool) as conn:
        assert await resume_due_pauses(conn, now=NOW) == 0
        sub = await subscriptions.get(conn, sub_id)
        events = await conn.fetch(
            "SELECT event_type FROM outbox_event WHERE aggregate_id = $1", sub_id
        )
    assert (sub.pause_behavior, sub.version) == (None, 2)
    assert [e["event_type"] for e in events] == ["SubscriptionResumed"]


async def test_the_history_reads_audit_details_as_documents(
    engine: AsyncEngine, pool: pg.Pool
) -> None:
    sub_id = await _subscription(engine)
    async with pg.transaction(pool) as conn:
        await conn.execute(
            "INSERT INTO audit_event (occurred_at, source, action, subject_type, subject_id, "
            "detail) VALUES ($1, 'CLI', 'subscription.cancel', 'subscription', $2, "
            "'{\"atPeriodEnd\": true}')",
            NOW,
            sub_id,
        )
        rows = await history.for_subscription(conn, sub_id, limit=10)
    assert [(r.kind, r.what, r.detail) for r in rows if r.kind == "api"] == [
        ("api", "subscription.cancel", {"atPeriodEnd": True})
    ]
