from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db.pg import asyncpg_dsn


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2025, 3, 10, 12, 0, tzinfo=UTC))


@pytest.fixture
async def pg(engine: AsyncEngine) -> AsyncIterator[asyncpg.Connection]:
    """A plain asyncpg connection to the (emptied) test database, for the bulk seeder."""
    conn = await asyncpg.connect(asyncpg_dsn(engine.url.render_as_string(hide_password=False)))
    yield conn
    await conn.close()
