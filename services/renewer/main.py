"""Entry point of the renewer process (``billing renewer`` / ``python -m services.renewer``)."""

from __future__ import annotations

import asyncio

from billing_core.clock import Clock, clock_from_offset
from billing_core.db.engine import create_engine
from billing_core.logging import configure_logging, get_logger
from billing_core.runtime.http import HealthServer
from billing_core.runtime.startup import load_settings, require_database
from billing_core.runtime.worker import Worker, stop_on_signals
from services.renewer.loop import Renewer
from services.renewer.settings import RenewerSettings

log = get_logger(__name__)


async def run(settings: RenewerSettings, clock: Clock | None = None) -> None:
    """Run the renewer until SIGTERM/SIGINT; the current batch finishes or rolls back."""
    engine = create_engine(settings, pool_size=settings.renewer_concurrency + 1)
    renewer = Renewer(
        engine,
        clock or clock_from_offset(settings.clock_offset_seconds),
        batch_size=settings.renewer_batch_size,
        max_periods_per_row=settings.renewer_max_periods_per_row,
        backlog_refresh_seconds=settings.renewer_backlog_refresh_seconds,
        concurrency=settings.renewer_concurrency,
    )
    worker = Worker(
        "renewer",
        renewer.tick,
        poll_interval=settings.renewer_poll_interval_seconds,
        shutdown_timeout=settings.renewer_shutdown_timeout_seconds,
    )
    health = HealthServer(
        settings.renewer_health_host,
        settings.renewer_health_port,
        alive=lambda: worker.healthy,
        ready=renewer.database_ready,
    )
    try:
        with stop_on_signals(worker.stop):
            await health.start()
            log.info(
                "renewer_started",
                health_port=health.port,
                batch_size=settings.renewer_batch_size,
                concurrency=settings.renewer_concurrency,
                poll_interval_s=settings.renewer_poll_interval_seconds,
            )
            await worker.run()
    finally:
        await health.stop()
        await engine.dispose()
    log.info("renewer_stopped")


def main() -> None:
    settings = load_settings(RenewerSettings, "renewer")
    configure_logging(settings.process_name, settings.log_level, settings.log_json)
    require_database("renewer", settings)
    asyncio.run(run(settings))
