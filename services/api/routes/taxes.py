"""A subscription's tax location: where its invoices are taxed (``subscription_tax_location``),
the rate-table calculator's key (``billing_core.domain.tax``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.tax import TaxLocation
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo import tax as tax_repo
from services.api.auth import CurrentClient
from services.api.context import get_context
from services.api.routes.common import json_response, problems
from services.api.schemas import TaxLocationOut, TaxLocationRequest

router = APIRouter(tags=["subscriptions"])

SubscriptionId = Annotated[
    int, Path(ge=1, le=BIGINT_MAX, description="Subscription id.", alias="id")
]


@router.put(
    "/subscriptions/{id}/tax-location",
    response_model=TaxLocationOut,
    summary="Set where the subscription's invoices are taxed",
    description="The customer's tax location (country, and region where it has its own rate). "
    "Invoices issued from now on (renewals) are taxed at its rate: on top of the price where "
    "prices exclude tax, inside it where they include it. Idempotent.",
    responses=problems(400, 401, 404, 413, 422),
)
async def put_tax_location(
    request: Request,
    subscription_id: SubscriptionId,
    body: TaxLocationRequest,
    _client: CurrentClient,
) -> Response:
    ctx = get_context(request)
    location = TaxLocation(body.country, body.region)
    async with ctx.sessions.begin() as session:
        if not await subscriptions_repo.exists(session, subscription_id):
            raise subscriptions_repo.SubscriptionNotFound(subscription_id)
        await tax_repo.set_location(session, subscription_id, location, now=ctx.clock.now())
        rate = (await tax_repo.rates_for(session, [subscription_id])).get(subscription_id)
    return json_response(
        TaxLocationOut(
            subscription_id=subscription_id,
            country=location.country,
            region=location.region,
            tax_rate=rate.label if rate else None,
            tax_inclusive=rate.inclusive if rate else None,
        )
    )
