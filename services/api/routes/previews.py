"""Previews without side effects: ``GET /subscriptions/{id}/upcoming-invoice``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from billing_core.repo import coupons as coupons_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo import tax as tax_repo
from billing_core.usecases import upcoming as upcoming_uc
from services.api.auth import InvoicesReader
from services.api.context import get_context
from services.api.routes.common import json_response, problems
from services.api.routes.subscription_change import SubscriptionId
from services.api.schemas import UpcomingInvoiceOut

router = APIRouter(tags=["subscriptions"])


@router.get(
    "/subscriptions/{id}/upcoming-invoice",
    response_model=UpcomingInvoiceOut,
    summary="The invoice the next renewal will create",
    description="Computed by the renewer's own planner from the subscription as it is now "
    "(plan, credit balance, tax location, coupon), with its lines: at the current period's end (or "
    "the trial's end) the renewer creates exactly this invoice unless something changes first. "
    "Writes nothing. A canceled subscription, or one whose cancel is scheduled, has none (404 "
    "no-upcoming-invoice).",
    responses=problems(401, 403, 404, 422, 429),
)
async def upcoming_invoice(
    request: Request, subscription_id: SubscriptionId, _client: InvoicesReader
) -> Response:
    async with get_context(request).pg.acquire() as conn:
        sub = await subscriptions_repo.get(conn, subscription_id)
        rate = (await tax_repo.rates_for(conn, [sub.id])).get(sub.id)
        discount = (await coupons_repo.discounts_for(conn, [sub.id])).get(sub.id)
    upcoming = upcoming_uc.upcoming_invoice(sub, rate, discount)
    return json_response(UpcomingInvoiceOut.of(upcoming))
