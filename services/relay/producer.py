"""The relay's Kafka producer: created lazily, torn down and rebuilt when it gets stuck.

aiokafka's idempotent producer never expires a batch: while the broker is away its futures just
wait. After a broker restart it may also die for good (``OutOfOrderSequenceNumber``, an unknown
producer id, a fenced epoch): its sender task ends and every later send fails. Both cases end the
same way here: the producer is discarded (pending batches failed locally, nothing marked
published) and a fresh one, with a new producer id, is built on the next batch.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from billing_core.logging import get_logger
from services.relay import metrics
from services.relay.settings import RelaySettings

log = get_logger(__name__)


class ProducerAbandoned(KafkaError):  # type: ignore[misc]
    """Failed locally: the producer holding this record was discarded before an answer came."""

    retriable = True


async def ensure_topic(bootstrap: str, topic: str, partitions: int, replication: int) -> bool:
    """Create ``topic`` if the cluster does not have it; True when this call created it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        if topic in await admin.list_topics():
            return False
        try:
            await admin.create_topics(
                [NewTopic(topic, num_partitions=partitions, replication_factor=replication)]
            )
        except TopicAlreadyExistsError:
            return False
        log.info("topic_created", topic=topic, partitions=partitions, replication=replication)
        return True
    finally:
        await admin.close()


def new_producer(settings: RelaySettings) -> AIOKafkaProducer:
    """The relay's producer configuration (the benchmark's floor uses the same one)."""
    return AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        client_id=settings.process_name,
        acks="all",
        enable_idempotence=True,
        linger_ms=settings.relay_linger_ms,
        max_batch_size=settings.relay_max_batch_bytes,
        max_request_size=settings.relay_max_message_bytes,
        request_timeout_ms=int(min(settings.relay_publish_timeout_seconds, 30.0) * 1000),
    )


class ProducerHolder:
    def __init__(self, settings: RelaySettings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._topic_checked = False

    async def get(self) -> AIOKafkaProducer:
        if self._producer is not None and self.stuck():
            await self.discard("sender stopped")
        if self._producer is None:
            s = self._settings
            if not self._topic_checked:
                await ensure_topic(
                    s.kafka_bootstrap,
                    s.kafka_topic,
                    s.relay_topic_partitions,
                    s.relay_topic_replication,
                )
                self._topic_checked = True
            producer = new_producer(s)
            try:
                await asyncio.wait_for(producer.start(), timeout=s.relay_publish_timeout_seconds)
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.stop(), timeout=5)
                raise
            self._producer = producer
            log.info("producer_started", topic=s.kafka_topic)
        return self._producer

    def stuck(self) -> bool:
        """The producer's sender task has ended: it will never deliver anything again."""
        if self._producer is None:
            return False
        task = self._producer._sender.sender_task
        return task is not None and task.done()

    async def discard(self, reason: str) -> None:
        """Fail everything pending locally and close the producer without waiting on Kafka."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        metrics.PRODUCER_REBUILDS.inc()
        log.warning("producer_discarded", reason=reason)
        producer._message_accumulator.fail_all(ProducerAbandoned(reason))
        try:
            await asyncio.wait_for(producer.stop(), timeout=5)
        except (TimeoutError, Exception) as exc:  # closing a broken client: keep going
            log.warning("producer_stop_failed", error=repr(exc))

    async def close(self) -> None:
        """Graceful stop: flush what is pending (bounded), then close."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            await asyncio.wait_for(producer.stop(), timeout=10)
        except (TimeoutError, Exception) as exc:
            log.warning("producer_stop_failed", error=repr(exc))
