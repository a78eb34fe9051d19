"""Malformed input to the console, with or without a session: a page or a redirect, never a 500."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.repo.reconciliation import NewItem, add_items
from tests.integration.console.conftest import console_client, form_token, logged_in
from tests.support.factories import create_invoice, create_subscription, driver_of

NON_ASCII_COOKIES = ["e30=.é", "e30=." + "é" * 64, "é.é", "e30=.²"]


@pytest.mark.parametrize("cookie", NON_ASCII_COOKIES)
async def test_a_non_ascii_session_cookie_sends_to_the_login_form(
    app: FastAPI, cookie: str
) -> None:
    async with console_client(app) as client:
        raw = f"billing_console={cookie}".encode()
        page = await client.get("/console", headers={"Cookie": raw})
        fragment = await client.get("/console/fragments/overview", headers={"Cookie": raw})
    assert page.status_code == 303
    assert page.headers["location"].startswith("/console/login")
    assert fragment.status_code == 401


@pytest.mark.parametrize("token", ["é", "²" * 64])
async def test_a_non_ascii_form_token_is_refused(app: FastAPI, api_key: str, token: str) -> None:
    async with logged_in(app, api_key) as client:
        answer = await client.post(
            "/console/reconciliation/1/resolve", data={"note": "done", "token": token}
        )
    assert answer.status_code == 403
    assert "expired" in answer.text


@pytest.mark.parametrize(
    "q", ["²", "\u0661\u0662", "99999999999999999999", "9223372036854775808", "-1", "9" * 5000]
)
async def test_search_takes_only_ascii_ids_a_bigint_can_hold(
    app: FastAPI, api_key: str, q: str
) -> None:
    async with logged_in(app, api_key) as client:
        answer = await client.get("/console/search", params={"q": q})
    assert answer.status_code == 200
    assert "a number" in answer.text


@pytest.mark.parametrize("item", ["²", "\u0661", "99999999999999999999", "9223372036854775808"])
async def test_a_subscription_page_for_a_non_id_is_a_404(
    app: FastAPI, api_key: str, item: str
) -> None:
    async with logged_in(app, api_key) as client:
        answer = await client.get(f"/console/subscriptions/{item}")
    assert answer.status_code == 404
    assert f"No subscription {item}." in answer.text


@pytest.mark.parametrize("item", ["99999999999999999999", "9223372036854775808", "²"])
async def test_resolving_a_non_id_is_a_404(
    app: FastAPI, api_key: str, engine: AsyncEngine, item: str
) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        sub = await create_subscription(conn, customer_id=77, start=now)
        inv = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=77,
            amount=990,
            next_attempt_at=now,
            period_start=now,
        )
        await add_items(await driver_of(conn), [NewItem(inv, sub, "gateway_rejected: no")], now=now)
    async with logged_in(app, api_key) as client:
        token = form_token(await client.get("/console/reconciliation"))
        answer = await client.post(
            f"/console/reconciliation/{item}/resolve", data={"note": "done", "token": token}
        )
    assert answer.status_code == 404
    assert f"No reconciliation item {item}." in answer.text
