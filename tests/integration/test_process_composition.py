"""The one worker-process composition: health, start steps, periodic jobs, drain, teardown."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import Iterator

import asyncpg
import httpx
import pytest

from billing_core.db import pg
from billing_core.runtime import process
from billing_core.runtime.worker import Worker
from billing_core.settings import CoreSettings


@pytest.fixture(autouse=True)
def garbage_collector_as_it_was() -> Iterator[None]:
    """A process freezes its startup objects and makes full collections rare (``serve``); the
    test process must not keep that for the tests after these."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


async def test_a_process_runs_its_parts_in_order_and_tears_down(settings: CoreSettings) -> None:
    steps: list[str] = []
    periodic_runs = 0
    readiness: list[int] = []
    pool = pg.LazyPool(settings, max_size=2)

    async def flaky_gauge() -> None:
        nonlocal periodic_runs
        periodic_runs += 1
        if periodic_runs == 1:
            raise RuntimeError("first refresh fails")  # logged; the job keeps running

    async def tick() -> bool:
        await asyncio.sleep(0.01)
        if worker.ticks == 5:
            assert parts.health is not None
            async with httpx.AsyncClient() as client:
                url = f"http://127.0.0.1:{parts.health.port}"
                readiness.append((await client.get(f"{url}/readyz")).status_code)
                readiness.append((await client.get(f"{url}/healthz")).status_code)
        if worker.ticks >= 20:
            worker.stop()
        return True

    async def step(name: str) -> None:
        steps.append(name)

    worker = Worker("probe", tick, poll_interval=0.01, shutdown_timeout=2)
    parts = process.WorkerProcess(
        name="probe",
        worker=worker,
        pool=pool,
        health_port=0,
        periodic=[process.Periodic("probe-gauge", 0.01, flaky_gauge)],
        start=[lambda: step("start")],
        drain=lambda: step("drain"),
        close=[lambda: step("close-1"), lambda: step("close-2")],
    )
    await asyncio.wait_for(process.serve(parts, settings), timeout=20)

    assert steps == ["start", "drain", "close-1", "close-2"]
    assert readiness == [200, 200]  # ready: the database answers (the shared check)
    assert periodic_runs >= 2  # a failing run did not stop the job
    assert not pool.open  # closed last


async def test_teardown_runs_even_when_a_start_step_fails(settings: CoreSettings) -> None:
    closed: list[str] = []
    pool = pg.LazyPool(settings, max_size=1)

    async def broken_start() -> None:
        raise ConnectionError("broker unreachable")

    async def close() -> None:
        closed.append("closed")

    parts = process.WorkerProcess(
        name="probe",
        worker=Worker("probe", lambda: asyncio.sleep(0, False), poll_interval=0.01),
        pool=pool,
        health_port=0,
        start=[broken_start],
        close=[close],
    )
    with pytest.raises(ConnectionError):
        await process.serve(parts, settings)
    assert closed == ["closed"]


async def test_the_shared_readiness_check(settings: CoreSettings) -> None:
    pool = await pg.create_pool(settings, max_size=1)
    try:
        assert await pg.database_answers(pool) is True
    finally:
        await pool.close()
    unreachable = await pg.create_pool(
        settings.model_copy(
            update={"database_url": "postgresql+asyncpg://billing@127.0.0.1:1/billing"}
        ),
        max_size=1,
    )
    with pytest.raises(OSError):
        await pg.database_answers(unreachable)
    await unreachable.close()


async def _connections_named(settings: CoreSettings, name: str) -> int:
    conn = await asyncpg.connect(pg.asyncpg_dsn(settings.database_url))
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name
            )
        )
    finally:
        await conn.close()


async def test_readiness_answers_on_the_process_pool_closed_at_teardown(
    settings: CoreSettings,
) -> None:
    own = settings.model_copy(update={"process_name": f"probe-{uuid.uuid4().hex[:8]}"})
    driver_name = own.process_name + ".pg"  # the driver pool's connections (db.pg.create_pool)
    seen: list[tuple[int, int]] = []

    async def tick() -> bool:
        if worker.ticks == 3:
            assert parts.health is not None
            async with httpx.AsyncClient() as client:
                ready = await client.get(f"http://127.0.0.1:{parts.health.port}/readyz")
            seen.append((ready.status_code, await _connections_named(own, driver_name)))
            worker.stop()
        await asyncio.sleep(0.01)
        return True

    worker = Worker("probe", tick, poll_interval=0.01, shutdown_timeout=2)
    parts = process.WorkerProcess(
        name="probe", worker=worker, pool=pg.LazyPool(own, max_size=1), health_port=0
    )
    await asyncio.wait_for(process.serve(parts, own), timeout=20)

    assert seen == [(200, 1)]  # ready, answered on a connection of the process's pool
    for _ in range(50):  # the server ends the closed connection's backend soon after
        if await _connections_named(own, driver_name) == 0:
            break
        await asyncio.sleep(0.1)
    assert await _connections_named(own, driver_name) == 0


async def test_db_pool_size_overrides_each_process_own_sizing(settings: CoreSettings) -> None:
    own = await pg.create_pool(settings.model_copy(update={"db_pool_size": None}), max_size=3)
    overridden = await pg.create_pool(settings.model_copy(update={"db_pool_size": 7}), max_size=3)
    try:
        assert own.get_max_size() == 3
        assert overridden.get_max_size() == 7
    finally:
        for pool in (own, overridden):
            await pool.close()
