"""The console's pages over HTTP (no browser): sessions, the form token, redirects, errors."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.domain.scopes import ALL_SCOPES, Scope
from billing_core.repo.api_clients import display_prefix
from billing_core.settings import CoreSettings
from billing_core.usecases.numbering import number_documents
from services.api.admin import create_api_key_async
from tests.integration.api.helpers import scalar, subscribe
from tests.integration.console.conftest import console_client, logged_in, post_login
from tests.support.factories import driver_of


async def test_pages_without_a_session_send_to_the_login_form(anonymous: httpx.AsyncClient) -> None:
    answer = await anonymous.get("/console/subscriptions/1?x=1")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login?next=/console/subscriptions/1%3Fx%3D1"
    assert (await anonymous.get("/console/fragments/overview")).status_code == 401


async def test_a_forged_or_tampered_session_cookie_is_refused(app: FastAPI, api_key: str) -> None:
    async with logged_in(app, api_key) as client:
        cookie = client.cookies["billing_console"]
        body, signature = cookie.rsplit(".", 1)
        async with console_client(app) as forged:
            forged.cookies.set("billing_console", body + "." + signature[::-1], path="/console")
            assert (await forged.get("/console")).status_code == 303
        assert (await client.get("/console")).status_code == 200


async def test_login_goes_to_the_page_asked_for_and_never_outside_the_console(
    app: FastAPI, api_key: str
) -> None:
    async with console_client(app) as client:
        asked = await post_login(client, api_key, "/console/reconciliation")
        outside = await post_login(client, api_key, "//evil.example/console")
    assert asked.headers["location"] == "/console/reconciliation"
    assert outside.headers["location"] == "/console"


async def test_resolving_without_the_form_token_is_refused(app: FastAPI, api_key: str) -> None:
    async with logged_in(app, api_key) as client:
        answer = await client.post(
            "/console/reconciliation/1/resolve", data={"note": "done", "token": "not-the-token"}
        )
    assert answer.status_code == 403
    assert "expired" in answer.text


async def test_search_explains_what_it_expects_and_an_unknown_subscription_is_a_404(
    app: FastAPI, api_key: str
) -> None:
    async with logged_in(app, api_key) as client:
        words = await client.get("/console/search", params={"q": "alice"})
        nothing = await client.get("/console/search", params={"q": "987654"})
        missing = await client.get("/console/subscriptions/987654")
    assert words.status_code == 200
    assert "a number" in words.text
    assert "No subscription, customer or invoice 987654." in nothing.text
    assert missing.status_code == 404
    assert "No subscription 987654." in missing.text


def test_the_console_is_not_part_of_the_api_document(app: FastAPI) -> None:
    paths = app.openapi()["paths"]
    assert "/subscriptions" in paths
    assert not [p for p in paths if p.startswith("/console")]


async def test_only_an_admin_key_opens_the_console(
    app: FastAPI, settings: CoreSettings, engine: AsyncEngine
) -> None:
    reader = await create_api_key_async(
        settings, "reader", scopes=[s for s in ALL_SCOPES if s != Scope.ADMIN]
    )
    async with console_client(app) as client:
        answer = await post_login(client, reader)
    assert answer.status_code == 401
    assert "admin scope" in answer.text
    assert "billing_console=" not in answer.headers.get("set-cookie", "")


async def test_revoking_the_key_ends_its_console_session(
    app: FastAPI, api_key: str, engine: AsyncEngine
) -> None:
    async with logged_in(app, api_key) as client:
        assert (await client.get("/console")).status_code == 200
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE api_client SET revoked_at = now() WHERE key_prefix = :p"),
                {"p": display_prefix(api_key)},
            )
        gone = await client.get("/console")
    assert gone.status_code == 303
    assert gone.headers["location"].startswith("/console/login")


async def test_a_subscriptions_story_shows_its_invoices_lines(
    app: FastAPI, api_key: str, client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    async with engine.begin() as conn:
        await number_documents(await driver_of(conn), limit=10)
    number = await scalar(
        engine, "SELECT number FROM invoice WHERE subscription_id = :s", s=sub["id"]
    )
    async with logged_in(app, api_key) as console:
        page = await console.get(f"/console/subscriptions/{sub['id']}")
    assert page.status_code == 200
    assert f"· {number}" in page.text
    assert "PLAN_PERIOD" in page.text and "Plan BASIC_MONTHLY" in page.text
    assert "No line items." not in page.text
