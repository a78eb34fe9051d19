"""One async engine per process; sessions that never commit below the edge.

Repository functions take an ``AsyncSession`` (or connection) and only execute/flush; the
caller that owns the unit of work opens ``async with sessions.begin()`` and so commits once.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from billing_core.settings import CoreSettings


def create_engine(settings: CoreSettings, *, pool_size: int | None = None) -> AsyncEngine:
    server_settings = {
        "application_name": settings.process_name,
        "timezone": "UTC",
    }
    if settings.db_statement_timeout_ms:
        server_settings["statement_timeout"] = str(settings.db_statement_timeout_ms)
    return create_async_engine(
        settings.database_url,
        pool_size=pool_size or settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_pre_ping=True,
        pool_recycle=1800,
        connect_args={"server_settings": server_settings},
    )


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
