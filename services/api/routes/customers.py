"""Customers' payment methods at the gateway: which Stripe customer and default payment method
charge one of our customers (``gateway_customer``). Ids only: card data never reaches us."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.scopes import Scope
from billing_core.repo import audit, gateway_customers
from billing_core.repo import customers as customers_repo
from billing_core.repo.api_clients import ApiClient
from services.api.auth import actor_of, requires
from services.api.context import get_context
from services.api.problems import NOT_FOUND, ApiProblem
from services.api.routes.common import json_response, problems
from services.api.schemas import PaymentMethodOut, PaymentMethodRequest

router = APIRouter(tags=["customers"])

CustomerId = Annotated[
    int, Path(ge=1, le=BIGINT_MAX, description="Our customer id.", alias="customerId")
]


@router.put(
    "/customers/{customerId}/payment-method",
    response_model=PaymentMethodOut,
    summary="Set the customer's gateway customer and default payment method",
    description="The Stripe customer and payment method the collector charges off-session for "
    "this customer's invoices (the next charge uses it). 201 when the customer had none, 200 "
    "when it replaced one; 404 customer-not-found when no such customer exists. With the Stripe "
    "gateway, Stripe must hold the payment method attached to that Stripe customer, whose "
    "metadata customer_id names this customer: else 422 payment-method-not-ours (503 "
    "gateway-unavailable when Stripe does not answer). Idempotent: the same body gives the "
    "same state.",
    responses={201: {"model": PaymentMethodOut}, **problems(400, 401, 403, 404, 413, 422, 503)},
)
async def put_payment_method(
    request: Request,
    customer_id: CustomerId,
    body: PaymentMethodRequest,
    client: Annotated[ApiClient, requires(Scope.PAYMENT_METHODS_WRITE)],
) -> Response:
    ctx = get_context(request)
    if ctx.payment_methods is not None:
        async with ctx.pg.acquire() as conn:
            await customers_repo.get(conn, customer_id)  # 404 before asking Stripe
        await ctx.payment_methods.check(
            customer_id, body.gateway_customer_id, body.payment_method_id
        )
    now = ctx.clock.now()
    actor = actor_of(request, client.id)
    async with ctx.transaction() as conn:
        await customers_repo.get(conn, customer_id)  # 404 customer-not-found
        saved, created = await gateway_customers.put(
            conn,
            customer_id=customer_id,
            gateway=body.gateway,
            gateway_customer_id=body.gateway_customer_id,
            payment_method_id=body.payment_method_id,
            now=now,
        )
        await audit.record(
            conn,
            audit.AuditEntry(
                actor,
                audit.PAYMENT_METHOD_SET,
                audit.CUSTOMER,
                customer_id,
                detail={
                    "gateway": body.gateway,
                    "gatewayCustomerId": body.gateway_customer_id,
                    "paymentMethodId": body.payment_method_id,
                    "created": created,
                },
            ),
            now=now,
        )
    return json_response(PaymentMethodOut.of(saved), status=201 if created else 200)


@router.get(
    "/customers/{customerId}/payment-method",
    response_model=PaymentMethodOut,
    summary="The customer's gateway customer and default payment method",
    responses=problems(401, 403, 404, 422),
)
async def get_payment_method(
    request: Request,
    customer_id: CustomerId,
    _client: Annotated[ApiClient, requires(Scope.SUBSCRIPTIONS_READ)],
) -> Response:
    async with get_context(request).pg.acquire() as conn:
        found = await gateway_customers.get(conn, customer_id)
    if found is None:
        raise ApiProblem(NOT_FOUND, f"Customer {customer_id} has no payment method on file.")
    return json_response(PaymentMethodOut.of(found))
