"""``python -m services.relay`` / ``billing relay``: run one relay replica until SIGTERM/SIGINT."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import clock_from_offset
from billing_core.db.engine import create_engine
from billing_core.runtime import process
from billing_core.runtime.worker import Worker
from services.relay.producer import ProducerHolder
from services.relay.relay import Relay
from services.relay.settings import RelaySettings
from services.relay.shards import ShardLeaser


def lease_engine(settings: RelaySettings) -> AsyncEngine:
    """Unpooled: the lease connection's locks must die with it, never return to a pool."""
    return create_engine(settings, pooled=False, name_suffix="-lease")


def build(settings: RelaySettings) -> process.WorkerProcess:
    engine = create_engine(settings, pool_size=3)
    leases = lease_engine(settings)
    relay = Relay(
        settings,
        engine,
        ShardLeaser(leases, settings.relay_shards),
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
        engine=engine,
        health_port=settings.relay_health_port,
        # The last batch is committed and the shards given back before the engines go.
        close=[relay.close, leases.dispose],
        started={
            "topic": settings.kafka_topic,
            "shards": settings.relay_shards,
            "batch_size": settings.relay_batch_size,
        },
    )


def main() -> None:
    process.run("relay", RelaySettings, build)
