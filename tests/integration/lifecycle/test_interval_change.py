"""Monthly <-> yearly plan changes through the API: a new period starts at the change (the
anchor moves there), the unused part of the old period is credited, the new period is invoiced
in full by its RENEWAL invoice; the events reach Kafka and the invariant checker is clean."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.period import Interval, period_bounds
from billing_core.domain.proration import mul_div_floor, whole_seconds
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.invariants.topic import read_topic
from billing_core.settings import CoreSettings
from tests.integration.api.helpers import assert_problem, rows, scalar, subscribe
from tests.integration.lifecycle.helpers import instant, iso
from tests.integration.relay.conftest import RelayFactory, drain
from tests.integration.relay.helpers import consume

BASIC_MONTHLY, BASIC_YEARLY = 990, 9900


async def change(
    client: httpx.AsyncClient, sub: dict[str, Any], plan: str, **body: Any
) -> httpx.Response:
    return await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": plan, **body},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )


def unused(price: int, sub: dict[str, Any], at: datetime) -> int:
    start, end = instant(sub["currentPeriodStart"]), instant(sub["currentPeriodEnd"])
    return mul_div_floor(price, whole_seconds(end - at), whole_seconds(end - start))


async def invoices(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    return await rows(
        engine,
        "SELECT id, kind, period_index, period_start, period_end, subtotal, credit_applied, "
        "amount, status FROM invoice WHERE subscription_id = :s ORDER BY period_index, id",
        s=subscription_id,
    )


async def lines(engine: AsyncEngine, invoice_id: int) -> list[tuple[str, int]]:
    found = await rows(
        engine,
        "SELECT kind, amount FROM invoice_line WHERE invoice_id = :i ORDER BY line_no",
        i=invoice_id,
    )
    return [(r["kind"], r["amount"]) for r in found]


async def outbox(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    return await rows(
        engine,
        "SELECT event_type, payload FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence",
        s=subscription_id,
    )


async def test_monthly_to_yearly_restarts_the_period_credits_the_rest_and_reaches_kafka(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
    settings: CoreSettings,
    kafka_topic: str,
    make_relay: RelayFactory,
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY", timeZone="Europe/Paris")
    clock.advance(timedelta(days=10, hours=5))
    at = clock.now()
    credit = unused(BASIC_MONTHLY, sub, at)
    assert 0 < credit < BASIC_MONTHLY

    response = await change(client, sub, "BASIC_YEARLY")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["changed"], body["due"], body["creditGranted"]) == (True, -credit, credit)
    assert body["prorationInvoiceId"] is None
    assert body["periodInvoiceAmount"] == BASIC_YEARLY - credit
    after = body["subscription"]
    assert after["plan"]["code"] == "BASIC_YEARLY"
    assert instant(after["billingAnchor"]) == at == instant(after["currentPeriodStart"])
    assert (
        instant(after["currentPeriodEnd"])
        == period_bounds(at, Interval.YEAR, 0, "Europe/Paris").end
    )
    assert (after["periodIndex"], after["creditBalance"]) == (1, 0)

    found = await invoices(engine, sub["id"])
    assert [(i["kind"], i["period_index"]) for i in found] == [("RENEWAL", 0), ("RENEWAL", 1)]
    new = found[1]
    assert new["id"] == body["periodInvoiceId"]
    assert (new["period_start"], new["period_end"]) == (
        at,
        instant(after["currentPeriodEnd"]),
    )
    assert (new["subtotal"], new["credit_applied"], new["amount"], new["status"]) == (
        BASIC_YEARLY,
        credit,
        BASIC_YEARLY - credit,
        "OPEN",
    )
    assert await lines(engine, new["id"]) == [
        ("PLAN_PERIOD", BASIC_YEARLY),
        ("CREDIT_APPLIED", -credit),
    ]
    ledger = await rows(
        engine,
        "SELECT amount, reason FROM credit_entry WHERE subscription_id = :s ORDER BY id",
        s=sub["id"],
    )
    assert [(r["amount"], r["reason"]) for r in ledger] == [
        (credit, "DOWNGRADE"),
        (-credit, "INVOICE"),
    ]

    events = await outbox(engine, sub["id"])
    types = [e["event_type"] for e in events]
    assert types == [
        "SubscriptionCreated",
        "InvoiceCreated",
        "SubscriptionPlanChanged",
        "InvoiceCreated",
    ]
    changed = events[2]["payload"]
    assert (changed["oldPlanCode"], changed["newPlanCode"], changed["effective"]) == (
        "BASIC_MONTHLY",
        "BASIC_YEARLY",
        "now",
    )
    assert changed["changedAt"] == changed["newPeriodStart"] == iso(at)
    assert changed["newPeriodEnd"] == after["currentPeriodEnd"]
    assert changed["prorationDue"] == -credit
    assert events[3]["payload"]["invoiceId"] == new["id"]

    async with make_relay() as relay:
        await drain(relay)
    consumed = await consume(settings.kafka_bootstrap, kafka_topic, expected=4, timeout=30)
    published = [e for e in consumed.events() if e.subscription_id == sub["id"]]
    assert [e.event_type for e in published] == types
    report = await check_all(
        pool,
        now=clock.now(),
        ledger=LedgerEvidence({}),
        topic=await read_topic(settings.kafka_bootstrap, kafka_topic),
        retry_bound=timedelta(days=30),  # no collector runs here: OPEN invoices wait
    )
    assert report.violation_count == 0, [(c.name, c.violations) for c in report.checks if not c.ok]


async def test_yearly_to_monthly_pays_the_month_from_the_credit_and_keeps_the_rest(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_YEARLY")
    clock.advance(timedelta(days=100))
    at = clock.now()
    credit = unused(BASIC_YEARLY, sub, at)
    assert credit > BASIC_MONTHLY

    response = await change(client, sub, "BASIC_MONTHLY")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["creditGranted"], body["periodInvoiceAmount"]) == (credit, 0)
    after = body["subscription"]
    assert after["creditBalance"] == credit - BASIC_MONTHLY
    assert instant(after["currentPeriodEnd"]) == period_bounds(at, Interval.MONTH, 0, "UTC").end
    new = (await invoices(engine, sub["id"]))[1]
    assert (new["period_index"], new["amount"], new["status"]) == (1, 0, "PAID")
    assert await lines(engine, new["id"]) == [
        ("PLAN_PERIOD", BASIC_MONTHLY),
        ("CREDIT_APPLIED", -BASIC_MONTHLY),
    ]
    types = [e["event_type"] for e in await outbox(engine, sub["id"])]
    assert types[2:] == ["SubscriptionPlanChanged", "InvoiceCreated", "InvoicePaid"]
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("periods").ok and report.check("amounts").ok, report.as_dict()
    assert report.check("lines").ok, report.as_dict()


async def test_proration_none_invoices_the_new_period_in_full_without_credit(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    clock.advance(timedelta(days=3))
    response = await change(client, sub, "PRO_YEARLY", prorationBehavior="none")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["due"], body["creditGranted"], body["periodInvoiceAmount"]) == (0, 0, 29900)
    assert await scalar(engine, "SELECT count(*) FROM credit_entry") == 0
    new = (await invoices(engine, sub["id"]))[1]
    assert (new["subtotal"], new["amount"], new["status"]) == (29900, 29900, "OPEN")


async def test_a_change_at_the_instant_the_period_starts_is_409_and_writes_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    # The same instant as the subscription's period 0 starts (frozen clock).
    assert_problem(await change(client, sub, "BASIC_YEARLY"), 409, "state-conflict")
    clock.advance(timedelta(seconds=1))
    first = await change(client, sub, "BASIC_YEARLY")
    assert first.status_code == 200, first.text
    # Back at once: the yearly period starts at this instant.
    assert_problem(await change(client, sub, "BASIC_MONTHLY"), 409, "state-conflict")
    assert await scalar(engine, "SELECT count(*) FROM invoice") == 2
    clock.advance(timedelta(seconds=1))
    back = await change(client, sub, "BASIC_MONTHLY")
    assert back.status_code == 200, back.text
    # Nothing of the yearly period was used but one second: almost all of it comes back.
    assert back.json()["creditGranted"] == mul_div_floor(
        BASIC_YEARLY,
        whole_seconds(
            period_bounds(clock.now(), Interval.YEAR, 0, "UTC").end
            - timedelta(seconds=1)
            - clock.now()
        ),
        whole_seconds(
            period_bounds(clock.now() - timedelta(seconds=1), Interval.YEAR, 0, "UTC").end
            - (clock.now() - timedelta(seconds=1))
        ),
    )
    found = await invoices(engine, sub["id"])
    assert [i["period_index"] for i in found] == [0, 1, 2]
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    assert report.check("periods").ok and report.check("amounts").ok, report.as_dict()


async def test_a_paused_subscription_cannot_change_interval_now_but_can_schedule_it(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    paused = await client.post(
        f"/subscriptions/{sub['id']}/pause",
        json={"behavior": "void"},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert paused.status_code == 200, paused.text
    clock.advance(timedelta(days=2))
    assert_problem(await change(client, sub, "BASIC_YEARLY"), 422, "plan-change-not-allowed")
    scheduled = await change(client, sub, "BASIC_YEARLY", effective="period_end")
    assert scheduled.status_code == 200, scheduled.text
    assert scheduled.json()["subscription"]["scheduledChange"]["planCode"] == "BASIC_YEARLY"


async def test_the_credit_is_at_the_discounted_price_and_the_new_period_discounted_then_taxed(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) "
                "VALUES ('US', 'NY', 88750, false, 'Sales tax')"
            )
        )
    made = await client.post(
        "/coupons",
        json={"code": "HALF2", "percentOff": 50, "duration": "REPEATING", "durationInPeriods": 2},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert made.status_code == 201, made.text
    sub = await subscribe(client, plan="BASIC_MONTHLY", couponCode="HALF2")
    put = await client.put(
        f"/subscriptions/{sub['id']}/tax-location", json={"country": "US", "region": "NY"}
    )
    assert put.status_code == 200, put.text
    clock.advance(timedelta(days=15))
    at = clock.now()
    credit = unused(BASIC_MONTHLY // 2, sub, at)  # what period 0 cost: half price

    response = await change(client, sub, "BASIC_YEARLY")
    assert response.status_code == 200, response.text
    assert response.json()["creditGranted"] == credit
    new = (await invoices(engine, sub["id"]))[1]
    # Period 1 is still covered by the coupon: 9900 - 4950, taxed 8.875 % on top, rounded per
    # line as every invoice's tax is (878.625 -> 879, -439.3125 -> -439).
    assert await lines(engine, new["id"]) == [
        ("PLAN_PERIOD", BASIC_YEARLY),
        ("DISCOUNT", -4950),
        ("TAX", 440),
        ("CREDIT_APPLIED", -credit),
    ]
    assert (new["subtotal"], new["amount"]) == (4950 + 440, 4950 + 440 - credit)
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    for name in ("periods", "amounts", "lines"):
        assert report.check(name).ok, report.check(name).violations
