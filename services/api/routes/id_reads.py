"""Reads of one resource by its ``{id}``, without FastAPI's per-request dependency resolution.

The route is declared like any other (its OpenAPI, its guard, its validation errors), but a
request whose ``{id}`` is a plain decimal in range goes straight to the route's declared guard
and the read: resolving the path parameter and the security dependency was a third of a GET's
CPU. Any other ``{id}`` takes FastAPI's own handler, so what it answers stays exactly FastAPI's.
A route that declares anything besides its one guard is refused when it is built: the short
path would skip it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
from services.api.auth import ScopedKey

Read = Callable[[Request, int], Awaitable[Response]]
_MAX_DIGITS = len(str(BIGINT_MAX))


def plain_id(raw: str) -> int | None:
    """``raw`` as an id when it is a plain decimal from 1 to BIGINT_MAX (no sign, no leading
    zero, ASCII digits only); None for anything else."""
    if not (raw.isascii() and raw.isdigit()) or raw[0] == "0" or len(raw) > _MAX_DIGITS:
        return None
    value = int(raw)
    return value if value <= BIGINT_MAX else None


def id_read(read: Read) -> type[APIRoute]:
    """A route class for ``GET .../{id}``: a plain id is checked by the route's declared guard
    and read by ``read(request, id)``; anything else goes through the declared endpoint."""

    class IdRead(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            declared = super().get_route_handler()
            calls = [dependency.call for dependency in self.dependant.dependencies]
            if len(calls) != 1 or not isinstance(calls[0], ScopedKey):
                raise TypeError(
                    f"{self.path}: a read by id declares exactly one API-key guard, not {calls}"
                )
            check = calls[0]

            async def handler(request: Request) -> Response:
                value = plain_id(request.path_params["id"])
                if value is None:
                    return await declared(request)
                await check(request)
                return await read(request, value)

            return handler

    return IdRead
