"""``PUT /customers/{customerId}/payment-method``: which Stripe customer and default payment
method charge a customer. Ids only; anything that looks like card data is refused and not kept."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from tests.integration.api.helpers import assert_problem, known_customers, rows

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
