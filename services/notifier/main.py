"""``python -m services.notifier``: consume the billing events, log the e-mails they would send."""

from __future__ import annotations

import asyncio

from billing_core.consumer import EventConsumer
from billing_core.db.engine import create_engine, session_factory
from billing_core.logging import configure_logging, get_logger
from billing_core.runtime.http import HealthServer
from billing_core.runtime.worker import Worker, stop_on_signals
from services.notifier import emails
from services.notifier.settings import NotifierSettings

log = get_logger(__name__)


async def run(settings: NotifierSettings) -> None:
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

    worker = Worker("notifier", tick, poll_interval=0.01, max_error_backoff=5.0)
    health = HealthServer(
        settings.notifier_health_host, settings.notifier_health_port, alive=lambda: worker.healthy
    )
    await health.start()
    await consumer.start()
    log.info("notifier_started", topic=settings.kafka_topic, health_port=health.port)
    try:
        with stop_on_signals(worker.stop):
            await worker.run()
    finally:
        await consumer.stop()
        await health.stop()
        await engine.dispose()


def main() -> None:
    settings = NotifierSettings()
    configure_logging(settings.process_name, settings.log_level, settings.log_json)
    asyncio.run(run(settings))
