"""The one runtime data access: named statements on asyncpg connections.

A module's SQL is :class:`Statement` constants with ``:name`` parameters, compiled once to the
driver's ``$n`` form; asyncpg prepares and caches each per connection. :func:`fetch`,
:func:`fetchrow`, :func:`fetchval` and :func:`execute` run one with its parameters by name;
rows are read by column name. A process has one pool (:func:`create_pool`, :class:`LazyPool`);
a unit of work is :func:`transaction`, opened and committed at the edge. The pool never closes
a connection under load: callers past ``max_size`` wait for one to be released.

A released connection is not reset with asyncpg's default query (``RESET ALL``, unlock every
session advisory lock, ``CLOSE ALL``, ``UNLISTEN *``: one more round trip per use). The
statements run on a pool never change session state: they take transaction-scoped locks only,
set nothing and listen to nothing. A transaction left open is still rolled back on release.
(The relay's shard leases, which hold session locks, run on a connection of their own.)
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import asyncpg  # type: ignore[import-untyped]

from billing_core.settings import CoreSettings

# An ``asyncpg.Connection`` / ``asyncpg.Pool``: the library ships no type information.
Connection: TypeAlias = Any
Pool: TypeAlias = Any


def server_settings(settings: CoreSettings, name_suffix: str = "") -> dict[str, str]:
    """The session settings every connection of the process starts with."""
    values = {"application_name": settings.process_name + name_suffix, "timezone": "UTC"}
    if settings.db_statement_timeout_ms:
        values["statement_timeout"] = str(settings.db_statement_timeout_ms)
    return values


def asyncpg_dsn(database_url: str) -> str:
    """The asyncpg DSN of a SQLAlchemy ``postgresql+asyncpg://`` URL."""
    return database_url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def create_pool(settings: CoreSettings, *, max_size: int) -> Pool:
    return await asyncpg.create_pool(
        asyncpg_dsn(settings.database_url),
        min_size=0,  # no connection at start: a process starts without the database
        max_size=settings.db_pool_size or max_size,
        server_settings=server_settings(settings, ".pg"),
        max_inactive_connection_lifetime=300,
        reset=_keep_session,
    )


class LazyPool:
    """A pool created on first use (a process starts without the database), closed once."""

    def __init__(self, settings: CoreSettings, *, max_size: int) -> None:
        self._settings = settings
        self._max_size = max_size
        self._pool: Pool | None = None
        self._creating = asyncio.Lock()

    async def get(self) -> Pool:
        if self._pool is None:
            async with self._creating:
                if self._pool is None:
                    self._pool = await create_pool(self._settings, max_size=self._max_size)
        return self._pool

    @property
    def open(self) -> bool:
        """Whether the pool was created and not closed since."""
        return self._pool is not None

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


async def _keep_session(_conn: Connection) -> None:
    """Release without the reset query (see the module's docstring)."""


# A ``:name`` parameter: not part of a ``::cast``, a word or an escaped colon (``10:30`` stays).
_PARAMETER = re.compile(r"(?<![:\w\\]):([A-Za-z_]\w*)(?!:)")


class Statement:
    """A hand-written statement with named parameters (``:name``), compiled once to the
    driver's ``$n`` form (a name used twice is one ``$n``); asyncpg prepares and caches it per
    connection."""

    def __init__(self, sql: str) -> None:
        numbers: dict[str, int] = {}

        def number(match: re.Match[str]) -> str:
            return f"${numbers.setdefault(match[1], len(numbers) + 1)}"

        self.sql: str = _PARAMETER.sub(number, sql)
        self.names: tuple[str, ...] = tuple(numbers)


async def fetch(
    conn: Connection, statement: Statement, params: Mapping[str, Any] | None = None
) -> Sequence[Mapping[str, Any]]:
    """Run ``statement`` in ``conn``'s transaction; its rows, columns by name."""
    params = params or {}
    rows: Sequence[Mapping[str, Any]] = await conn.fetch(
        statement.sql, *(params[name] for name in statement.names)
    )
    return rows


async def fetchrow(
    conn: Connection, statement: Statement, params: Mapping[str, Any] | None = None
) -> Mapping[str, Any] | None:
    """The first row of ``statement`` (None without one), columns by name."""
    rows = await fetch(conn, statement, params)
    return rows[0] if rows else None


async def fetchval(
    conn: Connection, statement: Statement, params: Mapping[str, Any] | None = None
) -> Any:
    """The first column of the first row of ``statement`` (None without a row)."""
    row = await fetchrow(conn, statement, params)
    return None if row is None else next(iter(row.values()))


async def execute(
    conn: Connection, statement: Statement, params: Mapping[str, Any] | None = None
) -> int:
    """Run ``statement`` in ``conn``'s transaction; how many rows it wrote (or returned)."""
    params = params or {}
    status: str = await conn.execute(statement.sql, *(params[name] for name in statement.names))
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


_ANSWERS = Statement("SELECT 1")


async def database_answers(pool: Pool) -> bool:
    """The readiness check every process shares: PostgreSQL answers a trivial query on a
    connection of ``pool``."""
    async with pool.acquire() as conn:
        return bool(await fetchval(conn, _ANSWERS) == 1)


@asynccontextmanager
async def transaction(pool: Pool) -> AsyncIterator[Connection]:
    """One unit of work: a connection of ``pool`` in a transaction, committed when the block
    ends, rolled back if it raises."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn
