"""Subscriptions found by customer and status: ``GET /subscriptions``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
from billing_core.repo import customers as customers_repo
from services.api.auth import SubscriptionsReader
from services.api.context import get_context
from services.api.routes import cursors
from services.api.routes.common import json_response, problems
from services.api.routes.customer_profiles import (
    SUBSCRIPTION_CURSOR,
    Cursor,
    Limit,
    subscription_page,
)
from services.api.schemas import SubscriptionPage

router = APIRouter(tags=["subscriptions"])


@router.get(
    "/subscriptions",
    response_model=SubscriptionPage,
    summary="List subscriptions, newest first, by customer and/or status",
    description="Without filters, every subscription. An unknown customerId gives an empty "
    "page (use GET /customers/{customerId}/subscriptions for a 404).",
    responses=problems(400, 401, 403, 422, 429),
)
async def list_subscriptions(
    request: Request,
    _client: SubscriptionsReader,
    customer_id: Annotated[
        int | None, Query(alias="customerId", ge=1, le=BIGINT_MAX, description="Customer id.")
    ] = None,
    status: Annotated[
        Literal["TRIALING", "ACTIVE", "PAST_DUE", "CANCELED"] | None,
        Query(description="Only this status."),
    ] = None,
    limit: Limit = 20,
    cursor: Cursor = None,
) -> Response:
    before_id = cursors.decode(SUBSCRIPTION_CURSOR, cursor)
    async with get_context(request).pg.acquire() as conn:
        rows = await customers_repo.subscriptions_page(
            conn, limit=limit + 1, customer_id=customer_id, status=status, before_id=before_id
        )
    return json_response(subscription_page(rows, limit))
