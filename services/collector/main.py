"""``billing collector``: settings built once, then the claim loop until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from billing_core.clock import clock_from_offset
from billing_core.db import pg
from billing_core.ratelimit import GlobalRateLimiter
from billing_core.runtime import process
from billing_core.runtime.worker import Worker
from services.collector.gateways import build_gateway
from services.collector.refunds import RefundSender
from services.collector.service import Collector
from services.collector.settings import CollectorSettings
from services.collector.window import CallWindow


def build(settings: CollectorSettings) -> process.WorkerProcess:
    # Results and pre-call checks go in groups: a few connections serve every call in flight.
    # No pre-ping (a round trip per use): a dead connection fails one group, which is retried.
    pool = pg.LazyPool(settings, max_size=12)
    redis = aioredis.from_url(
        settings.redis_url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=5
    )
    gateway, close_gateway, gateway_at = build_gateway(settings, pool)
    limiter = GlobalRateLimiter(
        redis,
        key=settings.collector_rate_limit_key,
        limit=settings.collector_rate_limit_per_second,
        guard_ms=settings.collector_rate_limit_guard_ms,
        max_late_ms=settings.collector_rate_limit_max_late_ms,
        horizon_ms=settings.collector_rate_limit_horizon_ms,
    )
    stopping = asyncio.Event()
    window = CallWindow(
        limit_per_second=settings.collector_rate_limit_per_second,
        max_window=settings.collector_max_in_flight,
        expected_latency_seconds=settings.collector_expected_latency_seconds,
    )
    clock = clock_from_offset(settings.clock_offset_seconds)
    collector = Collector(
        settings,
        pool=pool,
        gateway=gateway,
        limiter=limiter,
        window=window,
        redis=redis,
        clock=clock,
        stopping=stopping,
    )
    refunds = RefundSender(
        settings,
        pool=pool,
        gateway=gateway,
        limiter=limiter,
        window=window,
        clock=clock,
        stopping=stopping,
    )
    budget = settings.collector_shutdown_timeout_seconds
    worker = Worker(
        "collector",
        collector.tick,
        poll_interval=settings.collector_poll_interval_seconds,
        shutdown_timeout=budget,
        stop_event=stopping,
    )

    async def drain() -> None:
        """The calls in flight finish and are recorded within what is left of the budget."""
        stopped = worker.stop_requested_at or time.monotonic()
        await collector.drain(max(0.0, budget - (time.monotonic() - stopped)))

    return process.WorkerProcess(
        name="collector",
        worker=worker,
        pool=pool,
        health_port=settings.collector_health_port,
        periodic=[
            process.Periodic("collector-backlog", 5.0, collector.refresh_backlog),
            process.Periodic("collector-refunds", 1.0, refunds.send_due),
        ],
        drain=drain,
        close=[limiter.close, close_gateway, redis.aclose],
        started={
            "gateway": gateway_at,
            "limit": settings.collector_rate_limit_per_second,
        },
    )


def main() -> None:
    process.run("collector", CollectorSettings, build)
