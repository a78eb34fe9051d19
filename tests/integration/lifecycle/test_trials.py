"""Trials from subscribe to the first paid periods: the API, the renewer (notices, the trial's
end, catch-up), the invariant checker and the events read back from Kafka."""

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
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.invariants.report import Report
from billing_core.invariants.topic import read_topic
from billing_core.settings import CoreSettings
from billing_core.usecases.renew import renew_due_batch
from services.renewer.loop import Renewer
from tests.integration.api.helpers import assert_problem, new_customer, rows, scalar
from tests.integration.lifecycle.helpers import iso
from tests.integration.relay.conftest import RelayFactory, drain
from tests.integration.relay.helpers import consume


async def subscribe(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    """POST /subscriptions for a new customer (created through the API first)."""
    customer = (await new_customer(client))["id"]
    return await client.post(
        "/subscriptions",
        json={"customerId": customer, "planCode": "BASIC_MONTHLY", **body},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )


async def trialing(client: httpx.AsyncClient, trial_end: datetime, **body: Any) -> dict[str, Any]:
    response = await subscribe(client, trialEnd=iso(trial_end), **body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def event_types(engine: AsyncEngine, subscription_id: int) -> list[str]:
    found = await rows(
        engine,
        "SELECT event_type FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence",
        s=subscription_id,
    )
    return [r["event_type"] for r in found]


async def invoices(engine: AsyncEngine, subscription_id: int) -> list[dict[str, Any]]:
    return await rows(
        engine,
        "SELECT kind, period_index, period_start, period_end, amount, status FROM invoice "
        "WHERE subscription_id = :s ORDER BY period_index, id",
        s=subscription_id,
    )


async def check(pool: pg.Pool, settings: CoreSettings, topic: str, now: datetime) -> Report:
    return await check_all(
        pool,
        now=now,
        ledger=LedgerEvidence({}),
        topic=await read_topic(settings.kafka_bootstrap, topic),
    )


async def test_a_trial_charges_nothing_and_anchors_at_its_end(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    trial_end = clock.now() + timedelta(days=14)
    sub = await trialing(client, trial_end, timeZone="Europe/Paris")
    assert (sub["status"], sub["trialEnd"], sub["billingAnchor"]) == (
        "TRIALING",
        iso(trial_end),
        iso(trial_end),
    )
    assert (sub["currentPeriodStart"], sub["currentPeriodEnd"]) == (
        iso(clock.now()),
        iso(trial_end),
    )
    assert await invoices(engine, sub["id"]) == []
    assert await event_types(engine, sub["id"]) == ["SubscriptionCreated"]
    payload = await scalar(
        engine, "SELECT payload->>'trialEnd' FROM outbox_event WHERE aggregate_id = :s", s=sub["id"]
    )
    assert payload == iso(trial_end)
    listed = (await client.get("/subscriptions", params={"status": "TRIALING"})).json()
    assert [s["id"] for s in listed["items"]] == [sub["id"]]


async def test_the_plans_trial_days_apply_unless_the_request_says_null(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE plan SET trial_days = 14 WHERE code = 'BASIC_MONTHLY'"))
    try:
        by_plan = (await subscribe(client, timeZone="Europe/Paris")).json()
        without = (await subscribe(client, trialEnd=None)).json()
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE plan SET trial_days = 0 WHERE code = 'BASIC_MONTHLY'"))
    # 14 local days from Mar 10, 10:30 in Paris (CET) is Mar 24, 10:30 (still CET).
    assert (by_plan["status"], by_plan["trialEnd"]) == ("TRIALING", "2026-03-24T09:30:00Z")
    assert (without["status"], without["trialEnd"]) == ("ACTIVE", None)
    assert len(await invoices(engine, without["id"])) == 1


async def test_a_trial_end_not_after_now_is_422_and_writes_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    for trial_end in (
        clock.now(),
        clock.now() - timedelta(days=1),
        clock.now() + timedelta(days=800),
    ):
        assert_problem(
            await subscribe(client, trialEnd=iso(trial_end)), 422, "business-rule-violated"
        )
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 0


async def test_cancel_during_a_trial_never_charges(
    lazy_pool: pg.LazyPool,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
    settings: CoreSettings,
    kafka_topic: str,
    make_relay: RelayFactory,
) -> None:
    now_sub = await trialing(client, clock.now() + timedelta(days=7))
    later_sub = await trialing(client, clock.now() + timedelta(days=7))
    canceled = await client.post(
        f"/subscriptions/{now_sub['id']}/cancel", json={"atPeriodEnd": False}
    )
    assert canceled.json()["status"] == "CANCELED"
    scheduled = await client.post(
        f"/subscriptions/{later_sub['id']}/cancel", json={"atPeriodEnd": True}
    )
    assert scheduled.json()["cancelAtPeriodEnd"] is True

    clock.advance(timedelta(days=40))
    renewer = Renewer(lazy_pool, clock, batch_size=10)
    while await renewer.tick():
        pass
    after = (await client.get(f"/subscriptions/{later_sub['id']}")).json()
    assert (after["status"], after["currentPeriodEnd"]) == ("CANCELED", later_sub["trialEnd"])
    assert await scalar(engine, "SELECT count(*) FROM invoice") == 0
    assert await event_types(engine, later_sub["id"]) == [
        "SubscriptionCreated",
        "SubscriptionTrialWillEnd",
        "SubscriptionCanceled",
    ]
    async with make_relay() as relay:
        await drain(relay)
    report = await check(pool, settings, kafka_topic, clock.now())
    assert report.violation_count == 0, report.as_dict()


async def test_end_trial_now_invoices_period_0_from_now(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await trialing(client, clock.now() + timedelta(days=14))
    clock.advance(timedelta(days=2))
    response = await client.post(f"/subscriptions/{sub['id']}/end-trial", json={})
    assert response.status_code == 200, response.text
    body = response.json()
    period0 = period_bounds(clock.now(), Interval.MONTH, 0, "UTC")
    assert body["subscription"]["status"] == "ACTIVE"
    assert (body["subscription"]["billingAnchor"], body["subscription"]["trialEnd"]) == (
        iso(clock.now()),
        iso(clock.now()),
    )
    assert response.headers["etag"] == f'"{body["subscription"]["version"]}"'
    (invoice,) = await invoices(engine, sub["id"])
    assert (invoice["period_index"], invoice["period_start"], invoice["period_end"]) == (
        0,
        period0.start,
        period0.end,
    )
    assert (invoice["amount"], invoice["status"]) == (990, "OPEN")
    assert body["invoiceId"] == await scalar(
        engine, "SELECT id FROM invoice WHERE subscription_id = :s", s=sub["id"]
    )
    assert await event_types(engine, sub["id"]) == [
        "SubscriptionCreated",
        "SubscriptionTrialEnded",
        "InvoiceCreated",
    ]
    again = await client.post(f"/subscriptions/{sub['id']}/end-trial", json={})
    assert_problem(again, 409, "state-conflict")
    stale = await client.post(
        f"/subscriptions/{sub['id']}/end-trial", json={}, headers={"If-Match": '"0"'}
    )
    assert_problem(stale, 409, "version-conflict")


async def test_a_plan_change_during_a_trial_prorates_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await trialing(client, clock.now() + timedelta(days=14))
    response = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["changed"], body["due"], body["prorationInvoiceId"]) == (True, 0, None)
    assert body["subscription"]["status"] == "TRIALING"
    assert await invoices(engine, sub["id"]) == []


async def test_the_renewer_notices_once_then_ends_the_trial_with_catch_up_and_kafka_has_it_all(
    lazy_pool: pg.LazyPool,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
    settings: CoreSettings,
    kafka_topic: str,
    make_relay: RelayFactory,
) -> None:
    trial_end = clock.now() + timedelta(days=10)
    sub = await trialing(client, trial_end)
    renewer = Renewer(lazy_pool, clock, batch_size=10)

    await renewer.tick()  # 10 days before the end: no notice yet (3 days' lead)
    assert await event_types(engine, sub["id"]) == ["SubscriptionCreated"]
    clock.advance(timedelta(days=8))
    await renewer.tick()
    await renewer.tick()
    assert await event_types(engine, sub["id"]) == [
        "SubscriptionCreated",
        "SubscriptionTrialWillEnd",
    ]
    assert await invoices(engine, sub["id"]) == []

    # The renewer stays away from the trial's end until two periods later: it catches up.
    clock.set(period_bounds(trial_end, Interval.MONTH, 2, "UTC").start + timedelta(hours=1))
    while await renewer.tick():
        pass
    found = await invoices(engine, sub["id"])
    assert [(i["kind"], i["period_index"]) for i in found] == [("RENEWAL", n) for n in (0, 1, 2)]
    assert [(i["period_start"], i["period_end"]) for i in found] == [
        (p.start, p.end)
        for p in (period_bounds(trial_end, Interval.MONTH, n, "UTC") for n in (0, 1, 2))
    ]
    after = (await client.get(f"/subscriptions/{sub['id']}")).json()
    assert (after["status"], after["periodIndex"]) == ("ACTIVE", 2)
    expected = [
        "SubscriptionCreated",
        "SubscriptionTrialWillEnd",
        "SubscriptionTrialEnded",
        "InvoiceCreated",
        "InvoiceCreated",
        "InvoiceCreated",
    ]
    assert await event_types(engine, sub["id"]) == expected

    async with make_relay() as relay:
        await drain(relay)
    consumed = await consume(settings.kafka_bootstrap, kafka_topic, expected=6, timeout=30)
    published = [e for e in consumed.events() if e.subscription_id == sub["id"]]
    assert [(e.event_type, e.sequence) for e in published] == [
        (t, n) for n, t in enumerate(expected, start=1)
    ]
    report = await check(pool, settings, kafka_topic, clock.now())
    assert report.violation_count == 0, report.as_dict()


async def test_a_trial_without_its_notice_is_not_ended_by_a_renewal_batch(
    lazy_pool: pg.LazyPool,
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    clock: ManualClock,
    pool: pg.Pool,
) -> None:
    """The notice comes first, also when the trial's end passed while no renewer ran."""
    sub = await trialing(client, clock.now() + timedelta(days=1))
    clock.advance(timedelta(days=2))
    async with pg.transaction(pool) as conn:
        result = await renew_due_batch(conn, now=clock.now(), batch_size=10)
    assert result.claimed == 0
    await Renewer(lazy_pool, clock, batch_size=10).tick()
    assert await event_types(engine, sub["id"]) == [
        "SubscriptionCreated",
        "SubscriptionTrialWillEnd",
        "SubscriptionTrialEnded",
        "InvoiceCreated",
    ]


async def test_the_checker_reports_an_invoiced_trial_and_a_trial_that_is_not_one(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock
) -> None:
    invoiced = await trialing(client, clock.now() + timedelta(days=7))
    odd = await trialing(client, clock.now() + timedelta(days=7))
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, "
                "period_start, period_end, subtotal, amount, currency, status) "
                "SELECT id, customer_id, 'RENEWAL', 0, current_period_end, "
                "current_period_end + interval '1 month', 990, 990, 'EUR', 'OPEN' "
                "FROM subscription WHERE id = :s"
            ),
            {"s": invoiced["id"]},
        )
        await conn.execute(
            text("UPDATE subscription SET trial_end = trial_end + interval '1 day' WHERE id = :s"),
            {"s": odd["id"]},
        )
    report = await check_all(pool, now=clock.now(), ledger=LedgerEvidence({}), topic=None)
    periods = report.check("periods")
    assert periods.kinds() == {"trial_invoiced": 1, "trial_mismatch": 1}
    assert periods.ids("trial_invoiced") == [invoiced["id"]]
    assert periods.ids("trial_mismatch") == [odd["id"]]
