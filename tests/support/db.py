"""Test database lifecycle: created fresh per test session, migrated with Alembic."""

from __future__ import annotations

import asyncio

import asyncpg


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def recreate_database(admin_url: str, name: str) -> None:
    conn = await asyncpg.connect(_dsn(admin_url))
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def migrated_database(base_url: str, suffix: str) -> str:
    """A fresh database beside ``base_url``'s, named ``<its name>_<suffix>``, migrated to head;
    its URL."""
    from billing_core.db import migrate  # noqa: PLC0415 (Alembic only where a database is made)

    head, _, name = base_url.rpartition("/")
    fresh = f"{name}_{suffix}"
    await recreate_database(f"{head}/postgres", fresh)
    url = f"{head}/{fresh}"
    await asyncio.to_thread(migrate.upgrade, url)
    return url


async def truncate_all(url: str, keep: tuple[str, ...] = ("plan", "alembic_version")) -> None:
    conn = await asyncpg.connect(_dsn(url))
    try:
        tables = [
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
            if r["tablename"] not in keep
        ]
        if tables:
            quoted = ", ".join(f'"{t}"' for t in tables)
            await conn.execute(f"TRUNCATE {quoted} RESTART IDENTITY CASCADE")
    finally:
        await conn.close()
