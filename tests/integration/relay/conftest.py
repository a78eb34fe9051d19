"""Fixtures of the relay tests: an in-process relay on the test database and a unique topic."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import SystemClock
from billing_core.db import pg
from billing_core.settings import CoreSettings
from services.relay.main import lease_connection
from services.relay.producer import ProducerHolder
from services.relay.relay import Relay
from services.relay.settings import RelaySettings
from services.relay.shards import ShardLeaser

RelayFactory = Callable[..., contextlib.AbstractAsyncContextManager[Relay]]


def relay_settings(settings: CoreSettings, topic: str, **overrides: Any) -> RelaySettings:
    values: dict[str, Any] = {
        "database_url": settings.database_url,
        "kafka_bootstrap": settings.kafka_bootstrap,
        "kafka_topic": topic,
        "relay_topic_partitions": 3,
        "relay_shards": 8,
        "relay_health_port": 0,
        "log_json": False,
        **overrides,
    }
    return RelaySettings(**values)


@pytest.fixture
def make_relay(engine: AsyncEngine, settings: CoreSettings, kafka_topic: str) -> RelayFactory:
    """``async with make_relay(**overrides) as relay``: a relay on the clean test database."""

    @contextlib.asynccontextmanager
    async def factory(**overrides: Any) -> AsyncIterator[Relay]:
        s = relay_settings(settings, kafka_topic, **overrides)
        pool = pg.LazyPool(s, max_size=3)
        leaser = ShardLeaser(lambda: lease_connection(s), s.relay_shards)
        relay = Relay(s, pool, leaser, ProducerHolder(s), SystemClock())
        try:
            yield relay
        finally:
            await relay.close()
            await pool.close()

    return factory


async def drain(relay: Relay, *, max_ticks: int = 200) -> None:
    """Tick until a tick finds nothing more to send right now."""
    for _ in range(max_ticks):
        if not await relay.tick():
            return
    raise AssertionError("relay still had work after max_ticks")
