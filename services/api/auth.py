"""API-client authentication: ``Authorization: Bearer <api key>``.

Keys are stored as SHA-256 hashes (``api_client``). A verified key is remembered in the process
for ``auth_cache_seconds`` so reads do not pay a database round trip each; revocation takes
effect within that delay. Unknown keys are never cached.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo.api_clients import ApiClient, hash_key
from services.api.context import get_context
from services.api.problems import UNAUTHORIZED, ApiProblem

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key created with `billing create-api-key NAME`.",
)

MAX_KEY_LENGTH = 200


def _unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(UNAUTHORIZED, detail, headers={"WWW-Authenticate": 'Bearer realm="billing"'})


async def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> ApiClient:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise _unauthorized("Send 'Authorization: Bearer <api key>'.")
    key = credentials.credentials.strip()
    if not key or len(key) > MAX_KEY_LENGTH:
        raise _unauthorized("Invalid API key.")
    ctx = get_context(request)
    digest = hash_key(key)
    client = ctx.key_cache.get(digest)
    if client is None:
        async with ctx.reads() as session:
            client = await api_clients_repo.find_active_by_key(session, key)
        if client is None:
            raise _unauthorized("Invalid API key.")
        ctx.key_cache.put(digest, client)
    return client


CurrentClient = Annotated[ApiClient, Depends(authenticate)]
