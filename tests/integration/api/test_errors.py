"""Every error is problem+json with a request id; nothing leaks a stack trace."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from billing_core.clock import ManualClock
from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.api.conftest import asgi_client, free_port
from tests.integration.api.helpers import assert_problem


async def test_request_id_is_echoed_or_generated(client: httpx.AsyncClient) -> None:
    echoed = await client.get("/plans", headers={"X-Request-ID": "abc-123"})
    assert echoed.headers["x-request-id"] == "abc-123"
    generated = await client.get("/subscriptions/99")
    request_id = generated.headers["x-request-id"]
    assert len(request_id) == 32
    assert assert_problem(generated, 404, "subscription-not-found")["requestId"] == request_id
    hostile = await client.get("/plans", headers={"X-Request-ID": "x" * 500})
    assert len(hostile.headers["x-request-id"]) == 32  # not echoed: too long


async def test_unknown_route_and_method(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/nowhere"), 404, "not-found")
    assert_problem(await client.delete("/plans"), 405, "method-not-allowed")


async def test_unexpected_error_is_a_generic_problem(app: FastAPI, api_key: str) -> None:
    async def explode() -> None:
        raise RuntimeError("secret internals")

    app.add_api_route("/explode", explode)
    async with asgi_client(app, api_key) as client:
        response = await client.get("/explode", headers={"X-Request-ID": "req-boom"})
    problem = assert_problem(response, 500, "internal-error")
    assert problem["requestId"] == "req-boom"
    assert "secret internals" not in response.text
    assert "RuntimeError" not in response.text


async def test_database_down_readyz_503_and_requests_503_to_retry_without_trace(
    api_settings: ApiSettings, clock: ManualClock
) -> None:
    unreachable = f"postgresql+asyncpg://billing@127.0.0.1:{free_port()}/nowhere"
    settings = api_settings.model_copy(update={"database_url": unreachable})
    app = create_app(settings, clock)
    async with (
        app.router.lifespan_context(app),
        asgi_client(app, "bk_whatever") as client,
    ):
        assert (await client.get("/healthz")).status_code == 200
        assert_problem(await client.get("/readyz"), 503, "service-unavailable")
        failing = await client.get("/plans")
        assert_problem(failing, 503, "service-unavailable")
        assert failing.headers["retry-after"] == "1"
        assert "asyncpg" not in failing.text
        assert "Connect" not in failing.text


async def test_metrics_count_requests_by_route_and_status(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await client.get("/subscriptions/12345")
    internal = f"http://127.0.0.1:{app.state.context.internal_port}"
    async with httpx.AsyncClient(base_url=internal) as ops:
        text = (await ops.get("/metrics")).text
    assert (
        'billing_api_requests_total{method="GET",route="/subscriptions/{id}",status="404"}' in text
    )
    assert "billing_api_request_duration_seconds_bucket" in text
