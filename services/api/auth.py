"""Who is calling and what it may do: ``Authorization: Bearer <api key>`` and its scopes.

Keys are stored as SHA-256 hashes (``api_client``). A verified key is remembered in the process
for ``auth_cache_seconds`` so reads do not pay a database round trip each: revocation takes
effect within that delay, expiry at once (the cached client carries its ``expires_at``). An
unknown key is remembered as unknown for ``auth_negative_cache_seconds``, and a source address
that sent too many unknown keys is refused before any look-up (``client_limits``). A key is
looked up once at a time (requests with the same key wait for that look-up), and the look-up
counts as unknown while it runs: a parallel burst gets no more look-ups than the limit.

Every route that needs a key declares its one scope where it is defined, with
:func:`requires` (or ``idempotent_write(scope)`` for POSTs): that is also what the OpenAPI
document shows as the operation's security requirement. A key without the scope gets a 403
problem. Then the client's rate limit is counted (one Redis round trip).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Request, Security
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase
from fastapi.security.utils import get_authorization_scheme_param

from billing_core.domain.scopes import Scope
from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo import audit
from billing_core.repo.api_clients import ApiClient, hash_key
from services.api.client_limits import LIMIT_UNAVAILABLE, RATE_LIMITED, REFUSED, UNLIMITED
from services.api.context import AppContext, get_context
from services.api.middleware import RATE_HEADERS_SCOPE_KEY
from services.api.problems import FORBIDDEN, REQUEST_ID_SCOPE_KEY, UNAUTHORIZED, ApiProblem

MAX_KEY_LENGTH = 200
SCHEME_NAME = "ApiKey"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(UNAUTHORIZED, detail, headers={"WWW-Authenticate": 'Bearer realm="billing"'})


def source_address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


async def verified_client(request: Request) -> ApiClient:
    """The client of the request's bearer key (401 problem when there is none, 429 when its
    address sent too many unknown keys)."""
    scheme, credentials = get_authorization_scheme_param(request.headers.get("Authorization"))
    if not credentials or scheme.lower() != "bearer":
        raise _unauthorized("Send 'Authorization: Bearer <api key>'.")
    return await client_of_key(request, credentials.strip())


async def client_of_key(request: Request, key: str) -> ApiClient:
    """The client of ``key`` sent by the request's address, through the key cache and the
    per-address limit on unknown keys (401 problem when unknown, 429 past the limit)."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise _unauthorized("Invalid API key.")
    ctx = get_context(request)
    digest = hash_key(key)
    cached, client = ctx.key_cache.get(digest)
    if cached and client is None:
        raise _unauthorized("Invalid API key.")
    now = ctx.clock.now()
    if client is not None:
        if client.active_at(now):
            return client
        ctx.key_cache.forget(digest)
        raise _unauthorized("Invalid API key.")
    client = await ctx.key_cache.look_up(
        digest, lambda: _find(ctx, key, source_address(request), now)
    )
    if client is None:
        raise _unauthorized("Invalid API key.")
    return client


async def _find(ctx: AppContext, key: str, address: str, now: datetime) -> ApiClient | None:
    """The active client of ``key`` (None: unknown). The look-up counts as an unknown key of
    ``address`` from before it is awaited until the key is found valid; past the limit, a 429
    problem instead of any database work."""
    failures = ctx.failed_keys
    wait = failures.retry_after(address)
    if wait is not None:
        REFUSED.labels("unknown-keys").inc()
        raise ApiProblem(
            RATE_LIMITED,
            "Too many invalid API keys from this address; retry later.",
            headers={"Retry-After": str(wait)},
        )
    failures.add(address)
    try:
        async with ctx.pg.acquire() as conn:
            client = await api_clients_repo.find_active_by_key(conn, key, now=now)
    except BaseException:
        failures.forgive(address)
        raise
    if client is not None:
        failures.forgive(address)
    return client


class ScopedKey(SecurityBase):
    """The ``Authorization: Bearer`` scheme as one dependency that also checks one scope and
    counts the rate limit: it returns the verified client itself (the docs show it as the
    ``ApiKey`` bearer scheme). One dependency instead of a scheme plus functions over it:
    FastAPI resolves each dependency's parameters on every request, which was a tenth of a
    read's cost."""

    def __init__(self, scope: Scope) -> None:
        self.model = HTTPBearerModel(
            description="An API key created with `billing api-keys create NAME --scope ...`; "
            "each operation lists the scope it needs."
        )
        self.scheme_name = SCHEME_NAME
        self.scope = scope

    async def __call__(self, request: Request) -> ApiClient:
        client = await verified_client(request)
        if self.scope not in client.scopes:
            raise ApiProblem(
                FORBIDDEN,
                f"This API key lacks the scope {self.scope.value!r}.",
                requiredScope=self.scope.value,
            )
        ctx = get_context(request)
        quota = await ctx.rate_limit.hit(client)
        if quota is None:
            if request.method in _SAFE_METHODS:
                UNLIMITED.labels("read").inc()
                return client
            UNLIMITED.labels("write").inc()
            raise ApiProblem(
                LIMIT_UNAVAILABLE,
                "Writes are paused while the rate limit cannot be counted; retry later "
                "with the same Idempotency-Key.",
                headers={"Retry-After": "1"},
            )
        headers = quota.headers()
        if not quota.allowed:
            REFUSED.labels("client").inc()
            raise ApiProblem(
                RATE_LIMITED,
                f"More than {quota.limit} requests in {quota.window_seconds} s.",
                headers={**headers, "Retry-After": str(quota.reset_seconds)},
            )
        request.scope[RATE_HEADERS_SCOPE_KEY] = headers
        return client


_GUARDS = {scope: ScopedKey(scope) for scope in Scope}


def requires(scope: Scope) -> Any:
    """``Annotated[ApiClient, requires(Scope.X)]``: the route needs a key with scope X."""
    return Security(_GUARDS[scope], scopes=[scope.value])


SubscriptionsReader = Annotated[ApiClient, requires(Scope.SUBSCRIPTIONS_READ)]
InvoicesReader = Annotated[ApiClient, requires(Scope.INVOICES_READ)]


def actor_of(request: Request, client_id: int) -> audit.Actor:
    """Who makes this write, for its ``audit_event`` row: the client and the request's id."""
    request_id = request.scope.get(REQUEST_ID_SCOPE_KEY)
    return audit.Actor.api(client_id, request_id if isinstance(request_id, str) else None)
