"""Recording the collector's result groups: one transaction per group, on a plain asyncpg
connection (no SQLAlchemy statement overhead: BEGIN, a few prepared statements, COMMIT for a
group of any size), or on a SQLAlchemy session when the collector runs without the plain pool.

Either way it is one ``record_charge_results``: the same rules, statements and lock order,
whatever the group decided (refunds, reconciliation items, credit given back, voids included).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from billing_core.clock import Clock
from billing_core.db.pg import Connection, Pool
from billing_core.domain.dunning import DunningPolicy
from billing_core.usecases.payment_result import (
    AttemptToRecord,
    RecordOutcome,
    record_charge_results,
)


class GroupRecorder:
    def __init__(
        self,
        *,
        sessions: async_sessionmaker[AsyncSession],
        pool: Callable[[], Awaitable[Pool]] | None,
        clock: Clock,
        policy: DunningPolicy,
        rng: random.Random,
        key_prefix: str = "",
    ) -> None:
        self._sessions = sessions
        self._pool = pool  # None: every group on a session
        self._clock = clock
        self._policy = policy
        self._rng = rng
        self._key_prefix = key_prefix

    async def record(self, attempts: Sequence[AttemptToRecord]) -> list[RecordOutcome]:
        """What each result did, in order (``record_charge_results``), in one transaction."""
        if self._pool is not None:
            pool = await self._pool()
            async with pool.acquire() as conn, conn.transaction():
                return await self._record(conn, attempts)
        async with self._sessions.begin() as session:
            return await self._record(session, attempts)

    async def _record(
        self, db: AsyncSession | Connection, attempts: Sequence[AttemptToRecord]
    ) -> list[RecordOutcome]:
        return await record_charge_results(
            db,
            attempts,
            now=self._clock.now(),
            rng=self._rng,
            policy=self._policy,
            key_prefix=self._key_prefix,
        )
