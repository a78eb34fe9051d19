"""What every console answer shares: its templates, the headers that keep a page in its own
origin (no framing, no inline script, no copy in a cache), its error pages and the console's
cookies."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from billing_core.domain.money import format_minor
from services.api.console.session import SessionsUnavailable
from services.api.context import get_context
from services.api.problems import ErrorHandler

HERE = Path(__file__).parent
STATIC = HERE / "static"
_templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters["money"] = format_minor

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def render(name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    return HTMLResponse(_templates.get_template(name).render(**values), status_code=status_code)


def guard(response: Response) -> Response:
    """``response`` with :data:`HEADERS`."""
    response.headers.update(HEADERS)
    return response


class ConsoleRoute(APIRoute):
    """A console route: its answers carry :data:`HEADERS` (its error pages: :data:`ERROR_PAGES`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def console_handler(request: Request) -> Response:
            return guard(await handle(request))

        return console_handler


async def sessions_unavailable(_request: Request, _exc: Exception) -> Response:
    """A page that cannot reach the sessions (Redis) says so with a 503."""
    page = render(
        "message.html",
        503,
        title="Sessions unavailable",
        text="Console sessions cannot be checked right now; retry in a moment.",
    )
    page.headers["Retry-After"] = "1"
    return guard(page)


# The console's error pages, by the error they answer (``problems.install`` registers them).
ERROR_PAGES: Mapping[type[Exception], ErrorHandler] = {SessionsUnavailable: sessions_unavailable}


def set_cookie(request: Request, response: Response, name: str, value: str, path: str) -> None:
    """HttpOnly, SameSite=Strict, and Secure unless ``console_secure_cookies`` is false."""
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=get_context(request).settings.console_secure_cookies,
        path=path,
    )


def delete_cookie(request: Request, response: Response, name: str, path: str) -> None:
    response.delete_cookie(
        name,
        httponly=True,
        samesite="strict",
        secure=get_context(request).settings.console_secure_cookies,
        path=path,
    )
