"""Bearer API keys: stored hashed, checked on every non-operational endpoint."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.repo import api_clients as api_clients_repo
from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.api.conftest import ROOT, asgi_client
from tests.integration.api.helpers import assert_problem, rows

PROTECTED = [
    ("GET", "/plans"),
    ("GET", "/subscriptions/1"),
    ("GET", "/subscriptions/1/invoices"),
    ("POST", "/subscriptions"),
    ("POST", "/subscriptions/1/cancel"),
    ("POST", "/subscriptions/1/change-plan"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
async def test_protected_endpoints_need_a_valid_key(
    app: FastAPI, api_key: str, method: str, path: str
) -> None:
    async with asgi_client(app, None) as anonymous:
        missing = await anonymous.request(method, path, json={})
        assert_problem(missing, 401, "unauthorized")
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await anonymous.request(
            method, path, json={}, headers={"Authorization": "Bearer bk_not-a-real-key"}
        )
        assert_problem(wrong, 401, "unauthorized")
        basic = await anonymous.request(
            method, path, json={}, headers={"Authorization": f"Basic {api_key}"}
        )
        assert_problem(basic, 401, "unauthorized")


async def test_open_endpoints(app: FastAPI, anonymous: httpx.AsyncClient) -> None:
    assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
    assert (await anonymous.get("/readyz")).json() == {"status": "ready"}
    # Not on the public port by default (the production profile): on the internal one.
    for path in ("/metrics", "/docs", "/openapi.json"):
        assert (await anonymous.get(path)).status_code == 404, path
    internal = f"http://127.0.0.1:{app.state.context.internal_port}"
    async with httpx.AsyncClient(base_url=internal) as ops:
        metrics = await ops.get("/metrics")
        assert metrics.status_code == 200
        assert "billing_api_requests_total" in metrics.text
        assert (await ops.get("/openapi.json")).json() == app.openapi()
        docs = await ops.get("/docs")
        assert docs.status_code == 200
        assert "swagger" in docs.text.lower()
        assert (await ops.get("/readyz")).status_code == 200


async def test_docs_on_the_public_port_when_asked(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine
) -> None:
    application = create_app(api_settings.model_copy(update={"api_public_docs": True}), clock)
    async with (
        application.router.lifespan_context(application),
        asgi_client(application, None) as anonymous,
    ):
        assert (await anonymous.get("/openapi.json")).json() == application.openapi()
        assert (await anonymous.get("/docs")).status_code == 200
        assert (await anonymous.get("/metrics")).status_code == 404


async def test_keys_are_stored_hashed_and_revocation_works(
    app: FastAPI, api_key: str, engine: AsyncEngine, pool: pg.Pool
) -> None:
    stored = (await rows(engine, "SELECT * FROM api_client"))[0]
    assert stored["key_hash"] == hashlib.sha256(api_key.encode()).digest()
    assert api_key.startswith(stored["key_prefix"])
    assert len(stored["key_prefix"]) < len(api_key) // 2
    async with asgi_client(app, api_key) as client:
        assert (await client.get("/plans")).status_code == 200
        async with pg.transaction(pool) as conn:
            assert await api_clients_repo.revoke(conn, stored["id"], now=datetime.now(UTC))
        assert_problem(await client.get("/plans"), 401, "unauthorized")


def test_cli_creates_a_key_that_authenticates(database_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "create-api-key", "cli-test"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    key = result.stdout.strip()
    assert key.startswith("bk_")
    assert len(key) > 40

    async def check() -> list[str]:
        from billing_core.settings import CoreSettings  # noqa: PLC0415

        pool = await pg.create_pool(CoreSettings(database_url=database_url), max_size=1)
        try:
            async with pool.acquire() as conn:
                client = await api_clients_repo.find_active_by_key(conn, key, now=datetime.now(UTC))
                return [client.name] if client else []
        finally:
            await pool.close()

    import asyncio  # noqa: PLC0415

    assert asyncio.run(check()) == ["cli-test"]
