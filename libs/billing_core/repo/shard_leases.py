"""SQL of the relay's shard leases: session advisory locks on one unpooled connection.

A lock is held by the connection that took it and dies with it, so a relay that crashes gives
its shards back without anyone's help. Two lock classes: one per member (counting the relays
alive) and one per shard.
"""

from __future__ import annotations

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement

SHARD_LOCK_CLASS = 0x52454C41  # "RELA"
MEMBER_LOCK_CLASS = 0x52454C42

_HELD = Statement(
    """
    SELECT l.objid::int AS key FROM pg_locks l
    JOIN pg_database d ON d.oid = l.database AND d.datname = current_database()
    WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.classid = :cls
    """
)
_TRY = Statement("SELECT pg_try_advisory_lock(:cls, :key)")
_UNLOCK = Statement("SELECT pg_advisory_unlock(:cls, :key)")
_ALIVE = Statement("SELECT 1")


async def try_lock(conn: Connection, lock_class: int, key: int) -> bool:
    return bool(await pg.fetchval(conn, _TRY, {"cls": lock_class, "key": key}))


async def unlock(conn: Connection, lock_class: int, key: int) -> None:
    await pg.execute(conn, _UNLOCK, {"cls": lock_class, "key": key})


async def held(conn: Connection, lock_class: int) -> set[int]:
    """The keys of ``lock_class`` any session of this database holds."""
    return {int(row["key"]) for row in await pg.fetch(conn, _HELD, {"cls": lock_class})}


async def members(conn: Connection) -> int:
    """How many relays hold a member lock (are alive), counting this one."""
    return len(await held(conn, MEMBER_LOCK_CLASS))


async def still_connected(conn: Connection) -> None:
    """Raise when the lease connection (and so every lock on it) is gone."""
    await pg.execute(conn, _ALIVE)
