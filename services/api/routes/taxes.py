"""A subscription's tax location: where its invoices are taxed (``subscription_tax_location``),
the rate-table calculator's key (``billing_core.domain.tax``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.scopes import Scope
from billing_core.domain.tax import TaxLocation
from billing_core.repo import audit
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo import tax as tax_repo
from billing_core.repo.api_clients import ApiClient
from services.api.auth import actor_of, requires
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
    responses=problems(400, 401, 403, 404, 413, 422, 429),
)
async def put_tax_location(
    request: Request,
    subscription_id: SubscriptionId,
    body: TaxLocationRequest,
    client: Annotated[ApiClient, requires(Scope.SUBSCRIPTIONS_WRITE)],
) -> Response:
    ctx = get_context(request)
    location = TaxLocation(body.country, body.region)
    async with ctx.sessions.begin() as session:
        # Never back in time: at the request's instant or the subscription's last write,
        # whichever is later (subscription.change_instant); 404 for an unknown subscription.
        _sub, now = await subscriptions_repo.get_for_change(
            session, subscription_id, None, ctx.clock.now()
        )
        await tax_repo.set_location(session, subscription_id, location, now=now)
        rate = (await tax_repo.rates_for(session, [subscription_id])).get(subscription_id)
        await audit.record(
            session,
            audit.AuditEntry(
                actor_of(request, client.id),
                audit.SUBSCRIPTION_SET_TAX_LOCATION,
                audit.SUBSCRIPTION,
                subscription_id,
                detail={
                    "country": location.country,
                    "region": location.region,
                    "taxRate": rate.label if rate else None,
                },
            ),
            now=now,
        )
    return json_response(
        TaxLocationOut(
            subscription_id=subscription_id,
            country=location.country,
            region=location.region,
            tax_rate=rate.label if rate else None,
            tax_inclusive=rate.inclusive if rate else None,
        )
    )
