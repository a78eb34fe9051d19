"""Logging in to the console goes through the API's key checks: the per-address limit on unknown
keys and their negative cache, shared with the API; one answer for every refused key."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.domain.scopes import ALL_SCOPES, Scope
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async
from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.api.helpers import statements_sent
from tests.integration.console.conftest import console_client, post_login

FAILURES_PER_ADDRESS = 3


def _bogus() -> str:
    return f"bk_{secrets.token_urlsafe(32)}"


def _alert(page: httpx.Response) -> str:
    start = page.text.index('role="alert">') + len('role="alert">')
    return page.text[start : page.text.index("</p>", start)]


@pytest.fixture
async def strict_app(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine
) -> AsyncIterator[FastAPI]:
    settings = api_settings.model_copy(update={"auth_failures_per_address": FAILURES_PER_ADDRESS})
    application = create_app(settings, clock)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
def statements(app: FastAPI) -> Iterator[list[str]]:
    """The statements the API sends to the database (where key look-ups go)."""
    sent: list[str] = []
    with statements_sent(sent.append):
        yield sent


async def test_an_unknown_key_and_a_key_without_admin_get_the_same_answer(
    app: FastAPI, settings: CoreSettings, engine: AsyncEngine
) -> None:
    reader = await create_api_key_async(
        settings, "reader", scopes=[s for s in ALL_SCOPES if s != Scope.ADMIN]
    )
    async with console_client(app) as client:
        unknown = await post_login(client, _bogus())
        not_admin = await post_login(client, reader)
    assert unknown.status_code == not_admin.status_code == 401
    assert _alert(unknown) == _alert(not_admin)
    assert "billing_console=" not in unknown.headers.get("set-cookie", "")
    assert "billing_console=" not in not_admin.headers.get("set-cookie", "")


async def test_an_address_past_the_unknown_key_limit_is_refused_before_any_look_up(
    strict_app: FastAPI, api_key: str
) -> None:
    async with console_client(strict_app, "203.0.113.5") as scanner:
        tries = [await post_login(scanner, _bogus()) for _ in range(FAILURES_PER_ADDRESS)]
        assert [t.status_code for t in tries] == [401] * FAILURES_PER_ADDRESS
        refused = await post_login(scanner, _bogus())
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert "Too many invalid API keys" in refused.text
        # Even a good key: the address is refused before its key is looked up.
        assert (await post_login(scanner, api_key)).status_code == 429
    # The API counts the same failures: its key look-ups from that address are refused too.
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=strict_app, client=("203.0.113.5", 40000)),
        base_url="http://api.test",
        headers={"Authorization": f"Bearer {_bogus()}"},
    ) as api:
        assert (await api.get("/plans")).status_code == 429
    async with console_client(strict_app, "203.0.113.6") as other:
        assert (await post_login(other, api_key)).status_code == 303


async def test_an_unknown_key_is_looked_up_once(app: FastAPI, statements: list[str]) -> None:
    key = _bogus()
    async with console_client(app) as client:
        answers = [await post_login(client, key) for _ in range(5)]
    assert {a.status_code for a in answers} == {401}
    assert len(statements) == 1
