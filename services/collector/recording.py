"""Recording the collector's result groups: one transaction per group on a connection of the
driver pool (BEGIN, a few prepared statements, COMMIT for a group of any size).

It is one ``record_charge_results``: the same rules, statements and lock order, whatever the
group decided (refunds, reconciliation items, credit given back, voids included).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from billing_core.clock import Clock
from billing_core.db import pg
from billing_core.db.pg import LazyPool
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
        pool: LazyPool,
        clock: Clock,
        policy: DunningPolicy,
        rng: random.Random,
        key_prefix: str = "",
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._policy = policy
        self._rng = rng
        self._key_prefix = key_prefix

    async def record(self, attempts: Sequence[AttemptToRecord]) -> list[RecordOutcome]:
        """What each result did, in order (``record_charge_results``), in one transaction."""
        async with pg.transaction(await self._pool.get()) as conn:
            return await record_charge_results(
                conn,
                attempts,
                now=self._clock.now(),
                rng=self._rng,
                policy=self._policy,
                key_prefix=self._key_prefix,
            )
