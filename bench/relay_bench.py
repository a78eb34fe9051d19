"""Relay benchmark: outbox → Kafka events/s against the broker's own floor, and lag at 1 000/s.

    python -m bench.relay_bench [--events 200000] [--runs 3] [--lag-seconds 20]

* floor: a bare aiokafka producer (the relay's configuration: acks=all, idempotence, same linger
  and batch size) sends the same records (key, headers, JSON value) in batches of the relay's
  size, awaiting each batch's acknowledgements together; no database.
* relay x1 / x2: ``--events`` rows inserted in ``outbox_event``, then one or two
  ``python -m services.relay`` processes drain them; events/s counted from the first published
  row seen to the last.
* lag: a writer inserts 1 000 events/s (100 every 100 ms, each batch its own transaction) while
  one relay runs; lag = published_at - occurred_at of every row.

It uses its own database (``<name>_bench_relay`` next to BILLING_DATABASE_URL's) and a new topic
per run on BILLING_KAFKA_BOOTSTRAP. Medians of ``--runs`` runs are printed as Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

from billing_core import cloudevents
from billing_core.db import pg
from billing_core.seeding import seed_customers
from services.relay.producer import ensure_topic, new_producer
from services.relay.settings import RelaySettings
from tests.support.db import migrated_database

ROOT = Path(__file__).resolve().parents[1]
SUBSCRIPTIONS = 5_000


_SUBSCRIPTIONS = pg.Statement(
    """
    INSERT INTO subscription (customer_id, plan_id, status, billing_anchor,
        current_period_start, current_period_end)
    SELECT g, (SELECT id FROM plan ORDER BY id LIMIT 1), 'ACTIVE', now(), now(),
           now() + interval '1 month'
    FROM generate_series(1, :count) g
    """
)
_RESET = pg.Statement("TRUNCATE outbox_event, subscription RESTART IDENTITY CASCADE")
_EMPTY_OUTBOX = pg.Statement("TRUNCATE outbox_event")
_VACUUM_OUTBOX = pg.Statement("VACUUM ANALYZE outbox_event")
_ANALYZE_OUTBOX = pg.Statement("ANALYZE outbox_event")
_WAITING = pg.Statement(
    "SELECT count(*) FROM outbox_event WHERE published_at IS NULL AND parked_at IS NULL"
)
_UNPUBLISHED = pg.Statement("SELECT count(*) FROM outbox_event WHERE published_at IS NULL")
_LAGS = pg.Statement(
    "SELECT extract(epoch FROM published_at - occurred_at) AS lag FROM outbox_event"
)


async def prepare_database(base_url: str) -> str:
    return await migrated_database(base_url, "bench_relay")


async def reset(url: str) -> None:
    conn = await asyncpg.connect(pg.asyncpg_dsn(url))
    try:
        await pg.execute(conn, _RESET)
        await seed_customers(conn, first_id=1, count=SUBSCRIPTIONS)
        await pg.execute(conn, _SUBSCRIPTIONS, {"count": SUBSCRIPTIONS})
        await pg.execute(conn, _VACUUM_OUTBOX)
    finally:
        await conn.close()


_INSERT_TEMPLATE = """
    WITH s AS (
        UPDATE subscription SET event_seq = event_seq + :per_subscription
        WHERE {where} RETURNING id, event_seq - :per_subscription AS base
    )
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
    SELECT gen_random_uuid(), s.id, s.base + r, 'InvoicePaid',
           jsonb_build_object('invoice_id', s.base + r, 'subscription_id', s.id,
                              'amount', 1999, 'currency', 'EUR'),
           clock_timestamp()
    FROM generate_series(1, :per_subscription) r, s
    ORDER BY r, s.id
