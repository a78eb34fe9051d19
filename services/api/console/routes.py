"""``/console``: login, overview (live), subscription search and story, reconciliation queue.

Pages are rendered on the server and work without JavaScript; ``console.js`` only refreshes the
overview's numbers and chart every few seconds. Every page needs a console session (a login with
an API key); actions are forms carrying the session's token.
"""

from __future__ import annotations

import time
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from billing_core.domain.scopes import Scope
from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo import reconciliation as reconciliation_repo
from billing_core.repo import subscription_story
from billing_core.repo.reconciliation import MEANINGS
from billing_core.usecases import reconciliation as reconciliation_uc
from services.api.auth import actor_of, client_of_key
from services.api.client_limits import RATE_LIMITED
from services.api.console import overview as overview_data
from services.api.console.session import COOKIE, LOGIN_COOKIE, Operator, Sessions, login_nonce
from services.api.console.web import STATIC, ConsoleRoute, delete_cookie, render, set_cookie
from services.api.context import AppContext, get_context
from services.api.problems import ApiProblem
from services.api.settings import ApiSettings

router = APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)
# One answer for an unknown key and a key without ``admin``: a stolen key is not confirmed.
KEY_REFUSED = "That API key does not open the console (an active key with the admin scope does)."
TOO_MANY_KEYS = "Too many invalid API keys from this address; retry later."
LOGIN_EXPIRED = "The login form has expired; log in again."
MAX_NONCE_LENGTH = 64


def install(app: FastAPI, settings: ApiSettings) -> None:
    """Serve the console on ``app``, its sessions signed with ``console_secret``."""
    app.state.console = Sessions(
        settings.console_secret.get_secret_value().encode() or None,
        settings.console_session_seconds,
    )
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console")


def _sessions(request: Request) -> Sessions:
    sessions = request.app.state.console
    assert isinstance(sessions, Sessions)
    return sessions


class LoginRequired(Exception):
    """No valid console session: the page answers with a redirect to the login form."""


async def _operator(request: Request) -> tuple[AppContext, Operator, str]:
    """The logged-in operator: a valid cookie of an open session whose client is still active
    and still holds the ``admin`` scope (checked on every page: revoking the key or logging out
    ends the session)."""
    ctx = get_context(request)
    cookie = request.cookies.get(COOKIE)
    operator = await _sessions(request).read(ctx.redis, cookie, time.time())
    if operator is None or cookie is None:
        raise LoginRequired
    async with ctx.pg.acquire() as conn:
        allowed = await api_clients_repo.still_holds(
            conn, operator.client_id, Scope.ADMIN, now=ctx.clock.now()
        )
    if not allowed:
        raise LoginRequired
    return ctx, operator, _sessions(request).form_token(cookie)


def _to_login(request: Request) -> RedirectResponse:
    target = quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return RedirectResponse(f"/console/login?next={target}", status_code=303)


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def _id(text: str) -> int | None:
    """A row id typed or sent by a browser: ASCII digits within PostgreSQL's ``bigint``."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    number = int(text)
    return number if number < 2**63 else None


def _safe_next(target: str | None) -> str:
    return target if target and target.startswith("/console") and "//" not in target else "/console"


def _login_page(request: Request, status_code: int, target: str, error: str | None) -> Response:
    """The login form, its token bound to the browser's login cookie (set here when missing)."""
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    fresh = not nonce or len(nonce) > MAX_NONCE_LENGTH
    if fresh:
        nonce = login_nonce()
    page = render(
        "login.html",
        status_code,
        next=target,
        error=error,
        token=_sessions(request).form_token(nonce),
    )
    if fresh:
        set_cookie(request, page, LOGIN_COOKIE, nonce, path="/console/login")
    return page


@router.get("/login")
async def login_form(request: Request, next: str | None = None) -> Response:
    return _login_page(request, 200, _safe_next(next), None)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    target = _safe_next(form.get("next"))
    sessions = _sessions(request)
    if not sessions.form_token_ok(request.cookies.get(LOGIN_COOKIE), form.get("token")):
        return _login_page(request, 403, target, LOGIN_EXPIRED)
    try:
        client = await client_of_key(request, form.get("api_key", "").strip())
    except ApiProblem as refused:
        if refused.kind is RATE_LIMITED:
            page = _login_page(request, 429, target, TOO_MANY_KEYS)
            page.headers.update(refused.headers)
            return page
        client = None
    if client is None or Scope.ADMIN not in client.scopes:
        return _login_page(request, 401, target, KEY_REFUSED)
    cookie = await sessions.open(get_context(request).redis, client.id, client.name, time.time())
    response = RedirectResponse(target, status_code=303)
    set_cookie(request, response, COOKIE, cookie, path="/console")
    delete_cookie(request, response, LOGIN_COOKIE, path="/console/login")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    cookie = request.cookies.get(COOKIE)
    await _sessions(request).close(get_context(request).redis, cookie, time.time())
    response = RedirectResponse("/console/login", status_code=303)
    delete_cookie(request, response, COOKIE, path="/console")
    return response


