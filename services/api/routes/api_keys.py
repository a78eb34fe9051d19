"""Key management for ``admin`` keys: list, create, revoke, rotate (the ``billing api-keys``
command over HTTP), creating and rotating only keys whose scopes the caller's key holds (403
otherwise). Each change writes its ``audit_event`` row in its transaction.

These POSTs do not store their response under an ``Idempotency-Key``: it holds a new key, and
keys are never stored. Revoking is idempotent by itself; a create or rotate whose answer was
lost is found with ``GET /api-keys`` and revoked.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from billing_core.domain.scopes import Scope
from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo.api_clients import ApiClient
from billing_core.usecases import api_keys as api_keys_uc
from services.api.auth import actor_of, requires
from services.api.context import get_context
from services.api.routes.common import json_response, problems
from services.api.schemas import (
    ApiKeyList,
    ApiKeyOut,
    CreateApiKeyRequest,
    NewApiKeyOut,
    RotateApiKeyRequest,
)

router = APIRouter(tags=["api keys"])

Admin = Annotated[ApiClient, requires(Scope.ADMIN)]
KeyPrefix = Annotated[
    str,
    Path(
        min_length=6,
        max_length=16,
        pattern=r"^[A-Za-z0-9_\-]+$",
        description="The key's prefix (as listed), or enough of its first characters.",
    ),
]


@router.get(
    "/api-keys",
    response_model=ApiKeyList,
    summary="List API keys (never the keys themselves)",
    responses=problems(401, 403, 422, 429),
)
async def list_keys(
    request: Request,
    _client: Admin,
    include_inactive: Annotated[bool, Query(alias="includeInactive")] = False,
) -> Response:
    ctx = get_context(request)
    now = ctx.clock.now()
    async with ctx.pg.acquire() as conn:
        keys = await api_clients_repo.list_all(conn, include_inactive=include_inactive, now=now)
    return json_response(ApiKeyList(items=[ApiKeyOut.of(k, now) for k in keys]))


@router.post(
    "/api-keys",
    status_code=201,
    response_model=NewApiKeyOut,
    summary="Create an API key",
    responses=problems(400, 401, 403, 413, 422, 429, 503),
)
async def create_key(request: Request, body: CreateApiKeyRequest, client: Admin) -> Response:
    ctx = get_context(request)
    async with ctx.transaction() as conn:
        now = ctx.clock.now()
        new = await api_keys_uc.create(
            conn,
            name=body.name,
            scopes=body.scopes,
            now=now,
            actor=actor_of(request, client.id),
            expires_in=None
            if body.expires_in_seconds is None
            else api_keys_uc.seconds(body.expires_in_seconds),
            rate_limit_per_minute=body.rate_limit_per_minute,
            holds=client.scopes,
        )
    return json_response(NewApiKeyOut(key=new.key, api_key=ApiKeyOut.of(new.info, now)), status=201)


@router.post(
    "/api-keys/{prefix}/revoke",
    response_model=ApiKeyOut,
    summary="Revoke an API key (it stops working within the auth cache time)",
    responses=problems(400, 401, 403, 404, 413, 422, 429, 503),
)
async def revoke_key(request: Request, prefix: KeyPrefix, client: Admin) -> Response:
    ctx = get_context(request)
    async with ctx.transaction() as conn:
        now = ctx.clock.now()
        info = await api_keys_uc.revoke(conn, prefix, now=now, actor=actor_of(request, client.id))
    ctx.key_cache.clear()
    return json_response(ApiKeyOut.of(info, now))


@router.post(
    "/api-keys/{prefix}/rotate",
    status_code=201,
    response_model=NewApiKeyOut,
    summary="A new key for the same client; the old one works for a grace period",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def rotate_key(
    request: Request, prefix: KeyPrefix, body: RotateApiKeyRequest, client: Admin
) -> Response:
    ctx = get_context(request)
    async with ctx.transaction() as conn:
        now = ctx.clock.now()
        old, new = await api_keys_uc.rotate(
            conn,
            prefix,
            now=now,
            grace=api_keys_uc.seconds(body.grace_seconds),
            actor=actor_of(request, client.id),
            expires_in=None
            if body.expires_in_seconds is None
            else api_keys_uc.seconds(body.expires_in_seconds),
            holds=client.scopes,
        )
    ctx.key_cache.clear()
    return json_response(
        NewApiKeyOut(
            key=new.key, api_key=ApiKeyOut.of(new.info, now), previous=ApiKeyOut.of(old, now)
        ),
        status=201,
    )
