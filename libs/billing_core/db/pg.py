"""A plain asyncpg pool, for the few statements on a process's hot path.

Through SQLAlchemy (session, statement construction and caching, the asyncpg adapter and its
greenlet bridge) one statement costs about 0.4 ms of CPU; the same prepared statement on the
driver costs a tenth of that. The processes keep SQLAlchemy for everything else; their hot paths
run hand-written SQL from ``billing_core.repo`` on connections of this pool (asyncpg prepares and
caches each statement per connection). The pool never closes a connection under load (no
overflow churn): callers past ``max_size`` wait for one to be released.

A released connection is not reset with asyncpg's default query (``RESET ALL``, unlock every
session advisory lock, ``CLOSE ALL``, ``UNLISTEN *``: one more round trip per use). The
statements run here never change session state: they take transaction-scoped locks only, set
nothing and listen to nothing. A transaction left open is still rolled back on release.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db.engine import server_settings
from billing_core.settings import CoreSettings

# An ``asyncpg.Connection`` / ``asyncpg.Pool``: the library ships no type information.
Connection: TypeAlias = Any
Pool: TypeAlias = Any
# What repository functions take while callers move from SQLAlchemy sessions to the driver;
# ends as ``Connection`` alone.
Db: TypeAlias = AsyncSession | AsyncConnection | Connection


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
        self.clause: TextClause = text(sql)
        numbers: dict[str, int] = {}

        def number(match: re.Match[str]) -> str:
            return f"${numbers.setdefault(match[1], len(numbers) + 1)}"

        self.sql: str = _PARAMETER.sub(number, sql)
        self.names: tuple[str, ...] = tuple(numbers)


async def fetch(
    db: Db, statement: Statement, params: Mapping[str, Any] | None = None
) -> Sequence[Mapping[Any, Any]]:
    """Run ``statement`` in ``db``'s transaction; its rows, columns by name."""
    params = params or {}
    if isinstance(db, AsyncSession | AsyncConnection):
        return (await db.execute(statement.clause, dict(params))).mappings().all()
    rows: Sequence[Mapping[Any, Any]] = await db.fetch(
        statement.sql, *(params[name] for name in statement.names)
    )
    return rows


async def fetchrow(
    db: Db, statement: Statement, params: Mapping[str, Any] | None = None
) -> Mapping[Any, Any] | None:
    """The first row of ``statement`` (None without one), columns by name."""
    rows = await fetch(db, statement, params)
    return rows[0] if rows else None


async def fetchval(db: Db, statement: Statement, params: Mapping[str, Any] | None = None) -> Any:
    """The first column of the first row of ``statement`` (None without a row)."""
    row = await fetchrow(db, statement, params)
    return None if row is None else next(iter(row.values()))


async def execute(db: Db, statement: Statement, params: Mapping[str, Any] | None = None) -> int:
    """Run ``statement`` in ``db``'s transaction; how many rows it wrote (or returned)."""
    params = params or {}
    if isinstance(db, AsyncSession | AsyncConnection):
        result: Any = await db.execute(statement.clause, dict(params))
        return int(result.rowcount)
    status: str = await db.execute(statement.sql, *(params[name] for name in statement.names))
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


_ANSWERS = Statement("SELECT 1")


async def database_answers(pool: Pool) -> bool:
    """The readiness check every process shares: PostgreSQL answers a trivial query on a
    connection of ``pool``."""
    async with pool.acquire() as conn:
        return bool(await fetchval(conn, _ANSWERS) == 1)


_ANSWERS = Statement("SELECT 1")


@asynccontextmanager
async def transaction(pool: Pool) -> AsyncIterator[Connection]:
    """One unit of work: a connection of ``pool`` in a transaction, committed when the block
    ends, rolled back if it raises."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn
