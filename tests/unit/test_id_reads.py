"""The ids a read by ``{id}`` takes its short path for: plain decimals in range, nothing else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

import pytest
from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.scopes import Scope
from billing_core.repo.api_clients import ApiClient
from services.api.auth import requires
from services.api.routes.id_reads import id_read, plain_id


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", 1), ("42", 42), (str(BIGINT_MAX), BIGINT_MAX)],
)
def test_plain_decimals_in_range_are_ids(raw: str, expected: int) -> None:
    assert plain_id(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "0",
        "007",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1_000",
        "1.0",
        "abc",
        "١٢",
        "²",
        str(BIGINT_MAX + 1),
        "9" * 30,
    ],
)
def test_anything_else_is_left_to_the_declared_validation(raw: str) -> None:
    assert plain_id(raw) is None


async def _read(request: Request, value: int) -> Response:
    return Response(str(value))


async def _unguarded(id: int) -> Response:
    return Response(str(id))


async def _guarded_and_more(
    id: int,
    _client: Annotated[ApiClient, requires(Scope.SUBSCRIPTIONS_READ)],
    _extra: Annotated[str, Depends(lambda: "x")],
) -> Response:
    return Response(str(id))


@pytest.mark.parametrize("endpoint", [_unguarded, _guarded_and_more])
def test_a_read_by_id_that_declares_anything_but_one_guard_is_refused(
    endpoint: Callable[..., Awaitable[Response]],
) -> None:
    """The short path calls the guard only: a route it would skip something of is not built."""
    with pytest.raises(TypeError, match="exactly one API-key guard"):
        APIRouter().add_api_route("/things/{id}", endpoint, route_class_override=id_read(_read))
