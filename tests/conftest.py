"""Shared fixtures: real PostgreSQL, Redis and Kafka for every integration test.

The test session creates its own database (one per checkout), migrates it with Alembic, and
exports BILLING_* variables so processes started by tests reach the same servers.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from billing_core.db import migrate, pg
from billing_core.settings import CoreSettings
from tests.support.db import recreate_database, truncate_all
from tests.support.infra import Services, checkout_database_name, start_services


@pytest.fixture(scope="session")
def services() -> Services:
    return start_services()


@pytest.fixture(scope="session")
def database_url(services: Services) -> Iterator[str]:
    name = checkout_database_name()
    asyncio.run(recreate_database(services.admin_database_url, name))
    url = services.database_url(name)
    migrate.upgrade(url)
    saved = {
        k: os.environ.get(k)
        for k in ("BILLING_DATABASE_URL", "BILLING_REDIS_URL", "BILLING_KAFKA_BOOTSTRAP")
    }
    os.environ["BILLING_DATABASE_URL"] = url
    os.environ["BILLING_REDIS_URL"] = services.redis_url
    os.environ["BILLING_KAFKA_BOOTSTRAP"] = services.kafka_bootstrap
    yield url
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def settings(database_url: str, services: Services) -> CoreSettings:
    return CoreSettings(
        database_url=database_url,
        redis_url=services.redis_url,
        kafka_bootstrap=services.kafka_bootstrap,
        process_name="tests",
        log_json=False,
    )


@pytest.fixture
async def engine(settings: CoreSettings) -> AsyncIterator[AsyncEngine]:
    """A clean database (every table but the plan catalogue emptied) and a SQLAlchemy engine
    on it, for a test's own seeding and inspection SQL (the project runs on ``pool``)."""
    await truncate_all(settings.database_url)
    eng = create_async_engine(settings.database_url)
    yield eng
    await eng.dispose()


@pytest.fixture
async def pool(engine: AsyncEngine, settings: CoreSettings) -> AsyncIterator[pg.Pool]:
    """A driver pool on the clean database (``async with pg.transaction(pool) as conn``)."""
    created = await pg.create_pool(settings, max_size=4)
    yield created
    await created.close()


@pytest.fixture
async def lazy_pool(engine: AsyncEngine, settings: CoreSettings) -> AsyncIterator[pg.LazyPool]:
    """A process's pool (``pg.LazyPool``, as the renewer, relay and notifier take it) on the
    clean database."""
    created = pg.LazyPool(settings, max_size=4)
    yield created
    await created.close()


@pytest.fixture
async def redis(services: Services) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(services.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def redis_prefix() -> str:
    return f"test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def kafka_topic() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"
