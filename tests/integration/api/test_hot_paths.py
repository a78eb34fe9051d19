"""What the API's hot paths rely on: the plain asyncpg pool and the cached plan catalogue."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db import pg
from billing_core.repo.plans import PlanNotFound
from billing_core.settings import CoreSettings
from services.api.context import PlanCatalogue


async def test_a_connection_released_mid_transaction_is_rolled_back(
    settings: CoreSettings, engine: AsyncEngine
) -> None:
    """The pool skips asyncpg's reset query on release, not the rollback of an open
    transaction: nothing a request left half done survives into the next one."""
    pool = await pg.create_pool(settings, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("BEGIN")
            await conn.execute("SELECT pg_advisory_xact_lock(424242)")
            await conn.execute(
                "INSERT INTO api_client (name, key_prefix, key_hash, scopes) "
                "VALUES ('left-open', 'bk_x', '\\x00', '{admin}')"
            )
        async with pool.acquire() as conn:  # the same (only) connection, handed out again
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT count(*) FROM api_client") == 0
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_try_advisory_lock(424242)") is True
            await conn.execute("SELECT pg_advisory_unlock(424242)")
    finally:
        await pool.close()


async def test_plan_catalogue_is_cached_for_its_ttl(
    settings: CoreSettings, engine: AsyncEngine
) -> None:
    pool = await pg.create_pool(settings, max_size=1)
    cached, uncached = PlanCatalogue(3600), PlanCatalogue(0)
    try:
        async with pool.acquire() as conn, conn.transaction():
            assert (await cached.get(conn, "BASIC_MONTHLY")).price_amount == 990
            assert (await uncached.get(conn, "BASIC_MONTHLY")).price_amount == 990
            await conn.execute("UPDATE plan SET active = false WHERE code = 'BASIC_MONTHLY'")
            # Retired: seen at once without a cache, after the TTL with one.
            assert (await cached.get(conn, "BASIC_MONTHLY")).code == "BASIC_MONTHLY"
            with pytest.raises(PlanNotFound):
                await uncached.get(conn, "BASIC_MONTHLY")
            with pytest.raises(PlanNotFound):
                await cached.get(conn, "NO_SUCH_PLAN")
            raise _RollBack
    except _RollBack:
        pass
    finally:
        await pool.close()


class _RollBack(Exception):
    """Leaves the shared plan catalogue as it was."""


async def test_connections_killed_by_a_restart_are_replaced(
    settings: CoreSettings, engine: AsyncEngine
) -> None:
    """After a PostgreSQL restart the pooled connections are dead: the pool sees them closed and
    opens new ones when they are next acquired, instead of failing one request each."""
    named = settings.model_copy(update={"process_name": "restart-test"})
    pool = await pg.create_pool(named, max_size=2)
    try:
        async with pool.acquire() as a, pool.acquire() as b:  # two open connections
            assert await a.fetchval("SELECT 1") == await b.fetchval("SELECT 1") == 1
            old = {a.get_server_pid(), b.get_server_pid()}
        async with engine.connect() as admin:
            await admin.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'restart-test.pg'"
                )
            )
        await asyncio.sleep(0.5)  # the clients read the server's goodbye
        async with pool.acquire() as a, pool.acquire() as b:
            assert await a.fetchval("SELECT 1") == await b.fetchval("SELECT 1") == 1
            assert not old & {a.get_server_pid(), b.get_server_pid()}
    finally:
        await pool.close()
