"""Fixtures for the API tests: the app over ASGI (lifespan run), API keys, a real uvicorn."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async
from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[3]
SECRETS = ("whsec_current", "whsec_previous")
STRIPE_SECRETS = ("whsec_stripe_new", "whsec_stripe_old")
# Mid-period, mid-month, mid-morning: far from month ends and DST changes.
START = datetime(2026, 3, 10, 9, 30, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def api_settings(settings: CoreSettings) -> ApiSettings:
    return ApiSettings(
        database_url=settings.database_url,
        process_name="api-tests",
        log_json=False,
        webhook_secrets=",".join(SECRETS),
        stripe_webhook_secrets=",".join(STRIPE_SECRETS),
        idempotency_purge_interval_seconds=0,
        auth_cache_seconds=0,
        db_pool_size=25,
        redis_url=settings.redis_url,
        api_rate_limit_key_prefix=f"test:{uuid.uuid4().hex[:12]}:rate:",
        api_internal_port=0,
    )


@pytest.fixture
async def app(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine
) -> AsyncIterator[FastAPI]:
    application = create_app(api_settings, clock)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def api_key(settings: CoreSettings, engine: AsyncEngine) -> str:
    return await create_api_key_async(settings, "tests")


def asgi_client(app: FastAPI, api_key: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url="http://api.test",
        headers=headers,
    )


@pytest.fixture
async def client(app: FastAPI, api_key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, api_key) as c:
        yield c


@pytest.fixture
async def anonymous(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, None) as c:
        yield c


class ApiServer:
    def __init__(
        self, base_url: str, process: subprocess.Popen[bytes], log: IO[bytes], internal_url: str
    ) -> None:
        self.base_url = base_url
        self.internal_url = internal_url  # /metrics, /docs, /openapi.json
        self.process = process
        self.log = log


def start_api_server(extra_env: dict[str, str] | None = None) -> ApiServer:
    """``python -m services.api`` on a free port, inheriting the test session's environment."""
    port = free_port()
    internal_port = free_port()
    env = {
        **os.environ,
        "BILLING_API_HOST": "127.0.0.1",
        "BILLING_API_PORT": str(port),
        "BILLING_WEBHOOK_SECRETS": ",".join(SECRETS),
        "BILLING_LOG_LEVEL": "WARNING",
        "BILLING_AUTH_CACHE_SECONDS": "0",
        "BILLING_PROCESS_NAME": "api-tests-uvicorn",
        "BILLING_API_INTERNAL_PORT": str(internal_port),
        "BILLING_API_RATE_LIMIT_KEY_PREFIX": f"test:{uuid.uuid4().hex[:12]}:rate:",
        **(extra_env or {}),
    }
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-m", "services.api"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = ApiServer(
        f"http://127.0.0.1:{port}", process, log, f"http://127.0.0.1:{internal_port}"
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            output = log.read().decode(errors="replace")
            log.close()
            raise RuntimeError(f"the API exited with {process.returncode}: {output[-2000:]}")
        try:
            if httpx.get(f"{server.base_url}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop_api_server(server)
    raise RuntimeError("the API did not start within 30 s")


def stop_api_server(server: ApiServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    server.log.close()


@pytest.fixture(scope="module")
def api_server(database_url: str) -> Iterator[ApiServer]:
    server = start_api_server()
    try:
        yield server
    finally:
        stop_api_server(server)
