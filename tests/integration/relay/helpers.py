"""Helpers of the relay tests: rows inserted with SQL, relay processes, a private broker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from aiokafka import AIOKafkaConsumer
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core import cloudevents
from billing_core.db import pg
from tests.support.factories import ensure_customers
from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[3]


_SUBSCRIPTIONS = pg.Statement(
    """
    INSERT INTO subscription (customer_id, plan_id, status, billing_anchor,
        current_period_start, current_period_end)
    SELECT 1000 + g, (SELECT id FROM plan ORDER BY id LIMIT 1), 'ACTIVE', now(), now(),
           now() + interval '1 month'
    FROM generate_series(1, :n) g
    RETURNING id
    """
)


async def create_subscriptions(engine: AsyncEngine, n: int) -> list[int]:
    conn = await asyncpg.connect(pg.asyncpg_dsn(engine.url.render_as_string(hide_password=False)))
    try:
        async with conn.transaction():
            await ensure_customers(conn, list(range(1001, 1001 + n)))
            rows = await pg.fetch(conn, _SUBSCRIPTIONS, {"n": n})
    finally:
        await conn.close()
    return sorted(r["id"] for r in rows)


async def insert_events(
    engine: AsyncEngine,
    subscriptions: list[int],
    per_subscription: int,
    *,
    event_type: str = "InvoicePaid",
    pad: int = 0,
) -> int:
    """Append ``per_subscription`` events to each subscription, interleaved in id order."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                """
                WITH s AS (
                    UPDATE subscription SET event_seq = event_seq + :k
                    WHERE id = ANY(CAST(:subs AS bigint[]))
                    RETURNING id, event_seq - :k AS base
                )
                INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload,
                                          occurred_at)
                SELECT gen_random_uuid(), s.id, s.base + r, :type,
                       jsonb_build_object('invoice_id', r, 'customer_id', s.id,
                                          'pad', repeat('x', :pad)),
                       clock_timestamp()
                FROM generate_series(1, :k) r, s
                ORDER BY r, s.id
                """
            ),
            {"subs": subscriptions, "k": per_subscription, "type": event_type, "pad": pad},
        )
    return len(subscriptions) * per_subscription


async def count(engine: AsyncEngine, where: str) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(text(f"SELECT count(*) FROM outbox_event WHERE {where}"))
            ).scalar_one()
        )


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout: float, what: str, every: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Consumed:
    records: list[Any]

    def events(self) -> list[cloudevents.CloudEvent]:
        return [cloudevents.decode(r.key, r.value, r.headers) for r in self.records]


async def consume(bootstrap: str, topic: str, expected: int, timeout: float) -> Consumed:
    """Read ``topic`` from the beginning until ``expected`` records came (or time runs out)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"check-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await consumer.start()
    records: list[Any] = []
    try:
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            for recs in batch.values():
                records.extend(recs)
        # a short quiet period, to see duplicates that may still arrive
        batch = await consumer.getmany(timeout_ms=300)
        for recs in batch.values():
            records.extend(recs)
    finally:
        await consumer.stop()
    return Consumed(records)


def first_seen_in_order(events: list[cloudevents.CloudEvent]) -> dict[int, list[int]]:
    """Per subscription, the sequences in the order they were first seen (duplicates dropped).

    Records of one subscription all come from one partition, so the consumer's order is the log
    order of that partition.
    """
    seen: set[uuid.UUID] = set()
    out: dict[int, list[int]] = {}
    for e in events:
        if e.id in seen:
            continue
        seen.add(e.id)
        out.setdefault(e.subscription_id, []).append(e.sequence)
    return out


class RelayProcess:
    """``python -m services.relay`` with the test session's environment plus ``env``."""

    def __init__(self, topic: str, log_dir: Path, name: str, **env: str) -> None:
        self.log_path = log_dir / f"{name}.log"
        full = {
            **os.environ,
            "BILLING_KAFKA_TOPIC": topic,
            "BILLING_RELAY_HEALTH_PORT": "0",
            "BILLING_RELAY_TOPIC_PARTITIONS": "6",
            "BILLING_RELAY_SHARDS": "16",
            "BILLING_RELAY_REBALANCE_INTERVAL_SECONDS": "0.5",
            "BILLING_PROCESS_NAME": f"relay-{name}",
            **env,
        }
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.relay"],
            cwd=ROOT,
            env=full,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
        return rc


@contextlib.contextmanager
def relays(topic: str, n: int, **env: str) -> Iterator[list[RelayProcess]]:
    log_dir = Path(tempfile.mkdtemp(prefix="relay-logs-"))
    procs = [RelayProcess(topic, log_dir, f"r{i}", **env) for i in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(log_dir, ignore_errors=True)


class PrivateKafka:
    """A broker of our own (scripts/infra.sh with BILLING_VAR in a temp dir), safe to stop."""

    def __init__(self) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="billing-kafka-"))
        self.port = free_port()
        self.env = {
            **os.environ,
            "BILLING_VAR": str(self.var),
            "BILLING_KAFKA_PORT": str(self.port),
            "BILLING_KAFKA_CONTROLLER_PORT": str(free_port()),
        }
        cached = ROOT / "var" / "kafka" / "libs"
        if (cached / ".complete").exists():
            (self.var / "kafka").mkdir(parents=True)
            (self.var / "kafka" / "libs").symlink_to(cached)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _infra(self, *args: str) -> None:
        subprocess.run(
            [str(ROOT / "scripts" / "infra.sh"), *args],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
        )

    def start(self) -> None:
        self._infra("start", "kafka")

    def stop(self) -> None:
        self._infra("stop", "kafka")

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.var, ignore_errors=True)


@contextlib.asynccontextmanager
async def private_kafka() -> AsyncIterator[PrivateKafka]:
    broker = PrivateKafka()
    try:
        await asyncio.to_thread(broker.start)
        yield broker
    finally:
        await asyncio.to_thread(broker.cleanup)
