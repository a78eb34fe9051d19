"""``python -m services.notifier``: consume the billing events, log the e-mails they would send."""

from __future__ import annotations

from billing_core.consumer import EventConsumer
from billing_core.db.engine import create_engine, session_factory
from billing_core.runtime import process
from billing_core.runtime.worker import Worker
from services.notifier import emails
from services.notifier.settings import NotifierSettings


def build(settings: NotifierSettings) -> process.WorkerProcess:
    engine = create_engine(settings, pool_size=2)
    consumer = EventConsumer(
        name=settings.notifier_consumer_name,
        group_id=settings.notifier_group_id,
        topic=settings.kafka_topic,
        bootstrap=settings.kafka_bootstrap,
        sessions=session_factory(engine),
        handler=emails.handle,
        max_records=settings.notifier_max_records,
    )

    async def tick() -> bool:
        return await consumer.poll(timeout_ms=500) > 0

    return process.WorkerProcess(
        name="notifier",
        worker=Worker("notifier", tick, poll_interval=0.01, max_error_backoff=5.0),
        engine=engine,
        health_port=settings.notifier_health_port,
        start=[consumer.start],
        close=[consumer.stop],
        started={"topic": settings.kafka_topic},
    )


def main() -> None:
    process.run("notifier", NotifierSettings, build)
