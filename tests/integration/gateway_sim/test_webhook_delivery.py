"""Bounded webhook delivery: never more requests in flight than ``webhook_concurrency``, retries
spread by jitter, a deep backlog that does not slow the gateway down, and no CPU when idle."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.integration.gateway_sim.conftest import (
    Receiver,
    SimProcess,
    charge,
    configure,
    start_simulator,
    stop_simulator,
)
from tests.support.http_receiver import read_request
from tests.support.processes import free_port

pytestmark = pytest.mark.timing  # measures real time: run alone, never beside other tests

PROC_STAT = Path("/proc/self/stat")


# -- a receiver on raw streams that counts what is open at once ------------------------------


@dataclass
class CountingReceiver:
    """A minimal HTTP/1.1 receiver: answers 204 after ``answer_after`` seconds, or never
    (``hang``: it holds the request until the sender gives up and closes the connection)."""

    url: str = ""
    answer_after: float = 0.0
    hang: bool = False
    received: int = 0
    connections: int = 0
    max_connections: int = 0
    requests: int = 0
    max_requests: int = 0
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        self.max_connections = max(self.max_connections, self.connections)
        try:
            while True:
                await read_request(reader)
                self.received += 1
                self.requests += 1
                self.max_requests = max(self.max_requests, self.requests)
                try:
                    if self.hang:
                        await reader.read()  # until the sender closes the connection
                        return
                    await asyncio.sleep(self.answer_after)
                    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                    await writer.drain()
                finally:
                    self.requests -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.connections -= 1
            writer.close()
            self.handlers.discard(task)


@pytest.fixture
async def counting_receiver() -> AsyncIterator[CountingReceiver]:
    state = CountingReceiver()
    port = free_port()
    server = await asyncio.start_server(state.handle, "127.0.0.1", port)
    state.url = f"http://127.0.0.1:{port}/webhooks/payments"
    try:
        yield state
    finally:
        server.close()
        for task in list(state.handlers):
            task.cancel()
        await asyncio.gather(*state.handlers, return_exceptions=True)
        await server.wait_closed()


async def charge_many(client: httpx.AsyncClient, invoices: range, parallel: int = 16) -> None:
    numbers = iter(invoices)

    async def caller() -> None:
        for invoice in numbers:
            response = await charge(client, invoice=invoice)
            assert response.status_code == 200, response.text

    await asyncio.gather(*(caller() for _ in range(parallel)))


async def metric(client: httpx.AsyncClient, name: str) -> float:
    response = await client.get("/metrics")
    assert response.status_code == 200
    line = next(line for line in response.text.splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


async def eventually(check: Callable[[], Awaitable[bool]], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


# -- concurrency ------------------------------------------------------------------------------


async def test_deliveries_in_flight_never_exceed_the_concurrency(
    tmp_path: Path, counting_receiver: CountingReceiver
) -> None:
    counting_receiver.answer_after = 0.05
    sim = start_simulator(
        {
            "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "0",
            "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "0",
            "BILLING_GATEWAY_SIM_RATE_LIMIT_PER_SECOND": "0",
            "BILLING_GATEWAY_SIM_WEBHOOK_CONCURRENCY": "4",
        },
        tmp_path / "gateway-sim.log",
    )
    try:
        async with httpx.AsyncClient(base_url=sim.url, timeout=10) as client:
            await configure(
                client,
                webhook_url=counting_receiver.url,
                webhook_secret="whsec_x",
                webhook_delay_min_ms=0,
                webhook_delay_max_ms=0,
            )
            await charge_many(client, range(200))

            async def all_delivered() -> bool:
                delivered = 'billing_gateway_sim_webhook_deliveries_total{result="delivered"}'
                return await metric(client, delivered) == 200

            await eventually(all_delivered)
            assert await metric(client, "billing_gateway_sim_webhook_backlog_deliveries") == 0
    finally:
        stop_simulator(sim)

    assert counting_receiver.received == 200
    # 200 deliveries due at once, 50 ms each: the four workers were all busy, never more.
    assert counting_receiver.max_requests == 4
    assert counting_receiver.max_connections == 4


# -- jitter -----------------------------------------------------------------------------------


async def test_retries_of_deliveries_that_failed_together_are_spread(
    gw: httpx.AsyncClient, receiver: Receiver
) -> None:
    receiver.fail_attempts = 1
    await configure(
        gw,
        webhook_url=receiver.url,
        webhook_secret="whsec_x",
        webhook_delay_min_ms=0,
        webhook_delay_max_ms=0,
        webhook_max_attempts=2,
        webhook_retry_base_ms=400,
    )
    await charge_many(gw, range(100))
    await receiver.settle(quiet=1.0)

    arrivals: dict[str, list[float]] = {}
    for delivery in receiver.deliveries:
        arrivals.setdefault(json.loads(delivery.body)["id"], []).append(delivery.arrived)
    assert sorted(len(times) for times in arrivals.values()) == [2] * 100
    gaps = [second - first for first, second in arrivals.values()]
    # Each retry waits 400 ms times a factor drawn in [1, 1.5): 400..600 ms, spread uniformly
    # (standard deviation 58 ms); without jitter they would all be 400 ms apart.
    assert min(gaps) >= 0.39
    assert max(gaps) <= 0.75
    assert statistics.pstdev(gaps) >= 0.03
    retries = sorted(second for _, second in arrivals.values())
    most_in_20_ms = max(sum(1 for t in retries if start <= t < start + 0.02) for start in retries)
    assert most_in_20_ms <= 30, "retries came back together"


# -- responsiveness under a deep backlog ------------------------------------------------------


@dataclass
class Latencies:
    healthz: list[float] = field(default_factory=list)
    charges: list[float] = field(default_factory=list)


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


async def timed(call: Awaitable[httpx.Response]) -> float:
    started = time.perf_counter()
    response = await call
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text
    return elapsed


async def measure(client: httpx.AsyncClient, invoices: range) -> Latencies:
    """One request at a time, alternating ``GET /healthz`` and a new charge."""
    latencies = Latencies()
    for invoice in invoices:
        latencies.healthz.append(await timed(client.get("/healthz")))
        latencies.charges.append(await timed(charge(client, invoice=invoice)))
    return latencies


@pytest.mark.slow
async def test_a_deep_webhook_backlog_does_not_slow_the_gateway(
    gw: httpx.AsyncClient, counting_receiver: CountingReceiver
) -> None:
    samples = 400
    # The same requests with an empty backlog, then with 20 000 deliveries pending at a
    # receiver that never answers (each attempt times out after 5 s and is retried).
    assert await metric(gw, "billing_gateway_sim_webhook_backlog_deliveries") == 0
    empty = await measure(gw, range(1_000_000, 1_000_000 + samples))

    counting_receiver.hang = True
    await configure(
        gw,
        webhook_url=counting_receiver.url,
        webhook_secret="whsec_x",
        webhook_delay_min_ms=0,
        webhook_delay_max_ms=0,
        webhook_duplicate_rate=1.0,  # two deliveries per charge
    )
    await charge_many(gw, range(10_000))
    await configure(gw, webhook_url="", webhook_duplicate_rate=0.0)  # measured charges: none
    assert await metric(gw, "billing_gateway_sim_webhook_backlog_deliveries") == 20_000
    loaded = await measure(gw, range(2_000_000, 2_000_000 + samples))
    metrics_started = time.perf_counter()
    assert await metric(gw, "billing_gateway_sim_webhook_backlog_deliveries") == 20_000
    metrics_s = time.perf_counter() - metrics_started

    figures = {
        "healthz": (p99(empty.healthz), p99(loaded.healthz)),
        "charges": (p99(empty.charges), p99(loaded.charges)),
    }
    print(  # shown with -s: the figures the docs quote
        "p99 ms, empty vs 20 000 pending: "
        + ", ".join(f"{k} {a * 1000:.1f} vs {b * 1000:.1f}" for k, (a, b) in figures.items())
        + f"; /metrics {metrics_s * 1000:.1f} ms"
    )
    for name, (without, with_backlog) in figures.items():
        assert with_backlog - without < 0.050, f"{name}: p99 {without:.4f} -> {with_backlog:.4f} s"
    assert metrics_s < 1.0
    # Only the workers' connections reached the receiver, each holding one request.
    assert counting_receiver.max_connections <= 32
    assert counting_receiver.max_requests <= 32
    await gw.post("/v1/admin/reset")
    assert await metric(gw, "billing_gateway_sim_webhook_backlog_deliveries") == 0


# -- idle CPU ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.skipif(not PROC_STAT.exists(), reason="reads CPU time from /proc")
async def test_an_idle_simulator_uses_no_cpu(
    simulator: SimProcess, gw: httpx.AsyncClient, receiver: Receiver
) -> None:
    await configure(
        gw,
        webhook_url=receiver.url,
        webhook_secret="whsec_x",
        webhook_delay_min_ms=0,
        webhook_delay_max_ms=0,
    )
    await charge_many(gw, range(200))
    await receiver.settle()
    # A thousand deliveries waiting ten minutes for their instant: nothing to do meanwhile.
    await configure(gw, webhook_reorder_rate=1.0, webhook_reorder_delay_ms=600_000)
    await charge_many(gw, range(1000, 2000))
    assert await metric(gw, "billing_gateway_sim_webhook_backlog_deliveries") == 1000
    await asyncio.sleep(0.5)

    window = 5.0
    before = cpu_seconds(simulator.process.pid)
    await asyncio.sleep(window)
    used = cpu_seconds(simulator.process.pid) - before

    print(f"idle CPU: {used:.3f} s in {window:.0f} s ({used / window:.1%} of a core)")
    assert used / window < 0.02
