"""The console's fixtures: the API under uvicorn, an API key, and Chromium driven by Playwright."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async
from tests.integration.api.conftest import ApiServer, start_api_server, stop_api_server
from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[3]
SCREENSHOTS = ROOT / "var" / "console"


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
