"""The collector is built from its one settings object and the collaborators it shares with the
rest of the process; every figure it works with is read from the settings."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import redis.asyncio as aioredis

from billing_core.clock import clock_from_offset
from billing_core.db.pg import LazyPool
from billing_core.gateway import HttpPaymentGateway
from billing_core.ratelimit import GlobalRateLimiter
from services.collector import main
from services.collector.refunds import RefundSender
from services.collector.service import Collector
from services.collector.settings import CollectorSettings
from services.collector.window import CallWindow
from tests.support.imports import imported_names

SHARED = {
    "pool",
    "gateway",
    "limiter",
    "window",
    "redis",
    "clock",
    "stopping",
}


def parameters(cls: type) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters) - {"self"}


def test_the_collector_and_the_refunds_take_settings_and_shared_collaborators_only() -> None:
    assert parameters(Collector) == {"settings", *SHARED}
    assert parameters(RefundSender) <= {"settings", *SHARED}


async def test_a_collector_is_built_from_settings_without_touching_a_server() -> None:
    settings = CollectorSettings(database_url="postgresql+asyncpg://nobody@127.0.0.1:9/none")
    redis = aioredis.from_url("redis://127.0.0.1:9")
    gateway = HttpPaymentGateway("http://127.0.0.1:9")
    pool = LazyPool(settings, max_size=1)
    limiter = GlobalRateLimiter(redis, key="test:permits", limit=200)
    shared = {
        "gateway": gateway,
        "limiter": limiter,
        "window": CallWindow(limit_per_second=200, max_window=128),
        "clock": clock_from_offset(0),
        "stopping": asyncio.Event(),
    }
    try:
        collector = Collector(
            settings,
            pool=pool,
            redis=redis,
            **shared,
        )
        RefundSender(settings, pool=pool, **shared)
        assert collector.in_flight == 0
    finally:
        await gateway.aclose()
        await redis.aclose()
        await pool.close()


def test_the_collector_imports_no_sqlalchemy_and_no_engine() -> None:
    offenders = []
    for module in sorted(Path(main.__file__).parent.glob("*.py")):
        offenders += [
            f"{module.name}: {name}"
            for name in imported_names(module)
            if name.startswith(("sqlalchemy", "billing_core.db.engine"))
        ]
    assert offenders == []


async def test_the_collector_process_runs_on_one_driver_pool() -> None:
    settings = CollectorSettings(database_url="postgresql+asyncpg://nobody@127.0.0.1:9/none")
    built = main.build(settings)
    try:
        assert isinstance(built.pool, LazyPool)
        assert not hasattr(built, "engine")
    finally:
        for step in built.close:
            await step()
        assert built.pool is not None
        await built.pool.close()
