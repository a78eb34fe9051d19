"""``PUT /customers/{customerId}/payment-method``: which Stripe customer and default payment
method charge a customer. Ids only; anything that looks like card data is refused and not kept."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.domain.scopes import Scope
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async
from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.api.conftest import asgi_client
from tests.integration.api.helpers import assert_problem, known_customers, rows
from tests.support.stripe_stub import StripeStub, stripe_stub

PATH = "/customers/42/payment-method"
BODY = {"gatewayCustomerId": "cus_PZrgY7FgXqFqUd", "paymentMethodId": "pm_1OkjqQ2eZvKYlo2C"}


async def test_set_then_replace_then_read(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    await known_customers(engine, 42)
    created = await client.put(PATH, json=BODY)
    assert created.status_code == 201, created.text
    assert created.json() == {
        "customerId": 42,
        "gateway": "stripe",
        "gatewayCustomerId": "cus_PZrgY7FgXqFqUd",
        "paymentMethodId": "pm_1OkjqQ2eZvKYlo2C",
        "createdAt": clock.now().isoformat().replace("+00:00", "Z"),
        "updatedAt": clock.now().isoformat().replace("+00:00", "Z"),
    }
    same = await client.put(PATH, json=BODY)
    assert same.status_code == 200  # idempotent: the same state again

    clock.advance(timedelta(seconds=60))
    replaced = await client.put(PATH, json={**BODY, "paymentMethodId": "pm_NewCard2026"})
    assert replaced.status_code == 200
    assert replaced.json()["paymentMethodId"] == "pm_NewCard2026"
    assert replaced.json()["createdAt"] != replaced.json()["updatedAt"]

    read = await client.get(PATH)
    assert read.status_code == 200
    assert read.json() == replaced.json()
    stored = await rows(engine, "SELECT customer_id, payment_method_id FROM gateway_customer")
    assert stored == [{"customer_id": 42, "payment_method_id": "pm_NewCard2026"}]


async def test_card_data_is_refused_and_never_echoed(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    pan = "4242424242424242"
    bad_bodies = [
        {**BODY, "paymentMethodId": pan},
        {**BODY, "card": {"number": pan, "exp_month": 12, "exp_year": 2030, "cvc": "123"}},
        {**BODY, "gatewayCustomerId": "42"},
        {"paymentMethodId": "pm_1"},
    ]
    for body in bad_bodies:
        answer = await client.put(PATH, json=body)
        problem = assert_problem(answer, 422, "validation-error")
        assert pan not in answer.text, problem
    assert await rows(engine, "SELECT * FROM gateway_customer") == []


async def test_unknown_customer_is_404_and_auth_is_required(
    client: httpx.AsyncClient, anonymous: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert_problem(await client.get("/customers/7/payment-method"), 404, "not-found")
    # No payment method for a customer that does not exist: nothing is stored.
    assert_problem(await client.put(PATH, json=BODY), 404, "customer-not-found")
    assert await rows(engine, "SELECT * FROM gateway_customer") == []
    assert_problem(await anonymous.put(PATH, json=BODY), 401, "unauthorized")
    assert_problem(
        await client.put("/customers/0/payment-method", json=BODY), 422, "validation-error"
    )


# Stripe's answers to the two reads of the check, as Stripe documents the objects.
METHOD = {"id": "pm_1OkjqQ2eZvKYlo2C", "object": "payment_method", "customer": "cus_PZrgY7FgXqFqUd"}
STRIPE_CUSTOMER = {
    "id": "cus_PZrgY7FgXqFqUd",
    "object": "customer",
    "metadata": {"customer_id": "42"},
}
NO_SUCH_METHOD = {
    "error": {
        "code": "resource_missing",
        "message": "No such PaymentMethod: 'pm_1OkjqQ2eZvKYlo2C'",
        "type": "invalid_request_error",
    }
}


@pytest.fixture
async def stub() -> AsyncIterator[StripeStub]:
    async with stripe_stub() as server:
        yield server


@pytest.fixture
async def stripe_client(
    api_settings: ApiSettings,
    clock: ManualClock,
    engine: AsyncEngine,
    api_key: str,
    stub: StripeStub,
) -> AsyncIterator[httpx.AsyncClient]:
    """The API with the Stripe gateway configured, Stripe answering from the stub."""
    settings = api_settings.model_copy(
        update={
            "gateway": "stripe",
            "stripe_api_key": SecretStr("sk_test_123"),
            "stripe_api_base": stub.url,
        }
    )
    application = create_app(settings, clock)
    async with application.router.lifespan_context(application):
        async with asgi_client(application, api_key) as c:
            yield c


async def test_with_stripe_a_method_attached_to_our_stripe_customer_is_saved(
    stripe_client: httpx.AsyncClient, stub: StripeStub, engine: AsyncEngine
) -> None:
    await known_customers(engine, 42)
    stub.answer(200, METHOD)
    stub.answer(200, STRIPE_CUSTOMER)
    created = await stripe_client.put(PATH, json=BODY)
    assert created.status_code == 201, created.text
    assert [(r.method, r.path) for r in stub.requests] == [
        ("GET", "/v1/payment_methods/pm_1OkjqQ2eZvKYlo2C"),
        ("GET", "/v1/customers/cus_PZrgY7FgXqFqUd"),
    ]
    stored = await rows(engine, "SELECT customer_id, payment_method_id FROM gateway_customer")
    assert stored == [{"customer_id": 42, "payment_method_id": "pm_1OkjqQ2eZvKYlo2C"}]


@pytest.mark.parametrize(
    ("answers", "words"),
    [
        (
            [(200, {**METHOD, "customer": "cus_SomeoneElse"}), (200, STRIPE_CUSTOMER)],
            "is not attached to cus_PZrgY7FgXqFqUd",
        ),
        (
            [(200, METHOD), (200, {**STRIPE_CUSTOMER, "metadata": {"customer_id": "43"}})],
            "does not name customer 42",
        ),
        ([(200, METHOD), (200, {**STRIPE_CUSTOMER, "metadata": {}})], "does not name customer 42"),
        ([(200, METHOD), (200, {**STRIPE_CUSTOMER, "deleted": True})], "is deleted"),
        ([(404, NO_SUCH_METHOD)], "No such PaymentMethod"),
    ],
    ids=["another-customers-card", "customer-names-another", "unnamed", "deleted", "no-such"],
)
async def test_with_stripe_a_method_not_ours_is_refused_and_nothing_saved(
    stripe_client: httpx.AsyncClient,
    stub: StripeStub,
    engine: AsyncEngine,
    answers: list[tuple[int, dict[str, Any]]],
    words: str,
) -> None:
    await known_customers(engine, 42)
    for status, body in answers:
        stub.answer(status, body)
    problem = assert_problem(
        await stripe_client.put(PATH, json=BODY), 422, "payment-method-not-ours"
    )
    assert words in problem["detail"]
    assert await rows(engine, "SELECT * FROM gateway_customer") == []


async def test_with_stripe_no_answer_is_503_and_nothing_saved(
    stripe_client: httpx.AsyncClient, stub: StripeStub, engine: AsyncEngine
) -> None:
    await known_customers(engine, 42)
    stub.answer(500, {"error": {"type": "api_error", "message": "Something went wrong"}})
    assert_problem(await stripe_client.put(PATH, json=BODY), 503, "gateway-unavailable")
    assert await rows(engine, "SELECT * FROM gateway_customer") == []


async def test_with_stripe_an_unknown_customer_is_404_before_stripe_is_asked(
    stripe_client: httpx.AsyncClient, stub: StripeStub
) -> None:
    stub.answer(200, METHOD)
    assert_problem(await stripe_client.put(PATH, json=BODY), 404, "customer-not-found")
    assert stub.requests == []


async def test_setting_a_payment_method_needs_its_own_scope(
    app: FastAPI, settings: CoreSettings, engine: AsyncEngine
) -> None:
    await known_customers(engine, 42)
    writer = await create_api_key_async(
        settings, "writer", scopes=[Scope.SUBSCRIPTIONS_READ, Scope.SUBSCRIPTIONS_WRITE]
    )
    async with asgi_client(app, writer) as c:
        problem = assert_problem(await c.put(PATH, json=BODY), 403, "forbidden")
    assert problem["requiredScope"] == "payment_methods:write"
    assert await rows(engine, "SELECT * FROM gateway_customer") == []
