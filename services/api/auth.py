"""API-client authentication: ``Authorization: Bearer <api key>``.

Keys are stored as SHA-256 hashes (``api_client``). A verified key is remembered in the process
for ``auth_cache_seconds`` so reads do not pay a database round trip each; revocation takes
effect within that delay. Unknown keys are never cached.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase
from fastapi.security.utils import get_authorization_scheme_param

from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo.api_clients import ApiClient, hash_key
from services.api.context import get_context
from services.api.problems import UNAUTHORIZED, ApiProblem

MAX_KEY_LENGTH = 200


def _unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(UNAUTHORIZED, detail, headers={"WWW-Authenticate": 'Bearer realm="billing"'})


class ApiKeyAuth(SecurityBase):
    """The ``Authorization: Bearer`` scheme as one dependency: it reads the header and returns
    the verified client itself (the docs show it as the ``ApiKey`` bearer scheme). One
    dependency instead of a scheme plus a function over it: FastAPI resolves each dependency's
    parameters on every request, which was a tenth of a read's cost."""

    def __init__(self) -> None:
        self.model = HTTPBearerModel(
            description="An API key created with `billing create-api-key NAME`."
        )
        self.scheme_name = "ApiKey"

    async def __call__(self, request: Request) -> ApiClient:
        scheme, credentials = get_authorization_scheme_param(request.headers.get("Authorization"))
        if not credentials or scheme.lower() != "bearer":
            raise _unauthorized("Send 'Authorization: Bearer <api key>'.")
        key = credentials.strip()
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


authenticate = ApiKeyAuth()
CurrentClient = Annotated[ApiClient, Depends(authenticate)]
