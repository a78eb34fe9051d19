"""Which requests a keyed write takes its short path for, and which routes may have one."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Body, Header, Request
from pydantic import BaseModel
from starlette.responses import Response

from billing_core.domain.scopes import Scope
from services.api.idempotency import IdempotentWrite, idempotent_write, request_fingerprint
from services.api.routes.keyed_writes import KeyedWrite, json_media_type

Write = Annotated[IdempotentWrite, idempotent_write(Scope.SUBSCRIPTIONS_WRITE)]


class Thing(BaseModel):
    name: str


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "Application/JSON", "application/json; charset=utf-8"],
)
def test_json_is_taken(content_type: str) -> None:
    assert json_media_type(content_type)


@pytest.mark.parametrize(
    "content_type",
    [None, "", "text/plain", "application/problem+json", "application/jsonx", "multipart/form"],
)
def test_anything_else_is_left_to_the_declared_parsing(content_type: str | None) -> None:
    assert not json_media_type(content_type)


async def _declared(request: Request, body: Thing, write: Write) -> Response:
    return Response(body.name)


async def _answers_a_model(request: Request, body: Thing, write: Write) -> Thing:
    return body


async def _with_a_header(
    request: Request, body: Thing, write: Write, x: Annotated[str | None, Header()] = None
) -> Response:
    return Response(body.name)


async def _embedded(
    request: Request, body: Annotated[Thing, Body(embed=True)], write: Write
) -> Response:
    return Response(body.name)


async def _no_write(request: Request, body: Thing) -> Response:
    return Response(body.name)


async def _no_request(body: Thing, write: Write) -> Response:
    return Response(body.name)


def test_a_route_declared_as_a_keyed_write_is_built() -> None:
    router = APIRouter()
    router.add_api_route("/things", _declared, methods=["POST"], route_class_override=KeyedWrite)
    assert isinstance(router.routes[0], KeyedWrite)


@pytest.mark.parametrize(
    "endpoint", [_answers_a_model, _with_a_header, _embedded, _no_write, _no_request]
)
def test_a_keyed_write_that_declares_anything_else_is_refused(
    endpoint: Callable[..., Awaitable[Any]],
) -> None:
    """The short path resolves the request, the body and the write only: a route it would
    answer differently is not built."""
    with pytest.raises(TypeError, match="a keyed write declares"):
        APIRouter().add_api_route(
            "/things", endpoint, methods=["POST"], route_class_override=KeyedWrite
        )


@pytest.mark.parametrize(
    "body",
    [b'{"b": 1, "a": [1, 2]}', b'{ "a":[1,2],"b":1 }', b"null", b"[]", b'"\\u00e9"', b"{}"],
)
def test_a_fingerprint_from_the_parsed_body_is_that_of_the_body(body: bytes) -> None:
    """The short path hands its parsed body to the fingerprint: same hash as parsing again."""
    parsed = (json.loads(body),)
    again = request_fingerprint("POST", "/s", body)
    assert request_fingerprint("POST", "/s", body, parsed) == again


def test_a_fingerprint_is_of_the_body_s_meaning_not_its_spelling() -> None:
    spelled = request_fingerprint("POST", "/s", b'{"a": 1, "b": 2}')
    assert request_fingerprint("POST", "/s", b'{"b":2,"a":1}') == spelled
    assert request_fingerprint("POST", "/s", b'{"a": 1, "b": 3}') != spelled
    assert request_fingerprint("POST", "/t", b'{"a": 1, "b": 2}') != spelled
