"""A subscription's tax location: where its invoices are taxed (``subscription_tax_location``),
the rate-table calculator's key (``billing_core.domain.tax``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from billing_core.db.pg import Connection
from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.scopes import Scope
from billing_core.domain.tax import TaxLocation
from billing_core.repo.api_clients import ApiClient
from billing_core.usecases import tax_location as tax_location_uc
from services.api.auth import requires
from services.api.context import get_context
from services.api.idempotency import IdempotentWrite, Outcome
from services.api.routes.common import outcome, problems
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
    location = TaxLocation(body.country, body.region)
    # No key: the write runs in one transaction, again on the row as it now is when a
    # concurrent write (a renewal) committed first.
    write = IdempotentWrite(get_context(request), request, client, None)

    async def work(conn: Connection, now: datetime) -> Outcome:
        # Never back in time: at the request's instant or the subscription's last write,
        # whichever is later (subscription.change_instant); 404 for an unknown subscription.
        rate = await tax_location_uc.set_tax_location(
            conn,
            subscription_id=subscription_id,
            location=location,
            now=now,
            actor=write.actor,
        )
        return outcome(
            200,
            TaxLocationOut(
                subscription_id=subscription_id,
                country=location.country,
                region=location.region,
                tax_rate=rate.label if rate else None,
                tax_inclusive=rate.inclusive if rate else None,
            ),
        )

    return await write.run(work)
