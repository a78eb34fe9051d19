"""The relay against real PostgreSQL and Kafka, in process: headers, order, parking, pruning."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core import cloudevents
from billing_core.db import pg
from billing_core.domain import events
from billing_core.repo.outbox import append_events
from billing_core.settings import CoreSettings
from services.relay import metrics
from tests.integration.relay.conftest import RelayFactory, drain
from tests.integration.relay.helpers import (
    consume,
    count,
    create_subscriptions,
    first_seen_in_order,
    insert_events,
)


async def test_state_change_round_trip_to_a_consumed_cloudevent_with_all_headers(
    engine: AsyncEngine,
    pool: pg.Pool,
    make_relay: RelayFactory,
    settings: CoreSettings,
    kafka_topic: str,
) -> None:
    (sub,) = await create_subscriptions(engine, 1)
    occurred = datetime(2026, 12, 3, 10, 0, 0, 123456, tzinfo=UTC)
    async with pg.transaction(pool) as conn:
        await append_events(
            conn,
            [
                events.invoice_paid(sub, 7, 1999, "USD", occurred),
                events.subscription_canceled(sub, "customer_request", occurred),
            ],
            occurred,
        )
        ids = [
            row["event_id"]
            for row in await conn.fetch(
                "SELECT event_id FROM outbox_event WHERE aggregate_id = $1 ORDER BY sequence", sub
            )
        ]
    async with make_relay(relay_source="urn:billing:test") as relay:
        await drain(relay)
    consumed = await consume(settings.kafka_bootstrap, kafka_topic, expected=2, timeout=30)

    assert len(consumed.records) == 2
    first, second = consumed.records
    headers = dict(first.headers)
    assert first.key == str(sub).encode()
    assert headers["ce_specversion"] == b"1.0"
    assert headers["ce_id"] == str(ids[0]).encode()
    assert headers["ce_type"] == b"billing.InvoicePaid"
    assert headers["ce_source"] == b"urn:billing:test"
    assert headers["ce_subject"] == str(sub).encode()
    assert headers["ce_dataschema"] == b"urn:billing:schema:InvoicePaid:1"
    assert headers["ce_time"] == b"2026-12-03T10:00:00.123456Z"
    assert headers["content-type"] == b"application/json"
    assert headers["ce_subscriptionid"] == str(sub).encode()
    assert headers["ce_sequence"] == b"00000000000000000001"
    assert headers["ce_schemaversion"] == b"1"
    assert json.loads(first.value) == {
        "subscriptionId": sub,
        "invoiceId": 7,
        "amount": 1999,
        "currency": "USD",
        "paidAt": "2026-12-03T10:00:00.123456Z",
    }
    event = cloudevents.decode(second.key, second.value, second.headers)
    assert (event.id, event.event_type, event.sequence) == (ids[1], "SubscriptionCanceled", 2)
    assert event.time == occurred
    assert await count(engine, "published_at IS NULL") == 0


async def test_each_subscription_is_published_in_sequence_order(
    engine: AsyncEngine, make_relay: RelayFactory, settings: CoreSettings, kafka_topic: str
) -> None:
    subs = await create_subscriptions(engine, 20)
    total = await insert_events(engine, subs, 30)
    async with make_relay(relay_batch_size=97) as relay:
        await drain(relay)
    consumed = await consume(settings.kafka_bootstrap, kafka_topic, expected=total, timeout=30)
    order = first_seen_in_order(consumed.events())
    assert {s: order.get(s) for s in subs} == {s: list(range(1, 31)) for s in subs}


async def test_an_event_committed_late_is_published_and_a_gap_holds_its_subscription(
    engine: AsyncEngine, make_relay: RelayFactory, settings: CoreSettings, kafka_topic: str
) -> None:
    late_sub, other_sub, gap_sub = await create_subscriptions(engine, 3)
    insert = text(
        "INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, "
        "occurred_at) VALUES (gen_random_uuid(), :sub, :seq, 'InvoiceCreated', '{}', now())"
    )
    async with make_relay() as relay:
        late = await engine.connect()
        late_tx = await late.begin()
        # takes an id before the other rows, commits after them
        await late.execute(insert, {"sub": late_sub, "seq": 1})
        async with engine.begin() as conn:
            await conn.execute(insert, {"sub": other_sub, "seq": 1})
            await conn.execute(insert, {"sub": gap_sub, "seq": 2})  # seq 1 not there yet
        await drain(relay)
        assert await count(engine, "published_at IS NOT NULL") == 1  # other_sub only
        await late_tx.commit()
        await late.close()
        await drain(relay)
        assert await count(engine, f"aggregate_id = {late_sub} AND published_at IS NOT NULL") == 1
        assert await count(engine, f"aggregate_id = {gap_sub} AND published_at IS NULL") == 1
        async with engine.begin() as conn:
            await conn.execute(insert, {"sub": gap_sub, "seq": 1})
        await drain(relay)
    consumed = await consume(settings.kafka_bootstrap, kafka_topic, expected=4, timeout=30)
    order = first_seen_in_order(consumed.events())
    assert order == {late_sub: [1], other_sub: [1], gap_sub: [1, 2]}


async def test_a_too_large_event_is_parked_and_others_continue(
    engine: AsyncEngine, make_relay: RelayFactory, settings: CoreSettings, kafka_topic: str
) -> None:
    big_sub, *others = await create_subscriptions(engine, 4)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload,"
                " occurred_at) VALUES (gen_random_uuid(), :sub, 1, 'InvoiceCreated', "
                "jsonb_build_object('pad', repeat('x', 1200000)), now())"
            ),
            {"sub": big_sub},
        )
        await conn.execute(
            text("UPDATE subscription SET event_seq = 1 WHERE id = :s"), {"s": big_sub}
        )
    await insert_events(engine, [big_sub, *others], 3)  # big_sub gets 2..4, blocked behind 1
    parked_before = metrics.PARKED_TOTAL._value.get()
    async with make_relay() as relay:
        await drain(relay)
        await relay.refresh_stats()
    async with engine.connect() as conn:
        parked = (
            await conn.execute(
                text(
                    "SELECT sequence, last_error, publish_attempts FROM outbox_event "
                    "WHERE parked_at IS NOT NULL"
                )
            )
        ).all()
    assert len(parked) == 1
    assert parked[0].sequence == 1 and "MessageSizeTooLarge" in parked[0].last_error
    assert parked[0].publish_attempts == 1
    assert metrics.PARKED._value.get() == 1
    assert metrics.PARKED_TOTAL._value.get() == parked_before + 1
    # later events of the same subscription wait behind the parked one; the others all went
    assert await count(engine, f"aggregate_id = {big_sub} AND published_at IS NOT NULL") == 0
    assert await count(engine, "published_at IS NOT NULL") == 9
    consumed = await consume(settings.kafka_bootstrap, kafka_topic, expected=9, timeout=30)
    assert {e.subscription_id for e in consumed.events()} == set(others)


async def test_published_rows_are_pruned_after_retention_keeping_each_newest(
    engine: AsyncEngine, make_relay: RelayFactory
) -> None:
    subs = await create_subscriptions(engine, 5)
    await insert_events(engine, subs, 10)
    async with make_relay(relay_retention_hours=1, relay_prune_batch=7) as relay:
        await drain(relay)
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE outbox_event SET published_at = :t WHERE sequence <= 8"),
                {"t": datetime.now(UTC) - timedelta(hours=2)},
            )
            await conn.execute(
                text("UPDATE outbox_event SET published_at = :t WHERE aggregate_id = :s"),
                {"t": datetime.now(UTC) - timedelta(hours=2), "s": subs[0]},
            )
        pruned = await relay.prune()
        # sequences 1..8 of every subscription; subs[0] keeps its newest (10), loses 9 too
        assert pruned == 5 * 8 + 1
        assert await count(engine, "true") == 5 * 10 - pruned
        assert await count(engine, f"aggregate_id = {subs[0]}") == 1
        # the kept newest row lets the next event of that subscription through
        await insert_events(engine, [subs[0]], 1)
        await drain(relay)
        assert await count(engine, "published_at IS NULL") == 0
