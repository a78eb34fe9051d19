"""Relay processes against real PostgreSQL and Kafka: crashes, replicas, a broker outage."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.cloudevents import CloudEvent
from billing_core.consumer import EventConsumer
from billing_core.db import pg
from billing_core.domain import events as ev
from billing_core.repo.outbox import append_events
from billing_core.settings import CoreSettings
from services.relay.relay import CRASH_EXIT_CODE
from tests.integration.relay.conftest import RelayFactory, drain
from tests.integration.relay.helpers import (
    ROOT,
    consume,
    count,
    create_subscriptions,
    first_seen_in_order,
    insert_events,
    private_kafka,
    relays,
    wait_for,
)


async def _all_ids(engine: AsyncEngine) -> set[uuid.UUID]:
    async with engine.connect() as conn:
        return {r[0] for r in await conn.execute(text("SELECT event_id FROM outbox_event"))}


@pytest.mark.slow
async def test_relay_killed_between_send_and_mark_redelivers_and_the_consumer_applies_once(
    engine: AsyncEngine,
    lazy_pool: pg.LazyPool,
    settings: CoreSettings,
    kafka_topic: str,
) -> None:
    subs = await create_subscriptions(engine, 10)
    total = await insert_events(engine, subs, 5)
    with relays(kafka_topic, 1, BILLING_RELAY_CRASH_AFTER_SEND="1") as (crashing,):
        rc = await asyncio.to_thread(crashing.proc.wait, 60)
    assert rc == CRASH_EXIT_CODE
    assert await count(engine, "published_at IS NOT NULL") == 0  # sent, acknowledged, not marked
    with relays(kafka_topic, 1):
        await wait_for(
            lambda: _unpublished_is(engine, 0), timeout=60, what="the second relay to publish"
        )
    raw = await consume(settings.kafka_bootstrap, kafka_topic, expected=2 * total, timeout=30)
    assert len(raw.records) == 2 * total  # every event arrived twice

    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE relay_test_effect (event_id uuid NOT NULL)"))
    try:

        async def apply(conn: pg.Connection, event: CloudEvent) -> None:
            await conn.execute("INSERT INTO relay_test_effect VALUES ($1)", event.id)

        kit = EventConsumer(
            name="effects",
            group_id=f"effects-{uuid.uuid4().hex[:8]}",
            topic=kafka_topic,
            bootstrap=settings.kafka_bootstrap,
            pool=lazy_pool,
            handler=apply,
        )
        async with kit:
            async with asyncio.timeout(60):
                while kit.processed + kit.duplicates < 2 * total:
                    await kit.poll(timeout_ms=500)
        async with engine.connect() as conn:
            effects = (
                await conn.execute(
                    text("SELECT count(*), count(DISTINCT event_id) FROM relay_test_effect")
                )
            ).one()
            recorded = (
                await conn.execute(
                    text("SELECT count(*) FROM processed_event WHERE consumer = 'effects'")
                )
            ).scalar_one()
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("DROP TABLE relay_test_effect"))
    assert (kit.processed, kit.duplicates) == (total, total)
    assert tuple(effects) == (total, total)  # one effect per event
    assert recorded == total


async def _unpublished_is(engine: AsyncEngine, n: int) -> bool:
    return await count(engine, "published_at IS NULL") == n


@pytest.mark.slow
async def test_three_relays_deliver_50k_events_in_order_per_subscription(
    engine: AsyncEngine, settings: CoreSettings, kafka_topic: str
) -> None:
    subs = await create_subscriptions(engine, 500)
    total = await insert_events(engine, subs, 100)
    assert total == 50_000
    with relays(kafka_topic, 3, BILLING_RELAY_BATCH_SIZE="1000") as procs:

        async def some_published() -> bool:
            return await count(engine, "published_at IS NOT NULL") >= 10_000

        async def every_replica_holds_shards() -> bool:
            return all("shards_taken" in p.log_text() for p in procs)

        # A replica slow to start (a loaded machine) joins after the others took every shard;
        # it gets its share at their next rebalance: the kill comes once all three publish.
        await wait_for(every_replica_holds_shards, timeout=120, what="every replica's shards")
        await wait_for(some_published, timeout=120, what="10 000 events published")
        before_kill = [len(p.log_text()) for p in procs]
        procs[0].kill()  # kill -9 one replica mid-stream: its shards move to the others
        await wait_for(
            lambda: _unpublished_is(engine, 0), timeout=240, what="the outbox to drain", every=1
        )
        assert all(p.proc.poll() is None for p in procs[1:])
        logs = [p.log_text() for p in procs]
    consumed = await consume(settings.kafka_bootstrap, kafka_topic, expected=total, timeout=120)
    events = consumed.events()
    assert {e.id for e in events} == await _all_ids(engine)
    order = first_seen_in_order(events)
    assert order == {s: list(range(1, 101)) for s in subs}
    # a survivor took shards after the kill (the killed replica's)
    assert any(
        "shards_taken" in log[start:] for log, start in zip(logs[1:], before_kill[1:], strict=True)
    )


@pytest.mark.slow
async def test_broker_stopped_and_restarted_mid_stream_loses_nothing(
    engine: AsyncEngine, kafka_topic: str
) -> None:
    subs = await create_subscriptions(engine, 50)
    async with private_kafka() as broker:
        first = await insert_events(engine, subs, 20)
        with relays(
            kafka_topic,
            2,
            BILLING_KAFKA_BOOTSTRAP=broker.bootstrap,
            BILLING_RELAY_PUBLISH_TIMEOUT_SECONDS="5",
            BILLING_RELAY_BATCH_SIZE="200",
        ) as procs:
            await wait_for(lambda: _unpublished_is(engine, 0), timeout=90, what="first drain")
            await asyncio.to_thread(broker.stop)
            backlog = await insert_events(engine, subs, 20)
            await asyncio.sleep(3)
            backlog += await insert_events(engine, subs, 20)
            await asyncio.sleep(3)
            assert await count(engine, "published_at IS NULL") == backlog  # it waits, it grows
            assert all(p.proc.poll() is None for p in procs)  # backing off, not dead
            await asyncio.to_thread(broker.start)
            await wait_for(
                lambda: _unpublished_is(engine, 0), timeout=180, what="drain after restart"
            )
            assert await count(engine, "parked_at IS NOT NULL") == 0
            logs = "".join(p.log_text() for p in procs)
        assert "producer_discarded" in logs  # the stuck producer was torn down and rebuilt
        consumed = await consume(broker.bootstrap, kafka_topic, first + backlog, timeout=60)
    events = consumed.events()
    assert {e.id for e in events} == await _all_ids(engine)
    assert first_seen_in_order(events) == {s: list(range(1, 61)) for s in subs}


@pytest.mark.slow
async def test_notifier_process_logs_one_email_per_event_to_the_customer(
    pool: pg.Pool, engine: AsyncEngine, make_relay: RelayFactory, kafka_topic: str
) -> None:
    subs = await create_subscriptions(engine, 3)
    customers = {sub: 1000 + n for n, sub in enumerate(subs, start=1)}  # as created
    now = datetime(2026, 12, 1, tzinfo=UTC)
    async with pg.transaction(pool) as conn:
        for sub in subs:
            created = ev.subscription_created(sub, customers[sub], "BASIC", now, now, "UTC")
            voided = ev.invoice_voided(sub, 10 + sub, now)  # logged only (not sent)
            await append_events(conn, [created, voided], now)
    async with make_relay() as relay:
        await drain(relay)
    log_path = Path(tempfile.mkstemp(prefix="notifier-", suffix=".log")[1])
    env = {
        **os.environ,
        "BILLING_KAFKA_TOPIC": kafka_topic,
        "BILLING_NOTIFIER_HEALTH_PORT": "0",
        "BILLING_NOTIFIER_GROUP_ID": f"notifier-{uuid.uuid4().hex[:8]}",
        "BILLING_LOG_JSON": "true",
    }
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.notifier"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
        try:

            async def six_emails() -> bool:
                return log_path.read_text().count('"email_would_send"') >= 6

            await wait_for(six_emails, timeout=60, what="six e-mails logged")
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = await asyncio.to_thread(proc.wait, 30)
    lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
    log_path.unlink()
    emails = [x for x in lines if x.get("event") == "email_would_send"]
    voided = [e for e in emails if e["event_type"] == "InvoiceVoided"]
    assert rc == 0
    assert sorted(e["subscription_id"] for e in voided) == subs
    assert {e["subject"] for e in voided} == {"An invoice was voided"}
    assert {e["to"] for e in voided} == {
        f"customer-{c}@example.invalid" for c in customers.values()
    }
    assert await _processed(engine, "notifier") == 6


async def _processed(engine: AsyncEngine, consumer: str) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    text("SELECT count(*) FROM processed_event WHERE consumer = :c"),
                    {"c": consumer},
                )
            ).scalar_one()
        )
