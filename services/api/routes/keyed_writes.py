"""Writes of one JSON body under an ``Idempotency-Key``, without FastAPI's per-request dependency
resolution.

As for reads by id (:mod:`services.api.routes.id_reads`): the route is declared like any other
(its OpenAPI, its guard, its validation errors), but a request whose body is JSON that the
route's own body field accepts goes straight to the key's guard, the declared write (which
checks the ``Idempotency-Key``) and the endpoint: resolving the body, the header and the
security dependency was an eighth of a ``POST /subscriptions``. Any other request (no JSON
content type, a body the field refuses) takes FastAPI's declared handler, so what it answers
stays exactly FastAPI's. A route that declares anything besides the request, its body and its
keyed write, or whose endpoint does not answer a ``Response`` itself, is refused when it is
built: the short path would skip it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, params
from fastapi.dependencies.utils import get_typed_return_annotation
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from services.api.auth import ScopedKey
from services.api.idempotency import IDEMPOTENCY_KEY_HEADER, PARSED_BODY, is_keyed_write


def json_media_type(content_type: str | None) -> bool:
    """``content_type`` is plain ``application/json`` (parameters such as a charset allowed)."""
    if content_type is None:
        return False
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type == "application/json"


class KeyedWrite(APIRoute):
    """A route class for ``POST`` endpoints taking ``(request, body, write)``: a JSON body the
    route's body field accepts is checked by the write's declared guard, its key validated,
    and handed to the endpoint; anything else goes through the declared handler."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        declared = super().get_route_handler()
        dependant = self.dependant
        endpoint = dependant.call
        (body_field,) = dependant.body_params or (None,)
        writes = [d for d in dependant.dependencies if is_keyed_write(d.call)]
        guards = [d.call for d in writes[0].dependencies] if len(writes) == 1 else []
        if (
            endpoint is None
            or dependant.request_param_name is None
            or body_field is None
            or len(dependant.body_params) != 1
            or not isinstance(body_field.field_info, params.Body)
            or isinstance(body_field.field_info, params.Form)
            or body_field.field_info.embed
            or len(dependant.dependencies) != 1
            or len(guards) != 1
            or not isinstance(guards[0], ScopedKey)
            or any(
                (
                    dependant.path_params,
                    dependant.query_params,
                    dependant.header_params,
                    dependant.cookie_params,
                )
            )
            or not _answers_response(endpoint)
        ):
            raise TypeError(
                f"{self.path}: a keyed write declares (request, one JSON body, one keyed write) "
                "and answers a Response"
            )
        guard = guards[0]
        request_name, body_name = dependant.request_param_name, body_field.name
        write_name, keyed_write = writes[0].name, writes[0].call
        assert write_name is not None and keyed_write is not None

        async def handler(request: Request) -> Response:
            if not json_media_type(request.headers.get("content-type")):
                return await declared(request)
            try:
                received = json.loads(await request.body())
            except HTTPException:
                raise
            except Exception:  # not JSON, or the body could not be read: FastAPI's answer
                return await declared(request)
            body, errors = body_field.validate(received, {}, loc=("body",))
            if errors:
                return await declared(request)
            request.scope[PARSED_BODY] = (received,)
            client = await guard(request)
            write = await keyed_write(request, client, request.headers.get(IDEMPOTENCY_KEY_HEADER))
            response: Response = await endpoint(
                **{request_name: request, body_name: body, write_name: write}
            )
            return response

        return handler


def _answers_response(endpoint: Callable[..., Any]) -> bool:
    answer = get_typed_return_annotation(endpoint)
    return isinstance(answer, type) and issubclass(answer, Response)
