"""Each real server answers a real round trip: PostgreSQL, Redis, Kafka (with aiokafka)."""

from __future__ import annotations

import asyncio
import uuid

import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from billing_core.db import pg
from tests.support.infra import Services


async def test_postgres_round_trip(pool: pg.Pool) -> None:
    async with pg.transaction(pool) as conn:
        await conn.execute("CREATE TEMP TABLE rt (v bigint) ON COMMIT DROP")
        await conn.execute("INSERT INTO rt VALUES (9223372036854775807)")
        value = await conn.fetchval("SELECT v FROM rt")
        tz = await conn.fetchval("SHOW timezone")
    assert value == 2**63 - 1
    assert tz == "UTC"


async def test_postgres_runs_with_the_checkpoint_tuning_of_the_infra_script(
    pool: pg.Pool,
) -> None:
    """scripts/infra.sh's tuning reaches the server (its billing.conf, rewritten at each start):
    no checkpoint in the middle of a 1st of the month's WAL, full pages compressed."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT name, setting::bigint FROM pg_settings WHERE name IN "
            "('max_wal_size', 'checkpoint_timeout', 'shared_buffers')"
        )
        settings = {r["name"]: int(r["setting"]) for r in rows}
        compression = await conn.fetchval("SHOW wal_compression")
    assert settings["max_wal_size"] == 16 * 1024  # MB
    assert settings["checkpoint_timeout"] == 30 * 60  # s
    assert settings["shared_buffers"] * 8 >= 256 * 1024  # 8 kB pages: at least 256 MB
    assert compression == "lz4"


async def test_redis_round_trip(redis: aioredis.Redis, redis_prefix: str) -> None:
    key = f"{redis_prefix}rt"
    await redis.set(key, "42", px=10_000)
    assert await redis.get(key) == b"42"
    assert await redis.incrby(key, 8) == 50
    await redis.delete(key)


async def test_kafka_produce_consume_with_consumer_group(
    services: Services, kafka_topic: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=services.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(kafka_topic, num_partitions=3, replication_factor=1)])
    finally:
        await admin.close()

    producer = AIOKafkaProducer(
        bootstrap_servers=services.kafka_bootstrap, acks="all", enable_idempotence=True
    )
    await producer.start()
    sent = [f"msg-{i}".encode() for i in range(30)]
    try:
        futures = [
            await producer.send(kafka_topic, value=v, key=str(i % 5).encode())
            for i, v in enumerate(sent)
        ]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert {m.topic for m in metadata} == {kafka_topic}

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(
        kafka_topic,
        bootstrap_servers=services.kafka_bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    received: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            while len(received) < len(sent):
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    received.extend(r.value for r in records if r.value is not None)
        await consumer.commit()
        committed = {tp: await consumer.committed(tp) for tp in consumer.assignment()}
    finally:
        await consumer.stop()
    assert sorted(received) == sorted(sent)
    assert sum(v or 0 for v in committed.values()) == len(sent)
