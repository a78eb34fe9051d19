"""The one engine factory; sessions that never commit below the edge.

Repository functions take an ``AsyncSession`` (or connection) and only execute/flush; the
caller that owns the unit of work opens ``async with sessions.begin()`` and so commits once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import NullPool

from billing_core.settings import CoreSettings


def server_settings(settings: CoreSettings, name_suffix: str = "") -> dict[str, str]:
    """The session settings every connection of the process starts with."""
    values = {"application_name": settings.process_name + name_suffix, "timezone": "UTC"}
    if settings.db_statement_timeout_ms:
        values["statement_timeout"] = str(settings.db_statement_timeout_ms)
    return values


def create_engine(
    settings: CoreSettings,
    *,
    pool_size: int = 10,
    pre_ping: bool = True,
    pooled: bool = True,
    name_suffix: str = "",
) -> AsyncEngine:
    """The process's engine. ``pool_size`` is the process's own sizing, which
    ``BILLING_DB_POOL_SIZE`` overrides when set. ``pre_ping=False`` for a stream of short requests
    (a dead connection fails one statement, then the pool is invalidated); ``pooled=False`` for
    a connection whose locks must die with it (never returned to a pool)."""
    options: dict[str, Any] = {
        "connect_args": {"server_settings": server_settings(settings, name_suffix)}
    }
    if pooled:
        options |= {
            "pool_size": settings.db_pool_size or pool_size,
            "max_overflow": settings.db_max_overflow,
            "pool_pre_ping": pre_ping,
            "pool_recycle": 1800,
        }
    else:
        options["poolclass"] = NullPool
    return create_async_engine(settings.database_url, **options)


async def database_answers(engine: AsyncEngine) -> bool:
    """The readiness check every process shares: PostgreSQL answers a trivial query."""
    async with engine.connect() as conn:
        return bool((await conn.execute(text("SELECT 1"))).scalar_one() == 1)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
