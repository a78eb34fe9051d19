"""The outbox relay: one batch per tick, from PostgreSQL to Kafka, in order per subscription.

A tick: keep the shard leases (heartbeat, rebalance now and then); in ONE transaction claim the
oldest unpublished rows of the owned shards (``FOR UPDATE SKIP LOCKED``, id order), send them in
(subscription, sequence) order with the idempotent producer (acks=all), wait for every
acknowledgement together, then mark the acknowledged rows published and park the rejected ones,
and commit. A crash anywhere before the commit leaves the rows unpublished: they are sent again
(at least once; consumers de-duplicate by event id).

Order per subscription: all of its events share a key, hence a partition, and the idempotent
producer appends one partition's records in send order. A row is sent only if its predecessor
(sequence - 1) is published or sent just before it in the same batch; the first failure of a
subscription in a batch stops the rest of that subscription, so sequence n + 1 is never marked
before n. See docs/RELAY.md.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTopicError,
    MessageSizeTooLargeError,
    PolicyViolationError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from billing_core import cloudevents
from billing_core.clock import Clock
from billing_core.db import pg
from billing_core.logging import get_logger
from billing_core.repo import outbox_publishing
from billing_core.repo.outbox_publishing import OutboxRow
from services.relay import metrics
from services.relay.producer import ProducerHolder
from services.relay.settings import RelaySettings
from services.relay.shards import ShardLeaser

log = get_logger(__name__)

# Rejections that no retry can fix: the event is parked (parked_at, last_error) for an operator.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    CorruptRecordException,
    InvalidTopicError,
    PolicyViolationError,
)

CRASH_EXIT_CODE = 86


class PublishIncomplete(RuntimeError):
    """Part of a batch was neither acknowledged nor rejected; it stays unpublished."""


@dataclass
class BatchOutcome:
    claimed: int = 0
    published: list[int] = field(default_factory=list)
    parked: list[tuple[int, str]] = field(default_factory=list)
    failure: BaseException | None = None
    claimed_while_committing: bool = False  # the previous batch was not committed at claim time


async def _roll_back(pool: pg.Pool, conn: pg.Connection, transaction: Any) -> None:
    """End a batch's transaction unmarked and give its connection back."""
    try:
        await transaction.rollback()
    except Exception:
        conn.terminate()  # a broken connection: its transaction dies with it
    finally:
        await pool.release(conn)


def sendable_in_order(rows: Sequence[OutboxRow]) -> list[OutboxRow]:
    """Rows that may be sent now, in (subscription, sequence) order.

    A row goes out when its predecessor is already published (``ready``) or is the row sent just
    before it in this batch; the first row that cannot go holds back the rest of its subscription.
    """
    out: list[OutboxRow] = []
    last: dict[int, int] = {}
    held: set[int] = set()
    for row in sorted(rows, key=lambda r: (r.aggregate_id, r.sequence)):
        agg = row.aggregate_id
        if agg in held:
            continue
        if row.ready or last.get(agg) == row.sequence - 1:
            out.append(row)
            last[agg] = row.sequence
        else:
            held.add(agg)
    return out


