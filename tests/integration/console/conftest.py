"""The console's fixtures: the API over ASGI (from the API tests) and under uvicorn, an API key,
and Chromium driven by Playwright."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from playwright.async_api import Browser, Page, async_playwright
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async
from tests.integration.api.conftest import (
    ApiServer,
    anonymous,
    api_key,
    api_settings,
    app,
    client,
    clock,
    start_api_server,
    stop_api_server,
)
from tests.support.processes import free_port

__all__ = ["anonymous", "api_key", "api_settings", "app", "client", "clock"]

ROOT = Path(__file__).resolve().parents[3]
SCREENSHOTS = ROOT / "var" / "console"
FORM = "application/x-www-form-urlencoded"
_TOKEN = re.compile(r'name="token" value="([^"]*)"')


def console_client(app: FastAPI, address: str = "127.0.0.1") -> httpx.AsyncClient:
    """A browser's view of the console over HTTPS (its cookies are Secure), from ``address``."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=(address, 40000)),
        base_url="https://api.test",
    )


def form_token(page: httpx.Response) -> str | None:
    """The token a page's forms carry."""
    found = _TOKEN.search(page.text)
    return found.group(1) if found else None


async def post_login(
    client: httpx.AsyncClient, key: str, next_page: str = "/console"
) -> httpx.Response:
    """Log in as a browser does: open the form, then post it with its token."""
    token = form_token(await client.get("/console/login"))
    fields = {"api_key": key, "next": next_page, **({"token": token} if token else {})}
    return await client.post("/console/login", data=fields)


@contextlib.asynccontextmanager
async def logged_in(
    app: FastAPI, key: str, address: str = "127.0.0.1"
) -> AsyncIterator[httpx.AsyncClient]:
    async with console_client(app, address) as client:
        answer = await post_login(client, key)
        assert answer.status_code == 303, answer.text
        yield client


def chromium_path() -> str:
    """The system's Chromium (`scripts/chromium.sh` installs it; `make test` runs that first)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("Chromium is not installed and scripts/chromium.sh could not install it")
    return path


@pytest.fixture(scope="module")
def collector_health_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def console_server(database_url: str, collector_health_port: int) -> Iterator[ApiServer]:
    server = start_api_server(
        {
            "BILLING_CONSOLE_PROCESSES": f"collector=http://127.0.0.1:{collector_health_port}",
            "BILLING_CONSOLE_SECRET": "console-tests",
        }
    )
    try:
        yield server
    finally:
        stop_api_server(server)


@pytest.fixture
async def operator_key(settings: CoreSettings, engine: AsyncEngine) -> str:
    return await create_api_key_async(settings, "support-anna")


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    executable = chromium_path()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    opened = await context.new_page()
    opened.set_default_timeout(15_000)
    try:
        yield opened
    finally:
        await context.close()


async def log_in(page: Page, base_url: str, key: str, path: str = "/console") -> None:
    await page.goto(base_url + path)
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Log in").click()


def screenshot_path(name: str) -> str:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return str(SCREENSHOTS / f"{name}.png")
