"""The gateway simulator as a real process (``python -m services.gateway_sim``) on a free port.

One process serves the whole module set; every test starts from ``POST /v1/admin/reset`` (empty
ledger, reseeded draws, the start-up behaviour: no latency, no rate limit, no failures) and
configures what it exercises through ``POST /v1/admin/config``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.asgi_server import serving
from tests.support.processes import SIMULATOR_NICE, free_port, niced

ROOT = Path(__file__).resolve().parents[3]
SEED = 1234


@dataclass
class SimProcess:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_simulator(env: dict[str, str], log_path: Path) -> SimProcess:
    port = free_port()
    full_env = {
        **os.environ,
        "BILLING_GATEWAY_SIM_PORT": str(port),
        "BILLING_LOG_JSON": "false",
        **env,
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.gateway_sim"],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            **niced(SIMULATOR_NICE),
        )
    sim = SimProcess(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"simulator exited with {process.returncode}:\n{sim.log()}")
        try:
            if httpx.get(f"{sim.url}/healthz", timeout=1).status_code == 200:
                return sim
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"simulator did not answer /healthz in 20 s:\n{sim.log()}")


def stop_simulator(sim: SimProcess) -> None:
    sim.process.terminate()
    try:
        sim.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        sim.process.kill()
        sim.process.wait()


@pytest.fixture(scope="session")
def simulator() -> Iterator[SimProcess]:
    with tempfile.TemporaryDirectory(prefix="gateway-sim-") as tmp:
        sim = start_simulator(
            {
                "BILLING_GATEWAY_SIM_SEED": str(SEED),
                "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "0",
                "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "0",
                "BILLING_GATEWAY_SIM_RATE_LIMIT_PER_SECOND": "0",
            },
            Path(tmp) / "gateway-sim.log",
        )
        try:
            yield sim
        finally:
            stop_simulator(sim)


@pytest.fixture
async def gw(simulator: SimProcess) -> AsyncIterator[httpx.AsyncClient]:
    """A client on a freshly reset simulator."""
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with httpx.AsyncClient(base_url=simulator.url, timeout=10, limits=limits) as client:
        response = await client.post("/v1/admin/reset")
        assert response.status_code == 200, response.text
        yield client


async def configure(client: httpx.AsyncClient, **changes: Any) -> dict[str, Any]:
    response = await client.post("/v1/admin/config", json=changes)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def charge_body(
    invoice: int, attempt: int = 0, customer: int = 1, amount: int = 1990, currency: str = "EUR"
) -> dict[str, Any]:
    return {
        "customerId": customer,
        "amount": amount,
        "currency": currency,
        "metadata": {"invoiceId": invoice, "attempt": attempt},
    }


async def charge(
    client: httpx.AsyncClient,
    invoice: int,
    attempt: int = 0,
    *,
    key: str | None = None,
    timeout: float | None = None,
    **body: Any,
) -> httpx.Response:
    return await client.post(
        "/v1/charges",
        json=charge_body(invoice, attempt, **body),
        headers={"Idempotency-Key": key or f"inv-{invoice}-try-{attempt}"},
        timeout=timeout if timeout is not None else client.timeout,
    )


async def summary(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/v1/ledger/summary")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def ledger_charges(client: httpx.AsyncClient, **query: Any) -> list[dict[str, Any]]:
    response = await client.get("/v1/ledger/charges", params=query)
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


# -- a webhook receiver, run in the test's event loop ------------------------------------------


@dataclass
class Delivery:
    arrived: float  # time.monotonic()
    signature: str
    body: bytes


@dataclass
class Receiver:
    url: str
    deliveries: list[Delivery] = field(default_factory=list)
    fail_attempts: int = 0  # answer 500 to this many attempts of each event first
    attempts_by_event: dict[str, int] = field(default_factory=dict)

    async def settle(self, quiet: float = 0.5, limit: float = 20.0) -> None:
        """Wait until no delivery arrived for ``quiet`` seconds."""
        deadline = time.monotonic() + limit
        seen = -1
        while time.monotonic() < deadline:
            if len(self.deliveries) == seen:
                return
            seen = len(self.deliveries)
            await asyncio.sleep(quiet)
        raise AssertionError("webhooks kept arriving")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    import json  # noqa: PLC0415

    port = free_port()
    state = Receiver(url=f"http://127.0.0.1:{port}/webhooks/payments")

    async def webhook(request: Request) -> Response:
        body = await request.body()
        event_id = json.loads(body)["id"]
        attempt = state.attempts_by_event.get(event_id, 0) + 1
        state.attempts_by_event[event_id] = attempt
        state.deliveries.append(
            Delivery(time.monotonic(), request.headers.get("billing-signature", ""), body)
        )
        return Response(status_code=500 if attempt <= state.fail_attempts else 204)

    app = Starlette(routes=[Route("/webhooks/payments", webhook, methods=["POST"])])
    async with serving(app, port):
        yield state