"""
_INSERT = pg.Statement(_INSERT_TEMPLATE.format(where="id <= :subscriptions"))
# :subscriptions subscriptions after id :after, one event each: the steady writer of the lag run
_INSERT_WINDOW = pg.Statement(
    _INSERT_TEMPLATE.format(where="id > :after AND id <= :after + :subscriptions")
)


async def insert_backlog(url: str, events: int) -> None:
    conn = await asyncpg.connect(pg.asyncpg_dsn(url))
    try:
        per_sub = events // SUBSCRIPTIONS
        await pg.execute(
            conn, _INSERT, {"subscriptions": SUBSCRIPTIONS, "per_subscription": per_sub}
        )
        await pg.execute(conn, _ANALYZE_OUTBOX)
    finally:
        await conn.close()


def sample_records(events: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    now = datetime.now(UTC)
    out = []
    for i in range(events):
        sub = i % SUBSCRIPTIONS + 1
        seq = i // SUBSCRIPTIONS + 1
        value = (
            f'{{"amount": 1999, "currency": "EUR", "invoice_id": {seq}, "subscription_id": {sub}}}'
        ).encode()
        headers = cloudevents.encode_headers(
            event_id=uuid.uuid4(),
            event_type="InvoicePaid",
            occurred_at=now,
            subscription_id=sub,
            sequence=seq,
            schema_version=1,
        )
        out.append((cloudevents.encode_key(sub), value, headers))
    return out


async def floor_run(settings: RelaySettings, topic: str, events: int) -> float:
    records = sample_records(events)
    await ensure_topic(settings.kafka_bootstrap, topic, settings.relay_topic_partitions, 1)
    producer = new_producer(settings)
    await producer.start()
    try:
        # warm-up, untimed: partition leaders of the new topic settle
        await asyncio.gather(
            *[await producer.send(topic, value=v, key=k, headers=h) for k, v, h in records[:500]]
        )
        start = time.perf_counter()
        batch = settings.relay_batch_size
        for i in range(0, events, batch):
            futures = [
                await producer.send(topic, value=v, key=k, headers=h)
                for k, v, h in records[i : i + batch]
            ]
            await asyncio.gather(*futures)
        elapsed = time.perf_counter() - start
    finally:
        await producer.stop()
    return events / elapsed


def start_relays(n: int, url: str, topic: str) -> list[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        "BILLING_DATABASE_URL": url,
        "BILLING_KAFKA_TOPIC": topic,
        "BILLING_RELAY_HEALTH_PORT": "0",
        "BILLING_RELAY_REBALANCE_INTERVAL_SECONDS": "0.5",
        "BILLING_LOG_LEVEL": "WARNING",
    }
    return [
        subprocess.Popen(
            [sys.executable, "-m", "services.relay"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]


def stop_relays(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def relay_run(url: str, replicas: int, events: int) -> float:
    await reset(url)
    await insert_backlog(url, events)
    topic = f"bench-relay-{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(pg.asyncpg_dsn(url))
    procs = start_relays(replicas, url, topic)
    try:
        first: tuple[float, int] | None = None
        while True:
            # the partial index: cheap, and it shrinks as the relay works
            waiting = await pg.fetchval(conn, _WAITING)
            published = events - waiting
            now = time.perf_counter()
            if first is None and published > 0:
                first = (now, published)
            if published >= events:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a relay process exited during the benchmark")
            await asyncio.sleep(0.25)
        assert first is not None
        return (events - first[1]) / max(now - first[0], 1e-6)
    finally:
        stop_relays(procs)
        await conn.close()


async def lag_run(url: str, seconds: float, rate: int = 1000) -> tuple[float, float, float]:
    await reset(url)
    topic = f"bench-relay-lag-{uuid.uuid4().hex[:8]}"
    procs = start_relays(1, url, topic)
    conn = await asyncpg.connect(pg.asyncpg_dsn(url))
    try:
        await asyncio.sleep(3)  # the relay starts, creates its topic, takes its shards
        await pg.execute(conn, _EMPTY_OUTBOX)
        per_tick, tick = rate // 10, 0.1
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds:
            # 100 events: one for each of 100 subscriptions, rotating
            lo = (n * per_tick) % SUBSCRIPTIONS
            await pg.execute(
                conn,
                _INSERT_WINDOW,
                {"subscriptions": per_tick, "per_subscription": 1, "after": lo},
            )
            n += 1
            await asyncio.sleep(max(0.0, start + n * tick - time.perf_counter()))
        deadline = time.perf_counter() + 30
        while await pg.fetchval(conn, _UNPUBLISHED):
            if time.perf_counter() > deadline:
                raise RuntimeError("the relay did not keep up")
            await asyncio.sleep(0.1)
        rows = await pg.fetch(conn, _LAGS)
        lags = sorted(float(r["lag"]) for r in rows)
        p50 = lags[len(lags) // 2]
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        achieved = len(lags) / seconds
        return p50, p99, achieved
    finally:
        stop_relays(procs)
        await conn.close()


async def main_async(args: argparse.Namespace) -> None:
    settings = RelaySettings()
    url = await prepare_database(settings.database_url)
    floor, one, two, p50s, p99s, rates = [], [], [], [], [], []
    for run in range(args.runs):
        floor.append(await floor_run(settings, f"bench-floor-{uuid.uuid4().hex[:8]}", args.events))
        one.append(await relay_run(url, 1, args.events))
        two.append(await relay_run(url, 2, args.events))
        p50, p99, achieved = await lag_run(url, args.lag_seconds)
        p50s.append(p50)
        p99s.append(p99)
        rates.append(achieved)
        print(
            f"run {run + 1}: floor {floor[-1]:.0f}/s, relay x1 {one[-1]:.0f}/s, "
            f"x2 {two[-1]:.0f}/s, lag p50 {p50 * 1000:.0f} ms p99 {p99 * 1000:.0f} ms "
            f"at {achieved:.0f} events/s",
            file=sys.stderr,
            flush=True,
        )
    f, r1, r2 = (statistics.median(x) for x in (floor, one, two))
    print(f"\n{args.events} events, {args.runs} runs, medians\n")
    print("| measure | median | vs floor |")
    print("|---|---|---|")
    print(f"| floor: bare aiokafka producer, no database | {f:.0f} events/s | 1.00 |")
    # the floor moves from run to run on a shared machine: compare each run with its own floor
    k1 = statistics.median(a / b for a, b in zip(one, floor, strict=True))
    k2 = statistics.median(a / b for a, b in zip(two, floor, strict=True))
    print(f"| relay, 1 replica | {r1:.0f} events/s | {k1:.2f} (median of per-run ratios) |")
    print(f"| relay, 2 replicas | {r2:.0f} events/s | {k2:.2f} (median of per-run ratios) |")
    print(
        f"| lag at {statistics.median(rates):.0f} events/s: p50 / p99 | "
        f"{statistics.median(p50s) * 1000:.0f} ms / {statistics.median(p99s) * 1000:.0f} ms | |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lag-seconds", type=float, default=20.0)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
