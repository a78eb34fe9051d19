"""Coupons end to end: created and read through the API, redeemed at subscribing or later,
applied by the renewer as DISCOUNT lines for their duration (a trial's end and taxes
included), refused when expired, used up or in another currency, and plan changes prorated at
the discounted prices (A -> B -> A at one instant nets to 0); the checker stays clean."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from tests.integration.api.helpers import assert_problem, new_customer, rows, scalar
from tests.integration.lifecycle.helpers import assert_clean, iso, renew_until


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def coupon(client: httpx.AsyncClient, **terms: Any) -> dict[str, Any]:
    response = await client.post("/coupons", json=terms, headers=key())
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def subscribe(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    """POST /subscriptions for a new customer (created through the API first)."""
    customer = (await new_customer(client))["id"]
    return await client.post(
        "/subscriptions",
        json={"customerId": customer, "planCode": "BASIC_MONTHLY", **body},
        headers=key(),
    )


async def lines(engine: AsyncEngine, subscription_id: int) -> list[list[tuple[str, int]]]:
    """Each invoice's (kind, amount) lines, oldest invoice first."""
    found = await rows(
        engine,
        "SELECT i.id, l.kind, l.amount FROM invoice i JOIN invoice_line l ON l.invoice_id = i.id "
        "WHERE i.subscription_id = :s ORDER BY i.id, l.line_no",
        s=subscription_id,
    )
    out: dict[int, list[tuple[str, int]]] = {}
    for r in found:
        out.setdefault(r["id"], []).append((r["kind"], r["amount"]))
    return list(out.values())


