"""The renewer after a change to another billing interval: it renews from the moved anchor in
the new interval (once per period, catch-up included), and applies a change to another interval
scheduled for the period end by moving the anchor to that boundary."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.period import Interval, period_bounds
from tests.integration.api.helpers import rows, subscribe
from tests.integration.lifecycle.helpers import assert_clean, change, instant, renew, renewals


async def test_after_monthly_to_yearly_the_renewer_renews_once_at_the_yearly_boundary(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY", timeZone="America/New_York")
    clock.advance(timedelta(days=12, hours=7))
    at = clock.now()
    await change(client, sub, "BASIC_YEARLY")
    yearly = period_bounds(at, Interval.YEAR, 0, "America/New_York")
    following = period_bounds(at, Interval.YEAR, 1, "America/New_York")
    upcoming = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()
    assert (instant(upcoming["periodStart"]), instant(upcoming["periodEnd"])) == (
        following.start,
        following.end,
    )
    assert (upcoming["periodIndex"], upcoming["subtotal"]) == (2, 9900)

    # The old monthly period end passes: nothing is due (the period is the yearly one now).
    clock.set(instant(sub["currentPeriodEnd"]) + timedelta(days=1))
    await renew(engine, clock)
    assert len(await renewals(engine, sub["id"])) == 2

    clock.set(yearly.end + timedelta(days=3))
    await renew(engine, clock)
    await renew(engine, clock)  # a second pass finds nothing more to do
    found = await renewals(engine, sub["id"])
    assert [(r["period_index"], r["subtotal"]) for r in found] == [(0, 990), (1, 9900), (2, 9900)]
    assert (found[1]["period_start"], found[1]["period_end"]) == (yearly.start, yearly.end)
    assert (found[2]["period_start"], found[2]["period_end"]) == (following.start, following.end)
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert (after["periodIndex"], instant(after["billingAnchor"])) == (2, at)
    assert instant(after["currentPeriodEnd"]) == following.end
    await assert_clean(pool, clock)


async def test_after_yearly_to_monthly_the_renewer_catches_up_month_by_month(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_YEARLY", timeZone="Europe/Paris")
    clock.advance(timedelta(days=40, hours=2))
    at = clock.now()
    await change(client, sub, "BASIC_MONTHLY")

    # Five monthly boundaries pass before a renewer runs.
    clock.set(period_bounds(at, Interval.MONTH, 5, "Europe/Paris").start + timedelta(hours=1))
    await renew(engine, clock)
    found = await renewals(engine, sub["id"])
    assert [r["period_index"] for r in found] == [0, 1, 2, 3, 4, 5, 6]
    assert [r["subtotal"] for r in found] == [9900] + [990] * 6
    monthly = [period_bounds(at, Interval.MONTH, k, "Europe/Paris") for k in range(6)]
    assert [(r["period_start"], r["period_end"]) for r in found[1:]] == [
        (p.start, p.end) for p in monthly
    ]
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert after["periodIndex"] == 6
    assert instant(after["currentPeriodStart"]) == monthly[5].start
    # The yearly credit (about 11 months) paid the months it could, oldest first.
    credits = await rows(
        engine,
        "SELECT credit_applied, amount FROM invoice WHERE subscription_id = :s "
        "AND period_index > 0 ORDER BY period_index",
        s=sub["id"],
    )
    assert all(c["credit_applied"] + c["amount"] == 990 for c in credits)
    assert credits[0]["credit_applied"] == 990
    await assert_clean(pool, clock)


async def test_a_change_to_monthly_scheduled_for_the_period_end_moves_the_anchor_there(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_YEARLY")
    clock.advance(timedelta(days=30))
    scheduled = await change(client, sub, "BASIC_MONTHLY", effective="period_end")
    assert scheduled["scheduled"] and scheduled["creditGranted"] == 0
    boundary = instant(sub["currentPeriodEnd"])
    upcoming = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()
    first = period_bounds(boundary, Interval.MONTH, 0, "UTC")
    assert upcoming["subtotal"] == 990
    assert (instant(upcoming["periodStart"]), instant(upcoming["periodEnd"])) == (
        first.start,
        first.end,
    )

    clock.set(period_bounds(boundary, Interval.MONTH, 2, "UTC").start + timedelta(minutes=5))
    await renew(engine, clock)
    found = await renewals(engine, sub["id"])
    assert [(r["period_index"], r["subtotal"]) for r in found] == [
        (0, 29900),
        (1, 990),
        (2, 990),
        (3, 990),
    ]
    assert [(r["period_start"], r["period_end"]) for r in found[1:]] == [
        (p.start, p.end)
        for p in (period_bounds(boundary, Interval.MONTH, k, "UTC") for k in range(3))
    ]
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert (after["plan"]["code"], instant(after["billingAnchor"])) == ("BASIC_MONTHLY", boundary)
    assert after["scheduledChange"] is None
    change_event = (
        await rows(
            engine,
            "SELECT payload FROM outbox_event WHERE aggregate_id = :s "
            "AND event_type = 'SubscriptionPlanChanged'",
            s=sub["id"],
        )
    )[0]["payload"]
    assert change_event["effective"] == "period_end"
    assert instant(change_event["newPeriodStart"]) == boundary
    assert instant(change_event["newPeriodEnd"]) == first.end
    await assert_clean(pool, clock)
