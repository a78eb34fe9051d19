"""``python -m services.relay`` / ``billing relay``: run one relay replica until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from billing_core.clock import clock_from_offset
from billing_core.db.engine import create_engine
from billing_core.logging import configure_logging, get_logger
from billing_core.runtime.http import HealthServer
from billing_core.runtime.startup import load_settings, require_database
from billing_core.runtime.worker import Worker, stop_on_signals
from services.relay.producer import ProducerHolder
from services.relay.relay import Relay
from services.relay.settings import RelaySettings
from services.relay.shards import ShardLeaser

log = get_logger(__name__)


def lease_engine(settings: RelaySettings) -> AsyncEngine:
    """Unpooled: the lease connection's locks must die with it, never return to a pool."""
    return create_async_engine(
        settings.database_url,
        poolclass=NullPool,
        connect_args={
            "server_settings": {
                "application_name": f"{settings.process_name}-lease",
                "timezone": "UTC",
            }
        },
    )


async def run(settings: RelaySettings) -> None:
    engine = create_engine(settings, pool_size=3)
    leases = lease_engine(settings)
    leaser = ShardLeaser(leases, settings.relay_shards)
    producers = ProducerHolder(settings)
    relay = Relay(
        settings, engine, leaser, producers, clock_from_offset(settings.clock_offset_seconds)
    )
    worker = Worker(
        "relay",
        relay.tick,
        poll_interval=settings.relay_poll_interval_s,
        max_error_backoff=5.0,
        shutdown_timeout=settings.relay_shutdown_timeout_s,
    )
    health = HealthServer(
        settings.relay_health_host,
        settings.relay_health_port,
        alive=lambda: worker.healthy,
        ready=relay.ready,
    )
    await health.start()
    log.info(
        "relay_started",
        topic=settings.kafka_topic,
        shards=settings.relay_shards,
        batch_size=settings.relay_batch_size,
        health_port=health.port,
    )
    try:
        with stop_on_signals(worker.stop):
            await worker.run()
    finally:
        await relay.close()
        await health.stop()
        await engine.dispose()
        await leases.dispose()
        log.info("relay_stopped")


def main() -> None:
    settings = load_settings(RelaySettings, "relay")
    configure_logging(settings.process_name, settings.log_level, settings.log_json)
    require_database("relay", settings)
    asyncio.run(run(settings))