async def _overview(ctx: AppContext) -> overview_data.Overview:
    settings = ctx.settings
    return await overview_data.gather(
        ctx.pg,
        ctx.clock.now(),
        limit=settings.collector_rate_limit_per_second,
        processes=settings.console_process_list(),
    )


@router.get("")
async def overview(request: Request) -> Response:
    try:
        ctx, operator, token = await _operator(request)
    except LoginRequired:
        return _to_login(request)
    data = await _overview(ctx)
    return render(
        "overview.html",
        operator=operator,
        token=token,
        o=data,
        chart=overview_data.chart_points(data),
        page="overview",
    )


@router.get("/fragments/overview")
async def overview_fragment(request: Request) -> Response:
    try:
        ctx = (await _operator(request))[0]
    except LoginRequired:
        return Response(status_code=401)
    data = await _overview(ctx)
    return render("_overview_numbers.html", o=data, chart=overview_data.chart_points(data))


@router.get("/search")
async def search(request: Request, q: str = "") -> Response:
    try:
        ctx, operator, token = await _operator(request)
    except LoginRequired:
        return _to_login(request)
    text = q.strip().lstrip("#")
    number = _id(text)
    matches: list[subscription_story.Match] = []
    error = None
    if number is None:
        error = "Type a subscription id, a customer id or an invoice id (a number)."
    else:
        async with ctx.pg.acquire() as conn:
            matches = await subscription_story.find(conn, number)
        if len(matches) == 1:
            return RedirectResponse(
                f"/console/subscriptions/{matches[0].subscription_id}", status_code=303
            )
        if not matches:
            error = f"No subscription, customer or invoice {text}."
    return render(
        "search.html",
        operator=operator,
        token=token,
        q=q,
        matches=matches,
        error=error,
        page="search",
    )


@router.get("/subscriptions/{subscription_id}")
async def subscription_page(request: Request, subscription_id: str) -> Response:
    try:
        ctx, operator, token = await _operator(request)
    except LoginRequired:
        return _to_login(request)
    found = None
    number = _id(subscription_id)
    if number is not None:
        async with ctx.pg.acquire() as conn:
            found = await subscription_story.story(conn, number)
    if found is None:
        return render(
            "search.html",
            404,
            operator=operator,
            token=token,
            q=subscription_id,
            matches=[],
            error=f"No subscription {subscription_id}.",
            page="search",
        )
    return render("subscription.html", operator=operator, token=token, s=found, page="search")


@router.get("/reconciliation")
async def reconciliation(request: Request, resolved: str | None = None) -> Response:
    try:
        ctx, operator, token = await _operator(request)
    except LoginRequired:
        return _to_login(request)
    show_resolved = resolved == "1"
    async with ctx.pg.acquire() as conn:
        items = await reconciliation_repo.list_items(conn, include_resolved=show_resolved)
    return render(
        "reconciliation.html",
        operator=operator,
        token=token,
        items=items,
        what=MEANINGS,
        show_resolved=show_resolved,
        notice=request.query_params.get("notice"),
        page="reconciliation",
    )


@router.post("/reconciliation/{item}/resolve")
async def resolve(request: Request, item: str) -> Response:
    try:
        ctx, operator = (await _operator(request))[:2]
    except LoginRequired:
        return _to_login(request)
    form = await _form(request)
    if not _sessions(request).form_token_ok(request.cookies.get(COOKIE), form.get("token")):
        return render("message.html", 403, title="Refused", text="The form has expired.")
    item_id = _id(item)
    if item_id is None:
        return render(
            "message.html", 404, title="Not found", text=f"No reconciliation item {item}."
        )
    note = form.get("note", "").strip()
    if not note:
        return RedirectResponse(
            "/console/reconciliation?notice=" + quote("Say what was done before resolving."),
            status_code=303,
        )
    actor = actor_of(request, operator.client_id)
    async with ctx.transaction() as conn:
        done = await reconciliation_uc.resolve_item(
            conn,
            item_id,
            actor=actor,
            who=f"console:{operator.name}",
            how=note[:2000],
            now=ctx.clock.now(),
        )
    notice = f"Item {item_id} resolved." if done else f"Item {item_id} is not open."
    return RedirectResponse(f"/console/reconciliation?notice={quote(notice)}", status_code=303)