class Relay:
    def __init__(
        self,
        settings: RelaySettings,
        pool: pg.LazyPool,
        leaser: ShardLeaser,
        producers: ProducerHolder,
        clock: Clock,
    ) -> None:
        self._s = settings
        self._pool = pool
        self._leaser = leaser
        self._producers = producers
        self._clock = clock
        self._next_rebalance = 0.0
        self._next_prune = time.monotonic() + min(5.0, settings.relay_prune_interval_seconds)
        self._next_stats = 0.0
        self.batches_acknowledged = 0
        self._finishing: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the loop body
    async def tick(self) -> bool:
        mono = time.monotonic()
        if mono >= self._next_rebalance:
            await self.finish_pending()  # a shard is released only with its batches committed
            await self._leaser.rebalance()
            self._next_rebalance = mono + self._s.relay_rebalance_interval_seconds
            metrics.OWNED_SHARDS.set(len(self._leaser.owned))
            metrics.MEMBERS.set(self._leaser.members)
        else:
            await self._leaser.heartbeat()
        if mono >= self._next_stats:
            self._next_stats = mono + self._s.relay_stats_interval_seconds
            await self.refresh_stats()
        if mono >= self._next_prune:
            self._next_prune = mono + self._s.relay_prune_interval_seconds
            await self.prune()
        owned = sorted(self._leaser.owned)
        if not owned:
            await self.finish_pending()
            return False
        started = time.perf_counter()
        outcome = await self.publish_batch(owned)
        metrics.BATCH_SECONDS.observe(time.perf_counter() - started)
        if outcome.failure is not None:
            await self.finish_pending()
            raise PublishIncomplete(repr(outcome.failure)) from outcome.failure
        progressed = bool(outcome.published or outcome.parked)
        if not progressed and outcome.claimed and outcome.claimed_while_committing:
            # everything waited on the batch being committed: go again once it is
            await self.finish_pending()
            return True
        more = outcome.claimed >= self._s.relay_batch_size and progressed
        if not more:
            await self.finish_pending()  # idle: let the next claim see this batch committed
        return more

    async def publish_batch(self, owned: Sequence[int]) -> BatchOutcome:
        """Claim, send and wait for one batch; its marking and commit go on in the background.

        The next batch is claimed while this one commits. That is safe: this batch's rows stay
        locked and unpublished until the commit, so the next claim skips them, and the
        successors it finds are held back (their predecessor is neither published nor in their
        batch) until a later batch. At most one batch is being committed at a time.
        """
        outcome = BatchOutcome()
        producer = await self._producers.get()
        pool = await self._pool.get()
        conn = await pool.acquire()
        transaction = conn.transaction()
        handed_off = False
        try:
            await transaction.start()
            outcome.claimed_while_committing = self._finishing is not None
            rows = await outbox_publishing.claim(
                conn, shards=self._s.relay_shards, owned=owned, limit=self._s.relay_batch_size
            )
            outcome.claimed = len(rows)
            if not rows:
                return outcome
            await self._send_and_wait(producer, sendable_in_order(rows), outcome)
            self.batches_acknowledged += 1
            if self._s.relay_crash_after_send == self.batches_acknowledged:
                log.warning("crash_point_reached", batch=self.batches_acknowledged)
                os._exit(CRASH_EXIT_CODE)
            await self.finish_pending()
            self._finishing = asyncio.create_task(self._finish(pool, conn, transaction, outcome))
            handed_off = True
        finally:
            if not handed_off:
                await _roll_back(pool, conn, transaction)  # nothing marked
        if outcome.failure is not None:
            metrics.ERRORS.labels(kind=type(outcome.failure).__name__).inc()
            await self._producers.discard(repr(outcome.failure))
        return outcome

    async def _finish(
        self, pool: pg.Pool, conn: pg.Connection, transaction: Any, outcome: BatchOutcome
    ) -> None:
        try:
            now = self._clock.now()
            await outbox_publishing.mark_published(conn, outcome.published, now)
            await outbox_publishing.park(conn, outcome.parked, now)
            await transaction.commit()
        except BaseException:
            await _roll_back(pool, conn, transaction)
            raise
        await pool.release(conn)
        metrics.PUBLISHED.inc(len(outcome.published))
        if outcome.parked:
            metrics.PARKED_TOTAL.inc(len(outcome.parked))
            for row_id, error in outcome.parked:
                log.error("event_parked", outbox_id=row_id, error=error)

    async def finish_pending(self) -> None:
        """Wait until the batch being committed is committed (raises if its commit failed)."""
        task, self._finishing = self._finishing, None
        if task is not None:
            await task

    async def _send_and_wait(
        self, producer: AIOKafkaProducer, rows: list[OutboxRow], outcome: BatchOutcome
    ) -> None:
        topic = self._s.kafka_topic
        source = self._s.relay_source
        sent: list[tuple[OutboxRow, asyncio.Future[object]]] = []
        refused: set[int] = set()  # subscriptions with a row refused before sending
        deadline = time.monotonic() + self._s.relay_publish_timeout_seconds
        handed_all = False
        try:
            async with asyncio.timeout(self._s.relay_publish_timeout_seconds):
                for row in rows:
                    if row.aggregate_id in refused:
                        continue
                    headers = cloudevents.encode_headers(
                        event_id=row.event_id,
                        event_type=row.event_type,
                        occurred_at=row.occurred_at,
                        subscription_id=row.aggregate_id,
                        sequence=row.sequence,
                        schema_version=row.schema_version,
                        source=source,
                    )
                    try:
                        fut = await producer.send(
                            topic,
                            value=row.payload.encode("utf-8"),
                            key=cloudevents.encode_key(row.aggregate_id),
                            headers=headers,
                        )
                    except PERMANENT_ERRORS as exc:
                        outcome.parked.append((row.id, repr(exc)))
                        refused.add(row.aggregate_id)
                        continue
                    sent.append((row, fut))
            handed_all = True
        except TimeoutError:
            pass  # whatever was not handed to the producer stays unpublished
        pending = [fut for _, fut in sent]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        stopped: set[int] = set()
        for row, fut in sent:
            agg = row.aggregate_id
            if agg in stopped:
                continue
            error = fut.exception() if fut.done() else TimeoutError("no acknowledgement in time")
            if error is None:
                outcome.published.append(row.id)
            elif isinstance(error, PERMANENT_ERRORS):
                outcome.parked.append((row.id, repr(error)))
            else:
                # Not acknowledged: this row and the rest of its subscription stay unpublished
                # and go again, in order, with a fresh producer.
                stopped.add(agg)
                if outcome.failure is None:
                    outcome.failure = error
        if not handed_all and outcome.failure is None:
            outcome.failure = TimeoutError("the producer did not accept the batch in time")

    # ------------------------------------------------------------------ housekeeping
    async def refresh_stats(self) -> None:
        async with (await self._pool.get()).acquire() as conn:
            s = await outbox_publishing.stats(conn)
        metrics.UNPUBLISHED.set(s.unpublished)
        metrics.PARKED.set(s.parked)
        age = 0.0 if s.oldest is None else (self._clock.now() - s.oldest).total_seconds()
        metrics.OLDEST_AGE.set(max(0.0, age))

    async def prune(self) -> int:
        owned = sorted(self._leaser.owned)
        if not owned:
            return 0
        cutoff = self._clock.now() - timedelta(hours=self._s.relay_retention_hours)
        total = 0
        for _ in range(self._s.relay_prune_max_batches):
            async with pg.transaction(await self._pool.get()) as conn:
                n = await outbox_publishing.prune(
                    conn,
                    cutoff=cutoff,
                    shards=self._s.relay_shards,
                    owned=owned,
                    limit=self._s.relay_prune_batch,
                )
            total += n
            if n < self._s.relay_prune_batch:
                break
        if total:
            metrics.PRUNED.inc(total)
            log.info("outbox_pruned", rows=total)
        return total

    async def close(self) -> None:
        """Commit the last batch, close the producer, then give the shard leases back."""
        try:
            await self.finish_pending()
        except Exception as exc:
            log.warning("last_batch_commit_failed", error=repr(exc))
        await self._producers.close()
        await self._leaser.release_all()
