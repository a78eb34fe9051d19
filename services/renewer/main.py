"""Entry point of the renewer process (``billing renewer`` / ``python -m services.renewer``)."""

from __future__ import annotations

from datetime import timedelta

from billing_core.clock import clock_from_offset
from billing_core.db import pg
from billing_core.runtime import process
from billing_core.runtime.worker import Worker
from services.renewer.loop import Renewer
from services.renewer.settings import RenewerSettings


def build(settings: RenewerSettings) -> process.WorkerProcess:
    """One batch per connection in flight, plus one for the backlog gauge."""
    pool = pg.LazyPool(settings, max_size=settings.renewer_concurrency + 1)
    renewer = Renewer(
        pool,
        clock_from_offset(settings.clock_offset_seconds),
        batch_size=settings.renewer_batch_size,
        max_periods_per_row=settings.renewer_max_periods_per_row,
        backlog_refresh_seconds=settings.renewer_backlog_refresh_seconds,
        concurrency=settings.renewer_concurrency,
        trial_will_end_lead=timedelta(hours=settings.renewer_trial_will_end_lead_hours),
    )
    worker = Worker(
        "renewer",
        renewer.tick,
        poll_interval=settings.renewer_poll_interval_seconds,
        shutdown_timeout=settings.renewer_shutdown_timeout_seconds,
    )
    return process.WorkerProcess(
        name="renewer",
        worker=worker,
        pool=pool,
        health_port=settings.renewer_health_port,
        started={
            "batch_size": settings.renewer_batch_size,
            "concurrency": settings.renewer_concurrency,
            "poll_interval_seconds": settings.renewer_poll_interval_seconds,
        },
    )


def main() -> None:
    """Run until SIGTERM/SIGINT; the current batch finishes or rolls back."""
    process.run("renewer", RenewerSettings, build)
