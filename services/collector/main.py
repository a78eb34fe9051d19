"""``billing collector``: settings built once, then the claim loop until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta

import redis.asyncio as aioredis
from sqlalchemy import text

from billing_core.clock import clock_from_offset
from billing_core.db.engine import create_engine, session_factory
from billing_core.gateway import HttpPaymentGateway
from billing_core.logging import configure_logging, get_logger
from billing_core.ratelimit import GlobalRateLimiter
from billing_core.runtime.http import HealthServer
from billing_core.runtime.startup import load_settings, require_database
from billing_core.runtime.worker import Worker, stop_on_signals
from services.collector.service import Collector
from services.collector.settings import CollectorSettings
from services.collector.window import CallWindow

log = get_logger(__name__)


async def run(settings: CollectorSettings) -> None:
    engine = create_engine(settings, pool_size=max(5, min(settings.collector_max_in_flight, 40)))
    sessions = session_factory(engine)
    redis = aioredis.from_url(
        settings.redis_url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=5
    )
    gateway = HttpPaymentGateway(
        settings.collector_gateway_url,
        max_connections=settings.collector_max_in_flight,
        connect_timeout=settings.collector_connect_timeout_seconds,
        read_timeout=settings.collector_read_timeout_seconds,
    )
    limiter = GlobalRateLimiter(
        redis,
        key=settings.collector_rate_limit_key,
        limit=settings.collector_rate_limit_per_second,
        guard_ms=settings.collector_rate_limit_guard_ms,
        max_late_ms=settings.collector_rate_limit_max_late_ms,
        horizon_ms=settings.collector_rate_limit_horizon_ms,
    )
    stopping = asyncio.Event()
    collector = Collector(
        sessions=sessions,
        gateway=gateway,
        limiter=limiter,
        redis=redis,
        clock=clock_from_offset(settings.clock_offset_seconds),
        policy=settings.dunning_policy(),
        rng=random.Random(settings.collector_rng_seed),
        batch_size=settings.collector_batch_size,
        max_in_flight=settings.collector_max_in_flight,
        window=CallWindow(
            limit_per_second=settings.collector_rate_limit_per_second,
            max_window=settings.collector_max_in_flight,
            expected_latency_seconds=settings.collector_expected_latency_seconds,
        ),
        lease=timedelta(seconds=settings.collector_lease_seconds),
        call_budget=timedelta(
            seconds=settings.collector_connect_timeout_seconds
            + settings.collector_read_timeout_seconds
            + 1
        ),
        stopping=stopping,
    )
    worker = Worker(
        "collector",
        collector.tick,
        poll_interval=settings.collector_poll_interval_seconds,
        shutdown_timeout=5.0,
        stop_event=stopping,
    )

    async def ready() -> bool:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return True

    async def backlog_loop() -> None:
        while not worker.stop_event.is_set():
            try:
                await collector.refresh_backlog()
            except Exception as exc:
                log.warning("backlog_refresh_failed", error=repr(exc))
            await asyncio.sleep(5)

    health = HealthServer(
        settings.health_host,
        settings.collector_health_port,
        alive=lambda: worker.healthy,
        ready=ready,
    )
    await health.start()
    side = asyncio.create_task(backlog_loop())
    log.info(
        "collector_started",
        gateway=settings.collector_gateway_url,
        limit=settings.collector_rate_limit_per_second,
    )
    try:
        with stop_on_signals(worker.stop):
            await worker.run()
        await collector.drain(settings.collector_shutdown_timeout_seconds)
    finally:
        side.cancel()
        await limiter.close()
        await gateway.aclose()
        await health.stop()
        await redis.aclose()
        await engine.dispose()
    log.info("collector_stopped")


def main() -> None:
    settings = load_settings(CollectorSettings, "collector")
    configure_logging(settings.process_name, settings.log_level, settings.log_json)
    require_database("collector", settings)
    asyncio.run(run(settings))
