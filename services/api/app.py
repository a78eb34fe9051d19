"""The FastAPI application factory: ``create_app(settings, clock)``.

The database pool is created in the lifespan (never at import time) and closed at shutdown; the
lifespan also runs the periodic purge of expired idempotency keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html

from billing_core.clock import Clock
from billing_core.db import pg
from billing_core.logging import get_logger
from billing_core.runtime.batcher import Batcher
from billing_core.runtime.http import HealthServer
from billing_core.stripe_gateway import StripePaymentMethods
from billing_core.usecases import subscribe as subscribe_uc
from services.api import openapi, problems
from services.api.client_limits import (
    REDIS_TIMEOUT_SECONDS,
    ClientRateLimit,
    FailedKeysByAddress,
)
from services.api.console import routes as console_routes
from services.api.console import web as console_web
from services.api.context import AppContext, IdBlocks, KeyCache, PlanCatalogue
from services.api.idempotency import purge_loop
from services.api.middleware import RequestContextMiddleware
from services.api.routes import (
    api_keys,
    coupons,
    customer_profiles,
    customers,
    health,
    invoices,
    pauses,
    plans,
    previews,
    scheduled_cancel,
    scheduled_change,
    stripe_webhooks,
    subscription_search,
    subscriptions,
    taxes,
    trials,
    webhooks,
)
from services.api.settings import ApiSettings

log = get_logger(__name__)

DESCRIPTION = """
Subscription billing: subscribe customers to plans, change plans (prorated), cancel, and
receive the payment gateway's signed results.

* Authentication: `Authorization: Bearer <api key>` (create one with
  `billing api-keys create NAME --scope ...`). Each operation needs one scope of the key
  (`plans:read`, `subscriptions:read`, `subscriptions:write`, `invoices:read`, `admin`),
  listed as its security requirement; a key without it gets 403. `/healthz` and `/readyz`
  are open; `/metrics` and the docs are served on the internal port.
* Each client has a request limit: answers carry `RateLimit-Limit`, `RateLimit-Remaining`,
  `RateLimit-Reset` and `RateLimit-Policy`; past it, 429 with `Retry-After`.
* Every POST accepts an `Idempotency-Key` header (required to create a subscription).
* Errors are `application/problem+json` (RFC 9457) with a stable `type`.
"""


# Connections of the plain asyncpg pool that serves the hot paths (GET and POST /subscriptions):
# requests past this many wait for one to be released rather than open and close new ones.
PG_POOL_SIZE = 16
# Keyed creates written by one statement at most (those that arrived while the last was written).
CREATE_GROUP_SIZE = 32


class UnsafeSettings(RuntimeError):
    """The API refuses to be made: a webhook secret is missing, a placeholder, or a development
    one outside the development profile."""


def internal_server(app: FastAPI, context: AppContext) -> HealthServer:
    """``/metrics``, ``/healthz``, ``/readyz``, ``/docs`` and ``/openapi.json`` on the internal
    port (``api_internal_port`` on ``health_host``), apart from the public one: the network
    policy lets only monitoring reach it."""
    settings = context.settings

    async def ready() -> bool:
        return context.pg_ is not None and await pg.database_answers(context.pg_)

    schema = json.dumps(app.openapi(), separators=(",", ":")).encode()
    docs = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs").body
    return HealthServer(
        settings.health_host,
        settings.api_internal_port,
        ready=ready,
        pages={
            "/openapi.json": ("application/json", schema),
            "/docs": ("text/html; charset=utf-8", bytes(docs)),
        },
    )


def payment_method_checks(settings: ApiSettings) -> StripePaymentMethods | None:
    """With Stripe as the gateway, what checks a payment method before it is saved."""
    if settings.gateway != "stripe":
        return None
    return StripePaymentMethods(
        settings.stripe_api_key.get_secret_value(), api_base=settings.stripe_api_base
    )


def refuse_unsafe(settings: ApiSettings) -> None:
    """Raises :class:`UnsafeSettings` (logged, naming settings, never secrets) when a webhook
    secret is missing, a placeholder, or a development one outside the development profile."""
    unsafe = settings.unsafe_webhook_secrets()
    if unsafe:
        log.error("api_refused_to_start", reasons=unsafe)
        raise UnsafeSettings("; ".join(unsafe))


async def open_context(context: AppContext, settings: ApiSettings, clock: Clock) -> None:
    """The process's connections and batchers, on ``context``."""
    context.pg_ = await pg.create_pool(settings, max_size=PG_POOL_SIZE)
    context.creates_ = Batcher(context.write_creates, max_size=CREATE_GROUP_SIZE, max_wait=0)
    context.webhooks_ = Batcher(
        context.record_webhooks,
        max_size=50,
        max_wait=settings.webhook_group_wait_ms / 1000,
        max_gap=settings.webhook_group_gap_ms / 1000,
    )
    redis = aioredis.from_url(
        settings.redis_url,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
    )
    context.redis_ = redis
    context.rate_limit_ = ClientRateLimit(
        redis,
        key_prefix=settings.api_rate_limit_key_prefix,
        per_minute=settings.api_rate_limit_per_minute,
        window_seconds=settings.api_rate_limit_window_seconds,
        clock=clock,
    )
    context.payment_methods = payment_method_checks(settings)


