"""One composition for every worker process: each ``main.py`` supplies only what is its own.

:func:`run` builds the settings once (an invalid one exits 2 naming it), configures logging,
waits for PostgreSQL (exit 3 when it never answers), then serves the process the service's
``build`` returns: the health server (``/readyz``: the database answers, unless the process says
otherwise), the worker loop under SIGTERM/SIGINT, periodic jobs (gauges), an optional drain after
the loop stops, and teardown in order with the process's driver pool closed last.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from billing_core.db import pg
from billing_core.logging import configure_logging, get_logger
from billing_core.runtime import build_info
from billing_core.runtime.garbage_collection import quiet_garbage_collector
from billing_core.runtime.http import Check, HealthServer
from billing_core.runtime.startup import load_settings, require_database
from billing_core.runtime.worker import Worker, stop_on_signals
from billing_core.settings import CoreSettings

S = TypeVar("S", bound=CoreSettings)
Step = Callable[[], Awaitable[object]]

log = get_logger(__name__)


@dataclass(frozen=True)
class Periodic:
    """A side job run every ``every_seconds`` while the worker runs (errors logged, kept on)."""

    name: str
    every_seconds: float
    run: Callable[[], Awaitable[object]]


@dataclass
class WorkerProcess:
    """What one process is made of; :func:`serve` runs it."""

    name: str
    worker: Worker
    health_port: int
    pool: pg.LazyPool  # the process's database
    ready: Check | None = None  # default: the database answers
    periodic: Sequence[Periodic] = ()
    start: Sequence[Step] = ()  # after the health server is up, before the loop
    drain: Step | None = None  # after the loop stopped (e.g. answers still in flight)
    close: Sequence[Step] = ()  # teardown, in order; the pool is closed after them
    started: Mapping[str, object] = field(default_factory=dict)  # the start log line's fields
    health: HealthServer | None = field(default=None, init=False)


async def _every(job: Periodic, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await job.run()
        except Exception as exc:
            log.warning("periodic_job_failed", job=job.name, error=repr(exc))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=job.every_seconds)


async def serve(process: WorkerProcess, settings: CoreSettings) -> None:
    """Run ``process`` until SIGTERM/SIGINT (or ``process.worker.stop()``), then tear down."""
    ready = process.ready or (lambda: _database_answers(process))
    worker = process.worker
    process.health = HealthServer(
        settings.health_host, process.health_port, alive=lambda: worker.healthy, ready=ready
    )
    jobs: list[asyncio.Task[None]] = []
    try:
        await process.health.start()
        for step in process.start:
            await step()
        jobs = [
            asyncio.create_task(_every(job, worker.stop_event), name=job.name)
            for job in process.periodic
        ]
        quiet_garbage_collector()
        log.info(f"{process.name}_started", health_port=process.health.port, **process.started)
        with stop_on_signals(worker.stop):
            await worker.run()
        if process.drain is not None:
            await process.drain()
    finally:
        worker.stop()
        for job in jobs:
            job.cancel()
        for job in jobs:
            with contextlib.suppress(asyncio.CancelledError):
                await job
        for step in process.close:
            try:
                await step()
            except Exception as exc:
                log.warning("teardown_step_failed", process=process.name, error=repr(exc))
        await process.health.stop()
        await process.pool.close()
    log.info(f"{process.name}_stopped")


async def _database_answers(process: WorkerProcess) -> bool:
    return await pg.database_answers(await process.pool.get())


def run(name: str, settings_cls: type[S], build: Callable[[S], WorkerProcess]) -> None:
    """The whole life of a worker process (``main()`` of each service)."""
    settings = load_settings(settings_cls, name)
    configure_logging(settings.process_name, settings.log_level, settings.log_json)
    build_info.publish(name)
    require_database(name, settings)

    async def main() -> None:
        await serve(build(settings), settings)

    asyncio.run(main())
