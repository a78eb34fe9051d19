"""A consistent world in the test database, its events on a fresh topic, and a checker run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.invariants.report import Report
from billing_core.invariants.topic import TopicEvidence, read_topic
from tests.integration.invariants.world import Event, World
from tests.support.infra import Services


@dataclass
class Scene:
    world: World
    engine: AsyncEngine  # the test's own SQL
    pool: pg.Pool  # the checker's
    bootstrap: str
    topic: str

    async def read(self, events: list[Event] | None = None) -> TopicEvidence:
        """Publish ``events`` (default: the world's published ones) and read the topic back."""
        await self.world.publish(self.bootstrap, self.topic, events)
        return await read_topic(self.bootstrap, self.topic)

    async def check(
        self,
        *,
        ledger: LedgerEvidence | None = None,
        topic: TopicEvidence | None = None,
        now: datetime | None = None,
    ) -> Report:
        return await check_all(
            self.pool,
            now=now or self.world.now,
            ledger=ledger or self.world.ledger(),
            topic=topic or await self.read(),
        )


@pytest.fixture
async def scene(
    engine: AsyncEngine, pool: pg.Pool, services: Services, kafka_topic: str
) -> AsyncIterator[Scene]:
    world = World(now=datetime.now(UTC).replace(microsecond=0))
    await world.build(pool)
    yield Scene(world, engine, pool, services.kafka_bootstrap, kafka_topic)
