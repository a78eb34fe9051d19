"""A small kit for idempotent consumers of the billing events (Kafka, CloudEvents binary mode).

The relay delivers each event at least once, so a consumer must make a repeat harmless. This kit
does it inside the consumer's own database transaction::

    BEGIN
      INSERT INTO processed_event (consumer, event_id) ... ON CONFLICT DO NOTHING
      -- only for the ids that were new: run the handler (its writes join this transaction)
    COMMIT
    then commit the Kafka offsets

A crash before COMMIT redoes everything (nothing was recorded); a crash between COMMIT and the
offset commit re-delivers events whose ids are already recorded, so the handler is not run
again. One poll's records of one partition share a transaction; if the handler fails, the kit
rolls back and retries the records one by one, so one bad event cannot hold the others back.
An event the handler keeps failing on is logged, counted and skipped; a record that is not a
billing CloudEvent is logged, counted and skipped. A database that does not answer stops the
poll without committing offsets: the records are read again after the backoff.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import Counter

from billing_core import cloudevents
from billing_core.cloudevents import CloudEvent, InvalidCloudEvent
from billing_core.db import pg
from billing_core.db.arrays import text_array
from billing_core.db.pg import Connection, Statement
from billing_core.logging import get_logger

log = get_logger(__name__)

Handler = Callable[[Connection, CloudEvent], Awaitable[None]]

EVENTS = Counter(
    "billing_consumer_events_total",
    "Records seen by a consumer, by result (processed, duplicate, invalid, failed).",
    ["consumer", "result"],
)

_RECORD = Statement(
    """
    INSERT INTO processed_event (consumer, event_id)
    SELECT :consumer, id FROM unnest(CAST(:ids AS text)::uuid[]) AS id
    ON CONFLICT DO NOTHING
    RETURNING event_id
    """
)

# Errors that mean "the database is not there", not "this event is bad": retry the whole poll.
_INFRA_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
)


async def record_new(conn: Connection, consumer: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Record ``ids`` as processed by ``consumer``; return the ids that were not recorded before."""
    if not ids:
        return set()
    rows = await pg.fetch(
        conn, _RECORD, {"consumer": consumer, "ids": text_array(str(i) for i in ids)}
    )
    return {uuid.UUID(str(row["event_id"])) for row in rows}


class EventConsumer:
    def __init__(
        self,
        *,
        name: str,
        topic: str,
        bootstrap: str,
        pool: pg.LazyPool,
        handler: Handler,
        group_id: str | None = None,
        max_records: int = 500,
        handler_attempts: int = 3,
        retry_delay_s: float = 0.2,
        consumer_options: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self._topic = topic
        self._pool = pool
        self._handler = handler
        self._max_records = max_records
        self._attempts = handler_attempts
        self._retry_delay = retry_delay_s
        self._consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group_id or name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **(consumer_options or {}),
        )
        self.processed = 0
        self.duplicates = 0
        self.invalid = 0
        self.failed = 0

    async def start(self) -> None:
        await self._consumer.start()

    async def stop(self) -> None:
        await self._consumer.stop()

    async def __aenter__(self) -> EventConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def poll(self, timeout_ms: int = 1000) -> int:
        """Read one round of records, process them, commit their offsets; return how many."""
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=self._max_records)
        done: set[TopicPartition] = set()
        try:
            for tp, records in batches.items():
                if not records:
                    continue
                await self._process_partition(records)
                await self._consumer.commit({tp: records[-1].offset + 1})
                done.add(tp)
        except BaseException:
            # Read these records again (next poll): nothing of theirs was committed.
            for tp, records in batches.items():
                if tp not in done and records:
                    self._consumer.seek(tp, records[0].offset)
            raise
        return sum(len(r) for r in batches.values())

    async def run(self, stop: asyncio.Event, *, error_backoff_s: float = 1.0) -> None:
        """Poll until ``stop`` is set; infrastructure errors back off and retry."""
        while not stop.is_set():
            try:
                await self.poll()
            except _INFRA_ERRORS as exc:
                log.warning("consumer_poll_failed", consumer=self.name, error=repr(exc))
                await asyncio.sleep(error_backoff_s)

    async def _process_partition(self, records: Sequence[Any]) -> None:
        events: list[CloudEvent] = []
        for record in records:
            try:
                events.append(cloudevents.decode(record.key, record.value, record.headers))
            except InvalidCloudEvent as exc:
                self.invalid += 1
                EVENTS.labels(consumer=self.name, result="invalid").inc()
                log.error(
                    "consumer_invalid_record",
                    consumer=self.name,
                    partition=record.partition,
                    offset=record.offset,
                    error=str(exc),
                )
        if not events:
            return
        try:
            async with pg.transaction(await self._pool.get()) as conn:
                new = await record_new(conn, self.name, [e.id for e in events])
                handled = await self._handle_all(conn, events, new)
            self._count(handled, len(events) - handled)
            return
        except _INFRA_ERRORS:
            raise
        except Exception as exc:
            log.warning("consumer_batch_failed_retrying_one_by_one", error=repr(exc))
        for event in events:
            await self._process_one(event)

    async def _handle_all(
        self, conn: Connection, events: Sequence[CloudEvent], new: set[uuid.UUID]
    ) -> int:
        handled = 0
        for event in events:
            if event.id in new:
                new.discard(event.id)  # a repeat inside the same poll is a duplicate too
                await self._handler(conn, event)
                handled += 1
        return handled

    async def _process_one(self, event: CloudEvent) -> None:
        for attempt in range(1, self._attempts + 1):
            try:
                async with pg.transaction(await self._pool.get()) as conn:
                    new = await record_new(conn, self.name, [event.id])
                    handled = await self._handle_all(conn, [event], new)
                self._count(handled, 1 - handled)
                return
            except _INFRA_ERRORS:
                raise
            except Exception as exc:
                if attempt == self._attempts:
                    self.failed += 1
                    EVENTS.labels(consumer=self.name, result="failed").inc()
                    log.error(
                        "consumer_event_failed_skipped",
                        consumer=self.name,
                        event_id=str(event.id),
                        event_type=event.event_type,
                        subscription_id=event.subscription_id,
                        sequence=event.sequence,
                        error=repr(exc),
                    )
                    return
                await asyncio.sleep(self._retry_delay * attempt)

    def _count(self, processed: int, duplicates: int) -> None:
        self.processed += processed
        self.duplicates += duplicates
        if processed:
            EVENTS.labels(consumer=self.name, result="processed").inc(processed)
        if duplicates:
            EVENTS.labels(consumer=self.name, result="duplicate").inc(duplicates)