async def test_a_coupon_is_created_read_and_its_terms_checked(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    made = await coupon(
        client, code="WELCOME25", percentOff=12.5, duration="REPEATING", durationInPeriods=3
    )
    assert made == {
        "code": "WELCOME25",
        "percentOff": 12.5,
        "amountOff": None,
        "currency": None,
        "duration": "REPEATING",
        "durationInPeriods": 3,
        "maxRedemptions": None,
        "redeemBy": None,
        "timesRedeemed": 0,
    }
    assert (await client.get("/coupons/WELCOME25")).json() == made
    assert_problem(await client.get("/coupons/NOPE"), 404, "coupon-not-found")
    again = await client.post(
        "/coupons", json={"code": "WELCOME25", "percentOff": 5, "duration": "ONCE"}, headers=key()
    )
    assert_problem(again, 409, "coupon-exists")
    for bad in (
        {"code": "B", "duration": "ONCE"},
        {"code": "B", "percentOff": 10, "amountOff": 5, "currency": "EUR", "duration": "ONCE"},
        {"code": "B", "amountOff": 500, "duration": "ONCE"},
        {"code": "B", "percentOff": 10, "duration": "REPEATING"},
        {"code": "B", "percentOff": 10, "duration": "FOREVER", "durationInPeriods": 2},
        {"code": "B", "percentOff": 0, "duration": "ONCE"},
        {"code": "B", "percentOff": 100.5, "duration": "ONCE"},
        {"code": "B", "percentOff": 10.125, "duration": "ONCE"},
        {"code": "b c", "percentOff": 10, "duration": "ONCE"},
    ):
        response = await client.post("/coupons", json=bad, headers=key())
        assert_problem(response, 422, "validation-error")
    assert await scalar(engine, "SELECT count(*) FROM coupon") == 1
    (audited,) = await rows(engine, "SELECT * FROM audit_event WHERE action = 'coupon.create'")
    assert (audited["subject_type"], audited["detail"]["code"]) == ("coupon", "WELCOME25")


async def test_a_coupon_at_subscribing_discounts_its_periods_then_stops(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    await coupon(client, code="TWO", percentOff=25, duration="REPEATING", durationInPeriods=2)
    created = await subscribe(client, couponCode="TWO")
    assert created.status_code == 201, created.text
    sub = created.json()
    assert await lines(engine, sub["id"]) == [[("PLAN_PERIOD", 990), ("DISCOUNT", -248)]]
    (first,) = await rows(
        engine, "SELECT subtotal, amount FROM invoice WHERE subscription_id = :s", s=sub["id"]
    )
    assert (first["subtotal"], first["amount"]) == (742, 742)
    preview = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()
    assert (preview["subtotal"], [line["kind"] for line in preview["lines"]]) == (
        742,
        ["PLAN_PERIOD", "DISCOUNT"],
    )

    await renew_until(engine, clock, clock.now() + timedelta(days=65))
    assert await lines(engine, sub["id"]) == [
        [("PLAN_PERIOD", 990), ("DISCOUNT", -248)],
        [("PLAN_PERIOD", 990), ("DISCOUNT", -248)],
        [("PLAN_PERIOD", 990)],  # two periods: the coupon is over
    ]
    assert (await client.get("/coupons/TWO")).json()["timesRedeemed"] == 1
    await assert_clean(pool, clock)


async def test_refused_redemptions_write_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    await coupon(client, code="LAST", percentOff=10, duration="ONCE", maxRedemptions=1)
    await coupon(
        client,
        code="OLD",
        percentOff=10,
        duration="ONCE",
        redeemBy=iso(clock.now() + timedelta(hours=1)),
    )
    await coupon(client, code="DOLLARS", amountOff=500, currency="USD", duration="FOREVER")
    assert (await subscribe(client, couponCode="LAST")).status_code == 201
    assert_problem(await subscribe(client, couponCode="LAST"), 409, "coupon-not-redeemable")
    assert_problem(await subscribe(client, couponCode="DOLLARS"), 409, "coupon-not-redeemable")
    assert_problem(await subscribe(client, couponCode="NOPE"), 404, "coupon-not-found")
    clock.advance(timedelta(hours=1))
    assert_problem(await subscribe(client, couponCode="OLD"), 409, "coupon-not-redeemable")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
    assert await scalar(engine, "SELECT count(*) FROM subscription_discount") == 1
    counts = await rows(engine, "SELECT code, times_redeemed FROM coupon ORDER BY code")
    assert [(c["code"], c["times_redeemed"]) for c in counts] == [
        ("DOLLARS", 0),
        ("LAST", 1),
        ("OLD", 0),
    ]


async def test_a_retried_create_with_a_coupon_replays_and_counts_one_redemption(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """The same keyed create with the coupon's last redemption, sent again: replayed, one
    subscription, one discount, one redemption counted; the same key for another customer is
    422, a new key for another customer 409 (no redemption left)."""
    await coupon(client, code="ONLY", percentOff=10, duration="ONCE", maxRedemptions=1)
    customer = (await new_customer(client))["id"]
    other = (await new_customer(client))["id"]
    body = {"customerId": customer, "planCode": "BASIC_MONTHLY", "couponCode": "ONLY"}
    headers = key()
    first = await client.post("/subscriptions", json=body, headers=headers)
    assert first.status_code == 201, first.text
    clock.advance(timedelta(minutes=1))
    again = await client.post("/subscriptions", json=body, headers=headers)
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    reused = await client.post(
        "/subscriptions", json={**body, "customerId": other}, headers=headers
    )
    assert_problem(reused, 422, "idempotency-key-reused")
    fresh = await client.post("/subscriptions", json={**body, "customerId": other}, headers=key())
    assert_problem(fresh, 409, "coupon-not-redeemable")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
    assert await scalar(engine, "SELECT count(*) FROM subscription_discount") == 1
    assert await scalar(engine, "SELECT times_redeemed FROM coupon WHERE code = 'ONLY'") == 1


async def test_a_coupon_redeemed_later_starts_with_the_next_invoice(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    await coupon(client, code="FIVE", amountOff=500, currency="EUR", duration="ONCE")
    await coupon(client, code="MORE", percentOff=50, duration="FOREVER")
    sub = (await subscribe(client)).json()
    path = f"/subscriptions/{sub['id']}/coupon"
    applied = await client.post(path, json={"couponCode": "FIVE"}, headers=key())
    assert applied.status_code == 200, applied.text
    assert (applied.json()["fromPeriod"], applied.json()["untilPeriod"]) == (1, 2)
    # One coupon per subscription: a second is refused and not counted.
    assert_problem(
        await client.post(path, json={"couponCode": "MORE"}, headers=key()),
        409,
        "discount-exists",
    )
    assert (await client.get("/coupons/MORE")).json()["timesRedeemed"] == 0
    (audited,) = await rows(
        engine,
        "SELECT detail, version_before, version_after FROM audit_event"
        " WHERE action = 'subscription.apply_coupon'",
    )
    assert audited["detail"] == {"couponCode": "FIVE", "fromPeriod": 1, "untilPeriod": 2}
    # A redemption is a versioned write of the subscription, audited with its versions.
    redeemed_at = (sub["version"], sub["version"] + 1)
    assert (audited["version_before"], audited["version_after"]) == redeemed_at

    await renew_until(engine, clock, clock.now() + timedelta(days=65))
    assert await lines(engine, sub["id"]) == [
        [("PLAN_PERIOD", 990)],  # already invoiced when the coupon came
        [("PLAN_PERIOD", 990), ("DISCOUNT", -500)],
        [("PLAN_PERIOD", 990)],
    ]
    await assert_clean(pool, clock)


async def test_a_trials_first_paid_period_is_discounted_then_taxed(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) "
                "VALUES ('US', 'NY', 88750, false, 'Sales tax')"
            )
        )
    await coupon(client, code="HALF", percentOff=50, duration="ONCE")
    trial_end = clock.now() + timedelta(days=7)
    created = await subscribe(client, trialEnd=iso(trial_end), couponCode="HALF")
    assert created.status_code == 201, created.text
    sub = created.json()
    put = await client.put(
        f"/subscriptions/{sub['id']}/tax-location", json={"country": "US", "region": "NY"}
    )
    assert put.status_code == 200
    await renew_until(engine, clock, trial_end + timedelta(days=32))
    # 990 - 495 = 495, taxed 8.875 % on top: 44 (43.93).
    assert await lines(engine, sub["id"]) == [
        [("PLAN_PERIOD", 990), ("DISCOUNT", -495), ("TAX", 44)],
        [("PLAN_PERIOD", 990), ("TAX", 88)],
    ]
    await assert_clean(pool, clock)


async def test_a_to_b_to_a_at_one_instant_nets_to_zero_with_a_discount(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    await coupon(client, code="THIRD", percentOff=33.33, duration="FOREVER")
    sub = (await subscribe(client, couponCode="THIRD")).json()
    clock.advance(timedelta(days=11, hours=5, seconds=17))
    path = f"/subscriptions/{sub['id']}/change-plan"
    there = (await client.post(path, json={"planCode": "PRO_MONTHLY"}, headers=key())).json()
    back = (await client.post(path, json={"planCode": "BASIC_MONTHLY"}, headers=key())).json()
    assert there["due"] > 0 and back["due"] < 0
    assert there["due"] + back["due"] == 0
    # The upgrade was charged at the discounted prices; the way back credits exactly that.
    assert back["creditGranted"] == there["prorationAmount"]
    assert back["subscription"]["creditBalance"] == back["creditGranted"]
    await assert_clean(pool, clock)
