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

from typing import Any, TypeAlias

import asyncpg  # type: ignore[import-untyped]

from billing_core.db.engine import server_settings
from billing_core.seeding import asyncpg_dsn
from billing_core.settings import CoreSettings

# An ``asyncpg.Connection`` / ``asyncpg.Pool``: the library ships no type information.
Connection: TypeAlias = Any
Pool: TypeAlias = Any


async def create_pool(settings: CoreSettings, *, max_size: int) -> Pool:
    return await asyncpg.create_pool(
        asyncpg_dsn(settings.database_url),
        min_size=0,  # no connection at start: a process starts without the database
        max_size=settings.db_pool_size or max_size,
        server_settings=server_settings(settings, ".pg"),
        max_inactive_connection_lifetime=300,
        reset=_keep_session,
    )


async def _keep_session(_conn: Connection) -> None:
    """Release without the reset query (see the module's docstring)."""
