"""``python -m services.relay`` / ``billing relay``: run one relay replica until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncpg  # type: ignore[import-untyped]

from billing_core.clock import clock_from_offset
from billing_core.db import pg
from billing_core.db.pg import server_settings
from billing_core.runtime import process
from billing_core.runtime.worker import Worker
from services.relay.producer import ProducerHolder
from services.relay.relay import Relay
from services.relay.settings import RelaySettings
from services.relay.shards import ShardLeaser


async def lease_connection(settings: RelaySettings) -> pg.Connection:
    """A dedicated connection, never a pooled one: its session locks die with it."""
    return await asyncpg.connect(
        pg.asyncpg_dsn(settings.database_url),
        server_settings=server_settings(settings, "-lease"),
    )


def build(settings: RelaySettings) -> process.WorkerProcess:
    pool = pg.LazyPool(settings, max_size=3)
    relay = Relay(
        settings,
        pool,
        ShardLeaser(lambda: lease_connection(settings), settings.relay_shards),
        ProducerHolder(settings),
        clock_from_offset(settings.clock_offset_seconds),
    )
    worker = Worker(
        "relay",
        relay.tick,
        poll_interval=settings.relay_poll_interval_seconds,
        max_error_backoff=5.0,
        shutdown_timeout=settings.relay_shutdown_timeout_seconds,
    )
    return process.WorkerProcess(
        name="relay",
        worker=worker,
        pool=pool,
        health_port=settings.relay_health_port,
        # The last batch is committed and the shards given back before the pool closes.
        close=[relay.close],
        started={
            "topic": settings.kafka_topic,
            "shards": settings.relay_shards,
            "batch_size": settings.relay_batch_size,
        },
    )


def main() -> None:
    process.run("relay", RelaySettings, build)
