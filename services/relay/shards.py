"""Shard leases: which relay replica may publish which subscriptions.

Subscriptions are split into a fixed number of shards (``aggregate_id % shards``). A replica
publishes a shard only while it holds the PostgreSQL session advisory lock
``(SHARD_LOCK_CLASS, shard)`` on one dedicated connection. A replica that dies loses its session,
PostgreSQL releases its locks, and the survivors take the shards over at their next rebalance.

Membership uses the same trick: each replica holds one lock ``(MEMBER_LOCK_CLASS, random id)``;
counting those locks in ``pg_locks`` gives the number of live replicas, and each aims at
``ceil(shards / members)`` shards: it releases extra ones (between batches, never during one) and
tries to take free ones. Locks are per database, so deployments in other databases never meet.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable

from billing_core.db import pg
from billing_core.logging import get_logger
from billing_core.repo import shard_leases as leases

log = get_logger(__name__)


class ShardLeaser:
    def __init__(
        self,
        connect: Callable[[], Awaitable[pg.Connection]],
        shards: int,
        *,
        rng: random.Random | None = None,
    ):
        """``connect`` opens a dedicated connection, never a pooled one: its locks must die
        with it."""
        self._open = connect
        self.shards = shards
        self._rng = rng or random.Random()
        self._conn: pg.Connection | None = None
        self.member_id: int | None = None
        self.owned: set[int] = set()
        self.members = 0

    async def _connect(self) -> pg.Connection:
        conn = await self._open()  # no transaction: each statement commits on its own
        for _ in range(100):
            candidate = self._rng.randrange(1, 2**31 - 1)
            if await leases.try_lock(conn, leases.MEMBER_LOCK_CLASS, candidate):
                self.member_id = candidate
                break
        else:  # pragma: no cover - 100 collisions in 2**31 ids
            await conn.close()
            raise RuntimeError("could not register as a relay member")
        log.info("relay_member_registered", member_id=self.member_id)
        return conn

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        self.owned.clear()
        self.member_id = None
        if conn is not None:
            try:
                await conn.close(timeout=5)
            except Exception as exc:
                conn.terminate()
                log.warning("lease_connection_close_failed", error=repr(exc))

    async def heartbeat(self) -> None:
        """Check the lease connection answers; on failure every shard is dropped (and raised)."""
        if self._conn is None:
            return
        try:
            await leases.still_connected(self._conn)
        except Exception:
            log.warning("lease_connection_lost", shards=sorted(self.owned))
            await self._drop_connection()
            raise

    async def rebalance(self) -> None:
        """Count members, then release or take shards towards ``ceil(shards / members)``."""
        if self._conn is None:
            self._conn = await self._connect()
        conn = self._conn
        try:
            self.members = max(1, await leases.members(conn))
            target = math.ceil(self.shards / self.members)
            if len(self.owned) > target:
                extra = sorted(self.owned)[target:]
                for shard in extra:
                    await leases.unlock(conn, leases.SHARD_LOCK_CLASS, shard)
                    self.owned.discard(shard)
                log.info("shards_released", shards=extra, owned=len(self.owned), target=target)
            elif len(self.owned) < target:
                held = await leases.held(conn, leases.SHARD_LOCK_CLASS)
                free = [s for s in range(self.shards) if s not in held]
                self._rng.shuffle(free)
                taken: list[int] = []
                for shard in free:
                    if len(self.owned) >= target:
                        break
                    if await leases.try_lock(conn, leases.SHARD_LOCK_CLASS, shard):
                        self.owned.add(shard)
                        taken.append(shard)
                if taken:
                    log.info("shards_taken", shards=sorted(taken), owned=len(self.owned))
        except Exception:
            await self._drop_connection()
            raise

    async def release_all(self) -> None:
        """Give every shard back (graceful shutdown): the others take them at once."""
        await self._drop_connection()
