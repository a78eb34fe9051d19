"""Scopes: every route needs one, declared where the route is and shown in the OpenAPI
document; a key without it gets a 403 problem and changes nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.domain.scopes import ALL_SCOPES, Scope
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async
from tests.integration.api.conftest import asgi_client
from tests.integration.api.helpers import assert_problem, rows, scalar, subscribe

# Every route that needs a key, with its scope and a request that the scope lets through to
# the route itself (it may still be refused there, e.g. 404: anything but 401/403).
SCOPED: list[tuple[str, str, Scope, dict[str, Any]]] = [
    ("GET", "/plans", Scope.PLANS_READ, {}),
    ("GET", "/subscriptions/{id}", Scope.SUBSCRIPTIONS_READ, {}),
    ("GET", "/subscriptions/{id}/history", Scope.SUBSCRIPTIONS_READ, {}),
    ("GET", "/subscriptions/{id}/invoices", Scope.INVOICES_READ, {}),
    (
        "POST",
        "/subscriptions",
        Scope.SUBSCRIPTIONS_WRITE,
        {"customerId": 5, "planCode": "BASIC_MONTHLY"},
    ),
    ("POST", "/subscriptions/{id}/cancel", Scope.SUBSCRIPTIONS_WRITE, {"atPeriodEnd": True}),
    (
        "POST",
        "/subscriptions/{id}/change-plan",
        Scope.SUBSCRIPTIONS_WRITE,
        {"planCode": "PRO_MONTHLY"},
    ),
    ("GET", "/api-keys", Scope.ADMIN, {}),
    ("POST", "/api-keys", Scope.ADMIN, {"name": "x", "scopes": ["admin"]}),
    ("POST", "/api-keys/bk_nothing/revoke", Scope.ADMIN, {}),
    ("POST", "/api-keys/bk_nothing/rotate", Scope.ADMIN, {}),
    (
        "PUT",
        "/customers/7/payment-method",
        Scope.PAYMENT_METHODS_WRITE,
        {"gatewayCustomerId": "cus_A1", "paymentMethodId": "pm_A1"},
    ),
    ("GET", "/customers/7/payment-method", Scope.SUBSCRIPTIONS_READ, {}),
    ("GET", "/subscriptions", Scope.SUBSCRIPTIONS_READ, {}),
    ("POST", "/subscriptions/{id}/end-trial", Scope.SUBSCRIPTIONS_WRITE, {}),
    ("POST", "/subscriptions/{id}/resume-renewal", Scope.SUBSCRIPTIONS_WRITE, {}),
    ("POST", "/subscriptions/{id}/pause", Scope.SUBSCRIPTIONS_WRITE, {"behavior": "void"}),
    ("POST", "/subscriptions/{id}/resume", Scope.SUBSCRIPTIONS_WRITE, {}),
    ("DELETE", "/subscriptions/{id}/scheduled-change", Scope.SUBSCRIPTIONS_WRITE, {}),
    ("GET", "/subscriptions/{id}/upcoming-invoice", Scope.INVOICES_READ, {}),
    ("POST", "/customers", Scope.SUBSCRIPTIONS_WRITE, {"externalId": "shop-42"}),
    ("GET", "/customers", Scope.SUBSCRIPTIONS_READ, {}),
    ("GET", "/customers/7", Scope.SUBSCRIPTIONS_READ, {}),
    ("GET", "/customers/7/subscriptions", Scope.SUBSCRIPTIONS_READ, {}),
    ("GET", "/invoices/{id}", Scope.INVOICES_READ, {}),
    ("PUT", "/subscriptions/{id}/tax-location", Scope.SUBSCRIPTIONS_WRITE, {"country": "FR"}),
    ("POST", "/coupons", Scope.ADMIN, {"code": "X", "percentOff": 10, "duration": "ONCE"}),
    ("GET", "/coupons/NOPE", Scope.PLANS_READ, {}),
    ("POST", "/subscriptions/{id}/coupon", Scope.SUBSCRIPTIONS_WRITE, {"couponCode": "NOPE"}),
    ("GET", "/invoices/{id}/pdf", Scope.INVOICES_READ, {}),
]
OPEN = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("POST", "/webhooks/payments"),
    ("POST", "/webhooks/stripe"),
}


async def test_a_read_only_key_cannot_cancel(
    app: FastAPI, client: Any, settings: CoreSettings, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    reader = await create_api_key_async(
        settings, "support", scopes=(Scope.SUBSCRIPTIONS_READ, Scope.INVOICES_READ)
    )
    async with asgi_client(app, reader) as support:
        assert (await support.get(f"/subscriptions/{sub['id']}")).status_code == 200
        refused = await support.post(
            f"/subscriptions/{sub['id']}/cancel",
            json={"atPeriodEnd": False},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
    body = assert_problem(refused, 403, "forbidden")
    assert body["requiredScope"] == "subscriptions:write"
    assert await scalar(engine, "SELECT status FROM subscription") == "ACTIVE"
    assert await scalar(engine, "SELECT count(*) FROM idempotency_key") == 1  # the subscribe
    assert (
        await scalar(
            engine, "SELECT count(*) FROM audit_event WHERE action = 'subscription.cancel'"
        )
        == 0
    )


@pytest.mark.parametrize(("method", "path", "scope", "body"), SCOPED)
async def test_each_route_needs_its_scope_and_only_it(
    app: FastAPI,
    client: Any,
    settings: CoreSettings,
    method: str,
    path: str,
    scope: Scope,
    body: dict[str, Any],
) -> None:
    sub = await subscribe(client)
    url = path.replace("{id}", str(sub["id"]))
    headers = {"Idempotency-Key": str(uuid.uuid4())} if method == "POST" else {}
    without = await create_api_key_async(
        settings, "without", scopes=[s for s in ALL_SCOPES if s != scope]
    )
    only = await create_api_key_async(settings, "only", scopes=[scope])
    async with asgi_client(app, without) as c:
        refused = await c.request(method, url, json=body or None, headers=headers)
    assert_problem(refused, 403, "forbidden")
    async with asgi_client(app, only) as c:
        allowed = await c.request(method, url, json=body or None, headers=headers)
    assert allowed.status_code not in (401, 403), allowed.text


def test_the_openapi_document_shows_each_operations_scope(app: FastAPI) -> None:
    document = app.openapi()
    scheme = document["components"]["securitySchemes"]["ApiKey"]
    assert scheme == {"type": "http", "scheme": "bearer", "description": scheme["description"]}
    declared = {(m, p): s.value for m, p, s, _ in SCOPED}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            key = (
                method.upper(),
                path.replace("{prefix}", "bk_nothing")
                .replace("{customerId}", "7")
                .replace("{code}", "NOPE"),
            )
            if key in OPEN:
                assert "security" not in operation, key
                continue
            assert key in declared, f"{key}: a new route needs a scope (and a line in SCOPED)"
            assert operation["security"] == [{"ApiKey": [declared[key]]}], key
            assert "403" in operation["responses"], key


async def test_keys_from_before_scopes_have_every_scope(engine: AsyncEngine, api_key: str) -> None:
    """The fixture's key is made like `billing create-api-key` makes one: full access (the
    migration gave keys that existed before it the same; test_migrations checks that)."""
    (stored,) = await rows(engine, "SELECT scopes FROM api_client")
    assert stored["scopes"] == [str(s) for s in ALL_SCOPES]
