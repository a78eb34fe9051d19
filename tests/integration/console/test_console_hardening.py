"""What keeps a console page to its operator: no framing, no inline script, no cached copy,
sessions ended on the server at logout (on every replica), a login form only its own browser can
post, and cookies sent over HTTPS only unless development says otherwise."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from services.api.app import create_app
from services.api.console.session import SessionsUnavailable
from services.api.console.web import ERROR_PAGES
from services.api.settings import ApiSettings
from tests.integration.console.conftest import (
    console_client,
    form_token,
    logged_in,
    post_login,
)
from tests.support.processes import free_port

AppWith = Callable[..., AbstractAsyncContextManager[FastAPI]]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)|\son[a-z]+=|\sstyle=|javascript:", re.I)


@pytest.fixture
def app_with(api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine) -> AppWith:
    """An API app of these settings' changes, its lifespan run."""

    @asynccontextmanager
    async def start(**changes: Any) -> AsyncIterator[FastAPI]:
        application = create_app(api_settings.model_copy(update=changes), clock)
        async with application.router.lifespan_context(application):
            yield application

    return start


def _cookies(answer: httpx.Response) -> dict[str, str]:
    """Set-Cookie headers by cookie name."""
    return {h.split("=", 1)[0]: h for h in answer.headers.get_list("set-cookie")}


def _assert_guarded(answer: httpx.Response) -> None:
    policy = answer.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["cache-control"] == "no-store"
    assert not INLINE_SCRIPT.search(answer.text), INLINE_SCRIPT.search(answer.text)


async def test_every_console_page_forbids_framing_inline_script_and_caching(
    app: FastAPI, api_key: str
) -> None:
    async with console_client(app) as anonymous:
        _assert_guarded(await anonymous.get("/console/login"))
        _assert_guarded(await anonymous.get("/console"))  # the redirect to the login form
    async with logged_in(app, api_key) as client:
        for path in (
            "/console",
            "/console/fragments/overview",
            "/console/search?q=1",
            "/console/subscriptions/1",
            "/console/reconciliation",
        ):
            _assert_guarded(await client.get(path))
        _assert_guarded(await client.post("/console/reconciliation/x/resolve", data={}))


async def test_logging_out_ends_the_session_on_every_replica(
    app_with: AppWith, api_key: str
) -> None:
    async with (
        app_with(console_secret=SecretStr("shared")) as replica_a,
        app_with(console_secret=SecretStr("shared")) as replica_b,
        logged_in(replica_a, api_key) as browser,
    ):
        stolen = browser.cookies["billing_console"]
        async with console_client(replica_b) as thief:
            thief.cookies.set("billing_console", stolen, path="/console")
            assert (await thief.get("/console")).status_code == 200
            out = await browser.post("/console/logout")
            assert out.status_code == 303
            assert "billing_console" not in browser.cookies
            for replica in (replica_a, replica_b):
                async with console_client(replica) as again:
                    again.cookies.set("billing_console", stolen, path="/console")
                    gone = await again.get("/console")
                    assert gone.status_code == 303
                    assert gone.headers["location"].startswith("/console/login")


async def test_a_login_form_can_be_posted_only_by_the_browser_it_was_given_to(
    app: FastAPI, api_key: str
) -> None:
    async with console_client(app) as browser, console_client(app) as forger:
        no_token = await browser.post("/console/login", data={"api_key": api_key})
        assert no_token.status_code == 403
        assert "billing_console" not in _cookies(no_token)
        token = form_token(await browser.get("/console/login"))
        assert token
        # Another browser (the forger's login cookie, or none) cannot use this form's token.
        await forger.get("/console/login")
        borrowed = await forger.post("/console/login", data={"api_key": api_key, "token": token})
        assert borrowed.status_code == 403
        assert "billing_console" not in _cookies(borrowed)
        assert "billing_console" not in forger.cookies
        own = await browser.post("/console/login", data={"api_key": api_key, "token": token})
        assert own.status_code == 303
        assert "billing_console" in _cookies(own)


async def test_cookies_are_secure_even_over_plain_http_unless_development_says_so(
    app_with: AppWith, api_key: str
) -> None:
    async with (
        app_with() as production,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=production), base_url="http://api.test"
        ) as plain,
    ):
        form = await plain.get("/console/login")
        login_cookie = _cookies(form)["billing_console_login"]
        nonce = login_cookie.split("=", 1)[1].split(";", 1)[0]
        answer = await plain.post(
            "/console/login",
            data={"api_key": api_key, "token": form_token(form)},
            headers={"Cookie": f"billing_console_login={nonce}"},
        )
        assert answer.status_code == 303
        session_cookie = _cookies(answer)["billing_console"]
        for cookie in (login_cookie, session_cookie):
            assert "; Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    async with (
        app_with(console_secure_cookies=False) as development,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=development), base_url="http://api.test"
        ) as plain,
    ):
        answer = await post_login(plain, api_key)
        assert answer.status_code == 303
        assert "Secure" not in _cookies(answer)["billing_console"]
        assert (await plain.get("/console")).status_code == 200


async def test_without_redis_the_console_says_so_and_opens_no_session(
    app_with: AppWith, api_key: str
) -> None:
    async with (
        app_with(redis_url=f"redis://127.0.0.1:{free_port()}/0") as application,
        console_client(application) as client,
    ):
        answer = await post_login(client, api_key)
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "1"
        assert "Sessions unavailable" in answer.text
        assert "billing_console" not in _cookies(answer)
        _assert_guarded(answer)


async def test_the_console_error_page_is_answered_by_the_apps_error_handlers(
    app: FastAPI,
) -> None:
    """The 503 page is the app's handler's, as the API's problems are: a route of any class
    that meets the sessions' outage answers it, guarded."""

    async def outage() -> None:
        raise SessionsUnavailable

    app.router.add_api_route("/console/outage-probe", outage)
    async with console_client(app) as client:
        answer = await client.get("/console/outage-probe")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert "Sessions unavailable" in answer.text
    _assert_guarded(answer)
    assert app.exception_handlers[SessionsUnavailable] is ERROR_PAGES[SessionsUnavailable]