async def close_context(context: AppContext) -> None:
    """Closes what :func:`open_context` opened."""
    if context.redis_ is not None:
        await context.redis_.aclose()
    if context.payment_methods is not None:
        await context.payment_methods.aclose()
        context.payment_methods = None
    context.rate_limit_ = None
    context.redis_ = None
    await context.pg.close()
    context.pg_ = None
    context.webhooks_ = None
    context.creates_ = None


def create_app(settings: ApiSettings, clock: Clock) -> FastAPI:
    """The API application; refused (:func:`refuse_unsafe`) with unsafe webhook secrets."""
    refuse_unsafe(settings)
    context = AppContext(
        settings=settings,
        clock=clock,
        key_cache=KeyCache(settings.auth_cache_seconds, settings.auth_negative_cache_seconds),
        failed_keys=FailedKeysByAddress(
            settings.auth_failures_per_address, settings.auth_failure_window_seconds
        ),
        plans=PlanCatalogue(settings.plan_cache_seconds),
        subscription_ids=IdBlocks(subscribe_uc.ID_SEQUENCES),
        policy=settings.dunning_policy(),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await open_context(context, settings, clock)
        internal = internal_server(app, context)
        await internal.start()
        context.internal_port = internal.port
        purge: asyncio.Task[None] | None = None
        if settings.idempotency_purge_interval_seconds > 0:
            purge = asyncio.create_task(
                purge_loop(context, settings.idempotency_purge_interval_seconds),
                name="idempotency-purge",
            )
        log.info("api_started")
        try:
            yield
        finally:
            if purge is not None:
                purge.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await purge
            await internal.stop()
            await close_context(context)
            log.info("api_stopped")

    app = FastAPI(
        title="billing API",
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs" if settings.api_public_docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if settings.api_public_docs else None,
    )
    app.state.context = context
    problems.install(app, console_web.ERROR_PAGES if settings.console_enabled else None)
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes)
    # The routes join the application's own router, in this order: a request is matched
    # against one list, where each included router would be one more level walked per request.
    # The simulator's results are taken only where it is the gateway.
    simulator = (webhooks,) if settings.gateway == "simulator" else ()
    for module in (
        subscriptions,
        subscription_search,
        trials,
        scheduled_cancel,
        scheduled_change,
        pauses,
        previews,
        taxes,
        coupons,
        customers,
        customer_profiles,
        invoices,
        plans,
        api_keys,
        *simulator,
        stripe_webhooks,
        health,
    ):
        app.router.routes.extend(module.router.routes)
    if settings.console_enabled:
        console_routes.install(app, settings)
    openapi.install(app)
    return app
