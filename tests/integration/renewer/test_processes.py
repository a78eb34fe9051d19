"""Real renewer processes (``python -m services.renewer``): replicas, SIGTERM, kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.seeding import SeedSpec, seed_subscriptions
from tests.integration.renewer.support import assert_exactly_once, scalar, snapshot

ROOT = Path(__file__).resolve().parents[3]


class RenewerProcess:
    def __init__(self, log_path: Path, **env: str) -> None:
        self.log_path = log_path
        environment = os.environ.copy()
        environment.update(
            {
                "BILLING_RENEWER_HEALTH_PORT": "0",
                "BILLING_HEALTH_HOST": "127.0.0.1",
                "BILLING_RENEWER_POLL_INTERVAL_SECONDS": "0.2",
                "BILLING_LOG_JSON": "true",
                "BILLING_LOG_LEVEL": "INFO",
                **env,
            }
        )
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.renewer"],
            cwd=ROOT,
            env=environment,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log_events(self) -> list[dict[str, object]]:
        lines = self.log_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def health_port(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.log_events():
                if event.get("event") == "renewer_started":
                    return int(str(event["health_port"]))
            assert self.proc.poll() is None, self.log_path.read_text()
            time.sleep(0.05)
        raise AssertionError(f"renewer did not start: {self.log_path.read_text()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def ensure_dead(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def processes() -> Iterator[list[RenewerProcess]]:
    started: list[RenewerProcess] = []
    yield started
    for p in started:
        p.ensure_dead()


async def _seed_due(pg: asyncpg.Connection, count: int) -> None:
    now = datetime.now(UTC)
    await seed_subscriptions(
        pg,
        SeedSpec(count=count, due_from=now - timedelta(hours=3), due_window=timedelta(hours=2)),
    )
    await pg.execute("ANALYZE subscription")


async def _wait_until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
async def test_four_renewer_processes_invoice_each_due_period_exactly_once(
    engine: AsyncEngine,
    pg: asyncpg.Connection,
    processes: list[RenewerProcess],
    tmp_path: Path,
) -> None:
    await _seed_due(pg, 10_000)
    before = await snapshot(engine)

    for k in range(4):
        processes.append(
            RenewerProcess(tmp_path / f"renewer-{k}.log", BILLING_RENEWER_BATCH_SIZE="250")
        )
    ports = [p.health_port() for p in processes]

    async def backlog_done() -> bool:
        due = await scalar(
            engine,
            "SELECT count(*) FROM subscription WHERE status = 'ACTIVE' "
            "AND current_period_end <= now()",
        )
        return bool(due == 0)

    await _wait_until(backlog_done, 120, "the backlog to be renewed")

    async with httpx.AsyncClient() as client:
        ready = await client.get(f"http://127.0.0.1:{ports[0]}/readyz")
        assert ready.status_code == 200
        metrics = (await client.get(f"http://127.0.0.1:{ports[0]}/metrics")).text
    assert "billing_renewer_invoices_created_total" in metrics
    assert "billing_renewer_batch_duration_seconds_bucket" in metrics

    started = time.monotonic()
    codes = [p.stop() for p in processes]
    assert codes == [0, 0, 0, 0]
    assert time.monotonic() - started < 10
    assert await assert_exactly_once(engine, before) == 10_000
    worked = [
        sum(int(str(e["invoices"])) for e in p.log_events() if e.get("event") == "renewal_batch")
        for p in processes
    ]
    assert sum(worked) == 10_000
    assert sum(1 for w in worked if w > 0) >= 2  # the work was shared


@pytest.mark.slow
async def test_sigterm_mid_backlog_finishes_the_batch_and_exits_zero(
    engine: AsyncEngine,
    pg: asyncpg.Connection,
    processes: list[RenewerProcess],
    tmp_path: Path,
) -> None:
    await _seed_due(pg, 20_000)
    before = await snapshot(engine)
    proc = RenewerProcess(tmp_path / "renewer.log", BILLING_RENEWER_BATCH_SIZE="500")
    processes.append(proc)

    async def some_invoices() -> bool:
        return bool(await scalar(engine, "SELECT count(*) > 0 FROM invoice"))

    await _wait_until(some_invoices, 60, "the first batch")
    started = time.monotonic()
    assert proc.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 6

    renewed = await assert_exactly_once(engine, before)
    assert 0 < renewed < 20_000  # stopped mid-backlog, every batch whole
    assert renewed % 500 == 0
    events = [e.get("event") for e in proc.log_events()]
    assert "worker_stopped" in events and "renewer_stopped" in events


@pytest.mark.slow
async def test_kill_9_mid_batch_leaves_nothing_half_done(
    engine: AsyncEngine,
    pg: asyncpg.Connection,
    processes: list[RenewerProcess],
    tmp_path: Path,
) -> None:
    n = 30_000
    await _seed_due(pg, n)
    before = await snapshot(engine)
    app = "billing.renewer-kill9"
    proc = RenewerProcess(
        tmp_path / "renewer.log",
        BILLING_RENEWER_BATCH_SIZE=str(n),  # one huge batch: the kill lands inside it
        BILLING_RENEWER_CONCURRENCY="1",
        BILLING_PROCESS_NAME=app,
    )
    processes.append(proc)

    async def writing_invoices() -> bool:
        # The renewer's transaction has inserted invoices and has not committed.
        return bool(
            await pg.fetchval(
                "SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE a.application_name LIKE $1 || '%' AND l.relation = 'invoice'::regclass",
                app,
            )
        )

    await _wait_until(writing_invoices, 60, "the batch to write invoices")
    os.kill(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait(timeout=10)

    async def backend_gone() -> bool:
        return not await pg.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 || '%'", app
        )

    await _wait_until(backend_gone, 30, "PostgreSQL to end the dead renewer's session")
    assert await pg.fetchval("SELECT count(*) FROM invoice") == 0
    assert await pg.fetchval("SELECT count(*) FROM outbox_event") == 0
    assert await pg.fetchval("SELECT count(*) FROM credit_entry") == 0
    assert await snapshot(engine) == before

    second = RenewerProcess(tmp_path / "renewer-2.log", BILLING_RENEWER_BATCH_SIZE="1000")
    processes.append(second)

    async def all_renewed() -> bool:
        return bool(await pg.fetchval("SELECT count(*) FROM invoice") == n)

    await _wait_until(all_renewed, 120, "the second renewer to renew everything")
    assert second.stop() == 0
    assert await assert_exactly_once(engine, before) == n
