"""``python -m services.notifier``: consume the billing events, send the e-mails they call for."""

from __future__ import annotations

from billing_core.consumer import EventConsumer
from billing_core.db import pg
from billing_core.documents.invoice_view import Party
from billing_core.runtime import process
from billing_core.runtime.worker import Worker
from services.notifier import emails
from services.notifier.messages import Composer
from services.notifier.sender import Sender
from services.notifier.settings import NotifierSettings


def build(settings: NotifierSettings) -> process.WorkerProcess:
    # The consumer's transaction, and one connection per SMTP connection of the sender.
    pool = pg.LazyPool(settings, max_size=1 + settings.notifier_send_connections)
    handler = emails.Handler(
        Composer(mail_from=settings.notifier_mail_from, seller_name=settings.seller_name),
        Party(settings.seller_name, settings.seller_details),
    )
    consumer = EventConsumer(
        name=settings.notifier_consumer_name,
        group_id=settings.notifier_group_id,
        topic=settings.kafka_topic,
        bootstrap=settings.kafka_bootstrap,
        pool=pool,
        handler=handler,
        max_records=settings.notifier_max_records,
    )
    sender = Sender(pool, settings)

    async def tick() -> bool:
        return await consumer.poll(timeout_ms=500) > 0

    return process.WorkerProcess(
        name="notifier",
        worker=Worker(
            "notifier",
            tick,
            poll_interval=0.01,
            max_error_backoff=5.0,
            shutdown_timeout=settings.notifier_shutdown_timeout_seconds,
        ),
        pool=pool,
        health_port=settings.notifier_health_port,
        periodic=[
            process.Periodic("notifier_sender", settings.notifier_send_interval_seconds, sender.run)
        ],
        start=[consumer.start],
        drain=sender.stop,  # the message being sent is finished and recorded
        close=[consumer.stop],
        started={
            "topic": settings.kafka_topic,
            "smtp": f"{settings.notifier_smtp_host}:{settings.notifier_smtp_port}",
        },
    )


def main() -> None:
    process.run("notifier", NotifierSettings, build)
