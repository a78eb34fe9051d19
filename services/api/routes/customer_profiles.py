"""Customers: create, read, list, and a customer's subscriptions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from billing_core.db.pg import Connection
from billing_core.domain.money import BIGINT_MAX
from billing_core.repo import audit
from billing_core.repo import customers as customers_repo
from billing_core.repo.subscriptions import Subscription
from services.api.auth import SubscriptionsReader
from services.api.context import get_context
from services.api.idempotency import Outcome, SubscriptionsWrite
from services.api.routes import cursors
from services.api.routes.common import json_response, outcome, problems
from services.api.schemas import (
    CreateCustomerRequest,
    CustomerOut,
    CustomerPage,
    ExternalId,
    SubscriptionOut,
    SubscriptionPage,
)

router = APIRouter(tags=["customers"])

CustomerId = Annotated[
    int, Path(ge=1, le=BIGINT_MAX, description="Our customer id.", alias="customerId")
]
Limit = Annotated[int, Query(ge=1, le=100, description="Page size.")]
Cursor = Annotated[
    str | None, Query(max_length=64, description="The nextCursor of the previous page.")
]
CUSTOMER_CURSOR = "cus"
SUBSCRIPTION_CURSOR = "sub"


@router.post(
    "/customers",
    status_code=201,
    response_model=CustomerOut,
    summary="Create a customer",
    description="externalId is your own id for the customer and unique: a second customer "
    "with it is refused (409 customer-exists, naming the existing one as customerId). "
    "Accepts an Idempotency-Key header.",
    responses=problems(400, 401, 403, 409, 413, 422, 429, 503),
)
async def create_customer(body: CreateCustomerRequest, write: SubscriptionsWrite) -> Response:
    async def work(conn: Connection, now: datetime) -> Outcome:
        customer = await customers_repo.insert_customer(
            conn,
            customers_repo.NewCustomer(
                external_id=body.external_id,
                email=body.email,
                name=body.name,
                time_zone=body.time_zone,
                currency=body.currency,
            ),
            now=now,
        )
        await audit.record(
            conn,
            audit.AuditEntry(
                write.actor,
                audit.CUSTOMER_CREATE,
                audit.CUSTOMER,
                customer.id,
                detail={"externalId": body.external_id},
            ),
            now=now,
        )
        return outcome(201, CustomerOut.of(customer), location=f"/customers/{customer.id}")

    return await write.run(work)


@router.get(
    "/customers",
    response_model=CustomerPage,
    summary="List customers, newest first (or find one by externalId)",
    responses=problems(400, 401, 403, 422, 429),
)
async def list_customers(
    request: Request,
    _client: SubscriptionsReader,
    limit: Limit = 20,
    cursor: Cursor = None,
    external_id: Annotated[
        ExternalId | None,
        Query(
            alias="externalId",
            description="Only the customer with this externalId (a page of 0 or 1).",
        ),
    ] = None,
) -> Response:
    before_id = cursors.decode(CUSTOMER_CURSOR, cursor)
    async with get_context(request).pg.acquire() as conn:
        if external_id is not None:
            found = await customers_repo.get_by_external_id(conn, external_id)
            rows = [found] if found and (before_id is None or found.id < before_id) else []
        else:
            rows = await customers_repo.page(conn, limit=limit + 1, before_id=before_id)
    return json_response(
        CustomerPage(
            items=[CustomerOut.of(c) for c in rows[:limit]],
            next_cursor=cursors.next_cursor(CUSTOMER_CURSOR, [c.id for c in rows], limit),
        )
    )


@router.get(
    "/customers/{customerId}",
    response_model=CustomerOut,
    summary="Read a customer",
    responses=problems(401, 403, 404, 422, 429),
)
async def get_customer(
    request: Request, customer_id: CustomerId, _client: SubscriptionsReader
) -> Response:
    async with get_context(request).pg.acquire() as conn:
        customer = await customers_repo.get(conn, customer_id)
    return json_response(CustomerOut.of(customer))


@router.get(
    "/customers/{customerId}/subscriptions",
    response_model=SubscriptionPage,
    summary="List a customer's subscriptions, newest first",
    responses=problems(400, 401, 403, 404, 422, 429),
)
async def list_customer_subscriptions(
    request: Request,
    customer_id: CustomerId,
    _client: SubscriptionsReader,
    limit: Limit = 20,
    cursor: Cursor = None,
) -> Response:
    before_id = cursors.decode(SUBSCRIPTION_CURSOR, cursor)
    async with get_context(request).pg.acquire() as conn:
        await customers_repo.get(conn, customer_id)
        rows = await customers_repo.subscriptions_page(
            conn, limit=limit + 1, customer_id=customer_id, before_id=before_id
        )
    return json_response(subscription_page(rows, limit))


def subscription_page(rows: list[Subscription], limit: int) -> SubscriptionPage:
    return SubscriptionPage(
        items=[SubscriptionOut.of(s) for s in rows[:limit]],
        next_cursor=cursors.next_cursor(SUBSCRIPTION_CURSOR, [s.id for s in rows], limit),
    )
