"""A collector process charging through the Stripe adapter, against a given Stripe address."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.support.processes import Proc, free_port, start

StartCollector = Callable[..., Proc]


@pytest.fixture
def stripe_collector(database_url: str, tmp_path: Path) -> Iterator[StartCollector]:
    started: list[Proc] = []

    def start_collector(api_base: str, **env: str) -> Proc:
        port = free_port()
        proc = start(
            f"collector-stripe-{len(started)}",
            "services.collector",
            {
                "BILLING_DATABASE_URL": database_url,
                "BILLING_GATEWAY": "stripe",
                "BILLING_STRIPE_API_KEY": "sk_test_123",
                "BILLING_STRIPE_API_BASE": api_base,
                "BILLING_COLLECTOR_HEALTH_PORT": str(port),
                "BILLING_COLLECTOR_RATE_LIMIT_KEY": f"test:{uuid.uuid4().hex[:10]}:permits",
                "BILLING_COLLECTOR_POLL_INTERVAL_SECONDS": "0.2",
                **env,
            },
            tmp_path,
            ready_url=f"http://127.0.0.1:{port}/readyz",
        )
        started.append(proc)
        return proc

    yield start_collector
    for proc in started:
        if proc.alive():
            proc.kill9()


async def wait_for(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
