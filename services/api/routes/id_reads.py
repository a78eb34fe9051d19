"""Reads of one resource by its ``{id}``, without FastAPI's per-request dependency resolution.

The route is declared like any other (its OpenAPI, its guard, its validation errors), but a
request whose ``{id}`` is a plain decimal in range goes straight to the key's guard and the
read: resolving the path parameter and the security dependency was a third of a GET's CPU. Any
other ``{id}`` takes FastAPI's own handler, so what it answers stays exactly FastAPI's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.scopes import Scope
from services.api.auth import guard

Read = Callable[[Request, int], Awaitable[Response]]
_MAX_DIGITS = len(str(BIGINT_MAX))


def plain_id(raw: str) -> int | None:
    """``raw`` as an id when it is a plain decimal from 1 to BIGINT_MAX (no sign, no leading
    zero, ASCII digits only); None for anything else."""
    if not (raw.isascii() and raw.isdigit()) or raw[0] == "0" or len(raw) > _MAX_DIGITS:
        return None
    value = int(raw)
    return value if value <= BIGINT_MAX else None


def id_read(scope: Scope, read: Read) -> type[APIRoute]:
    """A route class for ``GET .../{id}`` that needs ``scope``: a plain id is guarded and read
    by ``read(request, id)``; anything else goes through the declared endpoint."""
    check = guard(scope)

    class IdRead(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            declared = super().get_route_handler()

            async def handler(request: Request) -> Response:
                value = plain_id(request.path_params["id"])
                if value is None:
                    return await declared(request)
                await check(request)
                return await read(request, value)

            return handler

    return IdRead
